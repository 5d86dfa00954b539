"""The simulator is a real control plane: the API server's Eviction API and PDB
checks, the disruption controller, the scheduler, the Job controller and RBAC are
the real ones, and reboots and host roots behave like a node's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from nodewright_sim import hostroot
from nodewright_sim.cluster import Cluster, SimulatorError, free_port
from nodewright_sim.fleet import create_fleet

from k8s_helpers import deployment_on, evict, pdb, wait_for

pytestmark = pytest.mark.integration


def test_eviction_blocked_by_pdb_gets_429(sim):
    ns = sim.namespace("pdb")
    nodes = sim.add_nodes("h200", 1)
    pods = deployment_on(sim, ns, "strict", nodes, 2)
    pdb(sim, ns, "strict", minAvailable=2)
    with pytest.raises(ApiException) as err:
        evict(sim, pods[0])
    assert err.value.status == 429
    assert "disruption budget" in err.value.body


def test_replacement_is_scheduled_on_uncordoned_node_only(sim):
    ns = sim.namespace("sched")
    n1, n2 = sim.add_nodes("h200", 2)
    deployment_on(sim, ns, "web", [n1, n2], 2)

    def web():
        return sim.core.list_namespaced_pod(ns, label_selector="app=web").items

    def cordon(node):
        # The scheduler acts on its own watch of the nodes: once a probe pod that may only
        # go to this node is refused as unschedulable, the scheduler has seen the cordon.
        sim.core.patch_node(node, {"spec": {"unschedulable": True}})
        probe = {"metadata": {"generateName": "probe-", "labels": {"app": "probe"}},
                 "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                          "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}
        made = [sim.core.create_namespaced_pod(ns, probe).metadata.name]

        def refused():
            pod = sim.core.read_namespaced_pod(made[-1], ns)
            if pod.spec.node_name:  # bound before the scheduler saw the cordon: ask again
                sim.core.delete_namespaced_pod(made[-1], ns, grace_period_seconds=0)
                made.append(sim.core.create_namespaced_pod(ns, probe).metadata.name)
                return False
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])
        wait_for(refused, what="the scheduler to see the cordon of %s" % node)
        for name in made:
            sim.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    cordon(n1)
    victims = [p for p in web() if p.spec.node_name == n1]
    if not victims:  # both landed on n2: move one so that n1 carries a pod
        victims = [web()[0]]
        sim.core.patch_node(n1, {"spec": {"unschedulable": False}})
        cordon(n2)
        n1, n2 = n2, n1
    old = {p.metadata.uid for p in victims}
    for p in victims:
        evict(sim, p)

    def replaced():
        pods = [p for p in web() if p.metadata.uid not in old and p.status.phase == "Running"]
        return pods if len(pods) >= len(victims) else None
    for p in wait_for(replaced, what="replacement pods"):
        assert p.spec.node_name == n2


def test_job_pod_completes(sim):
    ns = sim.namespace("job")
    sim.fleet.create_training_job("short-run", run_for="1s", gpus=1, namespace=ns)
    wait_for(lambda: (sim.batch.read_namespaced_job("short-run", ns).status.succeeded or 0) >= 1,
             what="job completion")


def test_reboot_changes_boot_id_via_not_ready(sim):
    (node,) = sim.add_nodes("b200", 1)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                         for c in sim.core.read_node(node).status.conditions or []), what="node Ready")
    before = sim.core.read_node(node).status.node_info.boot_id
    seen = []
    stop = threading.Event()

    def watcher():
        w = watch.Watch()
        for ev in w.stream(sim.core.list_node, field_selector="metadata.name=%s" % node, timeout_seconds=60):
            ready = [c.status for c in ev["object"].status.conditions or [] if c.type == "Ready"]
            seen.append((ready[0] if ready else None, ev["object"].status.node_info.boot_id))
            if stop.is_set():
                w.stop()
    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    time.sleep(0.5)
    proc = hostroot.run(sim.host_root(node), "reboot")
    assert proc.returncode == 0, proc.stderr

    def back():
        n = sim.core.read_node(node)
        ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        return ready and n.status.node_info.boot_id != before
    wait_for(back, what="node back Ready with a new bootID")
    stop.set()
    assert ("False", before) in seen or any(s[0] == "False" for s in seen), seen
    assert sim.core.read_node(node).status.node_info.boot_id == hostroot.boot_id(sim.host_root(node))


def test_rbac_denies_unbound_service_account(sim):
    ns = sim.namespace("rbac")
    sim.core.create_namespaced_service_account(ns, {"metadata": {"name": "nobody"}})
    cfg = client.Configuration()
    base = sim.api.configuration
    cfg.host = base.host
    cfg.ssl_ca_cert = base.ssl_ca_cert
    cfg.cert_file = base.cert_file
    cfg.key_file = base.key_file
    api = client.ApiClient(cfg, header_name="Impersonate-User",
                           header_value="system:serviceaccount:%s:nobody" % ns)
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).list_node()
    assert err.value.status == 403
    assert "system:serviceaccount:%s:nobody" % ns in err.value.body


def test_host_root_persisted_config_survives_reboot_runtime_does_not(sim):
    (node,) = sim.add_nodes("gb200", 1)
    root = sim.host_root(node)
    run = lambda cmd: hostroot.run(root, cmd)  # noqa: E731
    assert run("sysctl -w vm.swappiness=5").returncode == 0
    assert run("echo 'vm.max_map_count = 262144' > /etc/sysctl.d/90-test.conf").returncode == 0
    assert run("echo 'GRUB_CMDLINE_LINUX=\"iommu.passthrough=1\"' > /etc/default/grub.d/90-test.cfg"
               " && update-grub").returncode == 0
    assert "iommu.passthrough=1" not in run("cat /proc/cmdline").stdout
    hostroot.boot(root)
    assert run("sysctl -n vm.swappiness").stdout.strip() == "60"
    assert run("sysctl -n vm.max_map_count").stdout.strip() == "262144"
    assert "iommu.passthrough=1" in run("cat /proc/cmdline").stdout
    assert run("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader").stdout.splitlines()[0] == \
        "NVIDIA GB200, 10.0"
    assert run("uname -m").stdout.strip() == "aarch64"
    # A parameter the kernel does not have fails as on a real 6.x kernel.
    bad = run("sysctl -w kernel.sched_latency_ns=1000000")
    assert bad.returncode != 0 and "cannot stat" in bad.stderr


def test_fleet_labels_follow_gpu_feature_discovery(sim):
    nodes = {n.metadata.name: n for n in sim.core.list_node(label_selector="type=kwok").items}
    gb = next(n for name, n in nodes.items() if name.startswith("gb200"))
    assert gb.metadata.labels["nvidia.com/gpu.family"] == "blackwell"
    assert gb.metadata.labels["kubernetes.io/arch"] == "arm64"
    assert gb.metadata.labels["nvidia.com/gpu.compute.major"] == "10"
    assert gb.status.capacity["nvidia.com/gpu"] == "4"
    h = next(n for name, n in nodes.items() if name.startswith("h100"))
    assert h.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h.status.allocatable["nvidia.com/gpu"] == "8"


def test_a_small_pool_joins_in_index_order(sim):
    """Nodes of a small pool are created one after the other, so that no later index is
    older: a rollout orders its batch by creationTimestamp then name, and two simulators
    of the same fleet give it the same order."""
    names = sim.add_nodes("h200", 4, host_roots=False)
    try:
        created = [sim.core.read_node(n).metadata.creation_timestamp for n in names]
        assert names == sorted(names) and created == sorted(created), list(zip(names, created))
    finally:
        for name in names:
            sim.core.delete_node(name)


# --- lifecycle and bad input ------------------------------------------------------

def _processes_of(cluster_dir):
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if cluster_dir in line]


def test_second_simulator_side_by_side_and_already_running_is_refused(sim):
    other = Cluster("pytest-second-%d" % os.getpid())
    try:
        other.up()
        create_fleet(other, "bare", nodes=1)
        assert other.load()["server"] != sim.cluster.load()["server"]
        with pytest.raises(SimulatorError, match="already running"):
            other.up()
    finally:
        other.down()
    assert not _processes_of(other.dir)
    assert not os.path.exists(other.dir)


def test_port_taken_is_refused_cleanly(sim):
    port = int(sim.cluster.load()["ports"]["apiserver"])
    other = Cluster("pytest-port-%d" % os.getpid())
    with pytest.raises(SimulatorError, match="port %d is already in use" % port):
        other.up(apiserver_port=port)
    assert not os.path.exists(other.dir)


def test_a_port_taken_between_its_pick_and_its_bind_starts_over_with_new_ports(monkeypatch):
    """Simulators starting side by side (the ansible-core matrix, the suite's two processes)
    can pick the same free port: the one that loses it starts again with new ports."""
    import socket

    from nodewright_sim import cluster as cluster_mod
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    picks = []
    real = cluster_mod.free_port

    def pick():
        picks.append(taken if len(picks) == 4 else real())  # the scheduler's, first time round
        return picks[-1]
    monkeypatch.setattr(cluster_mod, "free_port", pick)
    other = Cluster("pytest-race-%d" % os.getpid())
    try:
        state = other.up()
        assert len(picks) == 12, picks  # two rounds of six ports
        assert state["ports"]["scheduler"] != taken and other.running()
        create_fleet(other, "bare", nodes=1)
    finally:
        holder.close()
        other.down()
    assert not _processes_of(other.dir) and not os.path.exists(other.dir)


def test_missing_binary_is_refused_cleanly(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_SIM_BIN", str(tmp_path))
    other = Cluster("pytest-nobin-%d" % os.getpid())
    with pytest.raises(SimulatorError, match="missing simulator binaries.*make binaries"):
        other.up()
    assert not os.path.exists(other.dir)


def test_broken_binary_is_refused_cleanly(tmp_path, monkeypatch):
    from nodewright_sim.cluster import BINARIES, bin_dir
    for name in BINARIES:
        os.symlink(os.path.join(bin_dir(), name), str(tmp_path / name))
    os.unlink(str(tmp_path / "etcd"))
    (tmp_path / "etcd").write_text("#!/bin/sh\necho 'segmentation fault' >&2\nexit 139\n")
    os.chmod(str(tmp_path / "etcd"), 0o755)
    monkeypatch.setenv("NODEWRIGHT_SIM_BIN", str(tmp_path))
    other = Cluster("pytest-broken-%d" % os.getpid())
    with pytest.raises(SimulatorError, match="etcd does not run"):
        other.up()
    assert not os.path.exists(other.dir)


def test_cli_unknown_profile_lists_known_ones():
    proc = subprocess.run([sys.executable, "-m", "nodewright_sim", "--name", "pytest-cli-%d" % free_port(),
                           "up", "--profile", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unknown fleet profile 'nope'; known profiles: all-gpus, bare, dev, large, mixed" in proc.stderr


def test_cli_exec_passes_the_command_and_its_arguments_as_given(sim):
    (node,) = sim.add_nodes("h100", 1)

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "nodewright_sim", "--name", sim.cluster.name, "exec", node]
                              + list(argv), capture_output=True, text=True)
    echoed = cli("--", "sh", "-c", "echo one two")
    assert (echoed.returncode, echoed.stdout, echoed.stderr) == (0, "one two\n", "")
    assert cli("--", "sysctl", "-n", "vm.swappiness").stdout == "60\n"
    assert cli("--", "sh", "-c", "exit 3").returncode == 3
    missing = cli("--", "no-such-command")
    assert missing.returncode == 127 and "no-such-command" in missing.stderr


def test_a_reboot_through_the_supervisor_starts_the_nodes_enabled_units(sim):
    (node,) = sim.add_nodes("b200", 1)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                         for c in sim.core.read_node(node).status.conditions or []), what="node Ready")
    root = sim.host_root(node)
    run = lambda cmd: hostroot.run(root, cmd)  # noqa: E731
    query = "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader | sort -u"
    assert run(query).stdout == "Disabled\n"
    assert run("systemctl enable nvidia-persistenced nvidia-fabricmanager").returncode == 0
    before = sim.core.read_node(node).status.node_info.boot_id
    assert run("reboot").returncode == 0
    wait_for(lambda: sim.core.read_node(node).status.node_info.boot_id != before and any(
        c.type == "Ready" and c.status == "True" for c in sim.core.read_node(node).status.conditions or []),
        what="node back Ready with a new bootID")
    assert run(query).stdout == "Enabled\n"
    assert run("systemctl is-active nvidia-persistenced nvidia-fabricmanager containerd kubelet").stdout == \
        "active\nactive\nactive\nactive\n"


def test_init_containers_complete_before_the_pod_runs(sim):
    """As a kubelet runs a pod: its init containers in order to completion (a sidecar,
    restartPolicy Always, keeps running), then its containers; an operator that does its
    work in init containers sees them done."""
    ns = sim.namespace("init")
    (node,) = sim.add_nodes("h100", 1)
    image = "registry.invalid/sim/stage:1"
    sim.core.create_namespaced_pod(ns, {"metadata": {"name": "staged"}, "spec": {
        "nodeName": node, "tolerations": [{"operator": "Exists"}],
        "initContainers": [{"name": "apply", "image": image}, {"name": "config", "image": image},
                           {"name": "agent", "image": image, "restartPolicy": "Always"}],
        "containers": [{"name": "pause", "image": image}]}})
    pod = wait_for(lambda: (lambda p: p if p.status.phase == "Running" else None)(
        sim.core.read_namespaced_pod("staged", ns)), what="the pod Running")
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Initialized"] == conditions["Ready"] == "True"
    init = {s.name: s for s in pod.status.init_container_statuses}
    assert list(init) == ["apply", "config", "agent"]
    for name in ("apply", "config"):
        assert init[name].state.terminated.exit_code == 0 and init[name].state.terminated.reason == "Completed"
        assert init[name].ready and not init[name].started
    assert init["agent"].state.running and init["agent"].started
    assert [s.state.running is not None for s in pod.status.container_statuses] == [True]


def test_a_running_pod_marked_not_ready_on_a_ready_node_is_ready_again(sim):
    """The node lifecycle controller marks a pod NotReady when it sees the pod's node not
    ready: the pods of a node that goes down, and a pod bound to a node that has just come
    back while the controller's view of it is still the old one. A kubelet then reports the
    pods it runs Ready again. Without that, one such pod blocked a PodDisruptionBudget, and
    every drain after it, for good."""
    ns = sim.namespace("ready-again")
    (node,) = sim.add_nodes("h100", 1)
    sim.core.create_namespaced_pod(ns, {"metadata": {"name": "web"}, "spec": {
        "nodeName": node, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "web", "image": "registry.invalid/sim/web:1"}]}})

    def ready():
        pod = sim.core.read_namespaced_pod("web", ns)
        return {c.type: c.status for c in pod.status.conditions or []}.get("Ready")
    wait_for(lambda: ready() == "True", what="the pod Ready")
    # What the node lifecycle controller writes (MarkPodsNotReady).
    sim.core.patch_namespaced_pod_status("web", ns, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-03T12:00:00Z"}]}})
    assert ready() == "False"
    wait_for(lambda: ready() == "True", timeout=120, what="the pod Ready again")
    pod = sim.core.read_namespaced_pod("web", ns)
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert all(conditions.get(t) == "True" for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")), \
        conditions
    assert pod.status.phase == "Running" and pod.status.pod_ip


def test_nodes_of_a_pool_boot_once_and_each_has_its_own_name_and_boot_id(sim):
    n1, n2 = sim.add_nodes("gb300", 2)
    templates = os.listdir(os.path.join(sim.cluster.dir, "templates"))
    for node in (n1, n2):
        root = sim.host_root(node)
        api_boot_id = sim.core.read_node(node).status.node_info.boot_id
        assert hostroot.boot_id(root) == api_boot_id
        assert hostroot.run(root, ". /etc/nodewright-sim/node.env; echo $NODE_NAME").stdout == node + "\n"
    assert hostroot.boot_id(sim.host_root(n1)) != hostroot.boot_id(sim.host_root(n2))
    (more,) = sim.add_nodes("gb300", 1)
    assert os.listdir(os.path.join(sim.cluster.dir, "templates")) == templates  # the same template again
    assert hostroot.run(sim.host_root(more), "systemctl is-active containerd").stdout == "active\n"
