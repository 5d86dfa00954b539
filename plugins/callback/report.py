# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: report
type: notification
short_description: Write NodeWright's structured run report (JSON) and its HTML page
version_added: "0.1.0"
description:
  - Records, per node, the outcome of the run (ok, failed, unreachable), the task that failed and why,
    the duration, and the NodeWright results that tasks return (drain, packages, interrupt).
  - With O(include_tasks) every task result is kept too, which tests and automation can read.
  - Each node's C(timeline) lists the tasks that ran on it (name, action, start, duration, outcome), which the
    HTML page draws.
  - With O(html) the report is also rendered as a self-contained HTML page next to the JSON file (same name,
    ending in C(.html)) - the waves and their nodes on a time axis, each step coloured by outcome, the
    compartments, the policy's decisions and the failures with their reason. C(nodewright report FILE) renders
    or opens it later.
  - Under ansible-runner (or AWX/AAP) both files are also written into the job's artifacts directory
    (C(artifacts/<ident>/nodewright-report.json) and C(.html)).
  - Plays run by the C(nodewright.fleet.rollout) strategy add C(rollout), one entry per play with the policy,
    every wave decision, each wave's nodes and outcome, and the nodes left untouched; each admitted host gets
    its C(wave) and C(compartment).
author:
  - NodeWright maintainers (@nodewright)
requirements:
  - enable it with C(callbacks_enabled = nodewright.fleet.report)
options:
  path:
    description: Where the JSON report is written.
    type: path
    default: nodewright-report.json
    env:
      - name: NODEWRIGHT_REPORT_PATH
    ini:
      - section: nodewright_report
        key: path
  include_tasks:
    description: Also keep every task result in the report.
    type: bool
    default: false
    env:
      - name: NODEWRIGHT_REPORT_TASKS
    ini:
      - section: nodewright_report
        key: include_tasks
  html:
    description: Also write the report as a self-contained HTML page (no network needed to view it).
    type: bool
    default: true
    version_added: "0.2.0"
    env:
      - name: NODEWRIGHT_REPORT_HTML
    ini:
      - section: nodewright_report
        key: html
  metrics_textfile:
    description:
      - Also write the run's metrics in the Prometheus text format to this file at the end of the run (for
        node_exporter's textfile collector; name it C(*.prom)) - the run's duration, result and nodes per
        outcome, the package states and stages the run saw, drain durations and waits for non-interruptible
        pods, waves and failed nodes. Names are listed in C(docs/operating.md).
    type: path
    version_added: "0.2.0"
    env:
      - name: NODEWRIGHT_METRICS_TEXTFILE
    ini:
      - section: nodewright_report
        key: metrics_textfile
"""

EXAMPLES = r"""
# ansible.cfg: write the JSON report and its HTML page for every run
# [defaults]
# callbacks_enabled = nodewright.fleet.report
# [nodewright_report]
# path = /var/log/nodewright/report.json
# metrics_textfile = /var/lib/node_exporter/textfile/nodewright.prom

# Or per run, from the environment:
# ANSIBLE_CALLBACKS_ENABLED=nodewright.fleet.report NODEWRIGHT_REPORT_PATH=out/report.json \
#   ansible-playbook -i fleet.k8s_nodes.yml nodewright.fleet.rollout
# nodewright report out/report.json --open
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import ANNOTATION_STATE_PREFIX
from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals, report_html, report_metrics

NODEWRIGHT_KEYS = ("evicted", "kept", "still_present", "blocking_pdbs", "initially_blocking", "plan",
                   "packages", "interrupt", "boot_id", "rebooted", "failures", "steps", "duration", "waited_seconds")
# ansible-runner (and AWX/AAP, which runs it) name the job's artifacts directory here.
RUNNER_ARTIFACTS_ENV = "AWX_ISOLATED_DATA_DIR"
RUNNER_REPORT_NAME = "nodewright-report.json"


