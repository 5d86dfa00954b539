# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which nodes a NodeWright resource targets, and which nodes NodeWright leaves alone:
the one rule the rollout, new-node gating, drift checks, status and the inventory use.

A resource targets the nodes its ``spec.nodeSelectors`` selects, minus ignored ones:
labelled ``nodewright.io/ignore=true``, or upstream NodeWright's ``nodewright.nvidia.com/ignore=true``
(``skyhook.nvidia.com/ignore=true`` before its rename).
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    LABEL_IGNORE,
    SKYHOOK_IGNORE,
    UPSTREAM_IGNORE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import (
    Requirement,
    Selector,
    from_label_selector,
)

IGNORE_LABELS = (LABEL_IGNORE, UPSTREAM_IGNORE, SKYHOOK_IGNORE)


def is_ignored(labels):
    """Nodes labelled ``nodewright.io/ignore=true`` (or upstream's ignore label) are left alone."""
    labels = labels or {}
    return any(labels.get(key) == "true" for key in IGNORE_LABELS)


def not_ignored():
    """The selector form of ``not is_ignored`` (for a LIST's labelSelector)."""
    return Selector([Requirement(key, "notin", ["true"]) for key in IGNORE_LABELS])


def resource_selector(resource, where="spec.nodeSelectors"):
    """The resource's node selector (SelectorError when it cannot be parsed)."""
    return from_label_selector(((resource or {}).get("spec") or {}).get("nodeSelectors"), where)


def targets(resource, labels, selector=None):
    """Whether ``resource`` targets a node with ``labels``."""
    labels = labels or {}
    if is_ignored(labels):
        return False
    return (selector or resource_selector(resource)).matches(labels)
