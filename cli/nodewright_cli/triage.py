# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Triage from the command line:

    nodewright node list [--resource R] [--json]
    nodewright node status NODE [--json]
    nodewright node update-state NODE --package P --state S ...   (recovery.py)
    nodewright package logs NODE PACKAGE [--resource R] [--stage S] [--all] [-f]
    nodewright package rerun NODE PACKAGE --stage S [--resource R]
    nodewright version

``node`` reads what the nodes carry (the per-resource state annotations: each
package's version, stage and state, the result and exit code of each check, the
last error; the cordon, taint and conditions). ``package`` reaches the node itself
through the connection the inventory gives (``--connection local|ssh|k8s``: the
simulator's host roots, SSH, NodeWright's node pod), with the
``nodewright.fleet.package`` module's ``logs`` and ``rerun`` phases. A rerun marks
the stage on the host and on the node's annotation; the next rollout (the
reconciler's) runs it through the safe sequence - nothing runs on the node outside
it. ``register`` adds the commands to the ``nodewright`` parser.
"""

from __future__ import annotations

import json
import os
import sys
import time

from nodewright_cli import collection, runner

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import RERUN_STAGES
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of

TRIAGE_TASK = "Read or mark the package on the node"
FOLLOW_INTERVAL = 2.0


# --------------------------------------------------------------------------- nodes

def node_detail(node, taint_key=markers.TAINT_RUNTIME_REQUIRED):
    """Everything NodeWright keeps on a node, per resource: status, step, last error,
    and each package with its stage, state and check results."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    resources = {}
    for key in sorted(labels):
        if key.startswith(markers.LABEL_STATUS + "-"):
            resources.setdefault(key[len(markers.LABEL_STATUS) + 1:], {})["status"] = labels[key]
    for resource, read in node_state.states_by_resource(meta.get("annotations") or {}).items():
        entry = resources.setdefault(resource, {})
        if "error" in read:
            entry["error"] = read["error"]
            continue
        state = read["state"]
        entry.setdefault("status", state.get("status") or markers.STATUS_UNKNOWN)
        entry["step"] = state.get("step")
        if state.get("reason"):
            entry["last_error"] = str(state["reason"])
        notes = [n for n in state.get("recovery") or () if isinstance(n, dict)]
        if notes:
            entry["recovery"] = notes
        packages = []
        for name, pkg in sorted(node_state.package_entries(state).items()):
            packages.append({"name": name, "version": pkg.get("version"), "stage": pkg.get("stage"),
                             "state": pkg.get("state"), "checks": pkg.get("checks") or {},
                             "updated": pkg.get("updated"), "rerun": pkg.get("rerun")})
        entry["packages"] = packages
    conditions = {c.get("type"): c for c in ((node.get("status") or {}).get("conditions") or [])}
    notes = {ctype.split("/", 1)[1]: conditions[ctype].get("message", "")
             for ctype in (markers.CONDITION_ERRORING, markers.CONDITION_BLOCKED, markers.CONDITION_DRIFT)
             if (conditions.get(ctype) or {}).get("status") == "True"}
    return {"node": name_of(node), "status": labels.get(markers.LABEL_STATUS) or markers.STATUS_UNKNOWN,
            "cordon": node_ops.cordon_state(node), "tainted": gating.has_taint(node, taint_key),
            "ready": node_ops.is_ready(node), "boot_id": node_state.boot_id(node), "conditions": notes,
            "blocked_by": (meta.get("annotations") or {}).get(markers.ANNOTATION_BLOCKED_BY),
            "resources": resources}


def node_rows(nodes, resource=None):
    """One row per node NodeWright has marks on (of ``resource`` only, when given)."""
    rows = []
    for node in sorted(nodes, key=name_of):
        detail = node_detail(node)
        if resource:
            detail["resources"] = {k: v for k, v in detail["resources"].items() if k == resource}
        if not detail["resources"]:
            continue
        rows.append(detail)
    return rows


