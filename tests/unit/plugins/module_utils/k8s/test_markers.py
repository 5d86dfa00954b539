# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The marks NodeWright puts on nodes: per-resource keys, and the rules every mark
keeps (its own prefix, no collisions, valid Kubernetes keys)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names

pytestmark = pytest.mark.unit


def _constants(prefix):
    return {key: value for key, value in vars(markers).items() if key.startswith(prefix) and isinstance(value, str)}


@pytest.mark.parametrize("resource, annotation, label", [
    ("tuning", "nodewright.io/state-tuning", "nodewright.io/status-tuning"),
    ("a.b-c", "nodewright.io/state-a.b-c", "nodewright.io/status-a.b-c"),
])
def test_per_resource_keys(resource, annotation, label):
    assert markers.state_annotation(resource) == annotation
    assert markers.status_label(resource) == label


def test_the_longest_resource_name_still_makes_valid_keys():
    # A NodeWright name is at most 56 characters so that these keys stay valid.
    name = "r" * 56
    names.label_key(markers.status_label(name), "label")
    names.qualified_key(markers.state_annotation(name), "annotation", "annotation key")


def test_group_and_prefix():
    assert markers.PREFIX == markers.API_GROUP == "nodewright.io"
    assert markers.GROUP_VERSION == "nodewright.io/v1alpha1"
    assert markers.GROUP_VERSION == markers.API_GROUP + "/" + markers.API_VERSION


@pytest.mark.parametrize("kind", ["LABEL_", "ANNOTATION_", "TAINT_"])
def test_node_marks_live_under_the_prefix(kind):
    found = _constants(kind)
    assert found
    for key, value in found.items():
        assert value.startswith(markers.PREFIX + "/"), key


def test_node_condition_types_live_under_the_prefix_and_resource_conditions_do_not():
    node_conditions = {k: v for k, v in _constants("CONDITION_").items()
                       if k not in ("CONDITION_NON_INTERRUPT", "CONDITION_RESOURCE_DRAIN_BLOCKED")}
    for key, value in node_conditions.items():
        assert value.startswith(markers.PREFIX + "/"), key
    # Conditions of a NodeWright resource carry upstream's plain names.
    assert markers.CONDITION_NON_INTERRUPT == "NonInterruptPodsRunning"
    assert markers.CONDITION_RESOURCE_DRAIN_BLOCKED == "DrainBlocked"


def test_no_two_marks_collide():
    values = [v for k, v in vars(markers).items() if k.isupper() and isinstance(v, str)
              and k.startswith(("LABEL_", "ANNOTATION_", "TAINT_", "CONDITION_", "EVENT_"))]
    assert len(values) == len(set(values))


def test_event_reasons_are_named_for_nodewright():
    events = _constants("EVENT_")
    assert events
    for key, value in events.items():
        assert value.startswith("NodeWright") and " " not in value, key


def test_statuses():
    assert markers.STATUSES == ("complete", "in_progress", "erroring", "blocked", "waiting", "unknown")
    for status in markers.STATUSES:
        names.label_value(status, "status")


def test_upstream_marks():
    assert markers.UPSTREAM_IGNORE == "nodewright.nvidia.com/ignore"
    assert markers.SKYHOOK_IGNORE == "skyhook.nvidia.com/ignore"
    assert markers.UPSTREAM_RUNTIME_TAINT_KEYS == ("nodewright.nvidia.com", "skyhook.nvidia.com")
    assert markers.NODE_MAINTENANCE_PLURAL == "nodemaintenances"
