# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Behaviour upstream NodeWright's end-to-end suite expects, as pure decisions: a
paused or disabled resource's deletion is blocked, the node-state entries of
packages a deletion does not uninstall are kept, NodeStateMalformed and
UninstallInProgress follow the nodes, and a resource held by ``sequencing: all``
says waiting."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import deletion
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.desired_state import apply_sequencing
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

pytestmark = pytest.mark.unit

ENTRY = {"version": "1.0.0", "stage": "config", "state": "complete"}


def resource(annotations=None, deleting=True):
    meta = {"name": "r", "finalizers": [deletion.FINALIZER], "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    return {"metadata": meta, "spec": {"packages": {
        "kdump": {"version": "1.0.0", "uninstall": {"enabled": True}},
        "sysctl": {"version": "1.0.0", "uninstall": {"enabled": False}}}}}


def node(name, packages=("kdump", "sysctl"), raw=None, label=None, conditions=()):
    state = raw if raw is not None else json.dumps({"status": "complete", "packages": {p: ENTRY for p in packages}})
    return {"metadata": {"name": name, "labels": {markers.status_label("r"): label} if label else {},
                         "annotations": {markers.state_annotation("r"): state}},
            "status": {"conditions": list(conditions), "nodeInfo": {"bootID": "b"}}}


@pytest.mark.parametrize("annotations,action", [
    ({markers.ANNOTATION_PAUSE: "true"}, deletion.DELETION_BLOCKED),
    ({markers.ANNOTATION_DISABLE: "true"}, deletion.DELETION_BLOCKED),
    ({}, deletion.UNINSTALL),
    # Letting it go without the uninstall is the user's explicit way out, paused or not.
    ({markers.ANNOTATION_PAUSE: "true", deletion.ANNOTATION_SKIP_UNINSTALL: "true"}, deletion.REMOVE_FINALIZER),
])
def test_a_paused_or_disabled_resource_keeps_its_pending_uninstall(annotations, action):
    decision = deletion.decide(resource(annotations), [node("a")], {"name": "r"})
    assert decision["action"] == action
    if action == deletion.DELETION_BLOCKED:
        assert decision["nodes"] == ["a"] and "skip-uninstall" in decision["reason"]
        cond = deletion.deletion_blocked_condition(decision)
        assert (cond["type"], cond["status"], cond["reason"]) == ("DeletionBlocked", "True", "PausedOrDisabled")
        assert deletion.deleting_condition(decision)["reason"] == "DeletionBlocked"
    else:
        assert deletion.deletion_blocked_condition(decision)["status"] == "False"


def test_a_paused_resource_with_nothing_left_to_uninstall_goes():
    decision = deletion.decide(resource({markers.ANNOTATION_PAUSE: "true"}), [node("a", ("sysctl",))],
                               {"name": "r"})
    assert decision["action"] == deletion.REMOVE_FINALIZER


def test_the_uninstall_conditions_say_it_runs_and_the_resource_is_not_ready():
    decision = deletion.decide(resource(), [node("a")], {"name": "r"})
    conds = {c["type"]: c for c in deletion.uninstall_conditions(decision)}
    assert conds["UninstallInProgress"]["status"] == "True" and conds["Ready"]["status"] == "False"


def test_clearing_a_deleted_resource_keeps_the_entries_of_packages_it_did_not_uninstall():
    assert deletion.kept_packages(resource()) == ["sysctl"]
    patch = node_ops.clear_marks_patch(node("a", label="complete"), "r", keep=["sysctl"])
    kept = json.loads(patch["metadata"]["annotations"][markers.state_annotation("r")])
    assert kept["packages"] == {"sysctl": ENTRY}
    assert patch["metadata"]["labels"][markers.status_label("r")] is None
    # Nothing of them recorded, or nothing to keep: the annotation goes, as before.
    assert node_ops.clear_marks_patch(node("a", ("kdump",)), "r", keep=["sysctl"])["metadata"]["annotations"] == \
        {markers.state_annotation("r"): None}
    assert node_ops.clear_marks_patch(node("a"), "r")["metadata"]["annotations"] == \
        {markers.state_annotation("r"): None}


