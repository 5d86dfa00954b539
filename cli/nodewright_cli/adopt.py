# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright adopt``: take over a fleet from upstream NodeWright (NVIDIA's operator,
formerly Skyhook) without redoing what it finished.

For every node and every upstream resource that left state on it
(``node/upstream.py`` reads it), the packages upstream completed are recorded
complete in NodeWright's own node state for the NodeWright resource of the same
name (``nodewright.io/state-<resource>``, each entry marked ``adoptedFrom``); the
first rollout then applies only the rest. What upstream did not finish is left out
and applied from the start. A cordon upstream holds becomes NodeWright's (it lifts it
when the node's work is done); an upstream runtime-required taint gates the node as
NodeWright's own does, and comes off here when every runtimeRequired resource is
complete on the node. Upstream's own marks are never changed (a rollback to the
operator finds them as it left them).

``plan`` is pure (nodes and resources in, per-node decisions and patches out); the
command writes the patches, or with ``--dry-run`` prints the same plan and writes
nothing. Exit status: 0 when everything found was adopted or is to be applied again,
2 when some upstream state could not be adopted (no NodeWright resource of that
name, an annotation that cannot be read), 1 on errors.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from nodewright_cli import collection  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import validate_nodewright
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.node import upstream
from ansible_collections.nodewright.fleet.plugins.module_utils.package import planner

EXIT_NOT_ADOPTED = 2


def desired_of(resources, package_dirs):
    """Per NodeWright resource name, ``{"packages": {name: {version, has_interrupt,
    configHashes, dependsOn}}}``, or ``{"error": why}`` when it cannot be read."""
    out = {}
    cache = {}
    for resource in resources:
        name = name_of(resource, None)
        try:
            valid = validate_nodewright(resource)
            specs = desired_state.package_specs(valid, package_dirs, cache)
            desired = desired_state.desired_packages(specs, cache)
        except NodeWrightError as exc:
            out[name] = {"error": str(exc).splitlines()[0]}
            continue
        raw = valid["spec"].get("packages") or {}
        packages = {}
        for n, d in enumerate(desired):
            d = dict(d, configHashes=planner.normalize_desired(d, n)["configHashes"])
            if d["state"] != "present":
                continue
            has_interrupt = (raw.get(d["name"]) or {}).get("interrupt") is not None or \
                not planner.is_noop(d.get("interrupt"))
            packages[d["name"]] = {"version": d["version"], "has_interrupt": has_interrupt,
                                   "configHashes": d.get("configHashes"), "dependsOn": d.get("dependsOn") or {},
                                   "desired": d}
        out[name] = {"packages": packages}
    return out


def _adopted_entry(entry, wanted, key, boot_id, now):
    same = upstream.same_version(entry["version"], wanted["version"])
    out = planner.state_entry(entry["name"], entry["version"], "config", planner.STATE_COMPLETE,
                              config_hashes=wanted.get("configHashes") if same else None,
                              depends_on=wanted.get("dependsOn"), boot_id=boot_id or None, updated=now)
    out["adoptedFrom"] = key
    if entry.get("image"):
        out["upstreamImage"] = entry["image"]
    return out


