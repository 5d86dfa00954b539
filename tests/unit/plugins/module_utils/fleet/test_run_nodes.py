# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodes of a play from host variables or the cluster (module_utils/fleet/run_nodes.py)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import (
    run_nodes,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("variables, expected", [
    ({"k8s_node": {"labels": {"pool": "a"}, "creationTimestamp": "2026-01-02T03:04:05Z"},
      "nodewright_node_labels": {"pool": "ignored"}},
     {"name": "n1", "labels": {"pool": "a"}, "creationTimestamp": "2026-01-02T03:04:05Z"}),
    ({"k8s_node": {"name": "n1"}, "nodewright_node_labels": {"gpu.count": 8}},
     {"name": "n1", "labels": {"gpu.count": "8"}, "creationTimestamp": None}),
    ({"nodewright_node_labels": {}}, {"name": "n1", "labels": {}, "creationTimestamp": None}),
    ({}, None),
    ({"k8s_node": {"name": "n1"}}, None),
])
def test_node_from_vars(variables, expected):
    assert run_nodes.node_from_vars("n1", variables) == expected


def test_node_labels_must_be_a_mapping():
    with pytest.raises(NodeWrightError) as info:
        run_nodes.node_from_vars("n1", {"nodewright_node_labels": ["pool=a"]})
    assert "host n1: nodewright_node_labels must be a mapping" in str(info.value)


def test_collect_nodes_keeps_host_order_and_needs_no_cluster_when_labels_are_known():
    variables = {"b": {"nodewright_node_labels": {"x": "1"}}, "a": {"k8s_node": {"labels": {}}}}
    nodes = run_nodes.collect_nodes(["b", "a"], lambda h: variables[h])
    assert [n["name"] for n in nodes] == ["b", "a"]


def test_collect_nodes_says_what_to_do_when_labels_are_missing_and_the_cluster_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(NodeWrightError) as info:
        run_nodes.collect_nodes(["a", "b"], lambda h: {})
    assert "2 host(s) have no node labels (a, b)" in str(info.value)
    assert "nodewright_node_labels" in info.value.hint