def _check_text(checks):
    parts = []
    for stage, check in sorted((checks or {}).items()):
        result = check.get("result")
        code = check.get("exitCode")
        parts.append("%s %s%s" % (stage, result, (" (exit %s)" % code) if code not in (None, 0) else ""))
    return ", ".join(parts)


def render_rows(rows):
    if not rows:
        return "no node carries NodeWright's marks\n"
    lines = ["%-24s %-12s %-22s %s" % ("NODE", "STATUS", "CORDON", "RESOURCES")]
    for row in rows:
        resources = ", ".join("%s:%s" % (r, e.get("status", "?") if "error" not in e else "malformed")
                              for r, e in sorted(row["resources"].items()))
        lines.append("%-24s %-12s %-22s %s" % (row["node"], row["status"], row["cordon"].replace("_", " "),
                                               resources))
        for resource, entry in sorted(row["resources"].items()):
            why = entry.get("error") or (entry.get("last_error") if entry.get("status") != "complete" else None)
            if why:
                lines.append("%-24s   %s: %s" % ("", resource, why.splitlines()[0][:160]))
    return "\n".join(lines) + "\n"


def render_detail(detail):
    lines = ["node %s: %s%s, %s%s" % (detail["node"], detail["status"], "" if detail["ready"] else " (NotReady)",
                                      detail["cordon"].replace("_", " "),
                                      ", tainted runtime-required" if detail["tainted"] else "")]
    if detail["blocked_by"]:
        lines.append("  blocked by %s" % detail["blocked_by"])
    for ctype, message in sorted(detail["conditions"].items()):
        lines.append("  %s: %s" % (ctype, message.splitlines()[0][:200] if message else ""))
    for resource, entry in sorted(detail["resources"].items()):
        if "error" in entry:
            lines.append("  resource %s: %s" % (resource, entry["error"]))
            continue
        lines.append("  resource %s: %s%s" % (resource, entry.get("status"),
                                              (" at %s" % entry["step"]) if entry.get("step") else ""))
        if entry.get("last_error"):
            lines.append("    last error: %s" % entry["last_error"].splitlines()[0][:300])
        for n in (entry.get("recovery") or ())[-3:]:
            lines.append("    changed by hand %s by %s: %s %s %s -> %s%s" % (
                n.get("at"), n.get("by"), n.get("action"), n.get("package"), n.get("from"), n.get("to"),
                (" (%s)" % n["reason"]) if n.get("reason") else ""))
        for pkg in entry.get("packages") or ():
            lines.append("    %s %s: %s/%s%s" % (pkg["name"], pkg["version"], pkg["stage"], pkg["state"],
                                                 (" (rerun of %s asked)" % pkg["rerun"]) if pkg.get("rerun") else ""))
            if pkg["checks"]:
                lines.append("      checks: %s" % _check_text(pkg["checks"]))
    if not detail["resources"]:
        lines.append("  no NodeWright resource has marks on this node")
    return "\n".join(lines) + "\n"


def resource_for(node, package, resource=None):
    """The resource whose state on ``node`` records ``package`` (``resource`` when
    given): one, or an error that lists them."""
    found = []
    for name, read in node_state.states_by_resource((node.get("metadata") or {}).get("annotations") or {}).items():
        if resource and name != resource:
            continue
        if "error" in read:
            if resource:
                raise NodeWrightError(read["error"])
            continue
        if package in node_state.package_entries(read["state"]):
            found.append(name)
    if resource:
        return resource  # the host may know more than the annotation
    if len(found) == 1:
        return found[0]
    if not found:
        raise NodeWrightError("no NodeWright resource records package %s on node %s" % (package, name_of(node)),
                              hint="list what the node has with `nodewright node status %s`" % name_of(node))
    raise NodeWrightError("package %s is recorded by several resources on node %s: %s"
                          % (package, name_of(node), ", ".join(sorted(found))), hint="give --resource")


# --------------------------------------------------------------------------- on the node