def _cordon(node, holders, decisions, annotations, patch, now):
    """What becomes of a cordon upstream holds (``holders``: ``(resource, annotation)``):
    released when every holder is complete now (upstream uncordons a node whose work is
    complete), else taken over as NodeWright's own, which it lifts when the node's work
    is done. A runtimeRequiredCordonAfter cordon is left as it is. Fills ``annotations``
    and ``patch``; returns the report, or None."""
    spec = node.get("spec") or {}
    runtime_cordon = upstream.runtime_cordon(node)
    out = None
    if holders:
        keys = ", ".join(k for _r, k in holders)
        complete = {d["resource"] for d in decisions if d.get("complete")}
        if not spec.get("unschedulable"):
            out = {"action": "none", "message": "upstream's cordon annotation (%s) is there but the node is not "
                                                "cordoned: nothing to take over" % keys}
        elif node_ops.cordon_record(node) is not None:
            out = {"action": "none", "message": "cordoned, and NodeWright already records the cordon as its own"}
        elif all(r in complete for r, _k in holders) and not runtime_cordon:
            patch["spec"] = {"unschedulable": None}
            out = {"action": "uncordon", "message": "cordon held by upstream (%s) released: its work on the node "
                                                    "is complete (upstream uncordons a complete node)" % keys}
        else:
            record = {"owner": node_ops.OWNER, "at": now, "by": socket.gethostname(),
                      "reason": "taken over from upstream NodeWright (%s)" % keys}
            if len(holders) == 1:
                record["resource"] = holders[0][0]
            annotations[markers.ANNOTATION_CORDONED_BY] = json.dumps(record, sort_keys=True)
            out = {"action": "adopt", "message": "cordon held by upstream (%s) taken over: NodeWright uncordons the "
                                                 "node when its work there is done" % keys}
    if runtime_cordon and spec.get("unschedulable"):
        out = dict(out or {"action": "none", "message": "cordoned by upstream's runtimeRequiredCordonAfter"},
                   runtime="upstream's runtimeRequiredCordonAfter cordon (%s) is left as it is: NodeWright never "
                           "lifts it; uncordon the node when it may take work" % runtime_cordon)
    return out


def plan_node(node, desired, resources, only=None, taint_key=markers.TAINT_RUNTIME_REQUIRED, now=None):
    """What adopting ``node`` means: ``{node, resources: [decision...], patch,
    cordon, taint, changed}``. ``desired`` is ``desired_of``'s result, ``resources``
    the NodeWright objects (for the runtime-required gate)."""
    now = now or node_ops.now_iso()
    name = name_of(node, None)
    out = {"node": name, "resources": [], "patch": None, "cordon": None, "taint": None, "changed": False}
    annotations, labels = {}, {}
    after = node
    cordon_holders = []
    for resource in upstream.resources_on(node):
        if only and resource != only:
            continue
        wanted = desired.get(resource)
        recorded = node_state.read_node_state(node, resource)
        mine_error = recorded.get("error")
        decision = upstream.decide(node, resource, (wanted or {}).get("packages"),
                                   node_state.package_entries(recorded) if not mine_error else {})
        decision["written"] = False
        if wanted is None:
            decision["missing"] = ("no NodeWright resource %s: nothing adopted (convert and apply upstream's %s "
                                   "first)" % (resource, resource))
        elif wanted.get("error"):
            decision["missing"] = "NodeWright resource %s cannot be read: %s" % (resource, wanted["error"])
        elif mine_error:
            decision["missing"] = "NodeWright's own state for %s cannot be read: %s" % (resource, mine_error)
        out["resources"].append(decision)
        decision["complete"] = False
        if decision["cordon_key"]:
            cordon_holders.append((resource, decision["cordon_key"]))
        if decision.get("missing") or decision["error"]:
            continue
        packages = dict(node_state.package_entries(recorded))
        boot_id = node_state.boot_id(node)
        for entry in decision["adopt"]:
            packages[entry["name"]] = _adopted_entry(entry, wanted["packages"][entry["name"]], decision["key"],
                                                     boot_id, now)
        desired_list = [w["desired"] for w in wanted["packages"].values()]
        result = planner.plan(desired_list, {"packages": packages}, boot_id=boot_id or None)
        decision["complete"] = not result["changed"]
        decision["left"] = [{"name": p["name"], "action": p["action"], "reason": p["reason"]}
                            for p in result["packages"] if p["action"] in planner.WORKING_ACTIONS]
        if decision["adopt"]:
            state = dict(recorded)
            state["packages"] = packages
            state["adopted"] = {"from": decision["key"], "at": now,
                                "operatorVersion": decision["operator_version"] or ""}
            if decision["complete"]:
                state["status"] = markers.STATUS_COMPLETE
            state["updated"] = now
            annotations[markers.state_annotation(resource)] = json.dumps(state, sort_keys=True)
            decision["written"] = True
        node_labels = (node.get("metadata") or {}).get("labels") or {}
        if decision["adopt"] and decision["complete"] and \
                node_labels.get(markers.status_label(resource)) != markers.STATUS_COMPLETE:
            labels[markers.status_label(resource)] = markers.STATUS_COMPLETE
            current = dict(node_labels, **labels)
            labels[markers.LABEL_STATUS] = node_ops.aggregate_status(
                [v for k, v in current.items() if k.startswith(markers.LABEL_STATUS + "-")])
    patch = {}
    out["cordon"] = _cordon(node, cordon_holders, out["resources"], annotations, patch, now)
    meta = {}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    if meta:
        patch["metadata"] = meta
    if patch:
        after = node_ops.merged(node, patch)
    out["patch"] = patch or None
    out["changed"] = bool(patch)
    taints = upstream.runtime_taints(node)
    if taints or gating.has_taint(node, taint_key):
        decision = gating.decide(after, resources, taint_key)
        out["taint"] = {"taints": taints, "action": decision["action"], "message": decision["message"]}
        if decision["action"] == gating.OPEN:
            out["changed"] = True
    return out


