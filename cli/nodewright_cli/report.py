# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright report [FILE]``: a run report of the ``nodewright.fleet.report`` callback
for people. It prints the summary - nodes per outcome, the waves, how long it took, where
the report is and, when the cluster can be read, each NodeWright resource's status - and
writes the report's HTML page beside it (waves x nodes on a time axis, the policy's
decisions, the failures).

    nodewright report                                   # nodewright-report.json (or NODEWRIGHT_REPORT_PATH)
    nodewright report run.json --open                   # and open the page in the default browser
    nodewright report run.json --print                  # the page on stdout
    nodewright report run.json --no-cluster             # without reading the resources
"""

from __future__ import annotations

import json
import os
import sys
import webbrowser

# Imported for its effect: it makes the collection importable.
from nodewright_cli import collection  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_html


def add_parser(sub):
    rp = sub.add_parser("report", help="sum up a run report (nodes per outcome, waves, duration, each resource's "
                                       "status) and write its HTML page; print or open the page")
    rp.add_argument("file", nargs="?", default=os.environ.get("NODEWRIGHT_REPORT_PATH") or "nodewright-report.json",
                    help="the JSON run report (default: NODEWRIGHT_REPORT_PATH, or nodewright-report.json), or the "
                         "HTML page written beside it")
    rp.add_argument("-o", "--output", help="where to write the page (default: beside FILE, named .html)")
    rp.add_argument("--no-cluster", action="store_true", help="the report only; do not read the resources")
    rp.add_argument("--package-dir", action="append", default=[])
    how = rp.add_mutually_exclusive_group()
    how.add_argument("--print", dest="print_page", action="store_true", help="write the page to stdout")
    how.add_argument("--open", dest="open_page", action="store_true", help="open the page in the default browser")
    return rp


def load(path):
    """The report in ``path``; a clear error when it is not one."""
    try:
        with open(path) as fh:
            report = json.load(fh)
    except OSError as exc:
        raise NodeWrightError("cannot read the run report %s: %s" % (path, exc.strerror or exc),
                              hint="give the file NODEWRIGHT_REPORT_PATH named (default nodewright-report.json)")
    except ValueError as exc:
        raise NodeWrightError("%s is not a JSON run report: %s" % (path, exc),
                              hint="give the JSON file the nodewright.fleet.report callback wrote")
    if not isinstance(report, dict) or not isinstance(report.get("hosts"), dict):
        raise NodeWrightError("%s is not a NodeWright run report: it has no 'hosts' mapping" % path,
                              hint="give the JSON file the nodewright.fleet.report callback wrote")
    return report


def _duration(seconds):
    seconds = int(round(float(seconds or 0)))
    return "%dm %02ds" % divmod(seconds, 60) if seconds >= 60 else "%ds" % seconds


def _first_line(text):
    return str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""


def waves(report):
    """[(wave number, node count, {compartment: count})] of the run: the rollout entries of
    one play (one per resource) share its wave numbers; later plays follow on."""
    out = []
    plays = []
    for entry in report.get("rollout") or []:
        if not plays or plays[-1][0] != entry.get("play"):
            plays.append((entry.get("play"), []))
        plays[-1][1].append(entry)
    for _play, entries in plays:
        per_wave = {}
        for entry in entries:
            for where in (entry.get("assignment") or {}).values():
                wave = per_wave.setdefault(where.get("wave"), {})
                wave[where.get("compartment")] = wave.get(where.get("compartment"), 0) + 1
        for number in sorted(n for n in per_wave if n is not None):
            out.append((len(out) + 1, sum(per_wave[number].values()), per_wave[number]))
    return out


def summarize(report, path, resources=None, cluster_error=None):
    """The summary's lines. ``resources`` is ``nodewright status`` data (or None)."""
    nodes = {h: e for h, e in (report.get("hosts") or {}).items() if h != "localhost"}
    playbook = os.path.basename(report.get("playbook") or "the playbook")
    lines = ["NodeWright run report: %s" % os.path.abspath(path)]
    if not nodes:
        local = (report.get("hosts") or {}).get("localhost") or {}
        if local.get("outcome", "ok") == "ok":
            lines.append("  %s: nothing to do - no targeted node had work (every one is up to date); %s"
                         % (playbook, _duration(report.get("duration"))))
        else:
            lines.append("  %s failed before any node was touched, at '%s': %s" % (
                playbook, local.get("failed_task"), _first_line(local.get("msg"))))
    else:
        found = waves(report)
        lines.append("  %s: %d node(s) maintained in %d wave(s), %s" % (
            playbook, len(nodes), len(found), _duration(report.get("duration"))))
        counts = {}
        for entry in nodes.values():
            counts[entry.get("outcome")] = counts.get(entry.get("outcome"), 0) + 1
        lines.append("  nodes per outcome: %s" % ", ".join("%s %d" % kv for kv in sorted(counts.items())))
        if found:
            lines.append("  waves: %s" % "; ".join(
                "%d: %d (%s)" % (number, size, ", ".join("%s %d" % kv for kv in sorted(parts.items())))
                for number, size, parts in found))
        for host, entry in sorted(nodes.items()):
            if entry.get("outcome") != "ok":
                lines.append("    %s %s at '%s': %s" % (host, entry.get("outcome"), entry.get("failed_task"),
                                                        _first_line(entry.get("msg"))))
        local = (report.get("hosts") or {}).get("localhost") or {}
        if local.get("outcome") not in (None, "ok"):
            lines.append("  the run ended with: %s" % _first_line(local.get("msg")))
    if resources is not None:
        for r in resources.get("resources") or []:
            lines.append("  NodeWright %s: %s, %d/%d node(s) complete" % (r["name"], r["status"], r["complete"],
                                                                          r["targets"]))
        for b in resources.get("blocked") or []:
            lines.append("  NodeWright %s: blocked: %s" % (b["name"], b["reason"]))
    elif cluster_error:
        lines.append("  (resource status not read: %s)" % cluster_error)
    return lines


def cluster_resources(args):
    """``(nodewright status data, None)``, or ``(None, why it could not be read)``."""
    from nodewright_cli import status
    from nodewright_cli.cluster import Cluster
    try:
        auth = {k: v for k, v in (("kubeconfig", args.kubeconfig), ("context", args.context)) if v}
        cluster = Cluster(auth)
        return status.build(cluster.nodewrights(), cluster.nodes(), cluster.policies(),
                            [os.path.abspath(d) for d in args.package_dir] + collection.shipped_package_dirs()), None
    except Exception as exc:  # noqa: BLE001 - the report is still worth printing
        return None, _first_line(exc) or type(exc).__name__


def cmd_report(args):
    path = args.file
    if path.endswith(".html") and not args.output:
        page_path = path
        if not os.path.isfile(page_path):
            raise NodeWrightError("no such page: %s" % path, hint="give the JSON report to render it again")
        if args.print_page:
            with open(page_path) as fh:
                sys.stdout.write(fh.read())
    else:
        report = load(path)
        page = report_html.render(report)
        if args.print_page:
            sys.stdout.write(page)
            return 0
        page_path = args.output or report_html.html_path(path)
        with open(page_path, "w") as fh:
            fh.write(page)
        resources, error = (None, None) if args.no_cluster else cluster_resources(args)
        print("\n".join(summarize(report, path, resources, error)))
        print("  page: %s" % os.path.abspath(page_path))
    if args.open_page and not webbrowser.open("file://" + os.path.abspath(page_path)):
        raise NodeWrightError("no browser to open %s" % page_path, hint="open the file by hand")
    return 0