def run_on_node(args, node, extravars):
    """Run the triage playbook on ``node``; the module's result (raises when it failed)."""
    workdir = os.path.abspath(args.workdir) if args.workdir else \
        os.path.join(os.environ.get("HOME", "/tmp"), ".nodewright", "triage")
    inventory = os.path.abspath(args.inventory) if args.inventory else runner.default_inventory(workdir,
                                                                                                args.connection)
    env = {}
    if args.kubeconfig:
        env["K8S_AUTH_KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    if args.context:
        env["K8S_AUTH_CONTEXT"] = args.context
    result = runner.run_playbook(collection.own_playbook("triage.yml"), "triage", inventory, workdir,
                                 extravars=extravars, limit=node, envvars=env,
                                 keep_events=lambda e: (e.get("event_data") or {}).get("task") == TRIAGE_TASK
                                 and e.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"))
    for event in result.events:
        res = (event.get("event_data") or {}).get("res") or {}
        if event.get("event") != "runner_on_ok":
            raise NodeWrightError("on node %s: %s" % (node, res.get("msg", "the task failed")))
        return res
    why = "; ".join("%s: %s" % (h, t) for h, t in sorted(result.messages.items())) or result.status
    raise NodeWrightError("node %s could not be reached: %s" % (node, why),
                          hint="is %s in the inventory (--inventory, --connection)? the run's output is in %s"
                               % (node, result.artifacts))


def _print_logs(found, shown, out):
    for log in found["logs"]:
        if log["offset"] == 0 and log["path"] not in shown:
            out.write("==> %s %s (%s%s) <==\n" % (log["stage"], log["step"], log["path"],
                                                  ", running" if log["live"] else ""))
        if log["text"]:
            out.write(log["text"] if log["text"].endswith("\n") else log["text"] + "\n")
        shown[log["path"]] = log["size"]


def cmd_package_logs(args, cluster, out=sys.stdout):
    node = cluster.node(args.node)
    resource = resource_for(node, args.package, args.resource)
    extravars = {"nodewright_triage_phase": "logs", "nodewright_triage_resource": resource,
                 "nodewright_triage_package": args.package, "nodewright_triage_all": bool(args.all)}
    if args.stage:
        extravars["nodewright_triage_stage"] = args.stage
    shown = {}
    found = run_on_node(args, args.node, extravars)
    if not found.get("logs"):
        out.write("no logs of %s on node %s (resource %s)%s\n" % (
            args.package, args.node, resource, (" for stage %s" % args.stage) if args.stage else ""))
    _print_logs(found, shown, out)
    while args.follow and found.get("running"):
        time.sleep(FOLLOW_INTERVAL)
        found = run_on_node(args, args.node, dict(extravars, nodewright_triage_offsets=shown))
        _print_logs(found, shown, out)
    if args.follow:
        out.write("-- no step of %s is running on %s --\n" % (args.package, args.node))
    return 0


def cmd_package_rerun(args, cluster, out=sys.stdout):
    node = cluster.node(args.node)
    resource = resource_for(node, args.package, args.resource)
    node_state.refuse_to_overwrite(node, resource)
    done = run_on_node(args, args.node, {"nodewright_triage_phase": "rerun", "nodewright_triage_resource": resource,
                                         "nodewright_triage_package": args.package,
                                         "nodewright_triage_stage": args.stage})
    state = done.get("state") or {}
    patch = node_ops.state_patch(cluster.node(args.node), resource, status=markers.STATUS_IN_PROGRESS,
                                 state={"packages": state.get("packages") or {}})
    cluster.patch_node(args.node, patch)
    out.write("node %s: %s of %s marked to run again (finished steps included); the next rollout of %s runs it "
              "through the safe sequence\n" % (args.node, args.stage, args.package, resource))
    return 0


def cmd_node(args, cluster, out=sys.stdout):
    if args.node_command == "update-state":
        from nodewright_cli import recovery
        return recovery.cmd_update_state(args, cluster, out)
    if args.node_command == "list":
        rows = node_rows(cluster.nodes(), args.resource)
        out.write(json.dumps(rows, indent=2, sort_keys=True) + "\n" if args.json else render_rows(rows))
        return 0
    detail = node_detail(cluster.node(args.node))
    out.write(json.dumps(detail, indent=2, sort_keys=True) + "\n" if args.json else render_detail(detail))
    return 0


def versions():
    from importlib import metadata
    import yaml
    with open(os.path.join(collection.FLEET_DIR, "galaxy.yml")) as fh:
        galaxy = yaml.safe_load(fh) or {}

    def of(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {"nodewright-cli": of("nodewright-cli"), "collection": "%s.%s %s" % (
        galaxy.get("namespace"), galaxy.get("name"), galaxy.get("version")), "collection_path": collection.FLEET_DIR,
        "ansible-core": of("ansible-core"), "api": "%s/%s" % (markers.API_GROUP, markers.API_VERSION)}


def cmd_version(args, out=sys.stdout):
    found = versions()
    if args.json:
        out.write(json.dumps(found, indent=2, sort_keys=True) + "\n")
    else:
        out.write("nodewright %s (collection %s at %s; ansible-core %s; resources %s)\n" % (
            found["nodewright-cli"], found["collection"], found["collection_path"], found["ansible-core"],
            found["api"]))
    return 0


# --------------------------------------------------------------------------- parser

def _connection_args(parser, env):
    parser.add_argument("--inventory", help="inventory (default: a k8s_nodes inventory of every node through "
                                            "--connection)")
    parser.add_argument("--connection", default=env("NODEWRIGHT_CONNECTION", "k8s"),
                        choices=["k8s", "kubernetes", "ssh", "local"], help="how the default inventory reaches nodes")
    parser.add_argument("--workdir", help="ansible-runner private data (default: ~/.nodewright/triage)")


def register(sub, env, cluster_of):
    """Add ``node``, ``package`` and ``version`` to the ``nodewright`` subparsers;
    return their command functions by name."""
    nd = sub.add_parser("node", help="what NodeWright keeps on nodes: per package state, checks, the last error")
    nsub = nd.add_subparsers(dest="node_command", required=True)
    ls = nsub.add_parser("list", help="nodes with NodeWright's marks")
    ls.add_argument("--resource", help="only this NodeWright resource")
    ls.add_argument("--json", action="store_true")
    st = nsub.add_parser("status", help="one node in detail")
    st.add_argument("node")
    st.add_argument("--json", action="store_true")
    from nodewright_cli import recovery
    recovery.add_update_state_parser(nsub, env)

    pk = sub.add_parser("package", help="a package on one node: its logs, or a stage to run again")
    psub = pk.add_subparsers(dest="package_command", required=True)
    lg = psub.add_parser("logs", help="the step logs of a package on a node")
    lg.add_argument("node")
    lg.add_argument("package")
    lg.add_argument("--resource", help="the NodeWright resource (default: the one that records the package)")
    lg.add_argument("--stage", help="only this stage (apply, apply-check, config, ...)")
    lg.add_argument("--all", action="store_true", help="every kept run of each step, not only the latest")
    lg.add_argument("-f", "--follow", action="store_true", help="follow the step running now until it ends")
    _connection_args(lg, env)
    rr = psub.add_parser("rerun", help="run a stage of a package again at the next rollout")
    rr.add_argument("node")
    rr.add_argument("package")
    rr.add_argument("--stage", required=True, choices=sorted(RERUN_STAGES))
    rr.add_argument("--resource", help="the NodeWright resource (default: the one that records the package)")
    _connection_args(rr, env)

    vr = sub.add_parser("version", help="versions of the command, the collection and ansible-core")
    vr.add_argument("--json", action="store_true")

    def package(args):
        cluster = cluster_of(args)
        if args.package_command == "logs":
            return cmd_package_logs(args, cluster)
        return cmd_package_rerun(args, cluster)

    return {"node": lambda args: cmd_node(args, cluster_of(args)), "package": package, "version": cmd_version}
