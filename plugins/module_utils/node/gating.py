# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""New-node gating (``runtimeRequired``): when the runtime-required taint comes off a node.

A node that must not run workloads before NodeWright has prepared its host joins
with the taint ``nodewright.io/runtime-required=true:NoSchedule`` (kubelet
``--register-with-taints``), or NodeWright adds it when the node appears and a
resource with ``autoTaintNewNodes`` selects it. The taint comes off only when every
``runtimeRequired`` NodeWright resource that targets the node has completed on it;
resources are looked at in priority order, so the first one still missing is the
one a person is told about. A failed package keeps the taint, and says so.

Upstream NodeWright's runtime-required taints (``nodewright.nvidia.com=runtime-required``,
and ``skyhook.nvidia.com=runtime-required`` from before its rename) gate a node just the
same: a node carrying one is tainted, no second taint is added to it, and when its gate
opens every recognised runtime-required taint comes off, as the operator itself removes
both its current and its legacy key.

The decisions are pure functions over plain dicts (nodes as the API returns them,
NodeWright objects); ``enforce`` and ``add_taint`` at the end carry them out through
the API, for the ``node_gate`` module and the reconciler alike.
"""

from __future__ import annotations

import datetime
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    ClusterError,
    NodeWrightError,
    carry_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.node.ops import read_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import targets as target_rule
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    DEFAULT_PRIORITY,
    is_disabled,
    is_paused,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of

TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"

# Decisions
OPEN = "open"      # remove the taint: every runtimeRequired resource is complete on the node
KEEP = "keep"      # the node is tainted and must stay so
NONE = "none"      # nothing to do (not tainted, or no runtimeRequired resource targets the node)

# Progress of one resource on one node
COMPLETE = "complete"
PENDING = "pending"
FAILED = "failed"
MALFORMED = "malformed"

# Reasons of the nodewright.io/Blocked condition that the gate owns; a Blocked
# condition with another reason belongs to another part of NodeWright and is left alone.
REASON_WAITING = "RuntimeRequired"
REASON_FAILED = "RuntimePackageFailed"
REASON_MALFORMED = "RuntimeStateMalformed"
REASON_READY = "RuntimeReady"
GATE_REASONS = (REASON_WAITING, REASON_FAILED, REASON_MALFORMED, REASON_READY)


def runtime_taint(key=markers.TAINT_RUNTIME_REQUIRED):
    return {"key": key, "value": TAINT_VALUE, "effect": TAINT_EFFECT}


def node_taints(node):
    return list(((node or {}).get("spec") or {}).get("taints") or [])


def recognised_keys(key=markers.TAINT_RUNTIME_REQUIRED):
    """The runtime-required taint keys that gate a node: ``key`` and upstream's."""
    return (key,) + tuple(k for k in markers.UPSTREAM_RUNTIME_TAINT_KEYS if k != key)


def present_taints(node, key=markers.TAINT_RUNTIME_REQUIRED):
    """The recognised runtime-required taint keys ``node`` carries, in ``recognised_keys`` order."""
    keys = {t.get("key") for t in node_taints(node)}
    return [k for k in recognised_keys(key) if k in keys]


def has_taint(node, key=markers.TAINT_RUNTIME_REQUIRED):
    """Whether ``node`` carries the runtime-required taint ``key``, or upstream's."""
    return bool(present_taints(node, key))


def _labels(node):
    return ((node or {}).get("metadata") or {}).get("labels") or {}


