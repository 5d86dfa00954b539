# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright on real kubelet nodes: a simulator with two nodes run by a real kubelet,
containerd and runc (``nodewright-sim up --real-nodes 2``) beside kwok nodes.

What kwok cannot show is proven here: the ``nodewright.fleet.node`` connection end to
end (its pod runs, modules and package steps run in the chroot, files travel both
ways, exit codes and output come back, the pod goes on success, failure and
interrupt), drains against pods that really terminate (grace periods, preStop
hooks, finalizers, DaemonSets, emptyDir data, a PDB waiting for a replacement on the
other node), a reboot (the kubelet stops, the node goes NotReady and comes back with
a new boot ID), and the Helm chart's reconciler running in a pod. Package scripts run
in each node's own host root, never on this machine: a test checks its /etc.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from nodewright_sim import ociimage, reconcilerimage
from nodewright_sim.cluster import Cluster
from nodewright_sim.fleet import Fleet
from nodewright_sim.realnodes import RealNodes

from k8s_helpers import ensure_crds, host_result, wait_for

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("NODEWRIGHT_CACHE") or os.path.expanduser("~/.cache/nodewright")) / "bin"
IMAGE = ociimage.BUSYBOX_IMAGE
NODE_POD = "nodewright.io/node-pod=true"
GROUP, VERSION = "nodewright.io", "v1alpha1"


class RealSim(object):
    """The real-node simulator: its API clients, its two real nodes, runners."""

    def __init__(self, cluster, nodes):
        self.cluster = cluster
        self.kubeconfig = cluster.kubeconfig
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.fleet = Fleet(cluster)
        self.real = RealNodes(cluster, self.fleet)
        self.nodes = nodes

    def host_root(self, node):
        return self.fleet.host_root(node)

    def host_file(self, node, path):
        full = pathlib.Path(self.host_root(node)) / path.lstrip("/")
        return full.read_text() if full.exists() else None

    def namespace(self, prefix="rn", privileged=False):
        name = "%s-%s" % (prefix, uuid.uuid4().hex[:6])
        labels = {"pod-security.kubernetes.io/enforce": "privileged"} if privileged else {}
        self.core.create_namespace({"metadata": {"name": name, "labels": labels}})
        wait_for(lambda: _exists(self.core.read_namespaced_service_account, "default", name),
                 what="the default ServiceAccount of %s" % name)
        return name

    def env(self, **extra):
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_DEPRECATION_WARNINGS="false",
                   ANSIBLE_PYTHON_INTERPRETER="auto_silent")
        env.update(extra)
        return env

    def playbook(self, tmp_path, plays, inventory, *extra, popen=False, env=None):
        """ansible-playbook with the report callback; returns the CompletedProcess (``.json``)."""
        (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
        if not isinstance(inventory, str):
            (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
            inventory = str(tmp_path / "inventory.yml")
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
               str(tmp_path / "play.yml")] + list(extra)
        run_env = self.env(ANSIBLE_CALLBACKS_ENABLED="nodewright.fleet.report",
                           NODEWRIGHT_REPORT_PATH=str(tmp_path / "report.json"), NODEWRIGHT_REPORT_TASKS="1",
                           **(env or {}))
        if popen:
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env,
                                    cwd=str(tmp_path), start_new_session=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=str(tmp_path))
        try:
            proc.json = json.loads((tmp_path / "report.json").read_text())
        except (OSError, ValueError):
            proc.json = None
        return proc

    def k8s_inventory(self, tmp_path, selector, **extra):
        path = tmp_path / "real.k8s_nodes.yml"
        path.write_text(yaml.safe_dump(dict({"plugin": "nodewright.fleet.k8s_nodes", "label_selectors": selector,
                                             "connection": "k8s"}, **extra)))
        return str(path)

    def node_pods(self, node=None, namespace=None):
        pods = (self.core.list_namespaced_pod(namespace, label_selector=NODE_POD) if namespace else
                self.core.list_pod_for_all_namespaces(label_selector=NODE_POD)).items
        return [p for p in pods if node is None or p.spec.node_name == node]

    def ready(self, node):
        conds = self.core.read_node(node).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conds)


