# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nvidia-tuning package rolled out by playbooks/rollout.yml from a NodeWright
resource, on simulator GB200 nodes.

The resource is deploy/examples/nodewright-nvidia-tuning.yaml (with its DeploymentPolicy
deploy/examples/deploymentpolicy-gpu-canary.yaml), narrowed to this test's nodes under
names of its own (other tests share the simulator); its configuration is the example's.
playbooks/plan.yml first shows the settings each node would get; the rollout then
resolves the profile on the controller, drains each node, writes the files, reboots it
(new bootID) and runs the post-interrupt check; a second rollout has no work; a
sysctl-only change restarts systemd-sysctl and reboots nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import yaml
from k8s_helpers import host_result, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import cmdline_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    DEFAULT_POWER_PROFILE_COMMAND,
    SYSCTL_FILE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import load_profiles, render_files

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
GROUP, VERSION = "nodewright.io", "v1alpha1"
EXAMPLES = os.path.join(REPO, "deploy", "examples")
PROFILES = load_profiles()


def ansible(sim, tmp_path, playbook, *args, hosts=None):
    """ansible-playbook with the run report; ``hosts`` become a static inventory of
    simulator nodes, each with its host root."""
    env = sim.env()
    env.update({"ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report", "NODEWRIGHT_REPORT_TASKS": "1",
                "NODEWRIGHT_REPORT_PATH": str(tmp_path / "report.json"), "ANSIBLE_LOCALHOST_WARNING": "false",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false", "ANSIBLE_DEPRECATION_WARNINGS": "false",
                "ANSIBLE_NOCOLOR": "1"})
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", playbook)] + list(args)
    if hosts:
        inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                             "hosts": {h: {"nodewright_host_root": sim.host_root(h)} for h in hosts}}}
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        cmd += ["-i", str(tmp_path / "inventory.yml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    try:
        proc.json = json.loads((tmp_path / "report.json").read_text())
    except (OSError, ValueError):
        proc.json = None
    return proc


@pytest.fixture(scope="module")
def custom(sim):
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "install_crds.yml")],
                          capture_output=True, text=True, env=dict(sim.env(), ANSIBLE_LOCALHOST_WARNING="false",
                                                                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return client.CustomObjectsApi(sim.api)


@pytest.fixture(scope="module")
def gb200(sim):
    nodes = sim.add_nodes("gb200", 2)
    # An NVLink domain of their own: the policy's topology limit counts every node of a
    # clique, and other tests leave nodes of the shared rack cordoned for triage.
    clique = "tuning-%s" % uuid.uuid4().hex[:6]
    for name in nodes:
        sim.core.patch_node(name, {"metadata": {"labels": {"nvidia.com/gpu.clique": clique}}})
    for name in nodes:
        wait_for(lambda name=name: any(c.type == "Ready" and c.status == "True"
                                       for c in sim.core.read_node(name).status.conditions or []),
                 what="%s Ready" % name)
    return sorted(nodes)


@pytest.fixture(scope="module")
def resource(custom, gb200):
    """The examples, narrowed to this test's nodes, under names of their own."""
    suffix = uuid.uuid4().hex[:6]
    with open(os.path.join(EXAMPLES, "deploymentpolicy-gpu-canary.yaml")) as fh:
        policy = yaml.safe_load(fh)
    with open(os.path.join(EXAMPLES, "nodewright-nvidia-tuning.yaml")) as fh:
        nodewright = yaml.safe_load(fh)
    policy["metadata"]["name"] = "gpu-canary-" + suffix
    nodewright["metadata"]["name"] = "nvidia-tuning-" + suffix
    spec = nodewright["spec"]
    spec["deploymentPolicy"] = policy["metadata"]["name"]
    spec["nodeSelectors"]["matchExpressions"] = [{"key": "kubernetes.io/hostname", "operator": "In",
                                                  "values": gb200}]
    custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", policy)
    custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", nodewright)
    yield nodewright["metadata"]["name"]
    for plural, name in (("nodewrights", nodewright["metadata"]["name"]),
                         ("deploymentpolicies", policy["metadata"]["name"])):
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException:
            pass


def boot_id(sim, name):
    return sim.core.read_node(name).status.node_info.boot_id


def read(sim, node, path):
    with open(os.path.join(sim.host_root(node), path.lstrip("/"))) as fh:
        return fh.read()


def node_state(sim, node, name):
    raw = (sim.core.read_node(node).metadata.annotations or {}).get(markers.state_annotation(name))
    return json.loads(raw) if raw else None


def steps(proc, node):
    """The package steps of the last rollout of ``node`` (its main and post-interrupt runs)."""
    out = []
    for task in ("Run the packages", "Run the packages' post-interrupt stages"):
        result = host_result(proc, node, task) or {}
        out += [s for r in result.get("results", []) for s in r.get("steps", [])]
    return out


def test_plan_then_rollout_then_nothing_then_a_sysctl_change(sim, tmp_path, custom, gb200, resource):
    # What the controller knows of a tray: its labels (no GPU Operator driver) and memory.
    resolved = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", options={"page_size": "4k"},
                               profiles=PROFILES, host={"driver_source": "host", "memory_kib": 960 * 1048576})
    reboots = len([s for s in resolved["settings"].values() if s["reboot"]])

    # plan.yml: the settings each node would get, before anything is applied.
    plan = ansible(sim, tmp_path, "plan.yml", "-e", "nodewright_resource=%s" % resource,
                   "-e", "nodewright_plan_path=%s" % (tmp_path / "plan.json"))
    assert plan.returncode == 0, plan.stdout[-3000:]
    for node in gb200:
        assert "%s: nvidia-tuning apply 1.1.0; interrupt reboot" % node in plan.stdout
    assert "nvidia-tuning gb200/multiNodeTraining on ubuntu-24.04: %d settings, %d need a reboot" % (
        len(resolved["settings"]), reboots) in plan.stdout
    assert "cmdline: numa_balancing = numa_balancing=disable (reboot)" in plan.stdout
    assert "sysctl: net.core.rmem_max = 212992 (the kernel's default) -> 536870912 (no reboot)" in plan.stdout
    assert ("sysctl: kernel.threads-max = 7864320 (the kernel's default for 960 GiB of memory) -> 16512444 "
            "(no reboot)") in plan.stdout
    assert ("skipped sysctl:vm.max_map_count: would lower vm.max_map_count from 1048576 (Ubuntu 24.04's "
            "/etc/sysctl.d/10-map-count.conf) to 262144") in plan.stdout
    assert "modprobe: nvidia/NVreg_GrdmaPciTopoCheckOverride = 1 (reboot)" in plan.stdout
    assert "decided gpudirect = dmabuf: no peer-memory provider known for this node" in plan.stdout
    assert "initramfs: rebuilt (update-initramfs -u -k all) when the driver options change" in plan.stdout
    planned = json.loads((tmp_path / "plan.json").read_text())["rollouts"][0]
    for node in gb200:
        tuned = planned["nodes"][node]["nvidia_tuning"]
        assert {s["id"]: s["value"] for s in tuned["settings"]} == {
            sid: s["value"] for sid, s in resolved["settings"].items()}
    assert not os.path.exists(os.path.join(sim.host_root(gb200[0]), SYSCTL_FILE))

    # The rollout: one node at a time (the policy's grace-blackwell compartment), each drained,
    # tuned, rebooted and checked.
    before = {n: boot_id(sim, n) for n in gb200}
    proc = ansible(sim, tmp_path, "rollout.yml", "-e", "nodewright_resource=%s" % resource, hosts=gb200)
    assert proc.returncode == 0, proc.stdout[-6000:]
    files = render_files(resolved, DEFAULT_POWER_PROFILE_COMMAND)
    for node in gb200:
        assert boot_id(sim, node) != before[node], node
        for spec in files:
            assert read(sim, node, spec["path"]) == spec["content"], (node, spec["path"])
        cmdline = read(sim, node, "/proc/cmdline").split()
        assert all(token in cmdline for token in cmdline_tokens(resolved)), cmdline
        # The driver options went into the initramfs before the reboot and are in effect.
        assert "NVreg_CoherentGPUMemoryMode=driver" in read(sim, node, "/boot/initrd.img-6.8.0-45-generic")
        assert read(sim, node, "/sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode").strip() == "driver"
        assert read(sim, node, "/sys/module/nvidia/parameters/NVreg_GrdmaPciTopoCheckOverride").strip() == "1"
        # The distribution's map count is kept.
        assert read(sim, node, "/proc/sys/vm/max_map_count").strip() == "1048576"
        checked = [s for s in steps(proc, node) if s["stage"] == "post-interrupt-check"]
        assert checked and checked[0]["ok"], steps(proc, node)
        assert checked[0]["stdout_tail"].strip() == "all %d setting(s) in effect" % len(resolved["settings"])
        state = node_state(sim, node, resource)
        assert state["packages"]["nvidia-tuning"]["state"] == "complete", state
        assert not sim.core.read_node(node).spec.unschedulable
        # The example's GPU health gate ran after the reboot and passed: persistence mode on
        # (the package's nvidia-persistenced), ECC on, NVLink up, DCGM's quick diagnostic.
        actions = read(sim, node, "/var/lib/nodewright-sim/actions.log")
        after_boot = actions[actions.rindex("\nboot "):]
        assert "nvidia-smi --query-gpu=index,persistence_mode,ecc.mode.current" in after_boot, actions[-2000:]
        assert "dcgmi diag -r 1" in after_boot and "nvidia-smi nvlink --status" in after_boot
    status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", resource).get("status") or {}
    assert status.get("status") == "complete", status

    # Nothing changed: no node has work, nothing reboots.
    booted = {n: boot_id(sim, n) for n in gb200}
    again = ansible(sim, tmp_path, "rollout.yml", "-e", "nodewright_resource=%s" % resource, hosts=gb200)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "%s: 0 of 2 nodes with work" % resource in " ".join(
        host_result(again, "localhost", "Say what will happen")["msg"].split())
    assert all(host_result(again, n, "Plan and run the packages in dependsOn order") is None for n in gb200)
    assert {n: boot_id(sim, n) for n in gb200} == booted

    # A sysctl-only change: planned as a restart of systemd-sysctl, done without a reboot.
    body = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", resource)
    body["spec"]["packages"]["nvidia-tuning"]["configMap"]["extra"] = json.dumps(
        {"settings": {"sysctl": {"vm.swappiness": {"value": 10, "why": "a site's own choice"}}}})
    custom.replace_cluster_custom_object(GROUP, VERSION, "nodewrights", resource, body)
    replan = ansible(sim, tmp_path, "plan.yml", "-e", "nodewright_resource=%s" % resource)
    assert "%s: nvidia-tuning config 1.1.0; interrupt service systemd-sysctl" % gb200[0] in replan.stdout
    assert "sysctl: vm.swappiness = 10 (no reboot)" in replan.stdout
    changed = ansible(sim, tmp_path, "rollout.yml", "-e", "nodewright_resource=%s" % resource, hosts=gb200)
    assert changed.returncode == 0, changed.stdout[-6000:]
    for node in gb200:
        assert read(sim, node, "/proc/sys/vm/swappiness").strip() == "10"
        assert "vm.swappiness = 10" in read(sim, node, SYSCTL_FILE)
        assert boot_id(sim, node) == booted[node]
        assert node_state(sim, node, resource)["packages"]["nvidia-tuning"]["state"] == "complete"


