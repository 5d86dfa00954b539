# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Recovery of one package's record on one node:

    nodewright node update-state NODE --package P --state S [--stage STAGE] [--resource R] [--version V]
                                 [--reason TEXT] [--yes] [--dry-run] [--json]
    nodewright reset NODE --package P [--resource R] [--version V] [--reason TEXT] [--yes] [--dry-run] [--json]

``update-state`` sets what NodeWright records of a package on a node (a stage and a
state: a package fixed by hand marked complete, a stage to be resumed); ``reset
--package`` forgets the package, so that the next rollout applies it from the start,
every step included, and leaves the other packages as they are. Both change the
state the host keeps (through the connection that reaches the node, as ``package
rerun`` does; the host's record is what the next run goes on from) and then the
node's state annotation, status label and Erroring condition.

Guards, each of which leaves everything as it was:

* the package must be one of the resource's packages and recorded on the node (at
  ``--version``, when given); the stage and state must be ones a run can go on from;
* no run may hold the node: neither a live reservation of the fleet's admission
  record (a rollout admitted the node and has not released it) nor the host's run
  lock (a package run, or the step it started, is working there);
* the change is shown first and asked for: ``--yes`` when not at a terminal,
  ``--dry-run`` to see it only.

Each change is traceable: an Event on the node, and a note (who, when, from what to
what, why) in the node state's ``recovery`` list, which later runs keep.
"""

from __future__ import annotations

import getpass
import json
import socket
import sys

from nodewright_cli import triage

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import admission
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package import triage as host_triage

# The key of the node state that keeps the last changes made by hand, and how many.
RECOVERY_KEY = "recovery"
KEEP_NOTES = 10


# --------------------------------------------------------------------------- decisions (pure)

def resource_package(resource_obj, resource, package):
    """Refuse a package that is not one of the resource's."""
    packages = ((resource_obj or {}).get("spec") or {}).get("packages") or {}
    if package not in packages:
        raise NodeWrightError("package %s is not in NodeWright %s" % (package, resource),
                              hint="its packages: %s" % (", ".join(sorted(packages)) or "none"))


def readable_state(node, resource):
    """The state ``resource`` records on ``node``; refused when it cannot be parsed."""
    state = node_state.read_node_state(node, resource)
    if "error" in state:
        raise NodeWrightError(state["error"])
    return state


def where(entry):
    return "%s/%s" % (entry.get("stage"), entry.get("state")) if entry else "not recorded"


def holder_of(node_name, holders, now):
    """The live reservation on ``node_name`` among ``holders`` (the admission record's),
    as words, or None."""
    for holder in holders.values():
        if node_name in holder.nodes and not holder.expired(now):
            return "run %s (holder %s) reserved it for NodeWright %s until %s unless renewed" % (
                holder.run or "?", holder.id, holder.nodes[node_name], admission._iso(holder.expires()))
    return None


def note(action, package, version, before, after, reason, at=None, by=None):
    """One entry of the node state's ``recovery`` list."""
    out = {"at": at or node_ops.now_iso(), "by": by or who(), "action": action, "package": package,
           "version": version, "from": where(before), "to": where(after) if after else "forgotten"}
    if reason:
        out["reason"] = reason
    return out


def notes_with(state, entry):
    kept = [n for n in ((state or {}).get(RECOVERY_KEY) or []) if isinstance(n, dict)]
    return (kept + [entry])[-KEEP_NOTES:]


def who():
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return "%s@%s" % (user, socket.gethostname())


# --------------------------------------------------------------------------- guards on the cluster

def refuse_if_held(cluster, node_name):
    """Refuse while a rollout holds the node (a live reservation in the admission record)."""
    record = admission.ReservationRecord(cluster.api)
    try:
        dummy, holders, now = record.read()
    except NodeWrightError as exc:
        raise NodeWrightError("cannot tell whether a rollout holds node %s: %s" % (node_name, exc),
                              hint="nothing was changed; the admission record %s must be readable" % record.where)
    held = holder_of(node_name, holders, now)
    if held:
        raise NodeWrightError("node %s is held by a running rollout: %s; nothing was changed" % (node_name, held),
                              hint="wait for the rollout to release the node (or pause its resource with "
                                   "`nodewright pause`), then run this again")