def _exists(read, *args):
    try:
        read(*args)
        return True
    except ApiException:
        return False


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    """One simulator with 2 real nodes for every test here."""
    cluster = Cluster("pytest-real-%d" % os.getpid())
    cluster.up(reboot_delay=1.0, kubelet_access=True)
    try:
        nodes = RealNodes(cluster).up(2)
        yield RealSim(cluster, nodes)
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def nodewright_ns(real):
    """The namespace of node pods, as docs/connection.md sets it up."""
    ns = "nodewright"
    try:
        real.core.create_namespace({"metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "privileged"}}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    return ns


def container(name, script, **extra):
    return dict({"name": name, "image": IMAGE, "command": ["sh", "-c", script]}, **extra)


def etc_snapshot(top="/etc"):
    """Path -> (kind, content hash or link target) of every entry below ``top``."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path):
                    snap[path] = ("link", os.readlink(path))
                elif os.path.isfile(path):
                    with open(path, "rb") as fh:
                        snap[path] = ("file", hashlib.sha256(fh.read()).hexdigest())
                else:
                    snap[path] = ("dir", None)
            except OSError:
                snap[path] = ("unreadable", None)
    return snap


# --------------------------------------------------------------------------- the simulator itself

def test_real_nodes_join_ready_with_their_pool_and_their_own_host_root(real):
    assert len(real.nodes) == 2
    for name in real.nodes:
        node = real.core.read_node(name)
        info = node.status.node_info
        assert real.ready(name)
        assert info.container_runtime_version.startswith("containerd://")
        assert info.kubelet_version.startswith("v1.")
        assert info.boot_id == real.host_file(name, "/proc/sys/kernel/random/boot_id").strip()
        labels = node.metadata.labels
        assert labels["nodepool"] == "h100" and labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["sim.nodewright.io/real-node"] == "true"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert "kwok.x-k8s.io/node" not in (node.metadata.annotations or {})
        assert node.metadata.annotations["sim.nodewright.io/host-root"] == real.host_root(name)
    st = real.cluster.status()
    assert set(st["real_nodes"]) == set(real.nodes)
    assert all(n["running"] and n["processes"] >= 2 for n in st["real_nodes"].values())


# --------------------------------------------------------------------------- the k8s-native connection

def test_the_connection_runs_modules_and_package_steps_in_the_nodes_host_root(real, nodewright_ns, tmp_path):
    node = real.nodes[0]
    inventory = real.k8s_inventory(tmp_path, "kubernetes.io/hostname=%s" % node)
    machine_etc = etc_snapshot()
    root_etc = etc_snapshot(os.path.join(real.host_root(node), "etc"))
    fetched = tmp_path / "fetched.txt"
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Read the node", "ansible.builtin.command": "cat /etc/nodewright-sim/node.env",
         "register": "node_env", "changed_when": False},
        {"name": "A failing command", "ansible.builtin.shell": "echo to-stdout; echo to-stderr >&2; exit 3",
         "register": "failing", "ignore_errors": True},
        {"name": "Copy a file onto the host", "ansible.builtin.copy": {
            "content": "from the controller\n", "dest": "/etc/nodewright-copy-test", "mode": "0644"}},
        {"name": "Fetch it back", "ansible.builtin.fetch": {
            "src": "/etc/nodewright-copy-test", "dest": str(fetched), "flat": True}},
        {"name": "Tune the kernel with the sysctl package", "nodewright.fleet.package": {
            "name": "sysctl", "config": {"vm.swappiness": "7"}}},
    ]}]
    proc = real.playbook(tmp_path, play, inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "NODE_NAME=%s" % node in host_result(proc, node, "Read the node")["stdout"]
    failing = host_result(proc, node, "A failing command")
    assert failing["failed"] and failing["rc"] == 3
    assert failing["stdout"] == "to-stdout" and failing["stderr"] == "to-stderr"
    assert host_result(proc, node, "Copy a file onto the host")["changed"] is True
    assert fetched.read_text() == "from the controller\n"
    assert host_result(proc, node, "Tune the kernel with the sysctl package")["changed"] is True
    # Everything happened in the node's host root...
    assert real.host_file(node, "/etc/nodewright-copy-test") == "from the controller\n"
    assert "vm.swappiness = 7" in real.host_file(node, "/etc/sysctl.d/90-nodewright-sysctl.conf")
    assert real.host_file(node, "/proc/sys/vm/swappiness").strip() == "7"
    changed = set(etc_snapshot(os.path.join(real.host_root(node), "etc")).items()) - set(root_etc.items())
    assert changed, "the package and the copy changed the node's /etc"
    # ... and nothing on this machine.
    assert not os.path.exists("/etc/nodewright-copy-test")
    assert not os.path.exists("/etc/sysctl.d/90-nodewright-sysctl.conf")
    assert etc_snapshot() == machine_etc
    wait_for(lambda: real.node_pods(node) == [], what="the connection to delete its pods")


def test_a_pod_on_a_real_node_cannot_mount_this_machines_root(real, nodewright_ns):
    from ansible_collections.nodewright.fleet.plugins.connection.node import NodePod
    from ansible_collections.nodewright.fleet.plugins.module_utils.node.pod import NodePodError
    node = real.nodes[0]
    with pytest.raises(NodePodError) as caught:
        NodePod(real.api, node, namespace=nodewright_ns, timeout=30).start()  # host_path: the default /
    text = str(caught.value)
    assert "an admission policy refused the node pod in namespace %s" % nodewright_ns in text
    assert "nodewright-sim-host-isolation" in text and "a hostPath must be below %s/" % real.cluster.dir in text
    assert real.node_pods(node) == []
    # The node's own host root is what its node pods mount.
    pod = NodePod(real.api, node, namespace=nodewright_ns, timeout=60, host_path=real.host_root(node))
    pod.start()
    try:
        rc, out, _err = pod.exec(["chroot", "/host", "/bin/sh", "-c", "cat /etc/nodewright-sim/node.env"])
        assert rc == 0 and b"NODE_NAME=%s" % node.encode() in out
    finally:
        pod.delete()


def test_a_failed_task_and_an_interrupted_play_leave_no_node_pod(real, nodewright_ns, tmp_path):
    node = real.nodes[1]
    inventory = real.k8s_inventory(tmp_path, "kubernetes.io/hostname=%s" % node)
    failed = real.playbook(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Fail on the host", "ansible.builtin.command": "false"}]}], inventory)
    assert failed.returncode == 2
    result = host_result(failed, node, "Fail on the host")
    assert result["failed"] and result["rc"] == 1
    wait_for(lambda: real.node_pods(node) == [], what="the pod of the failed task to be deleted")

    running = real.playbook(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Take long", "ansible.builtin.command": "sleep 300"}]}], inventory, popen=True)
    try:
        wait_for(lambda: [p for p in real.node_pods(node) if p.status.phase == "Running"], timeout=60,
                 what="the node pod running the long task")
        time.sleep(1)  # the command is in flight
        os.killpg(running.pid, signal.SIGINT)  # Ctrl-C
        running.wait(timeout=60)
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
    assert running.returncode != 0
    wait_for(lambda: real.node_pods(node) == [], timeout=60, what="the interrupted play's pod to be deleted")


def test_the_rollout_playbook_rolls_a_package_out_to_the_real_nodes_through_the_k8s_preset(
        real, nodewright_ns, tmp_path):
    custom = ensure_crds(real)
    label = "rollout-real-%s" % uuid.uuid4().hex[:6]
    for node in real.nodes:
        real.core.patch_node(node, {"metadata": {"labels": {"rollout-real": label}}})
    try:
        name = label
        custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"rollout-real": label}}, "interruptionBudget": {"count": 1},
                     "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}}})
        inventory = real.k8s_inventory(tmp_path, "rollout-real=%s" % label)
        machine_etc = etc_snapshot()
        env = real.env(ANSIBLE_CALLBACKS_ENABLED="nodewright.fleet.report",
                       NODEWRIGHT_REPORT_PATH=str(tmp_path / "report.json"))
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                               str(REPO / "playbooks" / "rollout.yml"), "-e", "nodewright_resource=%s" % name],
                              capture_output=True, text=True, env=env, cwd=str(tmp_path))
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name).get("status") or {}
        assert status.get("status") == "complete", status
        for node in real.nodes:
            assert "vm.max_map_count = 262144" in real.host_file(node, "/etc/sysctl.d/90-nodewright-sysctl.conf")
            assert not real.core.read_node(node).spec.unschedulable
        assert etc_snapshot() == machine_etc
        assert real.node_pods() == []
    finally:
        for node in real.nodes:
            real.core.patch_node(node, {"metadata": {"labels": {"rollout-real": None}}})


# --------------------------------------------------------------------------- drains of real pods

LOCAL = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                         "ansible_python_interpreter": sys.executable}}}}


def drain(real, tmp_path, node, **params):
    """nodewright.fleet.node_drain as a play runs it; returns (CompletedProcess, result)."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Drain", "nodewright.fleet.node_drain": dict({"name": node}, **params)}]}]
    proc = real.playbook(tmp_path, play, LOCAL)
    return proc, host_result(proc, "localhost", "Drain")


