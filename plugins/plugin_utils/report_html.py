# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run report of the ``nodewright.fleet.report`` callback as one self-contained HTML page.

``render(report)`` returns the page: a summary, a timeline (waves x nodes on a time axis,
each node's steps as bars coloured by outcome and as long as they took, the policy's
decisions as marks on the axis), the compartments, the decisions and the failures with
their reason. Inline CSS and SVG only: no script, no font or image from the network, so
the file opens anywhere (a CI artifact, an air-gapped bastion). Stdlib only.
"""

from __future__ import annotations

import datetime
import html
import os

CONTROLLER = "localhost"

# Outcome of a step -> fill colour (Ansible's own: ok green, changed yellow, failed red).
OUTCOME_COLOURS = {
    "ok": "#3a9d5d",
    "changed": "#d9a400",
    "failed": "#d62728",
    "failed_ignored": "#f08c3c",
    "unreachable": "#8e44ad",
}
OUTCOME_WORDS = {"ok": "ok", "changed": "changed", "failed": "failed", "failed_ignored": "failed, ignored or rescued",
                 "unreachable": "unreachable"}
COMPARTMENT_COLOURS = ("#4c78a8", "#72b7b2", "#b279a2", "#9d755d", "#54a24b", "#e45756", "#79706e", "#bab0ac")

# The safe sequence's steps, by the module a task runs; other tasks are bookkeeping (thin bars).
STEP_BY_ACTION = {
    "node_cordon": "cordon",
    "node_wait_pods": "wait for pods",
    "node_drain": "drain",
    "node_maintenance": "drain",
    "package": "packages",
    "node_wait_ready": "reboot",
    "reboot": "reboot",
    "node_health": "health",
    "node_gate": "gate",
}

LABEL_W = 200     # node names
AXIS_W = 1000     # the time axis
ROW_H = 16
WAVE_H = 22
TOP = 34          # axis labels and decision marks


def html_path(path):
    """The HTML page that goes with a JSON report: same name, ``.html``."""
    base, ext = os.path.splitext(path)
    return (base if ext == ".json" else path) + ".html"


def step_kind(step):
    """The safe-sequence step a timeline entry stands for, or None for bookkeeping tasks."""
    action = (step.get("action") or "").rsplit(".", 1)[-1]
    name = (step.get("task") or "").lower()
    if action == "node_cordon" and "uncordon" in name:
        return "uncordon"
    if action in STEP_BY_ACTION:
        return STEP_BY_ACTION[action]
    if action in ("command", "shell") and "reboot" in name:
        return "reboot"
    if action in ("command", "shell") and ("restart" in name or "reload" in name):
        return "restart"
    return None


def _epoch(value):
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _utc(epoch):
    if epoch is None:
        return "?"
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value):
    value = float(value or 0)
    if value >= 120:
        return "%dm%02ds" % (value // 60, value % 60)
    return "%.1fs" % value


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def rollouts_of(report):
    """The report's ``rollout`` entries (one per play run by the strategy or the wave runner)."""
    rollouts = report.get("rollout") or []
    return rollouts if isinstance(rollouts, list) else [rollouts]


def node_steps(entry, started):
    """A node's steps as (start, duration, outcome, task, kind), seconds from the run's start.
    Reports without a timeline give one bar from first to last result."""
    steps = []
    for step in entry.get("timeline") or []:
        if not isinstance(step, dict) or "start" not in step:
            continue
        steps.append((float(step["start"]), float(step.get("duration") or 0), step.get("status", "ok"),
                      step.get("task") or "?", step_kind(step)))
    if not steps and entry.get("first_seen") is not None:
        first = float(entry["first_seen"]) - started
        last = float(entry.get("last_seen", entry["first_seen"])) - started
        steps.append((first, max(0.0, last - first), entry.get("outcome", "ok"), "the whole run", None))
    return steps


