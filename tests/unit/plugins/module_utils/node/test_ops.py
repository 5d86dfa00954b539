# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Cordon ownership and NodeWright's markers on a node, as pure decisions."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops

pytestmark = pytest.mark.unit


def node(unschedulable=False, record=None, labels=None, annotations=None):
    ann = dict(annotations or {})
    if record is not None:
        ann[markers.ANNOTATION_CORDONED_BY] = record if isinstance(record, str) else json.dumps(record)
    return {"metadata": {"name": "n1", "labels": dict(labels or {}), "annotations": ann},
            "spec": {"unschedulable": unschedulable}}


OURS = {"owner": "nodewright", "resource": "r"}


@pytest.mark.parametrize("n, state, action", [
    (node(), "cordoned", "cordon"),
    (node(True, OURS), "cordoned", "none"),            # ours already: nothing to do
    (node(True), "cordoned", "none"),                  # someone else's: leave it, never claim it
    (node(True, OURS), "uncordoned", "uncordon"),
    (node(True), "uncordoned", "refuse"),              # never uncordon someone else's cordon
    (node(False, OURS), "uncordoned", "clear"),        # a stale record is removed
    (node(), "uncordoned", "none"),
])
def test_nodewright_only_undoes_its_own_cordon(n, state, action):
    assert ops.plan_cordon(n, state)[0] == action


def test_force_uncordons_someone_elses_cordon_and_says_so():
    action, _, message = ops.plan_cordon(node(True), "uncordoned", force=True)
    assert action == "uncordon" and "forced" in message


def test_cordon_states_tell_owners_apart():
    assert ops.cordon_state(node()) == "uncordoned"
    assert ops.cordon_state(node(True, OURS)) == "cordoned_by_nodewright"
    assert ops.cordon_state(node(True)) == "cordoned_by_other"
    # A record that is not JSON is still NodeWright's (it was written under its key).
    assert ops.cordon_state(node(True, "not json")) == "cordoned_by_nodewright"


def test_the_cordon_patch_records_who_and_why():
    patch = ops.cordon_patch("cordon", reason="maintenance", resource="r")
    record = json.loads(patch["metadata"]["annotations"][markers.ANNOTATION_CORDONED_BY])
    assert patch["spec"] == {"unschedulable": True}
    assert record["owner"] == "nodewright" and record["reason"] == "maintenance" and record["resource"] == "r"
    assert ops.cordon_patch("uncordon") == {"spec": {"unschedulable": None},
                                            "metadata": {"annotations": {markers.ANNOTATION_CORDONED_BY: None}}}
    assert ops.cordon_patch("none") is None


def test_state_patches_keep_the_worst_status_in_the_node_label():
    n = node(labels={markers.status_label("other"): "erroring"})
    patch = ops.state_patch(n, "r", status="complete", state={"step": "done"})
    assert patch["metadata"]["labels"] == {markers.status_label("r"): "complete", markers.LABEL_STATUS: "erroring"}
    state = json.loads(patch["metadata"]["annotations"][markers.state_annotation("r")])
    assert state["status"] == "complete" and state["step"] == "done"
    with pytest.raises(ValidationError):
        ops.state_patch(n, "r", status="finished")


def test_a_malformed_state_is_reported_not_trusted():
    bad = node(annotations={markers.state_annotation("r"): "{oops"})
    assert "malformed" in ops.read_state(bad, "r")["error"]
    assert "must hold a JSON object, not a list" in ops.read_state(
        node(annotations={markers.state_annotation("r"): "[1]"}), "r")["error"]
    assert ops.read_state(node(), "r") == {}


def test_clearing_a_resources_marks_recomputes_the_node_label():
    n = node(labels={markers.status_label("r"): "erroring", markers.status_label("s"): "complete"},
             annotations={markers.state_annotation("r"): "{}"})
    patch = ops.clear_marks_patch(n, "r")
    assert patch["metadata"]["labels"] == {markers.status_label("r"): None, markers.LABEL_STATUS: "complete"}
    assert patch["metadata"]["annotations"] == {markers.state_annotation("r"): None}
    assert ops.clear_marks_patch(node(), "r") is None


def test_seconds_since_a_recorded_time():
    import datetime
    now = datetime.datetime(2026, 12, 4, 12, 0, 0, tzinfo=datetime.timezone.utc)
    assert ops.seconds_since("2026-12-04T11:59:00Z", now=now) == 60.0
    assert ops.seconds_since("2026-12-04T12:00:30Z", now=now) == 0.0  # a clock ahead counts nothing
    assert ops.seconds_since("yesterday", now=now) == 0.0
    assert ops.seconds_since(None, now=now) == 0.0
