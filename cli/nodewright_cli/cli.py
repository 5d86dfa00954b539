# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The ``nodewright`` command.

    nodewright reconcile [--once] [--metrics-port 9108] [--inventory FILE] ...
    nodewright status [--resource NAME] [--json]
    nodewright drift [--reapply]
    nodewright pause|resume|disable|enable NAME
    nodewright ignore NODE [--undo]
    nodewright reset NODE [--resource NAME] | reset NODE --package P [--yes] [--dry-run]
    nodewright reset-batches NAME
    nodewright rollout PLAYBOOK -i INVENTORY (--policy FILE | --policy-name NAME) [--admission] ...
    nodewright rollout --resources -i INVENTORY [--resource NAME]   (rollout.yml without the strategy plugin)
    nodewright report [FILE] [--open | --print] [--no-cluster]
    nodewright node list|status NODE | update-state NODE --package P --state S [--stage S] [--yes] [--dry-run]
    nodewright package logs NODE PACKAGE [--stage S] [-f] | rerun NODE PACKAGE --stage S
    nodewright adopt [--resource NAME] [--node NODE] [--dry-run] [--json]   (take over from upstream NodeWright)
    nodewright convert FILE... [--drop FIELD]   (upstream NodeWright objects as NodeWright resources)
    nodewright version

Credentials as everywhere in NodeWright: --kubeconfig/--context, the K8S_AUTH_*
variables, KUBECONFIG, ~/.kube/config, or the in-cluster service account.
docs/operating.md describes each command.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys

from nodewright_cli import collection  # noqa: F401  (makes the collection importable)
from nodewright_cli import report

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(text):
    """Seconds from ``90``, ``30s``, ``10m``, ``1h``, ``1d`` (the chart's values)."""
    match = _DURATION_RE.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError("not a duration: %r (e.g. 30s, 10m, 1h)" % text)
    return float(match.group(1)) * _UNITS[match.group(2)]


def _env(name, default):
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _extravars(values):
    from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
    import yaml
    out = {}
    for value in values or ():
        try:
            if value.startswith("@"):
                loaded = safe_load.load_yaml_file(value[1:]) or {}
            elif value.lstrip().startswith("{"):
                loaded = safe_load.load_json(value, "--extra-vars")
            else:
                key, dummy, val = value.partition("=")
                loaded = {key: val}
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise NodeWrightError("--extra-vars %s cannot be read: %s" % (value, str(exc).splitlines()[0]))
        if not isinstance(loaded, dict):
            raise SystemExit("nodewright: --extra-vars %s is not a mapping" % value)
        out.update(loaded)
    return out


