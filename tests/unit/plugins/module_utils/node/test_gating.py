# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Table tests of new-node gating (runtimeRequired): when the taint comes off, what the
node is told when it stays, and which new nodes autoTaintNewNodes takes."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.unit

KEY = markers.TAINT_RUNTIME_REQUIRED
NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def resource(name, priority=200, runtime=True, auto=False, packages=None, selector=None, annotations=None):
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"priority": priority, "runtimeRequired": runtime, "autoTaintNewNodes": auto,
                     "nodeSelectors": selector if selector is not None else {"matchLabels": {"pool": "gpu"}},
                     "packages": packages if packages is not None else {"tuning": {"version": "1.0.0"}}}}


def state(status, **packages):
    return {"status": status, "packages": {
        name: {"name": name, "version": v[0], "stage": v[1], "state": v[2]} for name, v in packages.items()}}


def node(states=None, tainted=True, labels=None, created="2026-03-01T11:58:00Z", conditions=None, raw=None):
    annotations = {markers.state_annotation(r): json.dumps(s) for r, s in (states or {}).items()}
    annotations.update(raw or {})
    return {"metadata": {"name": "gpu-1", "labels": dict({"pool": "gpu"}, **(labels or {})),
                         "annotations": annotations, "creationTimestamp": created, "resourceVersion": "42"},
            "spec": {"taints": [gating.runtime_taint(KEY)] if tainted else []},
            "status": {"conditions": conditions or []}}


COMPLETE = state("complete", tuning=("1.0.0", "config", "complete"))


@pytest.mark.parametrize("states,resources,action,blocker,reason", [
    # every runtimeRequired resource complete: the taint comes off
    ({"a": COMPLETE}, [resource("a")], gating.OPEN, None, gating.REASON_READY),
    # not started yet
    ({}, [resource("a")], gating.KEEP, "a", gating.REASON_WAITING),
    # in progress (status not complete yet, although the package is)
    ({"a": state("in_progress", tuning=("1.0.0", "config", "complete"))}, [resource("a")], gating.KEEP, "a",
     gating.REASON_WAITING),
    # complete at an older version than the resource asks for
    ({"a": state("complete", tuning=("0.9.0", "config", "complete"))}, [resource("a")], gating.KEEP, "a",
     gating.REASON_WAITING),
    # a package waiting for its interrupt is not done
    ({"a": state("complete", tuning=("1.0.0", "interrupt", "in_progress"))}, [resource("a")], gating.KEEP, "a",
     gating.REASON_WAITING),
    # a failed package keeps the taint and says so
    ({"a": state("erroring", tuning=("1.0.0", "apply", "erroring"))}, [resource("a")], gating.KEEP, "a",
     gating.REASON_FAILED),
    # two resources: the first missing one in priority order is named
    ({"b": COMPLETE}, [resource("b", priority=50), resource("a", priority=100)], gating.KEEP, "a",
     gating.REASON_WAITING),
    ({}, [resource("b", priority=50), resource("a", priority=100)], gating.KEEP, "b", gating.REASON_WAITING),
    ({"a": COMPLETE, "b": COMPLETE}, [resource("b", priority=50), resource("a", priority=100)], gating.OPEN, None,
     gating.REASON_READY),
    # a resource without runtimeRequired does not hold the gate
    ({"a": COMPLETE}, [resource("a"), resource("z", runtime=False)], gating.OPEN, None, gating.REASON_READY),
    # a disabled resource is withdrawn; a paused one still holds the gate
    ({"a": COMPLETE}, [resource("a"), resource("d", annotations={markers.ANNOTATION_DISABLE: "true"})],
     gating.OPEN, None, gating.REASON_READY),
    ({"a": COMPLETE}, [resource("a"), resource("p", annotations={markers.ANNOTATION_PAUSE: "true"})],
     gating.KEEP, "p", gating.REASON_WAITING),
    # a resource that selects other nodes does not hold this one
    ({"a": COMPLETE}, [resource("a"), resource("o", selector={"matchLabels": {"pool": "cpu"}})], gating.OPEN,
     None, gating.REASON_READY),
    # a resource with no packages is complete at once
    ({}, [resource("e", packages={})], gating.OPEN, None, gating.REASON_READY),
])
def test_decide(states, resources, action, blocker, reason):
    decision = gating.decide(node(states), resources)
    assert decision["action"] == action
    assert (decision["blocker"] or {}).get("resource") == blocker
    assert decision["condition"]["reason"] == reason
    assert decision["condition"]["type"] == markers.CONDITION_BLOCKED
    assert decision["condition"]["status"] == ("False" if action == gating.OPEN else "True")


