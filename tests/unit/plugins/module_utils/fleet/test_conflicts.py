# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Two resources that would write different values for one setting on a node are
refused before anything changes; a run of another resource is not concerned."""

from __future__ import annotations

import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts, desired_state

pytestmark = pytest.mark.unit

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..")
PACKAGES = [os.path.join(REPO, "packages")]


def node(name, pool):
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"pool": pool},
                         "annotations": {}}, "status": {"nodeInfo": {"bootID": "b1"}}}


def sysctl_resource(name, pool, value, priority=200):
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"pool": pool}}, "priority": priority,
                     "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": value}}}}}


NODES = [node("a1", "a"), node("a2", "a"), node("b1", "b")]


def test_a_conflict_blocks_both_resources_naming_the_setting_values_and_nodes():
    described = desired_state.describe_all(
        [sysctl_resource("first", "a", "262144"), sysctl_resource("second", "a", "1048576", priority=100)],
        NODES, {}, PACKAGES)
    (found,) = described.conflicts
    # Named in priority order (lower value first), the order a node would get them in.
    assert found["resources"] == ["second", "first"] and found["nodes"] == ["a1", "a2"]
    assert found["setting"] == "sysctl:vm.max_map_count"
    assert found["values"] == {"first": "262144", "second": "1048576"}
    assert described.rollouts == [] and described.waves == []
    blocked = {b["name"]: b for b in described.blocked}
    assert set(blocked) == {"first", "second"} and all(b["conflict"] for b in blocked.values())
    assert "both set sysctl vm.max_map_count on 2 node(s) (a1, a2)" in blocked["first"]["reason"]
    assert "'1048576' (second) and '262144' (first)" in blocked["first"]["reason"]
    assert "nothing was changed" in blocked["second"]["reason"]


def test_equal_values_or_disjoint_nodes_do_not_conflict():
    same = desired_state.describe_all(
        [sysctl_resource("first", "a", "262144"), sysctl_resource("second", "a", " 262144 ")], NODES, {}, PACKAGES)
    disjoint = desired_state.describe_all(
        [sysctl_resource("first", "a", "262144"), sysctl_resource("second", "b", "1048576")], NODES, {}, PACKAGES)
    for described in (same, disjoint):
        assert described.conflicts == [] and described.blocked == []
        assert {r.name for r in described.rollouts} == {"first", "second"}


def test_a_run_of_one_resource_is_not_stopped_by_a_conflict_between_two_others():
    resources = [sysctl_resource("first", "a", "262144"), sysctl_resource("second", "a", "1048576"),
                 sysctl_resource("third", "b", "65530")]
    described = desired_state.describe_all(resources, NODES, {}, PACKAGES, only="third")
    assert described.conflicts == [] and described.blocked == []
    assert [r.name for r in described.rollouts] == ["third"]
    # A run of one of the two still stops, naming the other.
    described = desired_state.describe_all(resources, NODES, {}, PACKAGES, only="first")
    (found,) = described.conflicts
    assert found["resources"] == ["first", "second"]
    assert [b["name"] for b in described.blocked] == ["first"]


def test_every_conflict_is_found_and_named_in_words():
    found = conflicts.find_conflicts([("x", 1, {"n1": {"sysctl:a": "1", "file:/etc/f": "d1"}}),
                                      ("y", 2, {"n1": {"sysctl:a": "2", "file:/etc/f": "d2"}})])
    assert [c["setting"] for c in found] == ["file:/etc/f", "sysctl:a"]
    text = "; ".join(conflicts.conflict_message(c) for c in found)
    assert "file /etc/f" in text and "sysctl a" in text