# --------------------------------------------------------------------------- pools of their own

def tuning_resource(custom, name, nodes, config, label=None):
    """A NodeWright resource with the nvidia-tuning package for ``nodes`` only."""
    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright",
            "metadata": {"name": name, "labels": {"test.nodewright.io/tuning": label or name}},
            "spec": {"nodeSelectors": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                              "values": list(nodes)}]},
                     "interruptionBudget": {"count": 1},
                     "packages": {"nvidia-tuning": {"version": "1.1.0", "configMap": config}}}}
    custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)
    return name


def ready_with(sim, name, boot):
    node = sim.core.read_node(name)
    return node.status.node_info.boot_id != boot and any(
        c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def reconcile_once(sim, tmp_path, nodes, selector):
    """``nodewright reconcile --once`` for the resources labelled ``selector``, with an
    inventory of ``nodes`` (the k8s_nodes plugin, local connection to their host roots)."""
    inventory = tmp_path / "tuning.k8s_nodes.yml"
    inventory.write_text(yaml.safe_dump({
        "plugin": "nodewright.fleet.k8s_nodes", "connection": "local",
        "label_selectors": "kubernetes.io/hostname in (%s)" % ",".join(nodes),
        "compose": {"ansible_python_interpreter": repr(sys.executable)}}))
    env = sim.env()
    env.update({"PATH": BIN + os.pathsep + env.get("PATH", ""), "HOME": str(tmp_path),
                "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")]),
                "ANSIBLE_DEPRECATION_WARNINGS": "false"})
    return subprocess.run([sys.executable, "-m", "nodewright_cli", "reconcile", "--once", "--inventory", str(inventory),
                           "--workdir", str(tmp_path / "work"), "--resource-selector", selector],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path))


