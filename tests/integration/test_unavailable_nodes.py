# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Unavailable nodes hold capacity (issue 29, item 4): a target node that is NotReady,
or under the GPU Operator's driver upgrade, counts against ``fleetDisruptionLimit``
and is not admitted until it is healthy; the plan and the run name it and say why."""

from __future__ import annotations

import json
import os

import pytest
from nodewright_sim.supervisor import POWER

from fleet_helpers import Fleet, waves_from_report
from k8s_helpers import wait_for

pytestmark = pytest.mark.integration

GPU_UPGRADE = "nvidia.com/gpu-driver-upgrade-state"


@pytest.fixture(scope="module")
def sim():
    """A simulator of this module's own: a count limit counts every disrupted node of the
    cluster, and other tests leave nodes cordoned for triage in the shared one.
    ``NODEWRIGHT_SIM_REUSE`` names one to use instead (it must hold no such node)."""
    from conftest import Sim
    from nodewright_sim.cluster import Cluster
    from nodewright_sim.fleet import create_fleet
    reuse = os.environ.get("NODEWRIGHT_SIM_REUSE")
    if reuse:
        yield Sim(Cluster(reuse))
        return
    cluster = Cluster("unavailable-%d" % os.getpid())
    cluster.up(reboot_delay=2.0)
    try:
        create_fleet(cluster, "bare")
        yield Sim(cluster)
    finally:
        cluster.down()


def ready(sim, node):
    conditions = sim.core.read_node(node).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def power(sim, node, on):
    """Power the simulated node off (kwok marks it NotReady) or on again (Ready)."""
    sim.core.patch_node(node, {"metadata": {"annotations": {POWER: None if on else "off"}}})
    want = "True" if on else "False"
    wait_for(lambda: ready(sim, node) == want, timeout=120, what="%s Ready=%s" % (node, want))


def rebooting_resource(fleet, name, policy):
    """A resource whose package needs a reboot: each admitted node is cordoned, drained,
    rebooted (NotReady for a while) and uncordoned."""
    fleet.create("DeploymentPolicy", policy["name"], policy["spec"])
    fleet.create("NodeWright", name, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": policy["name"],
        "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"},
                                "interrupt": {"type": "reboot"}}}})


def node_marks(fleet, resource):
    """node -> (status label of ``resource``, cordoned)."""
    out = {}
    for node in fleet.nodes:
        obj = fleet.sim.core.read_node(node)
        out[node] = ((obj.metadata.labels or {}).get("nodewright.io/status-%s" % resource),
                     bool(obj.spec.unschedulable))
    return out


def decisions(report):
    return [d for r in report["rollout"] for d in r["decisions"]]


def test_a_notready_node_holds_the_only_slot_until_it_is_ready_again(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 4)])
    down = fleet.nodes[1]
    res = "reboot-" + fleet.label
    rebooting_resource(fleet, res, {"name": "one-" + fleet.label, "spec": {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 1}}})
    power(sim, down, on=False)

    # The plan names the node, why it holds the slot, and makes no wave.
    path = tmp_path / "plan.json"
    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res, "-e", "nodewright_plan_path=%s" % path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    (entry,) = json.loads(path.read_text())["rollouts"]
    assert entry["waves"]["waves"] == [] and entry["waves"]["status"] == "waiting"
    assert "fleet disruption limit reached" in entry["waves"]["reason"]
    assert "%s: NotReady (Ready is False" % down in entry["waves"]["reason"]
    assert list(entry["unavailable"]) == [down]
    assert entry["unavailable"][down].startswith("NotReady (Ready is False: KubeletNotReady, node is rebooting)")
    assert entry["unavailable"][down].endswith("counted against the limits, not admitted until healthy")
    assert "unavailable %s: NotReady" % down in plan.stdout

    # The run takes no healthy node out, does not admit the NotReady one, says why, and
    # ends waiting (exit 0: nothing failed, the capacity is held by the node's health).
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    output = " ".join((proc.stdout + proc.stderr).split())
    assert "no wave started: fleet disruption limit reached" in output, output[-4000:]
    assert "%s is unavailable (NotReady (Ready is False: KubeletNotReady, node is rebooting)): it counts " \
           "against the limits and is not admitted until it is healthy" % down in output, output[-4000:]
    assert waves_from_report(proc.report) == []
    (record,) = proc.report["rollout"]
    assert record["status"] == "waiting" and down in record["reason"] and "NotReady" in record["reason"]
    assert any("not admitted until healthy (%s: NotReady" % down in n for d in decisions(proc.report)
               for n in d["notes"])
    assert node_marks(fleet, res) == {n: (None, False) for n in fleet.nodes}, "nothing was touched"
    status = fleet.resource(res)["status"]
    assert status["status"] == "in_progress" and status["completeNodes"] == "0/4"
    assert status["nodeStatus"] == {n: "waiting" for n in fleet.nodes}

    # Ready again: the rerun takes every node, one at a time.
    power(sim, down, on=True)
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sorted(proc.report["rollout"][0]["assignment"]) == sorted(fleet.nodes)
    assert [len(w) for w in waves_from_report(proc.report)] == [1, 1, 1, 1]
    assert proc.report["rollout"][0]["status"] == "complete"
    assert node_marks(fleet, res) == {n: ("complete", False) for n in fleet.nodes}
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "4/4"


def test_a_node_under_the_gpu_operators_driver_upgrade_is_skipped_and_counted(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 4)])
    busy = fleet.nodes[0]
    res = "gpuop-" + fleet.label
    rebooting_resource(fleet, res, {"name": "two-" + fleet.label, "spec": {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 2}}})
    sim.core.patch_node(busy, {"metadata": {"labels": {GPU_UPGRADE: "upgrade-required"}}})

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # Batches of 2 under a limit of 2, one slot held by the node in the GPU Operator's hands.
    assert waves_from_report(proc.report) == [[n] for n in fleet.nodes[1:]]
    (record,) = proc.report["rollout"]
    why = "%s: under the GPU Operator's driver upgrade (%s=upgrade-required)" % (busy, GPU_UPGRADE)
    assert record["status"] == "waiting" and why in record["reason"], record["reason"]
    assert all(why in " ".join(d["notes"]) for d in decisions(proc.report))
    marks = node_marks(fleet, res)
    assert marks[busy] == (None, False), "left to the GPU Operator"
    assert all(marks[n] == ("complete", False) for n in fleet.nodes[1:])
    status = fleet.resource(res)["status"]
    assert status["status"] == "in_progress" and status["completeNodes"] == "3/4"
    assert status["nodeStatus"][busy] == "waiting"

    # The GPU Operator is done with it: the next run finishes it.
    sim.core.patch_node(busy, {"metadata": {"labels": {GPU_UPGRADE: "upgrade-done"}}})
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert waves_from_report(proc.report) == [[busy]]
    assert node_marks(fleet, res)[busy] == ("complete", False)
    assert fleet.resource(res)["status"]["status"] == "complete"


NVSENTINEL_STATE = "dgxc.nvidia.com/nvsentinel-state"
NODE_MAINTENANCE_CRD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "crds",
                                    "maintenance.nvidia.com_nodemaintenances.yaml")


def test_nodes_in_nvsentinels_or_another_requestors_maintenance_are_skipped_and_counted(sim, tmp_path):
    """Another controller's maintenance: a NodeMaintenance of another requestor (the
    NVIDIA maintenance-operator's CRD, installed here as that operator installs it) and
    NVSentinel's fault-handling label. Neither node is admitted, both hold a slot of the
    fleet limit, the plan and the run say whose maintenance; once they are released the
    next run finishes them."""
    from kubernetes import client
    from k8s_helpers import ensure_crds

    fleet = Fleet(sim, tmp_path, [("h100", 5)])
    held, quarantined = fleet.nodes[0], fleet.nodes[1]
    custom = ensure_crds(sim, [NODE_MAINTENANCE_CRD])
    ns = sim.namespace("maint")
    request = {"apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance",
               "metadata": {"name": "nic-fw-" + held, "namespace": ns},
               "spec": {"requestorID": "nvidia.network.operator", "nodeName": held, "cordon": True}}
    custom.create_namespaced_custom_object("maintenance.nvidia.com", "v1alpha1", ns, "nodemaintenances", request)
    custom.patch_namespaced_custom_object_status(
        "maintenance.nvidia.com", "v1alpha1", ns, "nodemaintenances", request["metadata"]["name"],
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Draining", "message": "",
                                    "lastTransitionTime": "2026-12-04T00:00:00Z"}]}})
    sim.core.patch_node(quarantined, {"metadata": {"labels": {NVSENTINEL_STATE: "quarantined"},
                                                   "annotations": {"quarantineHealthEvent": "[]"}}})
    res = "maint-" + fleet.label
    fleet.create("DeploymentPolicy", "maint-" + fleet.label, {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 3}})
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": "maint-" + fleet.label,
        "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}})
    by_requestor = "under maintenance requested by nvidia.network.operator (NodeMaintenance %s/nic-fw-%s, Draining)" \
        % (ns, held)
    by_nvsentinel = "under NVSentinel's fault handling (%s=quarantined)" % NVSENTINEL_STATE

    path = tmp_path / "plan.json"
    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res, "-e", "nodewright_plan_path=%s" % path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    (entry,) = json.loads(path.read_text())["rollouts"]
    assert sorted(entry["unavailable"]) == sorted([held, quarantined])
    assert entry["unavailable"][held].startswith(by_requestor)
    assert entry["unavailable"][quarantined].startswith(by_nvsentinel)

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # Batches of 2 under a limit of 3, two slots held by the other controllers.
    assert waves_from_report(proc.report) == [[n] for n in fleet.nodes[2:]]
    (record,) = proc.report["rollout"]
    assert record["status"] == "waiting", record["reason"]
    assert "%s: %s" % (held, by_requestor) in record["reason"] and \
        "%s: %s" % (quarantined, by_nvsentinel) in record["reason"], record["reason"]
    marks = node_marks(fleet, res)
    assert marks[held] == (None, False) and marks[quarantined] == (None, False), "left to their controllers"
    assert all(marks[n] == ("complete", False) for n in fleet.nodes[2:])
    assert fleet.resource(res)["status"]["nodeStatus"][held] == "waiting"

    # Both released: the next run finishes them.
    custom.delete_namespaced_custom_object("maintenance.nvidia.com", "v1alpha1", ns, "nodemaintenances",
                                           request["metadata"]["name"], body=client.V1DeleteOptions())
    sim.core.patch_node(quarantined, {"metadata": {"labels": {NVSENTINEL_STATE: None},
                                                   "annotations": {"quarantineHealthEvent": None}}})
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sorted(n for w in waves_from_report(proc.report) for n in w) == sorted([held, quarantined])
    assert node_marks(fleet, res) == {n: ("complete", False) for n in fleet.nodes}
    assert fleet.resource(res)["status"]["status"] == "complete"
