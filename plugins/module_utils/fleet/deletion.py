# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Deleting a NodeWright resource uninstalls its packages from its nodes.

A resource with a package whose ``uninstall.enabled`` is true carries the finalizer
``nodewright.io/uninstall``. When it is deleted, Kubernetes keeps it (with a
``deletionTimestamp``) until the finalizer goes, and the reconciler uninstalls
those packages from every node that still records them - through
``playbooks/uninstall.yml``, the safe sequence, in waves under the resource's
policy - then removes the finalizer. The decisions are pure functions over the
resource, its ``desired_state`` description and the nodes.

An uninstall that fails leaves the resource there, with the reason in its status
(condition ``Deleting``, reason ``UninstallFailed``), and is tried again at the
reconciler's retry interval; it never holds anything else up. The annotation
``nodewright.io/skip-uninstall: "true"`` lets the resource go without it (its
packages stay on the nodes), and a node that no longer exists is not waited for.

A paused or disabled resource runs nothing, its uninstall included: deleting it while
an uninstall is pending keeps it (condition ``DeletionBlocked``, reason
``PausedOrDisabled``, and a Warning Event) until it is resumed or enabled, as
upstream NodeWright does - letting it go would lose the record of the packages still
on its nodes.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import is_disabled, is_paused
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import (
    CONDITION_UNINSTALL_IN_PROGRESS,
    UNINSTALL_REASON,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

FINALIZER = markers.PREFIX + "/uninstall"
ANNOTATION_SKIP_UNINSTALL = markers.PREFIX + "/skip-uninstall"
CONDITION_DELETING = "Deleting"
CONDITION_DELETION_BLOCKED = "DeletionBlocked"
REASON_PAUSED_OR_DISABLED = "PausedOrDisabled"

NONE = "none"                      # not being deleted, or nothing to do
ADD_FINALIZER = "add-finalizer"
REMOVE_FINALIZER = "remove-finalizer"
UNINSTALL = "uninstall"
BLOCKED = "blocked"                # cannot uninstall (an invalid resource): says why, keeps the finalizer
DELETION_BLOCKED = "deletion-blocked"  # paused or disabled: the uninstall waits, the finalizer stays


def _meta(resource):
    return (resource or {}).get("metadata") or {}


def is_deleting(resource):
    return bool(_meta(resource).get("deletionTimestamp"))


def has_finalizer(resource):
    return FINALIZER in (_meta(resource).get("finalizers") or [])


def kept_packages(resource):
    """Names of the packages whose ``uninstall.enabled`` is not true: deleting the
    resource leaves them on the nodes, and their node-state entries with them."""
    packages = ((resource or {}).get("spec") or {}).get("packages") or {}
    enabled = set(uninstall_enabled(resource))
    return sorted(name for name in packages if name not in enabled)


def uninstall_enabled(resource):
    """Names of the packages whose ``uninstall.enabled`` is true."""
    packages = ((resource or {}).get("spec") or {}).get("packages") or {}
    return sorted(name for name, pkg in packages.items()
                  if isinstance(pkg, dict) and ((pkg.get("uninstall") or {}).get("enabled") is True))


def skips_uninstall(resource):
    """``nodewright.io/skip-uninstall: "true"``: the resource goes without uninstalling."""
    return (_meta(resource).get("annotations") or {}).get(ANNOTATION_SKIP_UNINSTALL) == "true"


def finalizer_patch(resource, present):
    """Merge patch that adds or removes the finalizer (the whole list, with the
    resourceVersion so that a concurrent change is refused, not lost), or None."""
    current = list(_meta(resource).get("finalizers") or [])
    if present == (FINALIZER in current):
        return None
    new = current + [FINALIZER] if present else [f for f in current if f != FINALIZER]
    patch = {"metadata": {"finalizers": new}}
    if _meta(resource).get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = _meta(resource)["resourceVersion"]
    return patch


def nodes_to_uninstall(resource, nodes, packages):
    """Nodes that still record one of ``packages`` for the resource (whatever their
    labels now say), in name order. A node whose state cannot be read is listed:
    its uninstall fails and says so, rather than the resource going silently."""
    name = _meta(resource).get("name")
    out = []
    for node in nodes:
        state = node_state.read_node_state(node, name)
        if "error" in state:
            out.append(_meta(node).get("name"))
            continue
        recorded = node_state.package_entries(state)
        if any(p in recorded for p in packages):
            out.append(_meta(node).get("name"))
    return sorted(out)


def decide(resource, nodes, described=None, blocked_reason=None):
    """What the reconciler does about ``resource``'s finalizer and uninstall.

    ``described`` is its ``desired_state.describe`` result (None when it could not be
    described, ``blocked_reason`` saying why). Returns ``{action, reason, nodes,
    packages}``: add-finalizer, remove-finalizer, uninstall (run uninstall.yml for
    ``packages`` on ``nodes``), blocked, or none."""
    enabled = uninstall_enabled(resource)
    out = {"action": NONE, "reason": "", "nodes": [], "packages": enabled}
    if not is_deleting(resource):
        if enabled and not has_finalizer(resource):
            out.update(action=ADD_FINALIZER, reason="packages %s have uninstall.enabled: deleting the resource will "
                                                    "uninstall them from its nodes" % ", ".join(enabled))
        return out
    if not has_finalizer(resource):
        return out
    if skips_uninstall(resource):
        out.update(action=REMOVE_FINALIZER, reason="annotation %s=true: the packages stay on the nodes"
                                                   % ANNOTATION_SKIP_UNINSTALL)
        return out
    if not enabled:
        out.update(action=REMOVE_FINALIZER, reason="no package has uninstall.enabled")
        return out
    pending = nodes_to_uninstall(resource, nodes, enabled)
    if not pending:
        out.update(action=REMOVE_FINALIZER, reason="%s uninstalled from every node" % ", ".join(enabled))
        return out
    held = "paused (annotation %s=true)" % markers.ANNOTATION_PAUSE if is_paused(resource) else \
        "disabled (annotation %s=true)" % markers.ANNOTATION_DISABLE if is_disabled(resource) else None
    if held:
        out.update(action=DELETION_BLOCKED, nodes=pending,
                   reason="the resource is %s: the uninstall of %s from %s waits, and the resource stays; remove "
                          "the annotation to let the uninstall run, or annotate it %s=true to let it go without "
                          "uninstalling" % (held, ", ".join(enabled), ", ".join(pending), ANNOTATION_SKIP_UNINSTALL))
        return out
    if described is None:
        out.update(action=BLOCKED, nodes=pending,
                   reason="cannot uninstall %s from %s: %s; fix the resource, or let it go without uninstalling "
                          "(annotate it %s=true)" % (", ".join(enabled), ", ".join(pending), blocked_reason or
                                                     "it cannot be described", ANNOTATION_SKIP_UNINSTALL))
        return out
    out.update(action=UNINSTALL, nodes=pending,
               reason="uninstalling %s from %d node(s) before the resource goes" % (", ".join(enabled), len(pending)))
    return out


def deleting_condition(decision, failure=None):
    """The ``Deleting`` condition of a resource being deleted."""
    if failure:
        return {"type": CONDITION_DELETING, "status": "True", "reason": "UninstallFailed",
                "message": "%s; the uninstall is tried again, or annotate the resource %s=true to let it go "
                           "without it" % (failure, ANNOTATION_SKIP_UNINSTALL)}
    reason = {UNINSTALL: "Uninstalling", BLOCKED: "UninstallBlocked",
              DELETION_BLOCKED: CONDITION_DELETION_BLOCKED}.get(decision["action"], "Finishing")
    return {"type": CONDITION_DELETING, "status": "True", "reason": reason, "message": decision["reason"]}


def uninstall_conditions(decision):
    """While a deleted resource's uninstall runs: ``UninstallInProgress`` (upstream's),
    and ``Ready`` False - set when the uninstall starts, not at the end of its run."""
    return [{"type": CONDITION_UNINSTALL_IN_PROGRESS, "status": "True", "reason": UNINSTALL_REASON,
             "message": decision["reason"]},
            {"type": "Ready", "status": "False", "reason": "Uninstalling", "message": decision["reason"]}]


def deletion_blocked_condition(decision):
    """The ``DeletionBlocked`` condition: True while a paused or disabled resource's
    deletion waits for its uninstall (upstream's, reason ``PausedOrDisabled``)."""
    if decision["action"] == DELETION_BLOCKED:
        return {"type": CONDITION_DELETION_BLOCKED, "status": "True", "reason": REASON_PAUSED_OR_DISABLED,
                "message": decision["reason"]}
    return {"type": CONDITION_DELETION_BLOCKED, "status": "False", "reason": "NotBlocked",
            "message": "nothing holds the deletion back"}