def plan(nodes, resources, package_dirs, only=None, node_names=None, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """The whole adoption: ``{nodes: [plan_node...], summary}`` for the nodes that carry
    upstream state (or an upstream runtime-required taint)."""
    desired = desired_of(resources, package_dirs)
    out = []
    for node in sorted(nodes, key=lambda n: name_of(n, "")):
        if node_names and name_of(node, None) not in node_names:
            continue
        if not upstream.resources_on(node) and not upstream.runtime_taints(node):
            continue
        out.append(plan_node(node, desired, resources, only=only, taint_key=taint_key))
    return {"nodes": out, "summary": summary(out)}


def summary(planned):
    count = {"nodes": len(planned), "adopted": 0, "already": 0, "redo": 0, "skipped": 0, "problems": 0,
             "changed_nodes": 0}
    for p in planned:
        count["changed_nodes"] += 1 if p["changed"] else 0
        for d in p["resources"]:
            count["adopted"] += len(d["adopt"]) if not d.get("missing") else 0
            count["already"] += len(d["already"])
            count["redo"] += len(d["redo"]) if not d.get("missing") else 0
            count["skipped"] += len(d["skipped"])
            count["problems"] += len(d["problems"]) + (1 if d["error"] else 0) + (1 if d.get("missing") else 0)
    return count


def carry_out(cluster, planned, resources, taint_key):
    """Write each node's patch, then open its runtime-required gate when it is ready."""
    for p in planned["nodes"]:
        if p["patch"]:
            cluster.patch_node(p["node"], p["patch"])
            adopted = sorted("%s/%s %s" % (d["resource"], e["name"], e["version"])
                             for d in p["resources"] if not d.get("missing") for e in d["adopt"])
            if adopted:
                cluster.event(p["node"], markers.EVENT_ADOPTED, "adopted from upstream NodeWright: %s"
                              % ", ".join(adopted)[:900])
        if p["taint"] and p["taint"]["action"] == gating.OPEN:
            done = gating.enforce(cluster.core, p["node"], resources, taint_key)
            p["taint"]["message"] = done["msg"]


def _pkgs(items, with_why=False):
    return ", ".join("%s %s%s" % (e["name"], e["version"], (" (%s)" % e["why"]) if with_why else "")
                     for e in items)


def render(planned, dry_run):
    would = "would be " if dry_run else ""
    lines = []
    for p in planned["nodes"]:
        lines.append("node %s:" % p["node"])
        for d in p["resources"]:
            where = d["key"] or "no node state"
            extra = [x for x in ("operator %s" % d["operator_version"] if d["operator_version"] else "",
                                 "status %s" % d["status"] if d["status"] else "") if x]
            lines.append("  upstream resource %s (%s%s)" % (d["resource"], where,
                                                            ", " + ", ".join(extra) if extra else ""))
            if d["error"]:
                lines.append("    malformed: %s; nothing adopted for %s: fix or remove the annotation"
                             % (d["error"], d["resource"]))
            if d.get("missing"):
                lines.append("    not adopted: %s" % d["missing"])
            else:
                if d["adopt"]:
                    lines.append("    %sadopted as complete: %s" % (would, _pkgs(d["adopt"])))
                if d["already"]:
                    lines.append("    already recorded by NodeWright: %s" % _pkgs(d["already"]))
                for r in d["redo"]:
                    lines.append("    not adopted, %sapplied again by the next rollout: %s %s (%s)"
                                 % ("to be ", r["name"], r["version"], r["why"]))
                if d.get("complete"):
                    lines.append("    complete: the next rollout has nothing to do on this node for %s"
                                 % d["resource"])
                elif d.get("left"):
                    lines.append("    the next rollout: %s" % "; ".join(
                        "%s %s (%s)" % (x["name"], x["action"], x["reason"]) for x in d["left"]))
            for s in d["skipped"]:
                lines.append("    ignored: %s %s (%s)" % (s["name"], s["version"], s["why"]))
            for problem in d["problems"]:
                lines.append("    malformed entry, not adopted: %s" % problem)
        if p["cordon"]:
            lines.append("  cordon: %s" % p["cordon"]["message"])
            if p["cordon"].get("runtime"):
                lines.append("  cordon: %s" % p["cordon"]["runtime"])
        if p["taint"]:
            lines.append("  taint %s: %s" % (", ".join(p["taint"]["taints"]) or "(none)", p["taint"]["message"]))
        if not p["changed"]:
            lines.append("  nothing to change on this node")
    s = planned["summary"]
    if not planned["nodes"]:
        lines.append("no node carries upstream NodeWright state: nothing to adopt")
    elif not s["changed_nodes"]:
        lines.append("nothing to adopt: everything upstream completed is already recorded (%d node(s), %d package(s))"
                     % (s["nodes"], s["already"]))
    else:
        lines.append("%s %d package(s); %d node(s) %schanged; %d to be applied again by the next rollout; %d ignored; "
                     "%d problem(s)" % ("would adopt" if dry_run else "adopted", s["adopted"], s["changed_nodes"],
                                        "would be " if dry_run else "", s["redo"], s["skipped"], s["problems"]))
    if dry_run:
        lines.append("dry run: nothing was changed")
    return "\n".join(lines) + "\n"


def register(sub, env, cluster_of):
    """Add ``adopt`` to the ``nodewright`` subparsers; return its command function by name."""
    ad = sub.add_parser("adopt", help="take over nodes from upstream NodeWright (formerly Skyhook): record what it "
                                      "completed so that nothing is applied again")
    ad.add_argument("--resource", help="only the upstream resource of this name")
    ad.add_argument("--node", dest="nodes", action="append", default=[], help="only this node (repeatable)")
    ad.add_argument("--dry-run", action="store_true", help="print what would be adopted, change nothing")
    ad.add_argument("--json", action="store_true")
    ad.add_argument("--package-dir", action="append", default=[], help="more package directories (repeatable)")
    ad.add_argument("--taint-key", default=env("NODEWRIGHT_TAINT_KEY", markers.TAINT_RUNTIME_REQUIRED))

    def run(args):
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
        for node in args.nodes:
            names.node_name(node, "--node")
        cluster = cluster_of(args)
        resources = cluster.nodewrights()
        dirs = [os.path.abspath(d) for d in args.package_dir] + collection.shipped_package_dirs()
        planned = plan(cluster.nodes(), resources, dirs, only=args.resource, node_names=set(args.nodes),
                       taint_key=args.taint_key)
        if not args.dry_run:
            carry_out(cluster, planned, resources, args.taint_key)
        if args.json:
            sys.stdout.write(json.dumps(planned, indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(render(planned, args.dry_run))
        return EXIT_NOT_ADOPTED if planned["summary"]["problems"] else 0

    return {"adopt": run}
