# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Behaviour upstream NodeWright's end-to-end suite asserts, on the simulator: the
deletion of a paused resource is blocked (DeletionBlocked, a Warning Event) until it
is resumed, and then uninstalls while saying so (UninstallInProgress, not Ready); the
node-state entry of a package without uninstall.enabled outlives the resource; a
repaired node-state annotation clears its marks (node condition, NodeStateMalformed)
though the node has no work; paused, disabled and held (sequencing: all) resources
say so in their status after rollout.yml."""

from __future__ import annotations

import json

import pytest
from fleet_helpers import Fleet
from kubernetes.client.rest import ApiException
from test_operating import GROUP, VERSION, condition, crds, gone, ops, removable  # noqa: F401 - fixtures

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.integration

SYSCTL = {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}


def conditions(obj):
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def resource_events(sim, name, reason):
    found = sim.core.list_event_for_all_namespaces(field_selector="involvedObject.name=%s" % name).items
    return [e for e in found if e.reason == reason and e.involved_object.kind == "NodeWright"]


def annotate(one, name, key, value):
    one.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                           {"metadata": {"annotations": {key: value}}})


def test_deleting_a_paused_resource_waits_for_it_to_resume_then_uninstalls_and_keeps_the_rest(sim, ops):  # noqa: F811
    (node,) = ops.add_nodes("gb300")
    name = ops.resource("gb300", dict(removable("ugap-paused"), **SYSCTL))
    first = ops.once()
    assert first.returncode == 0, first.stdout + first.stderr
    assert ops.host_file(node, "/etc/ugap-paused") == "on\n"

    annotate(ops, name, markers.ANNOTATION_PAUSE, "true")
    ops.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
    blocked = ops.once()
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr
    obj = ops.get(name)
    assert obj["metadata"]["deletionTimestamp"] and obj["status"]["status"] == "paused"
    cond = conditions(obj)["DeletionBlocked"]
    assert (cond["status"], cond["reason"]) == ("True", "PausedOrDisabled")
    assert "paused" in cond["message"] and "skip-uninstall" in cond["message"]
    assert conditions(obj)["Deleting"]["reason"] == "DeletionBlocked"
    assert ops.host_file(node, "/etc/ugap-paused") == "on\n", "nothing was uninstalled"
    events = resource_events(sim, name, "DeletionBlocked")
    assert [e.type for e in events] == ["Warning"]
    assert ops.once().returncode == 0 and not gone(ops, name)
    assert len(resource_events(sim, name, "DeletionBlocked")) == 1, "one Event per block, not one per pass"

    annotate(ops, name, markers.ANNOTATION_PAUSE, None)
    resumed = ops.once()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert ops.host_file(node, "/etc/ugap-paused") is None, "uninstalled once resumed"
    conds = conditions(ops.get(name))
    assert conds["DeletionBlocked"]["status"] == "False"
    assert conds["UninstallInProgress"]["status"] == "True" and conds["Ready"]["status"] == "False"

    last = ops.once()
    assert last.returncode == 0, last.stdout + last.stderr
    assert gone(ops, name)
    after = ops.node(node)["metadata"]
    state = json.loads(after["annotations"][markers.state_annotation(name)])
    assert sorted(state["packages"]) == ["sysctl"], "the package that stays keeps its entry"
    assert markers.status_label(name) not in (after.get("labels") or {})


def test_a_repaired_node_state_clears_its_marks_at_the_next_pass(sim, ops):  # noqa: F811
    (node,) = ops.add_nodes("gh200")
    name = ops.resource("gh200", SYSCTL)
    assert ops.once().returncode == 0
    key = markers.state_annotation(name)
    good = ops.node(node)["metadata"]["annotations"][key]
    sim.core.patch_node(node, {"metadata": {"annotations": {key: "{not-valid-json"}}})
    assert ops.once().returncode == 0
    assert condition(ops.node(node), markers.CONDITION_ERRORING)["reason"] == "MalformedState"
    cond = conditions(ops.get(name))["NodeStateMalformed"]
    assert (cond["status"], cond["reason"]) == ("True", "ParseError") and node in cond["message"]

    sim.core.patch_node(node, {"metadata": {"annotations": {key: good}}})
    repaired = ops.once()
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert condition(ops.node(node), markers.CONDITION_ERRORING)["status"] == "False"
    obj = ops.get(name)
    assert "NodeStateMalformed" not in conditions(obj) and obj["status"]["status"] == "complete"


def shellscript(fleet, marker, **spec):
    return dict({"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
                 "interruptionBudget": {"count": 2},
                 "packages": {"shellscript": {"version": "1.0.0", "configMap": {
                     "apply.sh": "echo on > /etc/%s\n" % marker, "apply_check.sh": "test -s /etc/%s\n" % marker}}}},
                **spec)


def test_rollout_marks_paused_disabled_and_held_resources(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    paused, disabled = "paused-" + fleet.label, "disabled-" + fleet.label
    fleet.create("NodeWright", paused, shellscript(fleet, "ugap-p"))
    fleet.create("NodeWright", disabled, shellscript(fleet, "ugap-d"))
    for name, key in ((paused, markers.ANNOTATION_PAUSE), (disabled, markers.ANNOTATION_DISABLE)):
        fleet.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                 {"metadata": {"annotations": {key: "true"}}})
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % name)
        assert proc.returncode == 0, proc.stdout[-3000:]
        status = fleet.resource(name)["status"]
        want = "paused" if name == paused else "disabled"
        assert status["status"] == want and key in status["message"]
        assert status["nodeStatus"] == {fleet.nodes[0]: "unknown"}
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)

    first, later = "first-" + fleet.label, "later-" + fleet.label
    fleet.create("NodeWright", first, shellscript(fleet, "ugap-first", priority=10, sequencing="all"))
    fleet.create("NodeWright", later, shellscript(fleet, "ugap-later", priority=20))
    try:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % later)
        assert proc.returncode == 0, proc.stdout[-3000:]
        status = fleet.resource(later)["status"]
        assert status["status"] == "waiting" and "waiting for %s" % first in status["message"]
        assert conditions(fleet.resource(later))["Ready"]["status"] == "False"
    finally:
        for name in (first, later):
            try:
                fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
            except ApiException:
                pass


def test_rollout_clears_the_mark_of_a_repaired_node_state(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    (n1,) = fleet.nodes
    res = "repair-" + fleet.label
    fleet.create("NodeWright", res, shellscript(fleet, "ugap-repair"))
    run = ["rollout.yml", "-e", "nodewright_resource=%s" % res]
    assert fleet.playbook(*run).returncode == 0
    key = markers.state_annotation(res)
    good = sim.core.read_node(n1).metadata.annotations[key]
    sim.core.patch_node(n1, {"metadata": {"annotations": {key: "{hand edited"}}})
    proc = fleet.playbook(*run)
    assert proc.returncode == 0, proc.stdout[-3000:]
    mark = [c for c in sim.core.read_node(n1).status.conditions if c.type == markers.CONDITION_ERRORING][0]
    assert (mark.status, mark.reason) == ("True", "MalformedState")
    assert conditions(fleet.resource(res))["NodeStateMalformed"]["status"] == "True"

    sim.core.patch_node(n1, {"metadata": {"annotations": {key: good}}})
    proc = fleet.playbook(*run)
    assert proc.returncode == 0, proc.stdout[-3000:]
    mark = [c for c in sim.core.read_node(n1).status.conditions if c.type == markers.CONDITION_ERRORING][0]
    assert mark.status == "False"
    obj = fleet.resource(res)
    assert "NodeStateMalformed" not in conditions(obj) and obj["status"]["status"] == "complete"