def model(report):
    """What the page shows, computed from the report: groups of rows (controller, each wave,
    nodes outside any wave), decisions, compartments, failures, untouched nodes."""
    started = float(report.get("started") or 0)
    finished = float(report.get("finished") or started)
    hosts = report.get("hosts") or {}
    rollouts = rollouts_of(report)
    waves, assignment, decisions, compartments, untouched, left_out = {}, {}, [], {}, [], {}
    for run in rollouts:
        for wave in run.get("waves") or []:
            waves[wave.get("number")] = wave
        assignment.update(run.get("assignment") or {})
        for decision in run.get("decisions") or []:
            decisions.append(dict(decision, play=run.get("play"), offset=(_epoch(decision.get("at")) or started)
                                  - started))
        compartments.update(run.get("compartments") or {})
        untouched += [n for n in run.get("untouched") or [] if n not in untouched]
        left_out.update(run.get("leftOut") or {})
    names = sorted({where.get("compartment") for where in assignment.values() if where.get("compartment")}
                   | set(compartments))
    colours = {name: COMPARTMENT_COLOURS[i % len(COMPARTMENT_COLOURS)] for i, name in enumerate(names)}

    def row(name):
        entry = hosts.get(name) or {}
        where = assignment.get(name) or {}
        return {"name": name, "outcome": entry.get("outcome", "ok"), "wave": where.get("wave", entry.get("wave")),
                "compartment": where.get("compartment", entry.get("compartment")),
                "steps": node_steps(entry, started), "entry": entry}

    groups = []
    if CONTROLLER in hosts:
        groups.append({"title": "controller", "wave": None, "rows": [row(CONTROLLER)], "span": None})
    by_wave = {}
    outside = []
    for name in sorted(set(hosts) | set(assignment)):
        if name == CONTROLLER:
            continue
        r = row(name)
        if r["wave"] is None:
            outside.append(r)
        else:
            by_wave.setdefault(r["wave"], []).append(r)
    for number in sorted(by_wave, key=lambda n: (n is None, n)):
        wave = waves.get(number) or {}
        rows = by_wave[number]
        span = (_epoch(wave.get("started")), _epoch(wave.get("finished")))
        span = tuple(None if t is None else t - started for t in span)
        failed = [r["name"] for r in rows if r["outcome"] != "ok"]
        comps = wave.get("compartments") or {}
        if not comps:
            for r in rows:
                comps.setdefault(r["compartment"] or "?", []).append(r["name"])
        groups.append({"title": "wave %s" % number, "wave": number, "rows": rows, "span": span,
                       "failed": failed, "compartments": {k: len(v) for k, v in comps.items()}})
    if outside:
        groups.append({"title": "not in a wave", "wave": None, "rows": outside, "span": None})
    failures = [r for g in groups for r in g["rows"] if r["outcome"] != "ok"]
    nodes = [r for g in groups for r in g["rows"] if r["name"] != CONTROLLER]
    counts = {}
    for r in nodes:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    end = max([finished - started] + [s[0] + s[1] for g in groups for r in g["rows"] for s in r["steps"]])
    return {"started": started, "finished": finished, "length": max(end, 1.0), "groups": groups,
            "decisions": decisions, "compartments": compartments, "colours": colours, "failures": failures,
            "untouched": untouched, "left_out": left_out, "counts": counts, "nodes": len(nodes),
            "rollouts": rollouts, "playbook": report.get("playbook")}


def _tick_step(length):
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400):
        if length / step <= 12:
            return step
    return 28800