def test_node_state_malformed_is_derived_at_every_write():
    bad = compute_status("r", [node("a", raw="{oops"), node("b")], ["a", "b"], [])
    cond = {c["type"]: c for c in bad["conditions"]}["NodeStateMalformed"]
    assert (cond["status"], cond["reason"]) == ("True", "ParseError")
    assert "cannot be parsed on 1 node(s): a" in cond["message"]
    fixed = compute_status("r", [node("a"), node("b")], ["a", "b"], [])
    assert "NodeStateMalformed" not in {c["type"] for c in fixed["conditions"]}


def test_uninstall_in_progress_keeps_the_resource_from_ready():
    nodes = [node("a", label="complete"), node("b", label="complete")]
    status = compute_status("r", nodes, ["a", "b"], [], uninstalling=["a", "elsewhere"])
    conds = {c["type"]: c for c in status["conditions"]}
    # Upstream's reason as well as its type: alerts written for the operator match on both.
    assert (conds["UninstallInProgress"]["status"], conds["UninstallInProgress"]["reason"]) == (
        "True", "UninstallInProgress")
    assert "1 node(s): a" in conds["UninstallInProgress"]["message"]
    assert conds["Ready"]["status"] == "False" and status["status"] == "in_progress"
    done = compute_status("r", nodes, ["a", "b"], [])
    assert done["status"] == "complete" and "UninstallInProgress" not in {c["type"] for c in done["conditions"]}


MALFORMED_MARK = {"type": markers.CONDITION_ERRORING, "status": "True", "reason": markers.REASON_MALFORMED_STATE,
                  "message": "r: malformed"}


@pytest.mark.parametrize("n,repaired", [
    (node("a", conditions=[MALFORMED_MARK]), True),
    (node("a", raw="{still bad", conditions=[MALFORMED_MARK]), False),
    (node("a"), False),
    (node("a", conditions=[dict(MALFORMED_MARK, reason="PackageFailed")]), False),
    (node("a", conditions=[dict(MALFORMED_MARK, status="False")]), False),
])
def test_a_repaired_state_is_found_and_its_mark_re_evaluated(n, repaired):
    assert node_state.repaired_malformed(n) is repaired
    if repaired:
        patch = node_ops.erroring_condition_patch(n)
        assert patch["status"]["conditions"][0]["status"] == "False"


def test_a_resource_held_by_sequencing_all_keeps_its_work_as_held_work():
    first = ResourcePlan("first", None, priority=1, sequencing="all", work=["a"], targets=["a"])
    later = ResourcePlan("later", None, priority=2, work=["a"], targets=["a"])
    idle = ResourcePlan("idle", None, priority=3, work=[], targets=["a"])
    apply_sequencing([first, later, idle])
    assert later.work == [] and later.held_work == ["a"] and "waiting for first" in later.held
    assert idle.held_work == []


def test_the_strategy_status_writer_says_waiting_and_uninstalling():
    from types import SimpleNamespace
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import status_writer

    def res(plan, work):
        return SimpleNamespace(name="r", targets=["a"], plan=ResourcePlan("r", None, **plan), eligible=None,
                               open_work=lambda: set(work), state=SimpleNamespace(succeeded=set()))
    write = status_writer(None)
    held = write(res({"held": "waiting for first", "held_work": ["a"]}, []), [node("a")], {}, None, None)
    assert (held["status"], held["message"]) == ("waiting", "waiting for first")
    busy = write(res({"uninstalling": ["a"]}, ["a"]), [node("a", label="complete")], {}, None, None)
    assert {c["type"]: c["status"] for c in busy["conditions"]}["UninstallInProgress"] == "True"
    done = write(res({"uninstalling": ["a"]}, []), [node("a", label="complete")], {}, None, None)
    assert done["status"] == "complete" and "UninstallInProgress" not in {c["type"] for c in done["conditions"]}