def _priority(resource):
    value = ((resource or {}).get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_PRIORITY


def targets(resource, node):
    """Whether ``resource`` selects ``node`` (an ignored node is selected by none).

    A selector that cannot be parsed selects nothing: the resource is invalid, and
    desired_state reports it as blocked.
    """
    try:
        return target_rule.targets(resource, _labels(node))
    except NodeWrightError:
        return False


def gating_resources(resources, node):
    """The runtimeRequired resources that target ``node``, in priority order (lower
    first, then by name). A disabled resource is withdrawn and does not hold the gate;
    a paused one does (its work is still to come)."""
    chosen = [r for r in resources or () if ((r.get("spec") or {}).get("runtimeRequired") is True)
              and not is_disabled(r) and targets(r, node)]
    return sorted(chosen, key=lambda r: (_priority(r), name_of(r)))


def resource_progress(resource, node):
    """``(progress, detail)`` of one resource on one node: complete, pending, failed or
    malformed. Complete means the node's recorded status is complete and every package
    of the resource is recorded complete at the version the resource asks for."""
    name = name_of(resource)
    wanted = {p: (spec or {}).get("version") for p, spec in
              (((resource.get("spec") or {}).get("packages")) or {}).items()}
    state = read_state(node, name)
    if "error" in state:
        return MALFORMED, "%s; fix or reset it (nodewright reset %s --resource %s)" % (
            state["error"], name_of(node), name)
    packages = state.get("packages") if isinstance(state.get("packages"), dict) else {}
    for pkg in sorted(wanted):
        entry = packages.get(pkg)
        if isinstance(entry, dict) and entry.get("state") == markers.STATUS_ERRORING:
            detail = "package %s %s failed at stage %s" % (pkg, entry.get("version", "?"), entry.get("stage", "?"))
            if state.get("reason"):
                detail += ": %s" % str(state["reason"]).splitlines()[0][:300]
            return FAILED, detail
    status = state.get("status") or _labels(node).get(markers.status_label(name))
    if status == markers.STATUS_ERRORING:
        reason = str(state.get("reason") or "maintenance failed").splitlines()[0][:300]
        return FAILED, "maintenance failed at %s: %s" % (state.get("step", "?"), reason)
    missing = []
    for pkg, version in sorted(wanted.items()):
        entry = packages.get(pkg)
        if not (isinstance(entry, dict) and entry.get("state") == "complete" and entry.get("version") == version
                and entry.get("stage") != "interrupt"):
            missing.append("%s %s" % (pkg, version))
    if not wanted:
        return COMPLETE, "no packages"
    if status == markers.STATUS_COMPLETE and not missing:
        return COMPLETE, "complete"
    if missing:
        return PENDING, "not yet applied: %s" % ", ".join(missing)
    return PENDING, "maintenance %s" % (status or "not started")


def decide(node, resources, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """What the gate does for ``node`` given every NodeWright resource.

    Returns ``{action, tainted, resources, blocker, message, condition, event}``:
    ``action`` is open, keep or none; ``resources`` lists each gating resource with
    its progress, in priority order; ``blocker`` is the first that is not complete;
    ``condition`` (type, status, reason, message) and ``event`` (reason, type,
    message) are what to record, or None.
    """
    tainted = has_taint(node, taint_key)
    if tainted:
        taint_key = ", ".join(present_taints(node, taint_key))
    gating = gating_resources(resources, node)
    entries = []
    for r in gating:
        progress, detail = resource_progress(r, node)
        entries.append({"resource": name_of(r), "priority": _priority(r), "progress": progress, "detail": detail,
                        "paused": is_paused(r)})
    result = {"action": NONE, "tainted": tainted, "taint": taint_key, "resources": entries, "blocker": None,
              "condition": None, "event": None, "cordon": None}
    if not entries:
        result["message"] = ("no runtimeRequired NodeWright resource targets this node; "
                             + ("the %s taint is left as it is" % taint_key if tainted else "nothing to gate"))
        return result
    blockers = [e for e in entries if e["progress"] != COMPLETE]
    done = ", ".join(e["resource"] for e in entries)
    if not blockers:
        result["message"] = "every runtimeRequired resource is complete (%s)" % done
        if tainted:
            result["action"] = OPEN
            result["message"] = "removing the %s taint: %s" % (taint_key, result["message"])
            result["event"] = {"reason": markers.EVENT_RUNTIME_READY, "type": "Normal",
                               "message": "runtime ready, taint %s removed: %s complete" % (taint_key, done)}
            cordoning = [name_of(r) for r in gating if (r.get("spec") or {}).get("runtimeRequiredCordonAfter") is True]
            if cordoning:
                # runtimeRequiredCordonAfter: the node stays out of scheduling, for a person
                # (or another controller) to release it.
                result["cordon"] = "runtimeRequiredCordonAfter of %s" % ", ".join(cordoning)
                result["message"] += "; cordoned (%s)" % result["cordon"]
        result["condition"] = {"type": markers.CONDITION_BLOCKED, "status": "False", "reason": REASON_READY,
                               "message": "runtime ready: %s complete" % done}
        return result
    first = blockers[0]
    result["blocker"] = first
    if not tainted:
        result["message"] = ("not tainted; %s is %s on this node (%s)" % (first["resource"], first["progress"],
                                                                          first["detail"]))
        return result
    result["action"] = KEEP
    what = "%s (priority %d) %s" % (first["resource"], first["priority"], first["detail"])
    if first["progress"] in (FAILED, MALFORMED):
        reason = REASON_FAILED if first["progress"] == FAILED else REASON_MALFORMED
        text = "taint %s kept: %s" % (taint_key, what)
        result["condition"] = {"type": markers.CONDITION_BLOCKED, "status": "True", "reason": reason,
                               "message": text}
        result["event"] = {"reason": markers.EVENT_BLOCKED, "type": "Warning", "message": text}
    else:
        text = "taint %s kept until %s; waiting for %s%s" % (
            taint_key, done, what, " (paused)" if first["paused"] else "")
        result["condition"] = {"type": markers.CONDITION_BLOCKED, "status": "True", "reason": REASON_WAITING,
                               "message": text}
    result["message"] = text
    return result


def runtime_cordon_patch(node, why):
    """Patch that cordons a node for runtimeRequiredCordonAfter (unless it already is
    unschedulable), recording why in ``nodewright.io/runtime-required-cordon``. Not
    NodeWright's maintenance cordon: nothing in NodeWright lifts it."""
    if (node.get("spec") or {}).get("unschedulable"):
        return None
    return {"spec": {"unschedulable": True},
            "metadata": {"annotations": {markers.ANNOTATION_RUNTIME_CORDON: why}}}


def stale_runtime_cordon(node):
    """Whether ``node`` records a runtimeRequiredCordonAfter cordon that is no longer
    there (somebody uncordoned the node)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return markers.ANNOTATION_RUNTIME_CORDON in annotations and not (node.get("spec") or {}).get("unschedulable")


STALE_CORDON_TEXT = ("the runtime-required cordon was lifted by someone else: its record %s is removed"
                     % markers.ANNOTATION_RUNTIME_CORDON)


def clear_stale_runtime_cordon(core, name, node, check_mode=False):
    """Remove the record of a runtimeRequiredCordonAfter cordon somebody lifted (as
    upstream removes its own); True when there was one."""
    if not stale_runtime_cordon(node):
        return False
    if not check_mode:
        node_ops.patch_node(core, name, {"metadata": {"annotations": {markers.ANNOTATION_RUNTIME_CORDON: None}}})
    return True


def retaint_after_reboot(node_name, node, rollouts, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """Whether a runtimeRequired node that rebooted outside NodeWright gets the
    runtime-required taint back: it does when a runtimeRequired resource with
    reapplyOnReboot is to apply packages again there because of the reboot (its
    ``desired_state`` plan, a ``plan.ResourcePlan`` of ``rollouts``, says so), so that
    workloads wait until they are complete again. Returns ``(bool, reason)``."""
    if has_taint(node, taint_key):
        return False, "%s already carries %s" % (node_name, taint_key)
    for described in rollouts or ():
        if not (described.runtime_required and described.reapply_on_reboot):
            continue
        again = [p["name"] for p in described.node(node_name).packages
                 if p.get("action") == "rerun" and p.get("after_reboot")]
        if again and node_name in described.work:
            return True, "%s rebooted; %s applies %s again (reapplyOnReboot)" % (
                node_name, described.name, ", ".join(again))
    return False, "no runtimeRequired resource re-applies packages on %s after a reboot" % node_name


def gate_condition(node, decision):
    """The condition to record for ``decision``, or None when nothing is to be written:
    a False (ready) condition is only written over a gate condition that is True, and
    a Blocked condition owned by another part of NodeWright is never overwritten."""
    wanted = decision.get("condition")
    if not wanted:
        return None
    current = None
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == wanted["type"]:
            current = cond
    if current is not None and current.get("status") == "True" and current.get("reason") not in GATE_REASONS:
        return None
    if wanted["status"] == "False" and (current is None or current.get("status") != "True"):
        return None
    return wanted


def taint_patch(node, present, key=markers.TAINT_RUNTIME_REQUIRED):
    """Patch that adds (``present``) or removes the runtime-required taint, or None.
    Upstream's taints count as present and are removed with it; only ``key`` is added.

    Taints are a list without a merge key, so the whole list is written; the node's
    resourceVersion makes the API server refuse the patch (409) when somebody changed
    the node in between, instead of losing their taint.
    """
    taints = node_taints(node)
    if present == has_taint(node, key):
        return None
    if present:
        new = taints + [runtime_taint(key)]
    else:
        gone = recognised_keys(key)
        new = [t for t in taints if t.get("key") not in gone]
    patch = {"spec": {"taints": new}}
    version = ((node or {}).get("metadata") or {}).get("resourceVersion")
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch


def _created(node):
    raw = ((node or {}).get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return None
    try:
        return datetime.datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


def should_auto_taint(node, resources, now, window_s=600, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """Whether NodeWright should taint a node it has just seen appear (the ADDED event
    of a watch). Returns ``(bool, reason)``.

    Only a node created less than ``window_s`` seconds before ``now`` counts as new:
    a watch also reports every existing node as ADDED when it (re)starts, and those
    nodes may run workloads already. The node must be targeted by a resource with
    ``runtimeRequired`` and ``autoTaintNewNodes`` that has not completed on it.
    """
    name = name_of(node)
    if has_taint(node, taint_key):
        return False, "%s already carries %s" % (name, taint_key)
    created = _created(node)
    if created is None:
        return False, "%s has no creation time" % name
    age = (now - created).total_seconds()
    if age > window_s:
        return False, "%s is not new (created %ds ago, window %ds)" % (name, age, window_s)
    wanting = [r for r in gating_resources(resources, node)
               if (r.get("spec") or {}).get("autoTaintNewNodes") is True
               and resource_progress(r, node)[0] != COMPLETE]
    if not wanting:
        return False, "no runtimeRequired resource with autoTaintNewNodes is pending on %s" % name
    return True, "new node %s is targeted by %s (autoTaintNewNodes)" % (name, ", ".join(name_of(r) for r in wanting))


# --------------------------------------------------------------------------- acting on a node


# A node that has just joined is written to several times a second (its status, the
# node lifecycle controller's taints), so a whole-list taint write may meet a few
# conflicts in a row before one lands.
_CONFLICT_ATTEMPTS = 8


def _write_taint(core, name, node, present, key):
    """Write the taint list; on a conflict (the node changed meanwhile) read it again and retry."""
    for attempt in range(1, _CONFLICT_ATTEMPTS + 1):
        patch = taint_patch(node, present, key)
        if patch is None:
            return node
        try:
            node_ops.patch_node(core, name, patch)
            return node_ops.get_node(core, name)
        except ClusterError as exc:
            if (exc.details or {}).get("status") != 409 or attempt == _CONFLICT_ATTEMPTS:
                raise
            time.sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
            node = node_ops.get_node(core, name)
    return node  # pragma: no cover


def enforce(core, name, resources, taint_key=markers.TAINT_RUNTIME_REQUIRED, check_mode=False, node=None):
    """Carry out ``decide`` on one node: remove the taint when the gate opens, record
    the Blocked condition, and an Event when something changed (so reruns stay quiet).
    Returns ``{changed, action, tainted, resources, msg}``."""
    node = node or node_ops.get_node(core, name)
    decision = decide(node, resources, taint_key)
    result = {"changed": False, "action": decision["action"], "tainted": decision["tainted"],
              "resources": decision["resources"], "msg": decision["message"]}
    if clear_stale_runtime_cordon(core, name, node, check_mode):
        node = node if check_mode else node_ops.get_node(core, name)
        result.update(changed=True, msg="%s; %s" % (result["msg"], STALE_CORDON_TEXT))
    with carry_result(result):
        if decision["action"] == OPEN:
            if not check_mode:
                if decision.get("cordon"):
                    # Cordon first: the taint must not come off before the node is unschedulable.
                    node_ops.patch_node(core, name, runtime_cordon_patch(node, decision["cordon"]) or {})
                    node = node_ops.get_node(core, name)
                node = _write_taint(core, name, node, False, taint_key)
            result.update(changed=True, tainted=False)
        wanted = gate_condition(node, decision)
        cond_patch = node_ops.condition_patch(node, wanted["type"], wanted["status"], wanted["reason"],
                                              wanted["message"]) if wanted else None
        if cond_patch:
            if not check_mode:
                node_ops.patch_node_status(core, name, cond_patch)
            result["changed"] = True
    event = decision.get("event")
    if event and (decision["action"] == OPEN or cond_patch) and not check_mode:
        node_ops.emit_event(core, name, event["reason"], event["message"], event["type"])
    return result


def add_taint(core, name, taint_key=markers.TAINT_RUNTIME_REQUIRED, reason=None, check_mode=False, node=None):
    """Add the runtime-required taint (autoTaintNewNodes, or by hand). Returns
    ``{changed, action, tainted, resources, msg}``."""
    node = node or node_ops.get_node(core, name)
    if taint_patch(node, True, taint_key) is None:
        return {"changed": False, "action": NONE, "tainted": True, "resources": [],
                "msg": "already tainted with %s" % taint_key}
    if not check_mode:
        _write_taint(core, name, node, True, taint_key)
        node_ops.emit_event(core, name, markers.EVENT_BLOCKED, "taint %s added%s: workloads wait until NodeWright "
                            "has prepared the node" % (taint_key, (" (%s)" % reason) if reason else ""))
    return {"changed": True, "action": "taint", "tainted": True, "resources": [],
            "msg": "tainted with %s" % taint_key}