def confirm(args, question, stdin=None, out=None):
    """Go on only when asked to: ``--yes``, or ``y`` typed at a terminal."""
    stdin = stdin or sys.stdin
    out = out or (sys.stderr if getattr(args, "json", False) else sys.stdout)
    if args.yes:
        return
    if not stdin.isatty():
        raise NodeWrightError("not confirmed, so nothing was changed",
                              hint="give --yes to confirm when not at a terminal, or --dry-run to see the change "
                                   "only")
    out.write("%s [y/N]: " % question)
    out.flush()
    if stdin.readline().strip().lower() not in ("y", "yes"):
        raise NodeWrightError("aborted: nothing was changed")


# --------------------------------------------------------------------------- the commands

def _prepare(args, cluster):
    node = cluster.node(args.node)
    resource = triage.resource_for(node, args.package, args.resource)
    resource_package(cluster.nodewright(resource), resource, args.package)
    return node, resource, readable_state(node, resource)


def _apply(args, cluster, resource, extravars, status, make_note, event):
    """Change the host's record (through the node's connection), then the node's marks."""
    done = triage.run_on_node(args, args.node, dict(extravars, nodewright_triage_resource=resource,
                                                    nodewright_triage_package=args.package))
    host = done.get("state") or {}
    node = cluster.node(args.node)
    current = readable_state(node, resource)
    after = (host.get("packages") or {}).get(args.package)
    record = make_note(after)
    patch = node_ops.state_patch(node, resource, status=status or host.get("status"),
                                 state={"packages": host.get("packages") or {},
                                        RECOVERY_KEY: notes_with(current, record)})
    cluster.patch_node(args.node, patch)
    condition = node_ops.erroring_condition_patch(node_ops.merged(node, patch))
    if condition:
        cluster.patch_node_status(args.node, condition)
    reason, message = event
    cluster.event(args.node, reason, "%s (by %s%s)" % (message, record["by"],
                                                       ": " + record["reason"] if record.get("reason") else ""))
    return after, patch


def _result(args, resource, version, before, after, changed, status=None):
    return {"node": args.node, "resource": resource, "package": args.package, "version": version,
            "before": {k: (before or {}).get(k) for k in ("stage", "state")} if before else None,
            "after": {k: after.get(k) for k in ("stage", "state")} if after else None,
            "status": status, "changed": changed, "dry_run": bool(args.dry_run)}


def cmd_update_state(args, cluster, out=sys.stdout, stdin=None):
    node, resource, state = _prepare(args, cluster)
    planned = host_triage.set_package_state(state, args.package, args.stage, args.state, args.version)
    before = node_state.package_entries(state)[args.package]
    after = planned["packages"][args.package]
    version = before.get("version")
    what = "node %s, NodeWright %s, package %s %s" % (args.node, resource, args.package, version)
    if where(before) == where(after):
        out.write(json.dumps(_result(args, resource, version, before, after, False), indent=2, sort_keys=True)
                  + "\n" if args.json else "%s is already %s: nothing to change\n" % (what, where(after)))
        return 0
    refuse_if_held(cluster, args.node)
    status_before = (state.get("status") or markers.STATUS_UNKNOWN)
    if not args.json:
        out.write("%s:\n  stage %s -> %s\n  state %s -> %s\n  status of the node for %s: %s -> %s\n" % (
            what, before.get("stage"), after.get("stage"), before.get("state"), after.get("state"), resource,
            status_before, planned["status"]))
    if args.dry_run:
        out.write(json.dumps(_result(args, resource, version, before, after, False, planned["status"]), indent=2,
                             sort_keys=True) + "\n" if args.json else "dry run: nothing was changed\n")
        return 0
    confirm(args, "Set %s of %s on %s to %s?" % (args.package, resource, args.node, where(after)), stdin=stdin)
    extravars = {"nodewright_triage_phase": "update-state", "nodewright_triage_state": args.state}
    if args.stage:
        extravars["nodewright_triage_stage"] = args.stage
    if args.version:
        extravars["nodewright_triage_version"] = args.version
    done, patch = _apply(args, cluster, resource, extravars, None,
                         lambda done: note("update-state", args.package, version, before, done, args.reason),
                         (markers.EVENT_STATE_UPDATED, "package %s %s of NodeWright %s set by hand from %s to %s"
                          % (args.package, version, resource, where(before), where(after))))
    status = patch["metadata"].get("labels", {}).get(markers.status_label(resource))
    if args.json:
        out.write(json.dumps(_result(args, resource, version, before, done, True, status), indent=2,
                             sort_keys=True) + "\n")
    else:
        out.write("node %s: package %s of %s set to %s (was %s); the node is %s for %s; Event %s and a note in "
                  "the node state record it\n" % (args.node, args.package, resource, where(done), where(before),
                                                  status, resource, markers.EVENT_STATE_UPDATED))
    return 0