def test_a_failed_package_is_named_with_an_event():
    failed = dict(state("erroring", tuning=("1.0.0", "apply", "erroring")), reason="apply.sh exited 3\nmore")
    decision = gating.decide(node({"a": failed}), [resource("a", priority=10)])
    assert decision["event"]["type"] == "Warning" and decision["event"]["reason"] == markers.EVENT_BLOCKED
    assert "a (priority 10) package tuning 1.0.0 failed at stage apply: apply.sh exited 3" in decision["message"]
    assert "more" not in decision["message"]


def test_a_malformed_state_keeps_the_taint_and_says_how_to_fix_it():
    decision = gating.decide(node(raw={markers.state_annotation("a"): "{not json"}), [resource("a")])
    assert decision["action"] == gating.KEEP
    assert decision["condition"]["reason"] == gating.REASON_MALFORMED
    assert "nodewright reset gpu-1 --resource a" in decision["message"]


def test_no_gating_resource_leaves_the_taint_alone():
    for resources in ([], [resource("z", runtime=False)]):
        decision = gating.decide(node(), resources)
        assert decision["action"] == gating.NONE and decision["condition"] is None
    ignored = node(labels={markers.LABEL_IGNORE: "true"})
    assert gating.decide(ignored, [resource("a")])["action"] == gating.NONE


def test_an_untainted_node_is_left_as_it_is():
    decision = gating.decide(node({}, tainted=False), [resource("a")])
    assert decision["action"] == gating.NONE and decision["condition"] is None
    assert "not tainted" in decision["message"]


@pytest.mark.parametrize("current,wanted_status,written", [
    (None, "True", True),
    (None, "False", False),  # nothing to clear: no condition is added
    ({"status": "True", "reason": gating.REASON_WAITING}, "False", True),
    ({"status": "False", "reason": gating.REASON_READY}, "False", False),
    # somebody else's Blocked condition is never overwritten
    ({"status": "True", "reason": "CriticalPods"}, "True", False),
    ({"status": "True", "reason": "CriticalPods"}, "False", False),
])
def test_gate_condition_only_touches_its_own(current, wanted_status, written):
    conditions = [dict(current, type=markers.CONDITION_BLOCKED, message="x")] if current else []
    n = node(conditions=conditions)
    decision = {"condition": {"type": markers.CONDITION_BLOCKED, "status": wanted_status, "reason": "R",
                              "message": "m"}}
    assert (gating.gate_condition(n, decision) is not None) == written


def test_taint_patch_keeps_other_taints_and_guards_with_the_resource_version():
    n = node(tainted=True)
    n["spec"]["taints"].insert(0, {"key": "nvidia.com/gpu", "effect": "NoSchedule"})
    patch = gating.taint_patch(n, False)
    assert patch == {"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                     "metadata": {"resourceVersion": "42"}}
    assert gating.taint_patch(n, True) is None
    bare = node(tainted=False)
    assert gating.taint_patch(bare, True)["spec"]["taints"] == [
        {"key": KEY, "value": "true", "effect": "NoSchedule"}]
    assert gating.taint_patch(bare, False) is None


@pytest.mark.parametrize("created,tainted,resources,states,expected", [
    ("2026-03-01T11:58:00Z", False, [resource("a", auto=True)], {}, True),
    # an existing node (a watch restart reports it as ADDED too) is left alone
    ("2026-02-01T11:58:00Z", False, [resource("a", auto=True)], {}, False),
    ("2026-03-01T11:58:00Z", True, [resource("a", auto=True)], {}, False),
    ("2026-03-01T11:58:00Z", False, [resource("a", auto=False)], {}, False),
    ("2026-03-01T11:58:00Z", False, [resource("a", auto=True, selector={"matchLabels": {"pool": "cpu"}})], {},
     False),
    ("2026-03-01T11:58:00Z", False, [resource("a", auto=True)], {"a": COMPLETE}, False),
    (None, False, [resource("a", auto=True)], {}, False),
])
def test_should_auto_taint(created, tainted, resources, states, expected):
    n = node(states, tainted=tainted, created=created)
    ok, why = gating.should_auto_taint(n, resources, NOW, window_s=600)
    assert ok is expected, why


def test_a_runtime_cordon_record_is_stale_once_somebody_uncordoned_the_node():
    recorded = {"metadata": {"annotations": {markers.ANNOTATION_RUNTIME_CORDON: "runtimeRequiredCordonAfter of r"}},
                "spec": {"unschedulable": True}}
    assert gating.stale_runtime_cordon(recorded) is False
    recorded["spec"]["unschedulable"] = False
    assert gating.stale_runtime_cordon(recorded) is True
    assert gating.stale_runtime_cordon({"metadata": {}, "spec": {}}) is False
    # In check mode nothing is written (no API is reached), and it says there was one.
    assert gating.clear_stale_runtime_cordon(None, "n", recorded, check_mode=True) is True
