# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which non-interruptible pods a run would wait for, node by node (what plan.yml shows)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits

pytestmark = pytest.mark.unit

SELECTOR = to_selector({"matchLabels": {"app.kubernetes.io/component": "training"}}, "podNonInterruptLabels")


def _pod(name, node, phase="Running", component="training", deleting=False):
    meta = {"name": name, "namespace": "ml", "labels": {"app.kubernetes.io/component": component},
            "creationTimestamp": "2026-12-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


@pytest.mark.parametrize("pods, nodes, expected", [
    ([_pod("a", "n1"), _pod("b", "n1", phase="Pending"), _pod("c", "n2")], ["n1", "n2"],
     {"n1": ["ml/a", "ml/b"], "n2": ["ml/c"]}),
    # A node without work is not waited on; finished, unmatched and deleted-not-running pods do not hold a node.
    ([_pod("a", "n3"), _pod("b", "n1", phase="Succeeded"), _pod("c", "n1", component="inference"),
      _pod("d", "n1", phase="Pending", deleting=True)], ["n1"], {}),
    ([_pod("a", None)], ["n1"], {}),
], ids=["running-and-pending", "nothing-to-wait-for", "unscheduled"])
def test_protected_pods_are_grouped_by_the_node_that_waits(pods, nodes, expected):
    assert waits.protected_by_node(pods, SELECTOR, nodes) == expected