def _timeline_svg(m):
    scale = AXIS_W / m["length"]
    height = TOP + sum(WAVE_H + ROW_H * len(g["rows"]) for g in m["groups"]) + 8
    width = LABEL_W + AXIS_W + 60
    out = ['<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'role="img" aria-label="rollout timeline">' % (width, height, width, height)]
    step = _tick_step(m["length"])
    t = 0
    while t <= m["length"] + 1e-9:
        x = LABEL_W + t * scale
        out.append('<line class="tick" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>' % (x, TOP - 4, x, height - 8))
        out.append('<text class="axis" x="%.1f" y="%d">%s</text>' % (x, TOP - 8, _e(_seconds(t))))
        t += step
    y = TOP
    for g in m["groups"]:
        attrs = ' data-wave="%s"' % _e(g["wave"]) if g["wave"] is not None else ""
        out.append('<g class="group%s"%s>' % (" wave" if g["wave"] is not None else "", attrs))
        block = WAVE_H + ROW_H * len(g["rows"])
        span = g.get("span")
        if span and span[0] is not None:
            x0 = LABEL_W + span[0] * scale
            x1 = LABEL_W + (span[1] if span[1] is not None else m["length"]) * scale
            out.append('<rect class="band" x="%.1f" y="%d" width="%.1f" height="%d"/>'
                       % (x0, y, max(1.0, x1 - x0), block))
        title = g["title"]
        if g["wave"] is not None:
            title += " \u00b7 %d node(s)" % len(g["rows"])
            comps = ", ".join("%s %d" % (k, v) for k, v in sorted(g["compartments"].items()))
            if comps:
                title += " \u00b7 " + comps
            if span and span[0] is not None and span[1] is not None:
                title += " \u00b7 " + _seconds(span[1] - span[0])
            if g["failed"]:
                title += " \u00b7 %d failed" % len(g["failed"])
        out.append('<text class="wavetitle" x="4" y="%d">%s</text>' % (y + 15, _e(title)))
        y += WAVE_H
        for r in g["rows"]:
            out.append('<g class="node" data-node="%s" data-outcome="%s"%s>'
                       % (_e(r["name"]), _e(r["outcome"]),
                          ' data-compartment="%s"' % _e(r["compartment"]) if r["compartment"] else ""))
            if r["compartment"]:
                out.append('<rect class="chip" x="4" y="%d" width="6" height="%d" fill="%s"><title>compartment %s'
                           '</title></rect>' % (y + 2, ROW_H - 4, m["colours"].get(r["compartment"], "#999"),
                                                _e(r["compartment"])))
            label = r["name"] if r["outcome"] == "ok" else "%s \u2716" % r["name"]
            out.append('<a href="#node-%s"><text class="nodename%s" x="14" y="%d">%s</text></a>'
                       % (_e(r["name"]), " bad" if r["outcome"] != "ok" else "", y + 12, _e(label)))
            for start, duration, outcome, task, kind in r["steps"]:
                x = LABEL_W + start * scale
                w = max(1.0, duration * scale)
                h, top = (ROW_H - 4, y + 2) if kind or outcome in ("failed", "unreachable") else (4, y + 6)
                out.append('<rect class="step" data-kind="%s" data-outcome="%s" x="%.1f" y="%d" width="%.1f" '
                           'height="%d" fill="%s"><title>%s: %s, %s%s</title></rect>'
                           % (_e(kind or "task"), _e(outcome), x, top, w, h, OUTCOME_COLOURS.get(outcome, "#999"),
                              _e(r["name"]), _e(task), _e(OUTCOME_WORDS.get(outcome, outcome)),
                              _e(" (%s)" % _seconds(duration))))
                if kind and w > 8 * (len(kind) + 6):
                    out.append('<text class="steplabel" x="%.1f" y="%d">%s %s</text>'
                               % (x + 3, y + 12, _e(kind), _e(_seconds(duration))))
            out.append("</g>")
            y += ROW_H
        out.append("</g>")
    for number, d in enumerate(m["decisions"], 1):
        x = LABEL_W + max(0.0, d["offset"]) * scale
        mark = "W%s" % d["wave"] if d.get("wave") is not None else d.get("status", "?")
        out.append('<g class="decision" data-status="%s"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>'
                   '<text x="%.1f" y="%d">%s</text><title>decision %d: %s</title></g>'
                   % (_e(d.get("status")), x, TOP - 2, x, height - 8, x + 2, TOP + 9, _e(mark), number,
                      _e(d.get("reason"))))
    out.append("</svg>")
    return "\n".join(out)


CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#1d2430}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#5b6473} .status{display:inline-block;padding:2px 8px;border-radius:10px;color:#fff;font-weight:600}
.status.complete,.status.ok{background:#3a9d5d} .status.halted,.status.failed{background:#d62728}
.status.incomplete,.status.waiting,.status.interrupted{background:#d9a400}
.counts span{margin-right:14px} .legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.scroll{overflow-x:auto;border:1px solid #d8dde5;border-radius:6px;padding:4px;background:#fff}
svg text{font:11px system-ui,Helvetica,Arial,sans-serif;fill:#1d2430}
svg .axis{fill:#5b6473;text-anchor:middle} svg .tick{stroke:#eceff3}
svg .band{fill:#eef3fb} svg .wavetitle{font-weight:600;font-size:12px}
svg .nodename.bad{fill:#b3181b;font-weight:600} svg .steplabel{fill:#fff;font-size:10px;pointer-events:none}
svg .decision line{stroke:#5b6473;stroke-dasharray:3 3} svg .decision text{fill:#5b6473;font-size:10px}
svg .decision[data-status=halted] line{stroke:#d62728} svg .decision[data-status=halted] text{fill:#d62728}
table{border-collapse:collapse;margin:4px 0} th,td{border-bottom:1px solid #e3e7ee;padding:4px 10px;
text-align:left;vertical-align:top} th{background:#f5f7fa}
td pre{white-space:pre-wrap;margin:0;max-width:900px;font-size:12px}
.failure td:first-child{color:#b3181b;font-weight:600}
"""


# The overall status of a run of several resources: the worst of theirs.
_SEVERITY = ("halted", "failed", "erroring", "incomplete", "waiting", "paused", "in_progress", "complete", "ok")


def _overall(rollouts):
    """(status, reason) of the run: one resource's own, or the worst status of several
    with each resource's reason."""
    if len(rollouts) <= 1:
        rollout = rollouts[0] if rollouts else {}
        return rollout.get("status"), rollout.get("reason") or ""
    statuses = [r.get("status") or "ok" for r in rollouts]
    status = min(statuses, key=lambda st: _SEVERITY.index(st) if st in _SEVERITY else len(_SEVERITY) // 2)
    reason = "; ".join("%s: %s" % (r.get("resource") or "?", r.get("reason") or r.get("status") or "")
                       for r in rollouts)
    return status, reason


def _summary(m):
    status, reason = _overall(m["rollouts"])
    status = status or ("failed" if m["failures"] else "ok")
    parts = ['<h1>NodeWright run report</h1>',
             '<p class="meta">%s \u00b7 started %s \u00b7 took %s</p>'
             % (_e(m["playbook"] or "playbook"), _e(_utc(m["started"])), _e(_seconds(m["finished"] - m["started"])))]
    parts.append('<p id="summary"><span class="status %s">%s</span> %s</p>'
                 % (_e(status), _e(status), _e(reason)))
    counts = " ".join('<span data-outcome="%s"><b>%d</b> %s</span>' % (_e(k), v, _e(k))
                      for k, v in sorted(m["counts"].items()))
    parts.append('<p class="counts">%d node(s) ran: %s%s</p>'
                 % (m["nodes"], counts or "none",
                    (' <span><b>%d</b> not admitted</span>' % len(m["untouched"])) if m["untouched"] else ""))
    return "\n".join(parts)


def _legend(m):
    items = ['<span><i style="background:%s"></i>%s</span>' % (c, _e(OUTCOME_WORDS[k]))
             for k, c in OUTCOME_COLOURS.items()]
    items.append("<span>tall bars: the safe sequence's steps (cordon, wait for pods, drain, packages, reboot or "
                 "restart, health, uncordon); thin bars: bookkeeping tasks; dashed lines: the policy's decisions"
                 "</span>")
    comps = ['<span><i style="background:%s"></i>compartment %s</span>' % (c, _e(k))
             for k, c in sorted(m["colours"].items())]
    comps_line = '<p class="legend">%s</p>' % " ".join(comps) if comps else ""
    return '<p class="legend">%s</p>%s' % (" ".join(items), comps_line)


def _decisions(m):
    if not m["decisions"]:
        return ""
    rows = []
    for d in m["decisions"]:
        notes = "; ".join(d.get("notes") or [])
        rows.append('<tr data-status="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s%s</td></tr>'
                    % (_e(d.get("status")), _e(_seconds(max(0.0, d["offset"]))), _e(d.get("status")),
                       _e(d.get("wave", "")), _e(d.get("reason")),
                       ('<br><small>%s</small>' % _e(notes)) if notes else ""))
    return ('<h2>Decisions of the policy</h2><table id="decisions"><tr><th>at</th><th>decision</th><th>wave</th>'
            '<th>why</th></tr>%s</table>' % "".join(rows))


def _compartments(m):
    if not m["compartments"]:
        return ""
    rows = []
    for name, block in sorted(m["compartments"].items()):
        batch = block.get("batchState") or {}
        rows.append('<tr data-compartment="%s"><td><i style="display:inline-block;width:10px;height:10px;'
                    'background:%s"></i> %s</td><td>%s</td><td>%s</td><td>%s%%</td><td>%s</td><td>%s</td>'
                    '<td>%s</td></tr>'
                    % (_e(name), m["colours"].get(name, "#999"), _e(name), _e(block.get("matched")),
                       _e(block.get("completed")), _e(block.get("progressPercent")), _e(block.get("ceiling")),
                       _e(batch.get("consecutiveFailures", 0)), "halted" if batch.get("shouldStop") else "going"))
    return ('<h2>Compartments</h2><table id="compartments"><tr><th>compartment</th><th>nodes</th><th>complete</th>'
            '<th>progress</th><th>ceiling</th><th>consecutive failed batches</th><th>state</th></tr>%s</table>'
            % "".join(rows))


def _failures(m):
    if not m["failures"]:
        return '<h2>Failures</h2><p id="failures">none</p>'
    rows = []
    for r in m["failures"]:
        e = r["entry"]
        rows.append('<tr class="failure" id="node-%s" data-node="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td>'
                    '<td><pre>%s</pre></td></tr>'
                    % (_e(r["name"]), _e(r["name"]), _e(r["name"]), _e(r["outcome"]), _e(r["wave"] or ""),
                       _e(e.get("failed_task")), _e(e.get("msg"))))
    return ('<h2>Failures</h2><table id="failures"><tr><th>node</th><th>outcome</th><th>wave</th><th>failed task'
            '</th><th>reason</th></tr>%s</table>' % "".join(rows))


def _untouched(m):
    if not m["untouched"] and not m["left_out"]:
        return ""
    parts = []
    if m["untouched"]:
        parts.append('<h2>Not admitted (untouched)</h2><p id="untouched">%s</p>'
                     % ", ".join('<span data-node="%s">%s</span>' % (_e(n), _e(n)) for n in m["untouched"]))
    if m["left_out"]:
        parts.append('<h2>Left out</h2><table id="left-out">%s</table>' % "".join(
            "<tr><td>%s</td><td>%s</td></tr>" % (_e(k), _e(v)) for k, v in sorted(m["left_out"].items())))
    return "".join(parts)


def render(report):
    """The report as a complete HTML document (a string)."""
    m = model(report)
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>NodeWright run report</title>",
        "<style>%s</style></head><body>" % CSS,
        _summary(m),
        "<h2>Timeline</h2>",
        _legend(m),
        '<div class="scroll">%s</div>' % _timeline_svg(m),
        _failures(m),
        _decisions(m),
        _compartments(m),
        _untouched(m),
        "</body></html>",
        "",
    ])