def cmd_reset_package(args, cluster, out=sys.stdout, stdin=None):
    node, resource, state = _prepare(args, cluster)
    entries = node_state.package_entries(state)
    before = entries.get(args.package)
    if before is None:
        message = "node %s has no record of package %s of NodeWright %s: nothing to reset" % (
            args.node, args.package, resource)
        out.write(json.dumps(_result(args, resource, None, None, None, False), indent=2, sort_keys=True) + "\n"
                  if args.json else message + "\n")
        return 0
    host_triage.forget_package(state, args.package, args.version)  # refuses another version
    version = before.get("version")
    refuse_if_held(cluster, args.node)
    others = sorted(n for n in entries if n != args.package)
    if not args.json:
        out.write("node %s, NodeWright %s: forget package %s %s (now %s); the next rollout applies it from the "
                  "start, every step included\n  kept as they are: %s\n" % (
                      args.node, resource, args.package, version, where(before),
                      ", ".join("%s %s" % (n, where(entries[n])) for n in others) or "no other package"))
    if args.dry_run:
        out.write(json.dumps(_result(args, resource, version, before, None, False), indent=2, sort_keys=True)
                  + "\n" if args.json else "dry run: nothing was changed\n")
        return 0
    confirm(args, "Forget %s of %s on %s?" % (args.package, resource, args.node), stdin=stdin)
    extravars = {"nodewright_triage_phase": "reset"}
    if args.version:
        extravars["nodewright_triage_version"] = args.version
    # The node has work again, as after `package rerun`: in progress until a run redoes it.
    _apply(args, cluster, resource, extravars, markers.STATUS_IN_PROGRESS,
           lambda done: note("reset", args.package, version, before, None, args.reason),
           (markers.EVENT_PACKAGE_RESET, "package %s %s of NodeWright %s forgotten by hand (was %s); the next "
            "rollout applies it from the start" % (args.package, version, resource, where(before))))
    if args.json:
        out.write(json.dumps(_result(args, resource, version, before, None, True, markers.STATUS_IN_PROGRESS),
                             indent=2, sort_keys=True) + "\n")
    else:
        out.write("node %s: package %s of %s forgotten (was %s); the next rollout applies it from the start; Event "
                  "%s and a note in the node state record it\n"
                  % (args.node, args.package, resource, where(before), markers.EVENT_PACKAGE_RESET))
    return 0


# --------------------------------------------------------------------------- parsers

def add_common(parser, env, resource_help="the NodeWright resource (default: the one that records the package)"):
    parser.add_argument("--resource", help=resource_help)
    parser.add_argument("--version", help="refuse unless the node records this version of the package")
    parser.add_argument("--reason", help="why, for the record (the Event and the node state's note)")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do it without asking (needed when not at a terminal)")
    parser.add_argument("--dry-run", action="store_true", help="show the change, make none")
    parser.add_argument("--json", action="store_true")
    triage._connection_args(parser, env)


def add_update_state_parser(nsub, env):
    us = nsub.add_parser("update-state", help="set a package's recorded stage and state on a node (recovery)")
    us.add_argument("node")
    us.add_argument("--package", required=True)
    us.add_argument("--state", required=True, choices=list(host_triage.SETTABLE_STATES))
    us.add_argument("--stage", choices=list(host_triage.SETTABLE_STAGES),
                    help="the stage to set (default: the one recorded)")
    add_common(us, env)
    return us