def test_a_cos_node_keeps_its_settings_after_a_reboot_without_a_rollout(sim, tmp_path, custom):
    (node,) = sim.add_nodes("h100", 1, os_id="cos")
    wait_for(lambda: ready_with(sim, node, None), what="%s Ready" % node)
    label = "cos-" + uuid.uuid4().hex[:6]
    name = tuning_resource(custom, label, [node], {"intent": "multiNodeTraining"})
    selector = "test.nodewright.io/tuning=%s" % label
    try:
        first = reconcile_once(sim, tmp_path, [node], selector)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert read(sim, node, "/proc/sys/net/core/rmem_max").strip() == "536870912"
        assert node_state(sim, node, name)["packages"]["nvidia-tuning"]["state"] == "complete"
        booted = boot_id(sim, node)
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)["status"]
        assert status["nodeBootIds"][node] == booted

        # A maintenance reboot: COS wipes /etc, the record in /var says the package is done.
        with open(os.path.join(sim.host_root(node), "run/nodewright-sim/reboot-requested"), "w") as fh:
            fh.write("maintenance\n")
        wait_for(lambda: ready_with(sim, node, booted), timeout=120, what="%s rebooted" % node)
        assert not os.path.exists(os.path.join(sim.host_root(node), SYSCTL_FILE))
        assert read(sim, node, "/proc/sys/net/core/rmem_max").strip() == "212992"

        # The reconciler sees the new boot ID and applies the settings again: no rollout
        # asked for, no interrupt, so no cordon or drain either.
        again = reconcile_once(sim, tmp_path, [node], selector)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "booted again since their settings were applied" in again.stderr
        assert read(sim, node, "/proc/sys/net/core/rmem_max").strip() == "536870912"
        assert os.path.exists(os.path.join(sim.host_root(node), SYSCTL_FILE))
        assert node_state(sim, node, name)["packages"]["nvidia-tuning"]["state"] == "complete"
        assert not sim.core.read_node(node).spec.unschedulable
        assert boot_id(sim, node) != booted
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)["status"]
        assert status["nodeBootIds"][node] == boot_id(sim, node)
        # Nothing more to do on the next pass.
        quiet = reconcile_once(sim, tmp_path, [node], selector)
        assert quiet.returncode == 0 and "booted again" not in quiet.stderr, quiet.stderr[-3000:]
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)