def uncordon(real, node):
    real.core.patch_node(node, {"spec": {"unschedulable": None},
                                "metadata": {"annotations": {"nodewright.io/cordoned-by": None}}})


def pinned_deployment(real, ns, name, node, containers, grace=30, volumes=None, replicas=1, affinity=None):
    labels = {"app": name}
    spec = {"containers": containers, "terminationGracePeriodSeconds": grace}
    if affinity:
        spec["affinity"] = affinity
    else:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if volumes:
        spec["volumes"] = volumes
    real.apps.create_namespaced_deployment(ns, {
        "metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                                             "template": {"metadata": {"labels": labels}, "spec": spec}}})
    return "app=%s" % name


def running_ready(real, ns, selector, node=None):
    pods = [p for p in real.core.list_namespaced_pod(ns, label_selector=selector).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            and (node is None or p.spec.node_name == node)]
    return [p for p in pods if all(c.ready for c in p.status.container_statuses or [])]


def log_volume(real, node, name):
    """A hostPath in the node's own host root, where a pod leaves what it went through."""
    path = os.path.join(real.host_root(node), "var/log/drain-tests", name)
    os.makedirs(path, exist_ok=True)
    return {"name": "log", "hostPath": {"path": path, "type": "Directory"}}, path


def test_a_drain_waits_for_grace_periods_and_prestop_hooks_keeps_daemonsets_and_asks_for_emptydir(
        real, tmp_path):
    node = real.nodes[0]
    ns = real.namespace("drain")
    volume, logs = log_volume(real, node, ns)
    mount = [{"name": "log", "mountPath": "/log"}]
    # SIGTERM starts a two-second shutdown; the drain must wait for it.
    pinned_deployment(real, ns, "graceful", node, [container(
        "c", "trap 'echo term >> /log/graceful; sleep 2; echo exited >> /log/graceful; exit 0' TERM; "
             "echo started >> /log/graceful; while true; do sleep 1; done", volumeMounts=mount)],
        volumes=[volume])
    # The preStop hook takes two seconds; SIGTERM comes after it.
    pinned_deployment(real, ns, "prestop", node, [container(
        "c", "trap 'echo term >> /log/prestop; exit 0' TERM; echo started >> /log/prestop; "
             "while true; do sleep 1; done", volumeMounts=mount,
        lifecycle={"preStop": {"exec": {"command": [
            "sh", "-c", "echo prestop >> /log/prestop; sleep 2; echo prestop-done >> /log/prestop"]}}})],
        volumes=[volume])
    pinned_deployment(real, ns, "scratch", node, [container(
        "c", "echo data > /scratch/f; while true; do sleep 1; done",
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
        volumes=[{"name": "scratch", "emptyDir": {}}], grace=1)
    real.apps.create_namespaced_daemon_set(ns, {"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"nodeSelector": {"sim.nodewright.io/real-node": "true"}, "tolerations": [{"operator": "Exists"}],
                     "terminationGracePeriodSeconds": 1, "containers": [container("c", "sleep 100000")]}}}})
    for app in ("graceful", "prestop", "scratch", "agent"):
        wait_for(lambda app=app: running_ready(real, ns, "app=%s" % app, node), timeout=90, what="%s running" % app)
    wait_for(lambda: os.path.exists(os.path.join(logs, "prestop")), what="the pods' logs")
    try:
        proc, refused = drain(real, tmp_path, node, timeout=120)
        assert proc.returncode == 2 and refused["failed"]
        assert "uses emptyDir storage" in refused["msg"] and "%s/scratch-" % ns in refused["msg"]
        assert not real.core.read_node(node).spec.unschedulable, "a refused drain changes nothing"
        assert running_ready(real, ns, "app=graceful", node)

        proc, result = drain(real, tmp_path, node, timeout=120, delete_emptydir_data=True)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        evicted = result["evicted"]
        for app in ("graceful", "prestop", "scratch"):
            assert any(p.startswith("%s/%s-" % (ns, app)) for p in evicted), (app, evicted)
        # When the drain returned, each pod had really finished its shutdown.
        assert open(os.path.join(logs, "graceful")).read().split() == ["started", "term", "exited"]
        assert open(os.path.join(logs, "prestop")).read().split() == ["started", "prestop", "prestop-done", "term"]
        kept = [k for k in result["kept"] if k["pod"].startswith("%s/agent-" % ns)]
        assert kept and kept[0]["reason"] == "DaemonSet pod stays (DaemonSet agent)"
        assert running_ready(real, ns, "app=agent", node), "the DaemonSet pod still runs"
        assert real.core.read_node(node).spec.unschedulable
    finally:
        real.core.delete_namespace(ns)
        uncordon(real, node)


def test_a_pod_stuck_terminating_on_a_finalizer_fails_the_drain_at_its_deadline(real, tmp_path):
    node = real.nodes[1]
    ns = real.namespace("stuck")
    real.core.create_namespaced_pod(ns, {"metadata": {"name": "held", "finalizers": ["test.nodewright.io/hold"]},
                                         "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                                                  "containers": [container("c", "sleep 100000")]}})
    wait_for(lambda: real.core.read_namespaced_pod("held", ns).status.phase == "Running", timeout=60,
             what="the held pod running")
    try:
        proc, result = drain(real, tmp_path, node, timeout=15, force=True)
        assert proc.returncode == 2 and result["failed"]
        assert result["still_present"] == ["%s/held" % ns]
        assert "drain of node %s timed out after 15s" % node in result["msg"]
        assert "%s/held has been terminating since " % ns in result["msg"]
        assert "held by finalizer test.nodewright.io/hold, which nothing has removed" in result["msg"]
        assert "The node stays cordoned" in result["msg"]
        pod = real.core.read_namespaced_pod("held", ns)
        assert pod.metadata.deletion_timestamp, "the eviction was accepted"
        assert pod.status.phase in ("Succeeded", "Failed") or not any(
            c.state.running for c in pod.status.container_statuses or []), "the kubelet stopped its container"
        assert real.core.read_node(node).spec.unschedulable
        events = real.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % node).items
        assert any(e.reason == "NodeWrightDrainFailed" for e in events)
    finally:
        real.core.patch_namespaced_pod("held", ns, {"metadata": {"finalizers": None}})
        real.core.delete_namespace(ns)
        uncordon(real, node)


def test_a_pdb_makes_the_drain_wait_for_a_replacement_ready_on_the_other_real_node(real, tmp_path):
    a, b = real.nodes
    ns = real.namespace("pdb")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [a, b]}]}]}}}
    # Ready two seconds after start, so a replacement is not available at once.
    web = container("c", "sleep 2; touch /tmp/ready; while true; do sleep 1; done",
                    readinessProbe={"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1})
    real.core.patch_node(b, {"spec": {"unschedulable": True}})  # both replicas start on a
    try:
        selector = pinned_deployment(real, ns, "web", None, [web], grace=1, replicas=2, affinity=affinity)
        wait_for(lambda: len(running_ready(real, ns, selector, a)) == 2, timeout=90, what="two web pods on %s" % a)
        uncordon(real, b)
        real.policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": "web"}, "spec": {
            "minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
        wait_for(lambda: (real.policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed
                          == 1), what="the PDB allowing one disruption")
        proc, result = drain(real, tmp_path, a, timeout=120)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        assert len(result["evicted"]) == 2
        # The second eviction was refused (429) until the first replacement was Ready on b.
        assert result["eviction_attempts"] > 2, result
        ready_on_b = running_ready(real, ns, selector, b)
        assert ready_on_b, "a replacement is Ready on %s" % b
        wait_for(lambda: len(running_ready(real, ns, selector, b)) == 2, timeout=60, what="both replicas on %s" % b)
        assert running_ready(real, ns, selector, a) == []
    finally:
        real.core.delete_namespace(ns)
        uncordon(real, a)
        uncordon(real, b)


# --------------------------------------------------------------------------- reboots

class ReadyWatch(object):
    """Every Ready status and boot ID a node shows while it is watched."""

    def __init__(self, real, node):
        self.seen = []
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(real, node), daemon=True)
        self._thread.start()

    def _run(self, real, node):
        core = client.CoreV1Api(config.new_client_from_config(config_file=real.kubeconfig))
        while not self._stop.is_set():
            try:
                for ev in self._watch.stream(core.list_node, field_selector="metadata.name=%s" % node,
                                             timeout_seconds=5):
                    n = ev["object"]
                    ready = [c.status for c in n.status.conditions or [] if c.type == "Ready"]
                    self.seen.append((ready[0] if ready else None, n.status.node_info.boot_id))
                    if self._stop.is_set():
                        return
            except Exception:
                time.sleep(0.2)

    def stop(self):
        self._stop.set()
        self._watch.stop()
        self._thread.join(10)
        return self.seen


def test_a_reboot_stops_the_kubelet_and_the_node_comes_back_with_a_new_boot_id(real, tmp_path):
    node = real.nodes[1]
    ns = real.namespace("reboot")
    pinned_deployment(real, ns, "survivor", node, [container("c", "while true; do sleep 1; done")], grace=1)
    wait_for(lambda: running_ready(real, ns, "app=survivor", node), timeout=60, what="the survivor running")
    before_pod = running_ready(real, ns, "app=survivor", node)[0]
    before_id = real.core.read_node(node).status.node_info.boot_id
    seen = ReadyWatch(real, node)
    sim_cli = os.path.join(os.path.dirname(sys.executable), "nodewright-sim")
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Read the boot ID", "nodewright.fleet.node_state": {"name": node}, "register": "before"},
        {"name": "Reboot the node", "ansible.builtin.command": {
            "argv": [sim_cli, "--name", real.cluster.name, "reboot", node]}},
        {"name": "Wait for the node", "nodewright.fleet.node_wait_ready": {
            "name": node, "previous_boot_id": "{{ before.boot_id }}", "timeout": 180}},
    ]}]
    try:
        proc = real.playbook(tmp_path, play, LOCAL)
        history = seen.stop()
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        after = real.core.read_node(node)
        after_id = after.status.node_info.boot_id
        assert after_id != before_id and host_result(proc, "localhost", "Read the boot ID")["boot_id"] == before_id
        assert after_id == real.host_file(node, "/proc/sys/kernel/random/boot_id").strip()
        assert host_result(proc, "localhost", "Wait for the node")["boot_id"] == after_id
        assert real.ready(node)
        assert any(status != "True" for status, _ in history), "the node went NotReady: %s" % history
        assert "boot %s" % after_id in real.host_file(node, "/var/lib/nodewright-sim/actions.log")
        # Its pod's container was killed with the node and started again by the new kubelet. Right
        # after the node is Ready the pod's status can still be the one the old kubelet wrote, so
        # wait for the new kubelet's: the same pod, running and ready with a new container.
        old_container = before_pod.status.container_statuses[0].container_id

        def restarted():
            return [p for p in running_ready(real, ns, "app=survivor", node)
                    if p.metadata.name == before_pod.metadata.name
                    and p.status.container_statuses[0].container_id != old_container]
        wait_for(restarted, timeout=90, what="the survivor back with a new container")
        assert real.node_pods(node) == []
    finally:
        seen.stop()
        real.core.delete_namespace(ns)


