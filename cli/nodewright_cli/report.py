# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright report``: a run report (the ``nodewright.fleet.report`` callback's
JSON) for people - the nodes per outcome, the waves, how long it took, where the
report is - and, when the cluster can be read, each NodeWright resource's status
and how many of its nodes are complete. Pure functions over the report and the
``nodewright status`` data."""

from __future__ import annotations

import os


def _duration(seconds):
    seconds = int(round(float(seconds or 0)))
    return "%dm %02ds" % divmod(seconds, 60) if seconds >= 60 else "%ds" % seconds


def _first_line(text):
    return str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""


def waves(report):
    """[(wave number, node count, {compartment: count})] over the rollout plays."""
    out = []
    for play in report.get("rollout") or []:
        per_wave = {}
        for where in (play.get("assignment") or {}).values():
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