def test_a_pool_with_the_gpu_operators_driver_gets_no_host_driver_settings(sim, tmp_path, custom):
    (node,) = sim.add_nodes("h200", 1, gpu_operator_driver=True)
    daemonset = sim.apps.read_namespaced_daemon_set("nvidia-driver-daemonset", "gpu-operator")
    assert daemonset.spec.template.spec.node_selector == {"nvidia.com/gpu.deploy.driver": "true"}
    name = tuning_resource(custom, "gpu-operator-" + uuid.uuid4().hex[:6], [node], {"intent": "multiNodeTraining"})
    try:
        plan = ansible(sim, tmp_path, "plan.yml", "-e", "nodewright_resource=%s" % name,
                       "-e", "nodewright_plan_path=%s" % (tmp_path / "plan.json"))
        assert plan.returncode == 0, plan.stdout[-3000:]
        assert ("decided driver_source = gpu-operator: the GPU Operator's driver DaemonSet runs on this node "
                "(nvidia.com/gpu.deploy.driver=true)") in plan.stdout
        tuned = json.loads((tmp_path / "plan.json").read_text())["rollouts"][0]["nodes"][node]["nvidia_tuning"]
        ids = [s["id"] for s in tuned["settings"]]
        assert not [sid for sid in ids if sid.startswith(("modprobe:nvidia/", "gpu:", "module:nvidia_peermem"))]
        assert tuned["initramfs"] is None
        assert "module:tcp_bbr" in ids and "cmdline:acs_redirect" in ids  # the host's own settings stay
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