def test_the_rollout_reboots_a_real_node_and_runs_its_post_interrupt_checks(real, nodewright_ns, tmp_path):
    node = real.nodes[0]
    custom = ensure_crds(real)
    name = "reboot-real-%s" % uuid.uuid4().hex[:6]
    real.core.patch_node(node, {"metadata": {"labels": {"reboot-real": name}}})
    before_id = real.core.read_node(node).status.node_info.boot_id
    seen = ReadyWatch(real, node)
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"reboot-real": name}}, "interruptionBudget": {"count": 1},
                     "packages": {"sysctl": {"version": "1.0.0", "configMap": {"kernel.pid_max": "131072"},
                                             "interrupt": {"type": "reboot"}}}}})
        inventory = real.k8s_inventory(tmp_path, "reboot-real=%s" % name)
        env = real.env(ANSIBLE_CALLBACKS_ENABLED="nodewright.fleet.report",
                       NODEWRIGHT_REPORT_PATH=str(tmp_path / "report.json"), NODEWRIGHT_REPORT_TASKS="1")
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                               str(REPO / "playbooks" / "rollout.yml"), "-e", "nodewright_resource=%s" % name],
                              capture_output=True, text=True, env=env, cwd=str(tmp_path))
        history = seen.stop()
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        after_id = real.core.read_node(node).status.node_info.boot_id
        assert after_id != before_id
        assert any(status != "True" for status, _ in history), history
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)["status"]
        assert status["status"] == "complete", status
        # The value survived the reboot (from /etc/sysctl.d) and the post-interrupt check saw it.
        assert real.host_file(node, "/proc/sys/kernel/pid_max").strip() == "131072"
        report = json.loads((tmp_path / "report.json").read_text())
        names = [t["task"] for t in report.get("tasks", []) if t["host"] == node and t["status"] != "skipped"]
        assert any("Wait for the node to be Ready with a new boot ID" in t for t in names), names
        assert real.ready(node) and not real.core.read_node(node).spec.unschedulable
    finally:
        seen.stop()
        real.core.patch_node(node, {"metadata": {"labels": {"reboot-real": None}}})


