# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""node_state reports changed only when it records something new: the same status and state
again (whatever their ``updated`` time) is no change."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.modules.node_state import records_nothing_new

pytestmark = pytest.mark.unit


def node(status=None, state=None):
    labels, annotations = {}, {}
    if status:
        labels = {markers.status_label("r"): status, markers.LABEL_STATUS: status}
    if state is not None:
        annotations[markers.state_annotation("r")] = json.dumps(dict(state, updated="2026-01-01T00:00:00Z"))
    return {"metadata": {"name": "n1", "labels": labels, "annotations": annotations}}


def test_the_same_state_again_records_nothing_new():
    recorded = node("complete", {"status": "complete", "packages": {"sysctl": {"version": "1.0.0"}}})
    patch = node_ops.state_patch(recorded, "r", status="complete", state={"packages": {"sysctl": {"version": "1.0.0"}}})
    assert records_nothing_new(recorded, patch)


@pytest.mark.parametrize("status,state", [
    ("erroring", None),
    ("complete", {"packages": {"sysctl": {"version": "1.1.0"}}}),
    (None, {"packages": {"sysctl": {"version": "1.0.0"}, "kdump": {"version": "1.0.0"}}}),
])
def test_a_different_status_or_state_is_new(status, state):
    recorded = node("complete", {"status": "complete", "packages": {"sysctl": {"version": "1.0.0"}}})
    assert not records_nothing_new(recorded, node_ops.state_patch(recorded, "r", status=status, state=state))


def test_a_node_without_a_record_gets_one():
    assert not records_nothing_new(node(), node_ops.state_patch(node(), "r", status="in_progress"))