def _plain(value):
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _task_name(task):
    """The task's own name, without the role prefix Ansible adds for display."""
    return task.name or task.get_name(include_role_fqcn=False)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "nodewright.fleet.report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self.report = {"version": 1, "started": time.time(), "playbook": None, "hosts": {}, "tasks": []}
        self._task_start = {}
        self._host_task_start = {}
        self._package_states = {}

    def _host(self, name):
        return self.report["hosts"].setdefault(name, {"outcome": "ok", "first_seen": time.time(), "results": []})

    def v2_playbook_on_start(self, playbook):
        self.report["playbook"] = getattr(playbook, "_file_name", None)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start[task._uuid] = time.time()

    def v2_runner_on_start(self, host, task):
        self._host_task_start[(host.get_name(), task._uuid)] = time.time()

    def _timeline(self, entry, host, task, data, status, now):
        """One step of the node's timeline: the task, when it started on this host, how long it
        took there and how it ended."""
        start = self._host_task_start.pop((host, task._uuid), None) or self._task_start.get(task._uuid, now)
        if status == "ok" and data.get("changed"):
            status = "changed"
        entry.setdefault("timeline", []).append({
            "task": _task_name(task), "action": task.action,
            "start": round(start - self.report["started"], 3), "duration": round(now - start, 3),
            "status": status})

    def _step_timeline(self, entry, host, task, steps, now):
        """The steps of one ``nodewright.fleet.maintain`` task, one after the other from the
        task's start on this host."""
        start = self._host_task_start.pop((host, task._uuid), None) or self._task_start.get(task._uuid, now)
        for step in steps:
            if not isinstance(step, dict):
                continue
            seconds = float(step.get("seconds") or 0.0)
            outcome = "failed" if step.get("failed") else ("changed" if step.get("changed") else "ok")
            entry.setdefault("timeline", []).append({
                "task": step.get("name") or "?", "action": step.get("action") or task.action,
                "start": round(start - self.report["started"], 3), "duration": round(seconds, 3),
                "status": outcome})
            start += seconds

    def _record(self, result, status):
        host, task, data = core_internals.callback_result(result)
        host = host.get_name()
        entry = self._host(host)
        entry["last_seen"] = time.time()
        started = self._task_start.get(task._uuid)
        if started is not None and started < entry["first_seen"]:
            entry["first_seen"] = started
        name = _task_name(task)
        if status in ("failed", "unreachable") and not data.get("_ansible_ignore_errors") \
                and not getattr(task, "ignore_errors", False):
            entry["outcome"] = status
            entry["failed_task"] = data.get("failed_step") or name
            entry["msg"] = data.get("msg")
        elif status == "failed":
            status = "failed_ignored"
        elif status == "ok" and (data.get("blocked") or data.get("paused")) and entry.get("outcome") == "ok":
            # nodewright.fleet.maintain left the node blocked by non-interruptible pods, or stopped it
            # because its resource was paused: not done, not failed.
            entry["outcome"] = "blocked" if data.get("blocked") else "paused"
            entry["msg"] = data.get("msg")
        # nodewright.fleet.maintain runs the safe sequence as one task: each of its steps
        # is reported, and drawn on the timeline, as the task it stands for.
        steps = data.get("steps") if isinstance(data.get("steps"), list) else []
        if steps:
            self._step_timeline(entry, host, task, steps, entry["last_seen"])
        else:
            self._timeline(entry, host, task, data, status, entry["last_seen"])
        for step in steps:
            if isinstance(step, dict) and isinstance(step.get("result"), dict):
                self._note_package_state(host, step["result"])
                self._keep(entry, host, step.get("name") or name, "failed" if step.get("failed") else "ok",
                           step["result"], data)
        self._note_package_state(host, data)
        self._keep(entry, host, name, status, data, data, all_keys=not steps)

    def _keep(self, entry, host, name, status, data, outer, all_keys=True):
        interesting = {k: data[k] for k in NODEWRIGHT_KEYS if k in data and (all_keys or k != "steps")}
        if interesting:
            entry["results"].append({"task": name, "status": status, **_plain(interesting)})
        if self.get_option("include_tasks"):
            clean = {k: v for k, v in data.items() if not k.startswith("_ansible") and k != "invocation"}
            self.report["tasks"].append({"task": name, "host": host, "status": status,
                                         "delegated": bool(outer.get("_ansible_delegated_vars")),
                                         "result": _plain(clean)})

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed_ignored" if ignore_errors else "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        host, task, _data = core_internals.callback_result(result)
        self._host_task_start.pop((host.get_name(), task._uuid), None)
        if self.get_option("include_tasks"):
            self.report["tasks"].append({"task": _task_name(task), "host": host.get_name(),
                                         "status": "skipped", "result": {}})

    def _add_rollout(self, stats):
        """The wave decisions of plays run by the nodewright.fleet.rollout strategy, which keeps
        them in the custom stat ``nodewright_rollout`` (one entry per play)."""
        rollouts = ((getattr(stats, "custom", None) or {}).get("_run") or {}).get("nodewright_rollout")
        if not rollouts:
            return
        self.report["rollout"] = _plain(rollouts)
        for entry in self.report["rollout"]:
            for host, where in (entry.get("assignment") or {}).items():
                if host in self.report["hosts"]:
                    self.report["hosts"][host]["wave"] = where.get("wave")
                    self.report["hosts"][host]["compartment"] = where.get("compartment")

    def v2_playbook_on_stats(self, stats):
        self._add_rollout(stats)
        self.report["finished"] = time.time()
        self.report["duration"] = round(self.report["finished"] - self.report["started"], 2)
        for entry in self.report["hosts"].values():
            entry["duration"] = round(entry.get("last_seen", entry["first_seen"]) - entry["first_seen"], 2)
        counts = {}
        for entry in self.report["hosts"].values():
            counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
        self.report["summary"] = counts
        path = self.get_option("path")
        paths = [path]
        artifacts = os.environ.get(RUNNER_ARTIFACTS_ENV)
        if artifacts and os.path.isdir(artifacts) and \
                os.path.dirname(os.path.abspath(path)) != os.path.abspath(artifacts):
            paths.append(os.path.join(artifacts, RUNNER_REPORT_NAME))
        text = json.dumps(self.report, indent=2, sort_keys=True, default=str)
        page = report_html.render(self.report) if self.get_option("html") else None
        for where in paths:
            _write(where, text)
            if page is not None:
                _write(report_html.html_path(where), page)
        self._write_metrics()

    # --- metrics textfile (NODEWRIGHT_METRICS_TEXTFILE) ----------------------------------
    def _note_package_state(self, host, data):
        """The last package state a package task returned per (resource, node)."""
        key = (data.get("annotation") or {}).get("key") if isinstance(data.get("annotation"), dict) else None
        if key and key.startswith(ANNOTATION_STATE_PREFIX) and isinstance(data.get("state"), dict):
            self._package_states[(key[len(ANNOTATION_STATE_PREFIX):], host)] = _plain(data["state"])

    def _write_metrics(self):
        path = self.get_option("metrics_textfile")
        if not path:
            return
        kind = os.path.splitext(os.path.basename(self.report.get("playbook") or "playbook"))[0]
        summary = self.report.get("summary") or {}
        found = nw_metrics.MetricSet()
        nw_metrics.run_metrics(found, kind, self.report["duration"], not any(
            summary.get(k) for k in ("failed", "unreachable")), self.report["finished"], summary)
        nw_metrics.package_state_metrics(found, self._package_states)
        report_metrics.add_report_metrics(found, self.report, kind)
        _write(path, found.render())
