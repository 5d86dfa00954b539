# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A NodeWright resource's status, derived from its nodes' markers."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import PackageSpec
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.unit

PACKAGES = [PackageSpec("sysctl", version="1.0.0")]


def node(name, status=None, state=None):
    labels = {markers.status_label("r"): status} if status else {}
    annotations = {markers.state_annotation("r"): state if isinstance(state, str) else json.dumps(state)} \
        if state is not None else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations},
            "status": {"nodeInfo": {"bootID": "boot-" + name}}}


def test_complete_when_every_target_is():
    nodes = [node("a", "complete", {"packages": {"sysctl": {"version": "1.0.0", "stage": "apply",
                                                            "state": "complete"}}}), node("b", "complete", {})]
    status = compute_status("r", nodes, ["a", "b"], PACKAGES, generation=3)
    assert status["status"] == "complete" and status["completeNodes"] == "2/2"
    assert status["observedGeneration"] == 3 and status["packageList"] == "sysctl:1.0.0"
    assert status["nodeState"]["a"]["sysctl|1.0.0"]["state"] == "complete"
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]


def test_erroring_wins_and_names_the_nodes():
    status = compute_status("r", [node("a", "erroring", {}), node("b", "in_progress", {})], ["a", "b"], PACKAGES)
    assert status["status"] == "erroring" and "erroring: a" in status["message"]
    assert status["nodesErroring"] == 1 and status["nodesInProgress"] == 1


def test_a_node_without_the_current_spec_is_waiting_not_complete():
    # Labelled complete for what it got before, but the resource now wants more.
    status = compute_status("r", [node("a", "complete", {}), node("b", "complete", {})], ["a", "b"], PACKAGES,
                            pending=["b"])
    assert status["status"] == "in_progress" and status["nodeStatus"]["b"] == "waiting"
    assert status["completeNodes"] == "1/2" and "1 waiting for the current spec" in status["message"]


def test_a_hand_edited_state_makes_the_node_erroring():
    status = compute_status("r", [node("a", "complete", "{broken")], ["a"], PACKAGES)
    assert status["nodeStatus"]["a"] == "erroring" and status["status"] == "erroring"


def test_override_and_untargeted_nodes_are_removed_from_the_status():
    status = compute_status("r", [node("a", "complete", {})], ["a"], PACKAGES, override="halted",
                            message="halted by policy", current={"nodeStatus": {"gone": "complete"}})
    assert status["status"] == "halted" and status["message"] == "halted by policy"
    assert status["nodeStatus"]["gone"] is None
    assert [c["status"] for c in status["conditions"] if c["type"] == "Blocked"] == ["True"]


def test_drain_blocked_names_each_node_whose_drain_a_budget_holds_and_is_false_otherwise():
    held = node("a", "in_progress", {})
    held["status"]["conditions"] = [{"type": "nodewright.io/DrainBlocked", "status": "True",
                                     "message": "drain of node a is waiting: PodDisruptionBudget ns/p refuses to "
                                                "evict ns/x since 2026-12-01T00:00:01Z"}]
    free = node("b", "complete", {})
    free["status"]["conditions"] = [{"type": "nodewright.io/DrainBlocked", "status": "False", "message": "x"}]
    status = compute_status("r", [held, free], ["a", "b"], PACKAGES)
    cond = [c for c in status["conditions"] if c["type"] == "DrainBlocked"][0]
    assert (cond["status"], cond["reason"]) == ("True", "EvictionRefused")
    assert cond["message"] == "a: PodDisruptionBudget ns/p refuses to evict ns/x since 2026-12-01T00:00:01Z"
    cond = [c for c in compute_status("r", [free], ["b"], PACKAGES)["conditions"] if c["type"] == "DrainBlocked"][0]
    assert (cond["status"], cond["reason"]) == ("False", "EvictionsAccepted")
    assert cond["message"] == "no drain of a node of this resource is held by a PodDisruptionBudget"


def test_nodes_complete_for_a_spec_changed_during_the_run_leave_the_resource_waiting():
    nodes = [node("a", "complete", {}), node("b", "complete", {})]
    status = compute_status("r", nodes, ["a", "b"], PACKAGES, generation=3, live_generation=4)
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert status["status"] == "waiting" and status["observedGeneration"] == 3
    assert (ready["status"], ready["reason"]) == ("False", "SpecChanged")
    assert "generation 3 (generation 4 is in the cluster)" in status["message"]
    # The same generation, or none known: complete as before.
    for live in (3, None):
        assert compute_status("r", nodes, ["a", "b"], PACKAGES, generation=3, live_generation=live)["status"] == \
            "complete"


def test_a_spec_change_does_not_hide_what_is_wrong_with_the_nodes():
    nodes = [node("a", "erroring", {}), node("b", "complete", {})]
    status = compute_status("r", nodes, ["a", "b"], PACKAGES, generation=3, live_generation=4)
    assert status["status"] == "erroring"
    assert compute_status("r", nodes, ["a", "b"], PACKAGES, override="halted", message="m", generation=3,
                          live_generation=4)["status"] == "halted"
