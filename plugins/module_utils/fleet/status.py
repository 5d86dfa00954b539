# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The status of a NodeWright resource, derived from the markers on its nodes, so
that ``kubectl get nodewrights`` shows progress like any other controller."""

from __future__ import annotations

import datetime
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

RESOURCE_STATUSES = ("unknown", "complete", "blocked", "waiting", "disabled", "paused", "in_progress", "erroring",
                     "halted")


# The resource's condition while a node waits for non-interruptible pods (training
# jobs) before its drain: upstream NodeWright's NonInterruptPodsRunning.
CONDITION_NON_INTERRUPT = markers.CONDITION_NON_INTERRUPT
REASON_NON_INTERRUPT = markers.CONDITION_NON_INTERRUPT


def non_interrupt_message(waiting):
    """``node: ns/pod, ...; ...`` for the nodes that wait, or ''."""
    if not waiting:
        return ""
    parts = ["%s waits for %s" % (node, ", ".join(pods[:10]) + (" and %d more" % (len(pods) - 10)
                                                                if len(pods) > 10 else ""))
             for node, pods in sorted(waiting.items())]
    return "waiting for non-interruptible pods to finish (nothing is evicted): " + "; ".join(parts)


def sticky_order(current, node_status, ts):
    """``status.nodePriority``: when each targeted node first had work (a status other
    than unknown); a node keeps its time while it is targeted, so the next run takes
    the nodes already under way first, in the same order."""
    recorded = ((current or {}).get("nodePriority") or {}) if isinstance(current, dict) else {}
    out = {}
    for node, st in node_status.items():
        if isinstance(recorded.get(node), str):
            out[node] = recorded[node]
        elif st != markers.STATUS_UNKNOWN:
            out[node] = ts
    return out


def _node_state(node, resource):
    return node_state.read_node_state(node, resource)


def compute_status(resource, nodes, targets, packages, override=None, message=None, generation=None,
                   extra=None, now=None, current=None, pending=()):
    """A status object (for the status subresource) from the targeted nodes' markers.

    ``override`` forces the overall status (blocked, halted, paused, disabled) with
    ``message``; otherwise it is derived: erroring > in_progress > complete.
    ``pending``: targets that still have work for the resource's current spec (a new
    version or config not yet applied); such a node is ``waiting``, not complete, even
    when its label still says complete for what it got before.
    """
    pending = set(pending)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    node_status, node_state, boot_ids, waiting = {}, {}, {}, {}
    for t in targets:
        node = by_name.get(t)
        if node is None:
            continue
        labels = node["metadata"].get("labels") or {}
        st = labels.get(markers.status_label(resource)) or markers.STATUS_UNKNOWN
        state = _node_state(node, resource)
        if "error" in state:
            st = markers.STATUS_ERRORING
        elif t in pending and st in (markers.STATUS_COMPLETE, markers.STATUS_UNKNOWN):
            st = markers.STATUS_WAITING
        node_status[t] = st
        pk = {}
        for name, entry in sorted((state.get("packages") or {}).items()):
            if isinstance(entry, dict):
                pk["%s|%s" % (name, entry.get("version", "?"))] = {
                    "name": name, "version": entry.get("version"), "stage": entry.get("stage"),
                    "state": entry.get("state")}
        node_state[t] = pk
        boot_ids[t] = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
        if st == markers.STATUS_BLOCKED and state.get("blockedBy"):
            waiting[t] = [str(p) for p in state["blockedBy"]]
    counts = {}
    for st in node_status.values():
        counts[st] = counts.get(st, 0) + 1
    complete = counts.get(markers.STATUS_COMPLETE, 0)
    if override:
        overall = override
    elif counts.get(markers.STATUS_ERRORING):
        overall = "erroring"
    elif counts.get(markers.STATUS_IN_PROGRESS) or counts.get(markers.STATUS_BLOCKED) or \
            counts.get(markers.STATUS_WAITING):
        overall = "in_progress"
    elif targets and complete == len(targets):
        overall = "complete"
    elif not targets:
        overall = "complete"
    else:
        overall = "in_progress" if complete else "unknown"
    ts = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not message:
        message = "%d of %d nodes complete" % (complete, len(targets))
        if counts.get(markers.STATUS_WAITING):
            message += "; %d waiting for the current spec" % counts[markers.STATUS_WAITING]
        if counts.get(markers.STATUS_ERRORING):
            bad = sorted(t for t, s in node_status.items() if s == markers.STATUS_ERRORING)
            message += "; erroring: %s" % ", ".join(bad[:10])
    ready = overall == "complete"
    pods_text = non_interrupt_message(waiting)
    blocked = overall in ("blocked", "halted")
    conditions = [
        {"type": "Ready", "status": "True" if ready else "False", "reason": overall.title().replace("_", ""),
         "message": message, "lastTransitionTime": ts},
        {"type": "Blocked", "status": "True" if blocked or waiting else "False",
         "reason": overall.title().replace("_", "") if blocked or not waiting else REASON_NON_INTERRUPT,
         "message": message if blocked else pods_text, "lastTransitionTime": ts},
        {"type": CONDITION_NON_INTERRUPT, "status": "True" if waiting else "False",
         "reason": REASON_NON_INTERRUPT if waiting else "NoneRunning",
         "message": pods_text or "no node waits for non-interruptible pods", "lastTransitionTime": ts},
    ]
    status = {
        "status": overall, "message": message,
        "nodeStatus": node_status, "nodeState": node_state, "nodeBootIds": boot_ids,
        "nodesMatched": len(targets), "nodesComplete": complete,
        "nodesInProgress": counts.get(markers.STATUS_IN_PROGRESS, 0) + counts.get(markers.STATUS_BLOCKED, 0),
        "nodesErroring": counts.get(markers.STATUS_ERRORING, 0),
        "completeNodes": "%d/%d" % (complete, len(targets)),
        "packageList": ",".join("%s:%s" % (p["name"], p["version"]) for p in packages),
        "conditions": conditions,
        "nodePriority": sticky_order(current, node_status, ts),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    status.update(extra or {})
    # Merge patch: drop nodes that are no longer targeted.
    for key in ("nodeStatus", "nodeState", "nodeBootIds", "nodePriority"):
        for old in ((current or {}).get(key) or {}):
            if old not in status[key]:
                status[key][old] = None
    return status
