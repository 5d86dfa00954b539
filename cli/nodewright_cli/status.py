# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The fleet at a glance: per resource, its nodes with their package states, why a
node or a resource is blocked, and which nodes the next wave takes.

``fleet_view`` is what the reconciler decides with too: every resource described by
``desired_state`` (targets, per-node plans, the policy's planned waves), the
resources that cannot be rolled out and why, and the nodes whose state annotation
is malformed. Pure functions over the objects the API returns.
"""

from __future__ import annotations

# Imported for its effect: it makes the collection importable.
from nodewright_cli import collection  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.node import drain, gating
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import is_ignored
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of


def fleet_view(resources, nodes, policies, package_dirs):
    """``{rollouts: [(resource, described)], blocked: [(resource, reason)],
    malformed: {node: {resource: error}}}``, resources in priority order."""
    by_name = {name_of(r): r for r in resources}
    described = desired_state.describe_all(resources, nodes, policies, package_dirs)
    rollouts = [(by_name[entry.name], entry) for entry in described.rollouts]
    blocked = [(by_name[b["name"]], b["reason"]) for b in described.blocked if b["name"] in by_name]
    malformed = {}
    for node in nodes:
        for resource in resources:
            state = node_ops.read_state(node, name_of(resource))
            if "error" in state:
                malformed.setdefault(name_of(node), {})[name_of(resource)] = state["error"]
    return {"rollouts": rollouts, "blocked": blocked, "malformed": malformed}


def _conditions(node):
    return {c.get("type"): c for c in ((node.get("status") or {}).get("conditions") or [])}


def node_notes(node, resource_name, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """Why a node is where it is, for people: blocked reasons, errors, cordon, taint."""
    notes = []
    state = node_ops.read_state(node, resource_name)
    if "error" in state:
        notes.append(state["error"])
    elif state.get("reason") and state.get("status") in (markers.STATUS_ERRORING, markers.STATUS_BLOCKED,
                                                         markers.STATUS_IN_PROGRESS):
        notes.append("%s: %s" % (state.get("step", state.get("status")), str(state["reason"]).splitlines()[0]))
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if annotations.get(markers.ANNOTATION_BLOCKED_BY):
        notes.append("blocked by %s" % annotations[markers.ANNOTATION_BLOCKED_BY])
    conditions = _conditions(node)
    for ctype in (markers.CONDITION_ERRORING, markers.CONDITION_BLOCKED, markers.CONDITION_DRAIN_BLOCKED,
                  markers.CONDITION_DRIFT):
        cond = conditions.get(ctype)
        if cond and cond.get("status") == "True":
            notes.append("%s: %s" % (ctype.split("/", 1)[1], cond.get("message", "")))
    cordon = node_ops.cordon_state(node)
    if cordon != "uncordoned":
        notes.append(cordon.replace("_", " "))
    if gating.has_taint(node, taint_key):
        notes.append("tainted %s" % ", ".join(gating.present_taints(node, taint_key)))
    return notes


def _drains_held(targets, by_name):
    held = {t: drain.drain_blocked_text(by_name[t]) for t in targets}
    return {t: text for t, text in held.items() if text}


def _packages(node, resource_name):
    state = node_ops.read_state(node, resource_name)
    out = []
    for name, entry in sorted((state.get("packages") or {}).items()):
        if isinstance(entry, dict):
            out.append({"name": name, "version": entry.get("version"), "stage": entry.get("stage"),
                        "state": entry.get("state")})
    return out


def build(resources, nodes, policies, package_dirs, taint_key=markers.TAINT_RUNTIME_REQUIRED, only=None):
    """The status as data (what ``nodewright status --json`` prints)."""
    view = fleet_view(resources, nodes, policies, package_dirs)
    by_name = {name_of(n): n for n in nodes}
    ignored = sorted(name_of(n) for n in nodes if is_ignored((n.get("metadata") or {}).get("labels")))
    out = {"resources": [], "blocked": [], "ignored": ignored}
    for resource, described in view["rollouts"]:
        name = described.name
        if only and name != only:
            continue
        waves = described.waves.get("waves") or []
        # A node with a malformed state is left alone until it is fixed or reset.
        next_wave = [n for n in (waves[0]["nodes"] if waves else []) if n not in view["malformed"]]
        rows = []
        for target in described.targets:
            node = by_name[target]
            labels = (node.get("metadata") or {}).get("labels") or {}
            plan = described.node(target)
            rows.append({"node": target, "status": labels.get(markers.status_label(name)) or markers.STATUS_UNKNOWN,
                         "packages": _packages(node, name),
                         "work": {p: a for p, a in sorted(plan.actions.items()) if a != "none"},
                         "next_wave": target in next_wave,
                         "notes": node_notes(node, name, taint_key)})
        status = (resource.get("status") or {}).get("status") or markers.STATUS_UNKNOWN
        if described.paused:
            status = "paused"
        elif described.disabled:
            status = "disabled"
        complete = sum(1 for r in rows if r["status"] == markers.STATUS_COMPLETE)
        out["resources"].append({
            "name": name, "priority": described.priority, "status": status,
            "policy": described.policy_name or "interruptionBudget", "runtime_required":
                described.runtime_required, "complete": complete, "targets": len(rows),
            "work": len(described.work),
            "next_wave": next_wave,
            "waves": [len(w["nodes"]) for w in waves],
            "plan": "%s: %s" % (described.waves.get("status"), described.waves.get("reason", "")),
            # Drains of its nodes that PodDisruptionBudgets hold now, from the nodes' live condition.
            "drain_blocked": _drains_held(described.targets, by_name),
            "nodes": rows})
    for resource, reason in view["blocked"]:
        if only and name_of(resource) != only:
            continue
        out["blocked"].append({"name": name_of(resource), "reason": reason})
    return out


def _packages_text(packages):
    if not packages:
        return "-"
    return ", ".join("%s %s %s/%s" % (p["name"], p["version"], p["stage"], p["state"]) for p in packages)


def render(data):
    """``nodewright status`` for people."""
    lines = []
    for r in data["resources"]:
        lines.append("NodeWright %s  priority %d  status %s  policy %s  complete %d/%d%s" % (
            r["name"], r["priority"], r["status"], r["policy"], r["complete"], r["targets"],
            "  runtimeRequired" if r["runtime_required"] else ""))
        if r["status"] == "paused":
            lines.append("  paused: no node starts until `nodewright resume %s`" % r["name"])
        elif r["status"] == "disabled":
            lines.append("  disabled: skipped until `nodewright enable %s`" % r["name"])
        for node, text in sorted(r["drain_blocked"].items()):
            lines.append("  drain blocked: %s: %s" % (node, text))
        if r["next_wave"]:
            lines.append("  next wave: %s  (waves of %s)" % (", ".join(r["next_wave"]),
                                                             ", ".join(str(n) for n in r["waves"])))
        else:
            lines.append("  next wave: none (%s)" % r["plan"])
        rows = [("NODE", "STATUS", "PACKAGES", "NEXT", "NOTES")]
        for n in r["nodes"]:
            rows.append((n["node"], n["status"], _packages_text(n["packages"]),
                         "yes" if n["next_wave"] else "", "; ".join(n["notes"])))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            lines.append(("  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4]).rstrip())
        lines.append("")
    for b in data["blocked"]:
        lines.append("NodeWright %s  status blocked: %s" % (b["name"], b["reason"]))
    if data["ignored"]:
        lines.append("ignored nodes (%s=true): %s" % (markers.LABEL_IGNORE, ", ".join(data["ignored"])))
    if not data["resources"] and not data["blocked"]:
        lines.append("no NodeWright resources")
    return "\n".join(lines).rstrip() + "\n"
