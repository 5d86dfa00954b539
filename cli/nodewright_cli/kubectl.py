# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``kubectl nodewright``: the nodewright command in kubectl's conventions.

Installed with the CLI as ``kubectl-nodewright``, so kubectl finds it on PATH as a
plugin. It offers what an operator reaches for from kubectl and hands each request to
the ``nodewright`` command (one implementation)::

    kubectl nodewright status [RESOURCE] [-o json|yaml|wide]
    kubectl nodewright node list [-l RESOURCE] [-o json|yaml|wide]
    kubectl nodewright node status NODE [-o json|yaml|wide]
    kubectl nodewright package logs NODE PACKAGE [--resource R] [--stage S] [--all] [-f] [-n NAMESPACE]
    kubectl nodewright pause|resume RESOURCE
    kubectl nodewright reset NODE [--resource R] [--package P [--yes]]
    kubectl nodewright version [-o json|yaml]

``--kubeconfig`` and ``--context`` are kubectl's (kubectl passes neither to a plugin:
they are given again after the plugin's name, as with every kubectl plugin).
``-n``/``--namespace`` applies where NodeWright uses a namespace: the node pods that
``package logs`` starts over the ``nodewright.fleet.node`` connection. NodeWright's
resources are cluster-scoped, so other commands refuse it rather than ignore it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

import yaml

OUTPUTS = ("json", "yaml", "wide")
NODE_POD_NAMESPACE_ENV = "NODEWRIGHT_NAMESPACE"


def build_parser():
    p = argparse.ArgumentParser(prog="kubectl nodewright",
                                description="NodeWright from kubectl: status, nodes, package logs, pause, resume, "
                                            "reset.")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("-n", "--namespace", help="namespace of the node pods (package logs over the k8s connection)")
    sub = p.add_subparsers(dest="command", required=True)

    def output(parser, choices=OUTPUTS):
        parser.add_argument("-o", "--output", choices=choices, help="output format (default: the table)")

    s = sub.add_parser("status", help="each NodeWright resource's nodes, packages, blocked reasons, next wave")
    s.add_argument("resource", nargs="?", help="only this NodeWright resource")
    output(s)
    node = sub.add_parser("node", help="what NodeWright keeps on nodes")
    node = node.add_subparsers(dest="node_command", required=True)
    nl = node.add_parser("list", help="nodes with NodeWright's marks")
    nl.add_argument("-l", "--resource", help="only this NodeWright resource")
    output(nl)
    ns = node.add_parser("status", help="one node in detail")
    ns.add_argument("node")
    output(ns)
    pkg = sub.add_parser("package", help="a package on one node")
    pkg = pkg.add_subparsers(dest="package_command", required=True)
    logs = pkg.add_parser("logs", help="the step logs of a package on a node")
    logs.add_argument("node")
    logs.add_argument("package")
    logs.add_argument("--resource")
    logs.add_argument("--stage")
    logs.add_argument("--all", action="store_true")
    logs.add_argument("-f", "--follow", action="store_true")
    for verb, what in (("pause", "stop starting nodes for a NodeWright resource"), ("resume", "undo pause")):
        v = sub.add_parser(verb, help=what)
        v.add_argument("resource")
    r = sub.add_parser("reset", help="forget NodeWright's record on a node, or one package's (--package)")
    r.add_argument("node")
    r.add_argument("--resource", help="only this NodeWright resource's record")
    r.add_argument("--package", help="only this package's record: the next rollout applies it from the start")
    r.add_argument("-y", "--yes", action="store_true", help="with --package: do it without asking")
    output(sub.add_parser("version", help="versions of the command, the collection and ansible-core"),
           ("json", "yaml"))
    return p


def translate(args):
    """``(nodewright argv, environment changes, structured)``: the nodewright command
    for ``args``; ``structured`` says its JSON output is to be printed as ``-o`` asks."""
    argv = []
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    if args.context:
        argv += ["--context", args.context]
    env = {}

    def only(resource):
        return ["--resource", resource] if resource else []
    out = getattr(args, "output", None)
    structured = out in ("json", "yaml")
    if args.namespace is not None and args.command != "package":
        raise SystemExit("kubectl nodewright %s: error: NodeWright resources and nodes are cluster-scoped; "
                         "-n/--namespace applies to package logs only" % args.command)
    if args.command == "status":
        argv += ["status"] + only(args.resource)
    elif args.command == "node" and args.node_command == "list":
        argv += ["node", "list"] + only(args.resource)
    elif args.command == "node":
        argv += ["node", "status", args.node]
    elif args.command == "package":
        argv += ["package", "logs", args.node, args.package] + only(args.resource)
        argv += ["--stage", args.stage] if args.stage else []
        argv += (["--all"] if args.all else []) + (["-f"] if args.follow else [])
        if args.namespace is not None:
            env[NODE_POD_NAMESPACE_ENV] = args.namespace
    elif args.command in ("pause", "resume"):
        argv += [args.command, args.resource]
    elif args.command == "reset":
        argv += ["reset", args.node] + only(args.resource)
        argv += (["--package", args.package] if args.package else []) + (["--yes"] if args.yes else [])
    elif args.command == "version":
        argv += ["version"]
    if structured:
        argv.append("--json")
    return argv, env, structured


def main(argv=None):
    args = build_parser().parse_args(argv)
    nw_argv, env, structured = translate(args)
    from nodewright_cli import cli
    os.environ.update(env)
    if not structured:
        return cli.main(nw_argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(nw_argv)
    text = buf.getvalue()
    if rc == 0 and args.output == "yaml":
        try:
            text = yaml.safe_dump(json.loads(text), sort_keys=False, default_flow_style=False)
        except ValueError:
            pass
    sys.stdout.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