# --------------------------------------------------------------------------- the Helm install, for real

def test_the_helm_chart_runs_the_reconciler_on_a_real_node_and_it_rolls_out_kwok_nodes(real, tmp_path):
    import urllib.request
    archive, image = reconcilerimage.build(str(tmp_path / "reconciler.oci.tar"))
    for node in real.nodes:
        real.real.import_image(node, archive)
    os.unlink(archive)
    ns = real.namespace("nwhelm", privileged=True)
    label = "helm-real-%s" % uuid.uuid4().hex[:6]
    kwok = real.fleet.add_nodes("gh200", 2)
    for node in kwok:
        real.core.patch_node(node, {"metadata": {"labels": {"helm-real": label}}})
    nodes_dir = os.path.join(real.cluster.dir, "nodes")
    repository, tag = image.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        # On a real node, beside the kwok nodes it maintains.
        "nodeSelector": {"sim.nodewright.io/real-node": "true"},
        "reconciler": {"interval": "5s", "logLevel": "debug",
                       # The kwok nodes' hosts are directories of the simulator: reach them there
                       # (connection local), with root and chroot, as package steps need.
                       "extraArgs": ["--connection", "local"],
                       # As root, Ansible's temporary files would go to root's home on the read-only
                       # root file system; the chart's other Ansible paths are under /tmp already.
                       "extraEnv": [{"name": "ANSIBLE_REMOTE_TMP", "value": "/tmp/.ansible/remote"}],
                       "extraVolumes": [{"name": "sim-nodes", "hostPath": {"path": nodes_dir, "type": "Directory"}}],
                       "extraVolumeMounts": [{"name": "sim-nodes", "mountPath": nodes_dir}]},
        "podSecurityContext": {"runAsNonRoot": False, "runAsUser": 0},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT", "CHOWN", "FOWNER", "DAC_OVERRIDE"]}},
    }
    helm = [str(BIN / "helm"), "--kubeconfig", real.kubeconfig]
    args = ["install", "nw", str(REPO / "deploy" / "helm" / "nodewright"), "--namespace", ns]
    for key, value in values.items():
        args += ["--set-json", "%s=%s" % (key, json.dumps(value))]
    custom = None
    name = "helm-" + label
    try:
        proc = subprocess.run(helm + args, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        selector = "app.kubernetes.io/component=reconciler"
        pods = wait_for(lambda: running_ready(real, ns, selector), timeout=180,
                        what="the reconciler pod running on a real node")
        pod = pods[0]
        assert pod.spec.node_name in real.nodes
        assert pod.spec.containers[0].image == image
        assert pod.spec.service_account_name == "nw-nodewright"
        custom = client.CustomObjectsApi(real.api)
        custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"helm-real": label}}, "interruptionBudget": {"count": 2},
                     "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "524288"}}}}})

        def complete():
            status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name).get("status") or {}
            return status.get("status") == "complete"
        try:
            wait_for(complete, timeout=300, interval=1, what="the in-cluster reconciler's rollout")
        except AssertionError:
            logs = real.core.read_namespaced_pod_log(pod.metadata.name, ns, tail_lines=60)
            raise AssertionError("the reconciler did not complete the rollout; its log:\n%s" % logs)
        for node in kwok:
            assert "vm.max_map_count = 524288" in real.host_file(node, "/etc/sysctl.d/90-nodewright-sysctl.conf")
            assert real.core.read_node(node).metadata.labels["nodewright.io/status-%s" % name] == "complete"
        # Its metrics, straight from the pod's IP.
        with urllib.request.urlopen("http://%s:9108/metrics" % pod.status.pod_ip, timeout=10) as resp:
            metrics = resp.read().decode()
        assert "nodewright_reconciler_ready 1" in metrics, metrics[:2000]
    finally:
        if custom is not None:
            with_ignored(custom.delete_cluster_custom_object, GROUP, VERSION, "nodewrights", name)
        subprocess.run(helm + ["uninstall", "nw", "--namespace", ns, "--wait"], capture_output=True)
        real.core.delete_namespace(ns)
        for node in kwok:
            with_ignored(real.core.delete_node, node)


def with_ignored(call, *args):
    try:
        call(*args)
    except ApiException:
        pass
