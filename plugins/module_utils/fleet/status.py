# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The status of a NodeWright resource, derived from the markers on its nodes, so
that ``kubectl get nodewrights`` shows progress like any other controller."""

from __future__ import annotations

import datetime
import json
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import name_list
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import drain as node_drain
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

RESOURCE_STATUSES = ("unknown", "complete", "blocked", "waiting", "disabled", "paused", "in_progress", "erroring",
                     "halted")


# The resource's condition while a node waits for non-interruptible pods (training
# jobs) before its drain: upstream NodeWright's NonInterruptPodsRunning.
CONDITION_NON_INTERRUPT = markers.CONDITION_NON_INTERRUPT
REASON_NON_INTERRUPT = markers.CONDITION_NON_INTERRUPT
CONDITION_NODE_STATE_MALFORMED = "NodeStateMalformed"
CONDITION_UNINSTALL_IN_PROGRESS = "UninstallInProgress"
# Ready's reason when the nodes are complete for a spec that changed during the run.
REASON_SPEC_CHANGED = "SpecChanged"
# Upstream's reason for it too, which its users' alerts and scripts match on.
UNINSTALL_REASON = "UninstallInProgress"


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


CONDITION_CONVERSION_WARNINGS = "ConversionWarnings"
ANNOTATION_CONVERSION_WARNINGS = markers.PREFIX + "/conversion-warnings"


def conversion_warnings_of(obj):
    """The warnings ``nodewright convert`` recorded on a resource converted from an
    upstream object (its ``nodewright.io/conversion-warnings`` annotation); [] without."""
    raw = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CONVERSION_WARNINGS)
    if not raw:
        return []
    try:
        found = json.loads(raw)
    except ValueError:
        return ["the annotation %s is not a JSON list: %s" % (ANNOTATION_CONVERSION_WARNINGS, raw[:200])]
    return [str(w) for w in found] if isinstance(found, list) else [str(found)]


def conversion_condition(warnings, ts):
    """``ConversionWarnings``, True while the resource carries its conversion's warnings."""
    if not warnings:
        return []
    return [{"type": CONDITION_CONVERSION_WARNINGS, "status": "True", "reason": "FieldsWithoutEffect",
             "message": "\n".join(warnings), "lastTransitionTime": ts}]


def lifecycle_conditions(malformed, uninstalling, ts):
    """Upstream NodeWright's conditions that exist only while they hold (a status write
    without them removes them): ``NodeStateMalformed`` while a target's state annotation
    cannot be parsed - re-evaluated from the annotations at every write, so a repaired
    one clears it - and ``UninstallInProgress`` while an uninstall is under way."""
    out = []
    if malformed:
        out.append({"type": CONDITION_NODE_STATE_MALFORMED, "status": "True", "reason": "ParseError",
                    "message": "the node-state annotation cannot be parsed on %d node(s): %s; fix it, or "
                               "`nodewright reset NODE --resource NAME`" % (len(malformed), _names(malformed)),
                    "lastTransitionTime": ts})
    if uninstalling:
        out.append({"type": CONDITION_UNINSTALL_IN_PROGRESS, "status": "True", "reason": UNINSTALL_REASON,
                    "message": "uninstalling on %d node(s): %s" % (len(uninstalling), _names(uninstalling)),
                    "lastTransitionTime": ts})
    return out


CONDITION_DOWNGRADE_REFUSED = "DowngradeRefused"
CONDITION_RETRY_LIMIT = "RetryLimitReached"


def refusal_conditions(refused, ts):
    """Conditions that exist only while they hold, one per kind of refusal (``desired_state.
    refused_nodes``): ``DowngradeRefused`` while a node has a newer version of a package with
    uninstall.enabled than the resource wants, and ``RetryLimitReached`` while a node is left
    alone because a stage's retry budget or an interrupt's restart limit is spent. The message
    says which node, why and the way out."""
    out = []
    for ctype, reason, kinds in ((CONDITION_DOWNGRADE_REFUSED, "UninstallFirst", ("downgrade-refused",)),
                                 (CONDITION_RETRY_LIMIT, "RetriesExhausted", ("exhausted", "restart-limit"))):
        mine = [r for r in refused or () if r.get("kind") in kinds]
        if mine:
            out.append({"type": ctype, "status": "True", "reason": reason, "lastTransitionTime": ts,
                        "message": "\n".join("%s: %s" % (r["node"], r["message"]) for r in mine)[:32000]})
    return out


