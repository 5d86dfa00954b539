# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one reader of the node state annotation, and its one behaviour for a value it
cannot parse: reported by every reader, never trusted, never overwritten."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import status as fleet_status
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import facts, gating, ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import normalize_state

pytestmark = pytest.mark.unit

BAD = ["{hand edited", "[1, 2]", '"complete"', "null"]


def node(value=None, name="n1"):
    annotations = {} if value is None else {markers.state_annotation("r"): value}
    return {"metadata": {"name": name, "annotations": annotations, "labels": {}}}


def test_a_readable_state_reads_the_same_everywhere():
    text = json.dumps({"status": "complete", "packages": {"p": {"version": "1.0.0", "stage": "config",
                                                               "state": "complete"}}})
    n = node(text)
    assert node_state.read_node_state(n, "r") == json.loads(text)
    assert ops.read_state(n, "r") == json.loads(text)
    assert facts.nodewright_state({}, {markers.state_annotation("r"): text})["r"]["state"] == json.loads(text)
    assert normalize_state(text)["packages"]["p"]["version"] == "1.0.0"
    assert node_state.read_node_state(node(), "r") == {}


@pytest.mark.parametrize("bad", BAD)
def test_an_unreadable_state_is_reported_by_every_reader(bad):
    n = node(bad)
    error = node_state.read_node_state(n, "r")["error"]
    assert "annotation nodewright.io/state-r on node n1 is malformed" in error
    assert "nodewright reset n1 --resource r" in error
    assert ops.read_state(n, "r")["error"] == error
    assert "is malformed" in facts.nodewright_state({}, n["metadata"]["annotations"])["r"]["error"]
    status = fleet_status.compute_status("r", [n], ["n1"], [])
    assert status["nodeStatus"]["n1"] == "erroring"
    progress, detail = gating.resource_progress({"metadata": {"name": "r"}, "spec": {"packages": {}}}, n)
    assert progress == gating.MALFORMED and "is malformed" in detail
    with pytest.raises(ValidationError) as caught:
        normalize_state(bad)
    assert "is malformed" in str(caught.value) and caught.value.field == "recorded_state"


@pytest.mark.parametrize("bad", BAD)
def test_an_unreadable_state_is_never_overwritten(bad):
    n = node(bad)
    for kwargs in ({"status": "in_progress", "state": {"step": "cordon"}}, {"status": "complete"},
                   {"state": {"reason": "x"}}):
        with pytest.raises(node_state.UnreadableState) as caught:
            ops.state_patch(n, "r", **kwargs)
        assert "NodeWright leaves it as it is" in str(caught.value)
        assert "nodewright reset n1 --resource r" in caught.value.hint
    assert ops.clear_marks_patch(n, "r") == {"metadata": {"annotations": {markers.state_annotation("r"): None}}}, \
        "a reset may still forget it"


def test_a_readable_state_is_merged_as_before():
    n = node(json.dumps({"status": "complete", "step": "done"}))
    patch = ops.state_patch(n, "r", status="in_progress", state={"step": "cordon"})
    written = json.loads(patch["metadata"]["annotations"][markers.state_annotation("r")])
    assert (written["status"], written["step"]) == ("in_progress", "cordon")
