# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The safe sequence's node handle: its request path, what it reads from the Node it
holds, and check mode, where nothing is written and no request is made (the handle
has no API client at all in these tests)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node.sequence import NodeHandle
from ansible_collections.nodewright.fleet.plugins.module_utils.node.state import UnreadableState

pytestmark = pytest.mark.unit


def handle(node=None, name="gpu-1"):
    h = NodeHandle(None, name, check_mode=True)
    h.node = node if node is not None else {"metadata": {"name": name, "labels": {}, "annotations": {}},
                                            "spec": {}, "status": {}}
    return h


@pytest.mark.parametrize("name, path", [
    ("gpu-1", "/api/v1/nodes/gpu-1"),
    ("a.b", "/api/v1/nodes/a.b"),
    ("a/b", "/api/v1/nodes/a%2Fb"),
    ("a b", "/api/v1/nodes/a%20b"),
])
def test_path_quotes_the_name(name, path):
    assert NodeHandle(None, name)._path == path


def test_a_new_handle_holds_no_node():
    h = NodeHandle(None, "gpu-1")
    assert (h.node, h.check_mode, h.api) == (None, False, None)


def test_reads_from_the_node_held():
    node = {"metadata": {"name": "gpu-1", "labels": {markers.status_label("r"): "complete"},
                         "annotations": {markers.state_annotation("r"): json.dumps({"status": "complete"})}},
            "spec": {"unschedulable": True}, "status": {"nodeInfo": {"bootID": "b-1"}}}
    h = handle(node)
    assert h.status("r") == "complete"
    assert h.status("other") is None
    assert h.state("r") == {"status": "complete"}
    assert h.state("other") == {}
    assert h.boot_id() == "b-1"
    assert h.cordon() == "cordoned_by_other"


def test_check_mode_mark_writes_nothing_and_remembers_the_patch():
    h = handle()
    before = json.dumps(h.node, sort_keys=True)
    assert h.mark("r", status="in_progress", state={"packages": {}}) is True
    assert json.dumps(h.node, sort_keys=True) == before
    assert h._pending["metadata"]["labels"][markers.status_label("r")] == "in_progress"
    assert markers.state_annotation("r") in h._pending["metadata"]["annotations"]


def test_mark_refuses_a_bad_status():
    with pytest.raises(ValidationError) as caught:
        handle().mark("r", status="done")
    assert caught.value.field == "status"
    assert "status must be one of complete, in_progress, erroring, blocked, waiting, unknown, got 'done'" \
        in str(caught.value)


def test_mark_leaves_a_malformed_state_alone():
    node = {"metadata": {"name": "gpu-1", "annotations": {markers.state_annotation("r"): "{broken"}}}
    with pytest.raises(UnreadableState):
        handle(node).mark("r", status="complete", state={})


@pytest.mark.parametrize("annotations, changed", [({}, False), ({"x/y": "1"}, True)])
def test_remove_annotation(annotations, changed):
    h = handle({"metadata": {"name": "gpu-1", "annotations": annotations}})
    assert h.remove_annotation("x/y") is changed
    assert h.node["metadata"]["annotations"] == annotations   # check mode: unchanged


def test_condition_in_check_mode():
    h = handle()
    assert h.condition(markers.CONDITION_DRIFT, "True", "HostDrift", "drifted") is True
    same = {"type": markers.CONDITION_DRIFT, "status": "True", "reason": "HostDrift", "message": "drifted"}
    h = handle({"metadata": {"name": "gpu-1"}, "status": {"conditions": [same]}})
    assert h.condition(markers.CONDITION_DRIFT, "True", "HostDrift", "drifted") is False


def test_sync_error_without_errors_writes_nothing():
    assert handle().sync_error("r") is False


def test_sync_error_in_check_mode_sees_the_pending_mark():
    h = handle()
    h.mark("r", status="erroring", state={"packages": {}})
    assert h.sync_error("r", {"reason": "StepFailed", "message": "apply failed"}) is True


def test_events_are_not_sent_in_check_mode():
    assert handle().event("NodeWrightDrift", "drifted") is False