def _names(nodes, limit=10):
    return name_list(nodes, limit)


def _node_state(node, resource):
    return node_state.read_node_state(node, resource)


def compute_status(resource, nodes, targets, packages, override=None, message=None, generation=None,
                   extra=None, now=None, current=None, pending=(), uninstalling=(), refused=(),
                   conversion_warnings=(), live_generation=None):
    """A status object (for the status subresource) from the targeted nodes' markers.

    ``override`` forces the overall status (blocked, halted, paused, disabled) with
    ``message``; otherwise it is derived: erroring > in_progress > complete.
    ``pending``: targets that still have work for the resource's current spec (a new
    version or config not yet applied); such a node is ``waiting``, not complete, even
    when its label still says complete for what it got before.
    ``uninstalling``: targets where an uninstall of the resource's packages is under
    way or about to start: condition ``UninstallInProgress``, and not Ready meanwhile.
    ``refused``: ``[{node, kind, message}]`` targets left alone (``desired_state.
    refused_nodes``); a node whose downgrade is refused is ``blocked``, and so is the
    resource unless a node is erroring; conditions ``DowngradeRefused``, ``RetryLimitReached``.
    ``live_generation``: the resource's ``metadata.generation`` as the cluster has it now;
    when the spec changed after ``generation`` was planned, the nodes are complete only for
    the old spec, so the resource is ``waiting`` (Ready False, reason ``SpecChanged``), never
    complete.
    """
    pending = set(pending)
    uninstalling = sorted(set(uninstalling) & set(targets))
    refused = [r for r in refused or () if isinstance(r, dict) and r.get("node") in set(targets)]
    downgrades = {r["node"] for r in refused if r.get("kind") == "downgrade-refused"}
    malformed = []
    by_name = {n["metadata"]["name"]: n for n in nodes}
    node_status, node_state, boot_ids, waiting, drains = {}, {}, {}, {}, {}
    for t in targets:
        node = by_name.get(t)
        if node is None:
            continue
        labels = node["metadata"].get("labels") or {}
        st = labels.get(markers.status_label(resource)) or markers.STATUS_UNKNOWN
        state = _node_state(node, resource)
        if "error" in state:
            st = markers.STATUS_ERRORING
            malformed.append(t)
        elif t in downgrades and st != markers.STATUS_ERRORING:
            st = markers.STATUS_BLOCKED
        elif t in pending and st in (markers.STATUS_COMPLETE, markers.STATUS_UNKNOWN):
            st = markers.STATUS_WAITING
        node_status[t] = st
        pk = {}
        for name, entry in sorted((state.get("packages") or {}).items()):
            if isinstance(entry, dict):
                pk["%s|%s" % (name, entry.get("version", "?"))] = item = {
                    "name": name, "version": entry.get("version"), "stage": entry.get("stage"),
                    "state": entry.get("state")}
                # The retry budget and restart limit at work (package/retries.py).
                if isinstance(entry.get("attempts"), dict) and entry["attempts"]:
                    item["attempts"] = dict(entry["attempts"])
                if isinstance(state.get("restarts"), int) and state["restarts"] > 0:
                    item["restarts"] = state["restarts"]
        node_state[t] = pk
        boot_ids[t] = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
        if st == markers.STATUS_BLOCKED and state.get("blockedBy"):
            waiting[t] = [str(p) for p in state["blockedBy"]]
        drain_held = node_drain.drain_blocked_text(node)
        if drain_held:
            drains[t] = drain_held
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
    if uninstalling and overall == "complete":
        overall = "in_progress"
    spec_changed = (not override and overall == "complete" and isinstance(live_generation, int)
                    and isinstance(generation, int) and live_generation > generation)
    if spec_changed:
        overall = "waiting"
        message = message or ("the spec changed while this run rolled out generation %d (generation %d is in the "
                              "cluster): the nodes are complete for the old spec; the next run rolls out the new one"
                              % (generation, live_generation))
    if downgrades and not override and overall in ("complete", "in_progress", "unknown"):
        overall = "blocked"
    ts = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not message:
        message = "%d of %d nodes complete" % (complete, len(targets))
        if counts.get(markers.STATUS_WAITING):
            message += "; %d waiting for the current spec" % counts[markers.STATUS_WAITING]
        if counts.get(markers.STATUS_ERRORING):
            bad = sorted(t for t, s in node_status.items() if s == markers.STATUS_ERRORING)
            message += "; erroring: %s" % ", ".join(bad[:10])
        for kind, words in (("downgrade-refused", "downgrade refused (uninstall first)"),
                            ("exhausted", "retry budget spent"), ("restart-limit", "interrupt restart limit reached")):
            nodes_of = sorted(r["node"] for r in refused if r.get("kind") == kind)
            if nodes_of:
                message += "; %s: %s" % (words, _names(nodes_of))
    ready = overall == "complete"
    pods_text = non_interrupt_message(waiting)
    blocked = overall in ("blocked", "halted")
    conditions = [
        {"type": "Ready", "status": "True" if ready else "False",
         "reason": REASON_SPEC_CHANGED if spec_changed else overall.title().replace("_", ""),
         "message": message, "lastTransitionTime": ts},
        {"type": "Blocked", "status": "True" if blocked or waiting else "False",
         "reason": overall.title().replace("_", "") if blocked or not waiting else REASON_NON_INTERRUPT,
         "message": message if blocked else pods_text, "lastTransitionTime": ts},
        {"type": CONDITION_NON_INTERRUPT, "status": "True" if waiting else "False",
         "reason": REASON_NON_INTERRUPT if waiting else "NoneRunning",
         "message": pods_text or "no node waits for non-interruptible pods", "lastTransitionTime": ts},
        {"type": markers.CONDITION_RESOURCE_DRAIN_BLOCKED, "status": "True" if drains else "False",
         "reason": node_drain.REASON_BLOCKED if drains else node_drain.REASON_PROCEEDING,
         "message": "\n".join("%s: %s" % (node, drains[node]) for node in sorted(drains))
         or node_drain.DRAIN_NOT_BLOCKED,
         "lastTransitionTime": ts},
    ]
    conditions += lifecycle_conditions(malformed, uninstalling, ts)
    conditions += refusal_conditions(refused, ts)
    conditions += conversion_condition(conversion_warnings, ts)
    status = {
        "status": overall, "message": message,
        "nodeStatus": node_status, "nodeState": node_state, "nodeBootIds": boot_ids,
        "nodesMatched": len(targets), "nodesComplete": complete,
        "nodesInProgress": counts.get(markers.STATUS_IN_PROGRESS, 0) + counts.get(markers.STATUS_BLOCKED, 0),
        "nodesErroring": counts.get(markers.STATUS_ERRORING, 0),
        "completeNodes": "%d/%d" % (complete, len(targets)),
        "packageList": ",".join("%s:%s" % (p.name, p.version) for p in packages),
        "conditions": conditions,
        "nodePriority": sticky_order(current, node_status, ts),
    }
    if generation is not None:
        status["observedGeneration"] = generation
        for cond in conditions:
            cond["observedGeneration"] = generation
    status.update(extra or {})
    # Merge patch: drop nodes that are no longer targeted.
    for key in ("nodeStatus", "nodeState", "nodeBootIds", "nodePriority"):
        for old in ((current or {}).get(key) or {}):
            if old not in status[key]:
                status[key][old] = None
    return status