def build_parser():
    p = argparse.ArgumentParser(prog="nodewright", description="Operate NodeWright on a cluster.")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: K8S_AUTH_KUBECONFIG, KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--log-level", default=_env("NODEWRIGHT_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])
    sub = p.add_subparsers(dest="command", required=True)

    rec = sub.add_parser("reconcile", help="watch the cluster and roll out new or changed work")
    rec.add_argument("--once", action="store_true", help="one pass (and a drift check with --drift-on-start), "
                                                         "then exit")
    rec.add_argument("--inventory", help="inventory for the runs (default: a k8s_nodes inventory of every node "
                                         "through --connection)")
    rec.add_argument("--connection", default=_env("NODEWRIGHT_CONNECTION", "k8s"),
                     choices=["k8s", "kubernetes", "ssh", "local"], help="how the default inventory reaches nodes")
    rec.add_argument("--workdir", help="ansible-runner private data (default: ~/.nodewright/reconcile)")
    rec.add_argument("--debounce", type=duration, default=5.0, help="quiet time before a pass (default 5s)")
    rec.add_argument("--interval", type=duration, default=duration(_env("NODEWRIGHT_RECONCILE_INTERVAL", "30s")),
                     help="longest a change waits for its pass, however busy the cluster (default 30s)")
    rec.add_argument("--resync", type=duration, default=duration(_env("NODEWRIGHT_RESYNC_INTERVAL", "10m")),
                     help="a pass at least this often even when nothing changed (default 10m)")
    rec.add_argument("--retry-interval", type=duration, default=None,
                     help="the same work after a run is tried again after this long (default: --resync)")
    rec.add_argument("--drift-interval", type=duration, default=duration(_env("NODEWRIGHT_DRIFT_INTERVAL", "1h")),
                     help="check completed nodes for drift this often; 0 turns it off (default 1h)")
    rec.add_argument("--drift-reapply", action="store_true", help="apply drifted packages again (next rollout)")
    rec.add_argument("--drift-on-start", action="store_true", help="with --once: also check for drift")
    rec.add_argument("--new-node-window", type=duration, default=600.0,
                     help="autoTaintNewNodes taints nodes created at most this long ago (default 10m)")
    rec.add_argument("--stop-timeout", type=duration, default=20.0,
                     help="on SIGTERM, how long a run may still take before it is abandoned (default 20s)")
    rec.add_argument("--watch-timeout", type=int, default=300, help=argparse.SUPPRESS)
    rec.add_argument("--metrics-port", type=int, default=int(_env("NODEWRIGHT_METRICS_PORT", "0")),
                     help="serve Prometheus metrics on this port (0: off)")
    rec.add_argument("--metrics-address", default="0.0.0.0")
    rec.add_argument("--taint-key", default=_env("NODEWRIGHT_TAINT_KEY", markers.TAINT_RUNTIME_REQUIRED))
    rec.add_argument("--resource-selector", default=_env("NODEWRIGHT_RESOURCE_SELECTOR", None),
                     help="only the NodeWright resources with these labels (kubectl -l syntax); each is then "
                          "rolled out by name")
    rec.add_argument("--package-dir", action="append", default=[], help="more package directories (repeatable)")
    rec.add_argument("-e", "--extra-vars", action="append", default=[],
                     help="extra variables for the rollout: KEY=VALUE, JSON, or @file (repeatable)")
    rec.add_argument("--notify", metavar="URL", action="append", default=[],
                     help="send each rollout's events (started, batch, blocked, halted, complete) to this Apprise "
                          "URL; repeat for more (default: $NODEWRIGHT_NOTIFY, URLs separated by spaces, which keeps "
                          "webhook tokens out of the command line); a failed notification never fails a rollout")
    rec.add_argument("--notify-events", metavar="EVENT,...", default=_env("NODEWRIGHT_NOTIFY_EVENTS", None),
                     help="only these of started, batch, blocked, halted, complete (default: all)")
    rec.add_argument("--notify-batch-interval", metavar="DURATION",
                     default=_env("NODEWRIGHT_NOTIFY_BATCH_INTERVAL", None),
                     help="at most one batch notification this often per rollout (e.g. 30m); the batches in "
                          "between are counted into the next notification (default: every batch)")

    st = sub.add_parser("status", help="nodes with their package states, blocked reasons and the next wave")
    st.add_argument("name", nargs="?", help="only this NodeWright resource (the same as --resource)")
    st.add_argument("--resource", help="only this NodeWright resource")
    st.add_argument("--json", action="store_true")
    st.add_argument("--package-dir", action="append", default=[])
    st.add_argument("--taint-key", default=_env("NODEWRIGHT_TAINT_KEY", markers.TAINT_RUNTIME_REQUIRED))

    dr = sub.add_parser("drift", help="check completed nodes for drift now")
    dr.add_argument("--reapply", action="store_true", help="mark drifted packages to be applied again")
    dr.add_argument("--inventory")
    dr.add_argument("--connection", default=_env("NODEWRIGHT_CONNECTION", "k8s"),
                    choices=["k8s", "kubernetes", "ssh", "local"])
    dr.add_argument("--workdir")
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--resource-selector", help="only the NodeWright resources with these labels")

    for verb, text in (("pause", "stop starting nodes for a NodeWright resource"),
                       ("resume", "undo pause"), ("disable", "skip a NodeWright resource (later ones proceed)"),
                       ("enable", "undo disable")):
        one = sub.add_parser(verb, help=text)
        one.add_argument("name", help="NodeWright resource")
        one.add_argument("--dry-run", action="store_true", help="print the patch, change nothing")
    ig = sub.add_parser("ignore", help="make NodeWright leave a node alone (label %s=true)" % markers.LABEL_IGNORE)
    ig.add_argument("node")
    ig.add_argument("--undo", action="store_true", help="take the node back")
    ig.add_argument("--dry-run", action="store_true")
    rs = sub.add_parser("reset", help="forget NodeWright's record on a node (labels and annotations), or one "
                                      "package's (--package)")
    rs.add_argument("node")
    rs.add_argument("--package", help="only this package's record, which the next rollout applies from the start "
                                      "(the other packages keep theirs); asks first")
    from nodewright_cli import recovery
    recovery.add_common(rs, _env, resource_help="only this resource's record (default: all; with --package: the "
                                                "one that records the package)")
    rb = sub.add_parser("reset-batches", help="forget a NodeWright resource's batch state (a halted rollout "
                                              "starts again from its first batch)")
    rb.add_argument("name", help="NodeWright resource")
    rb.add_argument("--dry-run", action="store_true")
    from nodewright_cli import rollout as rollout_cmd
    rollout_cmd.add_parser(sub)
    report.add_parser(sub)
    from nodewright_cli import triage
    COMMANDS.update(triage.register(sub, _env, _cluster))
    from nodewright_cli import adopt
    COMMANDS.update(adopt.register(sub, _env, _cluster))
    from nodewright_cli import convert
    COMMANDS.update(convert.register(sub))
    return p


