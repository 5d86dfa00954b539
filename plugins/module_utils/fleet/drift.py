# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Drift: a node NodeWright completed whose host no longer passes its packages' checks.

The check stages run on the host (``nodewright.fleet.package`` with ``phase: check``);
the decisions around them are pure and live here: which nodes to check for which
resources, what the ``nodewright.io/Drift`` condition says, and how a node's state
is marked so that the next rollout applies the drifted packages again.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node.ops import read_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import mark_for_reapply
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import resource_selector, targets
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import is_disabled
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of

REASON_DRIFT = "HostDrift"
REASON_NO_DRIFT = "NoDrift"


def check_targets(nodes, resources):
    """``{node: [resource, ...]}``: the resources each node has completed (recorded
    status complete), which a drift check looks at again. Ignored nodes and disabled
    resources are left out; so are nodes whose state annotation is malformed."""
    out = {}
    for resource in sorted(resources or (), key=name_of):
        if is_disabled(resource):
            continue
        try:
            selector = resource_selector(resource)
        except Exception:  # noqa: BLE001 - an invalid resource is reported as blocked elsewhere
            continue
        name = name_of(resource)
        for node in nodes or ():
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not targets(resource, labels, selector):
                continue
            state = read_state(node, name)
            if state.get("status") == markers.STATUS_COMPLETE and "error" not in state:
                out.setdefault(node["metadata"]["name"], []).append(name)
    return out


def condition(drifted):
    """The ``nodewright.io/Drift`` condition for one node from ``{resource: [drifted
    package entries]}`` (entries as ``package`` with ``phase: check`` returns them)."""
    found = {r: items for r, items in (drifted or {}).items() if items}
    if not found:
        return {"type": markers.CONDITION_DRIFT, "status": "False", "reason": REASON_NO_DRIFT,
                "message": "the host passes the checks of its packages"}
    parts = []
    for resource in sorted(found):
        for item in found[resource]:
            first = (item.get("message") or "").splitlines()[0] if item.get("message") else ""
            parts.append("%s/%s %s: %s failed%s" % (resource, item.get("name"), item.get("version"),
                                                    item.get("stage") or "copy", (" (%s)" % first) if first else ""))
    return {"type": markers.CONDITION_DRIFT, "status": "True", "reason": REASON_DRIFT,
            "message": "host drifted: " + "; ".join(parts)}


def is_drifting(node):
    """Whether the node's Drift condition is True."""
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == markers.CONDITION_DRIFT:
            return cond.get("status") == "True"
    return False


def reapply_state(state, drifted):
    """A copy of a node state (the annotation's) in which each drifted package is marked
    in progress at the stage whose rerun repairs it - the same marks the package
    module's ``phase: check`` with ``reapply`` makes in the host's own record - so that
    the next rollout resumes it through the safe sequence. Returns ``(state, names)``."""
    new, marked = mark_for_reapply(state, drifted)
    if marked:
        new["status"] = markers.STATUS_IN_PROGRESS
        new["reason"] = "drift: %s applied again" % ", ".join(marked)
    return new, marked
