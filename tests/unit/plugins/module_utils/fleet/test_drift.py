# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Drift decisions: which nodes a check looks at again, the Drift condition's words,
and the state that makes the next rollout apply drifted packages again."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import drift
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

from test_metrics import _node  # a Node carrying one resource's state

pytestmark = pytest.mark.unit


def test_check_targets_are_completed_nodes_of_enabled_resources():
    pkg = {"t": {"name": "t", "version": "1.0.0", "stage": "config", "state": "complete"}}
    nodes = [_node("n1", "r", "complete", pkg), _node("n2", "r", "in_progress", pkg),
             _node("n3", "r", "complete", pkg, raw="{broken")]
    nodes[1]["metadata"]["annotations"][markers.state_annotation("r")] = json.dumps({"status": "in_progress"})
    res = {"metadata": {"name": "r"}, "spec": {"nodeSelectors": {"matchLabels": {"pool": "gpu"}}}}
    assert drift.check_targets(nodes, [res]) == {"n1": ["r"]}
    res["metadata"]["annotations"] = {markers.ANNOTATION_DISABLE: "true"}
    assert drift.check_targets(nodes, [res]) == {}


def test_drift_condition_and_reapply_state():
    assert drift.condition({"r": []})["status"] == "False"
    item = {"name": "t", "version": "1.0.0", "stage": "config-check", "message": "check failed\nlog..."}
    cond = drift.condition({"r": [item]})
    assert cond["status"] == "True" and cond["type"] == markers.CONDITION_DRIFT
    assert cond["message"] == "host drifted: r/t 1.0.0: config-check failed (check failed)"
    state = {"status": "complete", "packages": {"t": {"name": "t", "version": "1.0.0", "stage": "config",
                                                      "state": "complete"}}}
    new, marked = drift.reapply_state(state, [item, dict(item, name="gone", stage="apply-check")])
    assert marked == ["t"] and new["status"] == "in_progress"
    assert new["packages"]["t"]["state"] == "in_progress" and new["packages"]["t"]["stage"] == "config"
    assert state["packages"]["t"]["state"] == "complete"  # a copy
    again, _ = drift.reapply_state(state, [dict(item, stage="apply-check")])
    assert again["packages"]["t"]["stage"] == "apply"


PKG = {"t": {"name": "t", "version": "1.0.0", "stage": "config", "state": "complete"}}


def _resource(name, selectors=None, annotations=None):
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"nodeSelectors": selectors if selectors is not None else {"matchLabels": {"pool": "gpu"}}}}


def test_check_targets_per_node_in_resource_name_order():
    nodes = [_node("n1", "b", "complete", PKG), _node("n2", "a", "complete", PKG)]
    # n1 also completed resource a.
    nodes[0]["metadata"]["annotations"][markers.state_annotation("a")] = json.dumps(
        {"status": "complete", "packages": PKG})
    assert drift.check_targets(nodes, [_resource("b"), _resource("a")]) == {"n1": ["a", "b"], "n2": ["a"]}


@pytest.mark.parametrize("nodes, resources", [
    (None, None),
    ([], [_resource("r")]),
    ([_node("n1", "r", "complete", PKG)], []),
])
def test_check_targets_of_nothing(nodes, resources):
    assert drift.check_targets(nodes, resources) == {}


def test_check_targets_leave_out_ignored_unselected_and_failed_nodes():
    ignored = _node("n1", "r", "complete", PKG)
    ignored["metadata"]["labels"][markers.LABEL_IGNORE] = "true"
    elsewhere = _node("n2", "r", "complete", PKG)
    elsewhere["metadata"]["labels"]["pool"] = "cpu"
    with_error = _node("n3", "r", "complete", PKG, raw=json.dumps({"status": "complete", "packages": PKG,
                                                                   "error": "x"}))
    good = _node("n4", "r", "complete", PKG)
    assert drift.check_targets([ignored, elsewhere, with_error, good], [_resource("r")]) == {"n4": ["r"]}


def test_a_resource_with_an_invalid_selector_is_skipped():
    bad = _resource("bad", selectors="pool=gpu")
    assert drift.check_targets([_node("n1", "bad", "complete", PKG), _node("n2", "r", "complete", PKG)],
                               [bad, _resource("r")]) == {"n2": ["r"]}


@pytest.mark.parametrize("drifted", [None, {}, {"r": []}, {"r": None, "s": []}])
def test_no_drift_condition(drifted):
    assert drift.condition(drifted) == {"type": "nodewright.io/Drift", "status": "False", "reason": "NoDrift",
                                        "message": "the host passes the checks of its packages"}


@pytest.mark.parametrize("drifted, message", [
    ({"r": [{"name": "t", "version": "1.0.0", "stage": "apply-check", "message": ""}]},
     "host drifted: r/t 1.0.0: apply-check failed"),
    ({"r": [{"name": "t", "version": "1.0.0"}]}, "host drifted: r/t 1.0.0: copy failed"),
    ({"r": [{"name": "t", "version": "1.0.0", "stage": "config-check", "message": "first\nsecond"}]},
     "host drifted: r/t 1.0.0: config-check failed (first)"),
    ({"s": [{"name": "u", "version": "2", "stage": "apply-check"}],
      "r": [{"name": "t", "version": "1", "stage": "apply-check"}, {"name": "v", "version": "3", "stage": "x"}]},
     "host drifted: r/t 1: apply-check failed; r/v 3: x failed; s/u 2: apply-check failed"),
])
def test_drift_condition_message(drifted, message):
    cond = drift.condition(drifted)
    assert (cond["type"], cond["status"], cond["reason"]) == (markers.CONDITION_DRIFT, "True", "HostDrift")
    assert cond["message"] == message


@pytest.mark.parametrize("node, drifting", [
    (None, False),
    ({}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, False),
    ({"status": {"conditions": [{"type": markers.CONDITION_DRIFT, "status": "True"}]}}, True),
    ({"status": {"conditions": [{"type": markers.CONDITION_DRIFT, "status": "False"}]}}, False),
    ({"status": {"conditions": [{"type": markers.CONDITION_DRIFT, "status": "Unknown"}]}}, False),
])
def test_is_drifting(node, drifting):
    assert drift.is_drifting(node) is drifting


def test_reapply_state_without_a_recorded_package_changes_nothing():
    state = {"status": "complete", "packages": dict(PKG)}
    new, marked = drift.reapply_state(state, [{"name": "gone", "stage": "apply-check"}])
    assert marked == [] and new == state and "reason" not in new


def test_reapply_state_says_why():
    state = {"status": "complete", "packages": {"b": dict(PKG["t"], name="b"), "a": dict(PKG["t"], name="a")}}
    new, marked = drift.reapply_state(state, [{"name": "b", "stage": "config-check"},
                                              {"name": "a", "stage": "apply-check"}])
    assert marked == ["a", "b"]
    assert new["status"] == markers.STATUS_IN_PROGRESS
    assert new["reason"] == "drift: a, b applied again"
