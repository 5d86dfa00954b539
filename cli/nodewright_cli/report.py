# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright report FILE``: the run report of the ``nodewright.fleet.report`` callback
as its HTML page (waves x nodes on a time axis, the policy's decisions, the failures).

    nodewright report nodewright-report.json            # writes nodewright-report.html, prints a summary
    nodewright report nodewright-report.json --open     # and opens it in the default browser
    nodewright report nodewright-report.json --print    # the page on stdout
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
    rp = sub.add_parser("report", help="render a run report (JSON) as its HTML page; print or open it")
    rp.add_argument("file", help="the JSON run report (NODEWRIGHT_REPORT_PATH) or the HTML page written beside it")
    rp.add_argument("-o", "--output", help="where to write the page (default: beside FILE, named .html)")
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


def summary(report):
    """One line per outcome and per failed node, for the terminal."""
    nodes = {h: e for h, e in report["hosts"].items() if h != report_html.CONTROLLER}
    counts = {}
    for entry in nodes.values():
        counts[entry.get("outcome", "ok")] = counts.get(entry.get("outcome", "ok"), 0) + 1
    rollouts = report_html.rollouts_of(report)
    status = (rollouts[-1].get("status") if rollouts else None) or "no rollout"
    lines = ["%d node(s): %s; rollout %s" % (len(nodes), ", ".join("%s %d" % kv for kv in sorted(counts.items()))
                                             or "none", status)]
    for host, entry in sorted(nodes.items()):
        if entry.get("outcome", "ok") != "ok":
            msg = str(entry.get("msg") or "").splitlines()
            lines.append("  %s %s at '%s': %s" % (host, entry.get("outcome"), entry.get("failed_task"),
                                                  msg[0][:200] if msg else ""))
    return "\n".join(lines)


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
        print(summary(report))
        print("page: %s" % os.path.abspath(page_path))
    if args.open_page and not webbrowser.open("file://" + os.path.abspath(page_path)):
        raise NodeWrightError("no browser to open %s" % page_path, hint="open the file by hand")
    return 0