def _cluster(args):
    from nodewright_cli.cluster import Cluster
    auth = {k: v for k, v in (("kubeconfig", args.kubeconfig), ("context", args.context)) if v}
    return Cluster(auth)


def _child_env(args):
    env = {}
    if args.kubeconfig:
        env["K8S_AUTH_KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    if args.context:
        env["K8S_AUTH_CONTEXT"] = args.context
    return env


def cmd_reconcile(args):
    from nodewright_cli.reconciler import Options, Reconciler
    opts = Options(debounce=args.debounce, max_debounce=max(args.interval, args.debounce), resync=args.resync,
                   retry_interval=args.retry_interval if args.retry_interval is not None else args.resync,
                   drift_interval=args.drift_interval, drift_reapply=args.drift_reapply,
                   new_node_window=args.new_node_window, stop_timeout=args.stop_timeout,
                   watch_timeout=args.watch_timeout, metrics_port=args.metrics_port,
                   metrics_address=args.metrics_address, inventory=args.inventory and os.path.abspath(args.inventory),
                   connection=args.connection, workdir=args.workdir and os.path.abspath(args.workdir),
                   taint_key=args.taint_key, package_dirs=[os.path.abspath(d) for d in args.package_dir],
                   extravars=_reconcile_extravars(args), resource_selector=args.resource_selector)
    rec = Reconciler(_cluster(args), opts)
    rec.run_playbook = _with_env(rec.run_playbook, _child_env(args))
    if args.once:
        return rec.run_once(with_drift=args.drift_on_start)
    return rec.run_forever()


def _reconcile_extravars(args):
    """``-e`` with ``--notify`` / ``--notify-events`` as the rollouts' ``nodewright_rollout_notify``,
    checked before the reconciler starts watching."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.notify import parse_notify
    extravars = _extravars(args.extra_vars)
    # The flags win over the environment (the chart sets NODEWRIGHT_NOTIFY from a Secret).
    urls = [u for u in args.notify if u] or _env("NODEWRIGHT_NOTIFY", "").split()
    if (args.notify_events or args.notify_batch_interval) and not urls:
        flag = "--notify-events" if args.notify_events else "--notify-batch-interval"
        raise ValidationError("%s without --notify" % flag, field=flag,
                              hint="name where the events go with --notify URL (or NODEWRIGHT_NOTIFY)")
    if not urls:
        if "nodewright_rollout_notify" in extravars:
            parse_notify(extravars["nodewright_rollout_notify"])
        return extravars
    if "nodewright_rollout_notify" in extravars:
        raise ValidationError("--notify and -e nodewright_rollout_notify both say where events go", field="--notify",
                              hint="give one of them")
    value = {"urls": urls}
    if args.notify_events:
        value["events"] = [e.strip() for e in args.notify_events.split(",") if e.strip()]
    if args.notify_batch_interval:
        value["batchInterval"] = args.notify_batch_interval
    parse_notify(value, "--notify")
    return dict(extravars, nodewright_rollout_notify=value)


def _with_env(run, env):
    if not env:
        return run

    def wrapped(*a, **kw):
        kw["envvars"] = dict(kw.get("envvars") or {}, **env)
        return run(*a, **kw)
    return wrapped


def cmd_status(args):
    from nodewright_cli import status
    if args.name and args.resource and args.name != args.resource:
        raise NodeWrightError("two resources named: %s and --resource %s" % (args.name, args.resource),
                              hint="name one resource, or none for all of them")
    only = args.resource or args.name
    cluster = _cluster(args)
    data = status.build(cluster.nodewrights(), cluster.nodes(), cluster.policies(),
                        [os.path.abspath(d) for d in args.package_dir] + collection.shipped_package_dirs(),
                        taint_key=args.taint_key, only=only)
    if only and not data["resources"] and not data["blocked"]:
        raise NodeWrightError("NodeWright resource %r does not exist" % only,
                              hint="list them with `kubectl get nodewrights`")
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n" if args.json else status.render(data))
    return 0


def cmd_drift(args):
    from nodewright_cli.reconciler import Options, Reconciler
    opts = Options(drift_reapply=args.reapply, inventory=args.inventory and os.path.abspath(args.inventory),
                   connection=args.connection, workdir=args.workdir and os.path.abspath(args.workdir),
                   drift_interval=0, resource_selector=args.resource_selector)
    rec = Reconciler(_cluster(args), opts)
    rec.run_playbook = _with_env(rec.run_playbook, _child_env(args))
    if not rec.check_permissions():
        return 3
    rec._refresh_caches()
    found = rec.drift_check()
    if args.json:
        sys.stdout.write(json.dumps(found, indent=2, sort_keys=True) + "\n")
    else:
        for node, per_resource in sorted(found.items()):
            items = ["%s/%s %s failed" % (r, i["name"], i.get("stage") or "copy")
                     for r, lst in sorted(per_resource.items()) for i in lst]
            print("%s: %s" % (node, "drifted: " + "; ".join(items) if items else "no drift"))
        if not found:
            print("no completed node to check")
    return 2 if any(i for per in found.values() for i in per.values()) else 0


def _print_patch(what, patch, dry_run, done_text, same_text):
    if dry_run:
        print("%s: %s" % (what, json.dumps(patch, sort_keys=True) if patch else "no change"))
    else:
        print(done_text if patch else same_text)


def cmd_resource_action(args):
    from nodewright_cli import actions
    patch = actions.apply_resource_action(_cluster(args), args.name, args.command, dry_run=args.dry_run)
    key, value = actions.RESOURCE_ANNOTATIONS[args.command]
    past = {"pause": "paused", "resume": "resumed", "disable": "disabled", "enable": "enabled"}[args.command]
    _print_patch("NodeWright %s" % args.name, patch, args.dry_run,
                 "%s NodeWright %s (annotation %s %s)" % (past, args.name, key,
                                                          "set to %s" % value if value else "removed"),
                 "NodeWright %s is already %s" % (args.name, past))
    return 0


def cmd_ignore(args):
    from nodewright_cli import actions
    patch = actions.apply_node_patch(_cluster(args), args.node, actions.ignore_patch, dry_run=args.dry_run,
                                     undo=args.undo)
    _print_patch("node %s" % args.node, patch, args.dry_run,
                 "node %s is %s (label %s)" % (args.node, "taken back" if args.undo else "ignored",
                                               markers.LABEL_IGNORE),
                 "node %s is already %s" % (args.node, "not ignored" if args.undo else "ignored"))
    return 0


def cmd_reset(args):
    from nodewright_cli import actions
    if args.package:
        from nodewright_cli import recovery
        return recovery.cmd_reset_package(args, _cluster(args))
    extra = [flag for flag, given in (("--version", args.version), ("--reason", args.reason), ("--json", args.json))
             if given]
    if extra:
        raise NodeWrightError("%s go%s with --package only" % (", ".join(extra), "" if len(extra) > 1 else "es"),
                              hint="a reset of a whole resource's record takes --resource and --dry-run")
    patch, condition = actions.reset_node(_cluster(args), args.node, resource=args.resource, dry_run=args.dry_run)
    if condition and args.dry_run:
        print("node %s status: %s" % (args.node, json.dumps(condition, sort_keys=True)))
    what = "resource %s" % args.resource if args.resource else "every resource"
    _print_patch("node %s" % args.node, patch, args.dry_run,
                 "node %s: NodeWright's record of %s removed; the next rollout takes the node again" % (args.node,
                                                                                                        what),
                 "node %s has no NodeWright record of %s" % (args.node, what))
    return 0


def cmd_reset_batches(args):
    from nodewright_cli import actions
    cluster = _cluster(args)
    patch = actions.batch_reset_patch(cluster.nodewright(args.name))
    if patch and not args.dry_run:
        cluster.patch_nodewright_status(args.name, patch)
    _print_patch("NodeWright %s status" % args.name, patch, args.dry_run,
                 "NodeWright %s: batch state removed; the next rollout starts from each compartment's first batch"
                 % args.name, "NodeWright %s has no recorded batch state" % args.name)
    return 0


def _rollout(args):
    from nodewright_cli import rollout as rollout_cmd
    return rollout_cmd.cmd_rollout(args)


COMMANDS = {"reconcile": cmd_reconcile, "status": cmd_status, "drift": cmd_drift, "pause": cmd_resource_action,
            "resume": cmd_resource_action, "disable": cmd_resource_action, "enable": cmd_resource_action,
            "ignore": cmd_ignore, "reset": cmd_reset,
            "reset-batches": cmd_reset_batches, "report": report.cmd_report, "rollout": _rollout}


def check_args(args):
    """Every name on the command line, checked before anything talks to the cluster."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector
    if getattr(args, "name", None) is not None:
        names.nodewright_name(args.name, "NAME")
    if getattr(args, "node", None) is not None:
        names.node_name(args.node, "NODE")
    if getattr(args, "resource", None) is not None:
        names.nodewright_name(args.resource, "--resource")
    if getattr(args, "taint_key", None) is not None:
        names.taint_key(args.taint_key, "--taint-key")
    if getattr(args, "resource_selector", None):
        to_selector(args.resource_selector, "--resource-selector")


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        check_args(args)
        return COMMANDS[args.command](args)
    except NodeWrightError as exc:
        sys.stderr.write("nodewright %s: error: %s\n" % (args.command, exc))
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
