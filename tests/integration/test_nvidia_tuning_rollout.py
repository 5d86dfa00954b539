# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nvidia-tuning package rolled out by playbooks/rollout.yml from a NodeWright
resource, on simulator GB200 nodes.

The resource is deploy/examples/nodewright-nvidia-tuning.yaml (with its DeploymentPolicy
deploy/examples/deploymentpolicy-gpu-canary.yaml), narrowed to this test's nodes and
given ``skip_checks`` for what the simulator cannot report (see test_nvidia_tuning_sim).
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
from ansible_collections.nodewright.fleet.plugins.plugin_utils.tuning_files import load_profiles, render_files

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
GROUP, VERSION = "nodewright.io", "v1alpha1"
EXAMPLES = os.path.join(REPO, "deploy", "examples")
SIM_SKIP = {"dropin:*": "the simulator's systemctl shows no unit properties",
            "gpu:*": "the simulator runs no GPU services",
            "governor:*": "the simulator runs no units"}
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
    spec["packages"]["nvidia-tuning"]["configMap"]["skip_checks"] = json.dumps(SIM_SKIP)
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
    """The package steps of the last package run on ``node``."""
    result = host_result(proc, node, "Plan and run the packages in dependsOn order") or {}
    return [s for r in result.get("results", []) for s in r.get("steps", [])]


def test_plan_then_rollout_then_nothing_then_a_sysctl_change(sim, tmp_path, custom, gb200, resource):
    resolved = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04",
                                 options={"driver_source": "host", "page_size": "4k"}, profiles=PROFILES)

    # plan.yml: the settings each node would get, before anything is applied.
    plan = ansible(sim, tmp_path, "plan.yml", "-e", "nodewright_resource=%s" % resource,
                   "-e", "nodewright_plan_path=%s" % (tmp_path / "plan.json"))
    assert plan.returncode == 0, plan.stdout[-3000:]
    for node in gb200:
        assert "%s: nvidia-tuning apply 1.0.0; interrupt reboot" % node in plan.stdout
    assert "nvidia-tuning gb200/multiNodeTraining on ubuntu-24.04: %d settings, 9 need a reboot" % len(
        resolved["settings"]) in plan.stdout
    assert "cmdline: numa_balancing = numa_balancing=disable (reboot)" in plan.stdout
    assert "sysctl: net.core.rmem_max = 536870912 (no reboot)" in plan.stdout
    assert "modprobe: nvidia/NVreg_GrdmaPciTopoCheckOverride = 1 (reboot)" in plan.stdout
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
        assert read(sim, node, "/sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode").strip() == "driver"
        assert read(sim, node, "/sys/module/nvidia/parameters/NVreg_GrdmaPciTopoCheckOverride").strip() == "1"
        checked = [s for s in steps(proc, node) if s["stage"] == "post-interrupt-check"]
        assert checked and checked[0]["ok"], steps(proc, node)
        assert "all 32 setting(s) in effect, 6 unverified" in checked[0]["stdout_tail"]
        state = node_state(sim, node, resource)
        assert state["packages"]["nvidia-tuning"]["state"] == "complete", state
        assert not sim.core.read_node(node).spec.unschedulable
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
    assert "%s: nvidia-tuning config 1.0.0; interrupt service systemd-sysctl" % gb200[0] in replan.stdout
    assert "sysctl: vm.swappiness = 10 (no reboot)" in replan.stdout
    changed = ansible(sim, tmp_path, "rollout.yml", "-e", "nodewright_resource=%s" % resource, hosts=gb200)
    assert changed.returncode == 0, changed.stdout[-6000:]
    for node in gb200:
        assert read(sim, node, "/proc/sys/vm/swappiness").strip() == "10"
        assert "vm.swappiness = 10" in read(sim, node, SYSCTL_FILE)
        assert boot_id(sim, node) == booted[node]
        assert node_state(sim, node, resource)["packages"]["nvidia-tuning"]["state"] == "complete"
