# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Running the collection's playbooks through ansible-runner, and reading what they
did: per-node outcomes from the run report and the run's stats, drift check results
from the job events."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time

from nodewright_cli import collection

DRIFT_TASK = "Run the check stages of each completed resource's packages"
# The task of rollout.yml that plans the run; it registers nodewright_desired.
DESIRED_TASK = "Read NodeWright resources, validate them and plan every node"


class RunResult(object):
    """One playbook run: ``status`` (successful, failed, canceled, timeout), ``rc``,
    ``duration``, ``hosts`` (node -> ok | failed | unreachable), ``messages`` (node ->
    why it failed), ``report`` (the nodewright.fleet.report JSON) and ``events``."""

    def __init__(self, kind, status, rc, started, finished, hosts, messages, report, events, artifacts):
        self.kind = kind
        self.status = status
        self.rc = rc
        self.started = started
        self.finished = finished
        self.duration = round(finished - started, 3)
        self.hosts = hosts
        self.messages = messages
        self.report = report
        self.events = events
        self.artifacts = artifacts

    @property
    def success(self):
        return self.status == "successful"

    def outcomes(self):
        counts = {}
        for outcome in self.hosts.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def summary(self):
        nodes = ", ".join("%s %s" % (h, o) for h, o in sorted(self.hosts.items()) if h != "localhost")
        return "%s run %s (rc %s) in %.1fs%s" % (self.kind, self.status, self.rc, self.duration,
                                                 (": " + nodes) if nodes else "")


def host_outcomes(stats, report):
    """node -> ok | failed | unreachable, from the run report (which knows a rescued
    failure from a real one) and the play recap stats of ansible-runner."""
    hosts, messages = {}, {}
    for host, entry in ((report or {}).get("hosts") or {}).items():
        hosts[host] = entry.get("outcome", "ok")
        if entry.get("outcome") != "ok":
            messages[host] = "%s: %s" % (entry.get("failed_task"), entry.get("msg"))
    stats = stats or {}
    for host in (stats.get("processed") or {}):
        if host in hosts:
            continue
        if host in (stats.get("dark") or {}):
            hosts[host] = "unreachable"
        elif host in (stats.get("failures") or {}):
            hosts[host] = "failed"
        else:
            hosts[host] = "ok"
    return hosts, messages


def default_inventory(workdir, connection):
    """A k8s_nodes inventory of the whole fleet, reached through ``connection``
    (k8s: a privileged pod per node; ssh; local: the simulator's host roots)."""
    path = os.path.join(workdir, "fleet.k8s_nodes.yml")
    connection = {"kubernetes": "k8s"}.get(connection, connection)
    text = ("# Written by nodewright reconcile: every node, with its NodeWright state.\n"
            "plugin: nodewright.fleet.k8s_nodes\nconnection: %s\n" % connection)
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def _find_ansible():
    """ansible-runner looks ansible-playbook up on PATH: a virtualenv's scripts dir may
    not be there when ``nodewright`` is started by its full path."""
    if shutil.which("ansible-playbook"):
        return
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "ansible-playbook")):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def run_playbook(playbook, kind, inventory, workdir, extravars=None, limit=None, cancel=None, envvars=None,
                 keep_events=None, cmdline=None, forks=None, quiet=True, project_dir=None):
    """Run ``playbook`` with ansible-runner in ``workdir/<kind>`` and return a RunResult.

    The one place NodeWright starts ansible-runner (the reconciler, drift checks and
    ``nodewright rollout``). ``cancel`` is polled about every second; when it returns
    True the run is abandoned (ansible-runner kills the playbook's process group).
    ``keep_events`` picks the job events to keep in ``RunResult.events``;
    ``cmdline`` is a list of further ansible-playbook arguments (``--check``, ``-v``);
    ``inventory`` a path or a list of them."""
    import ansible_runner

    _find_ansible()
    private = os.path.join(workdir, kind)
    os.makedirs(private, exist_ok=True)
    report_path = os.path.join(private, "report.json")
    if os.path.exists(report_path):
        os.unlink(report_path)
    env = {
        "ANSIBLE_COLLECTIONS_PATH": collection.collections_path(),
        "ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
        "NODEWRIGHT_REPORT_PATH": report_path,
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
    }
    env.update(envvars or {})
    events = []

    captured = {}

    def on_event(event):
        if event.get("event") == "playbook_on_stats":
            captured.update(event.get("event_data") or {})
        if keep_events and keep_events(event):
            events.append(event)
        return False  # not written to artifacts/job_events: the report and the stats say what happened

    started = time.time()
    extra = {}
    if cmdline:
        extra["cmdline"] = " ".join(shlex.quote(c) for c in cmdline)
    if forks:
        extra["forks"] = forks
    if project_dir:
        extra["project_dir"] = project_dir
    run = ansible_runner.run(private_data_dir=private, playbook=playbook, inventory=inventory,
                             extravars=extravars or {}, limit=limit, envvars=env, quiet=quiet,
                             cancel_callback=cancel or (lambda: False), event_handler=on_event,
                             rotate_artifacts=5, settings={"pexpect_timeout": 1}, **extra)
    finished = time.time()
    try:
        with open(report_path) as fh:
            report = json.load(fh)
    except (OSError, ValueError):
        report = None
    stats = captured or run.stats or {}
    hosts, messages = host_outcomes(stats, report)
    result = RunResult(kind, run.status, run.rc, started, finished, hosts, messages, report, events,
                       getattr(run.config, "artifact_dir", private))
    result.stats = stats
    return result


def is_drift_result(event):
    return event.get("event") in ("runner_on_ok", "runner_on_failed") and \
        (event.get("event_data") or {}).get("task") == DRIFT_TASK


def drift_results(events):
    """From the drift playbook's events: ``(found, errors)`` where ``found`` is
    ``{node: {resource: [drifted package entries]}}`` for every node checked and
    ``errors`` is ``{node: message}`` for nodes whose check could not run."""
    found, errors = {}, {}
    for event in events:
        data = event.get("event_data") or {}
        node = data.get("host")
        res = data.get("res") or {}
        items = res.get("results") if isinstance(res.get("results"), list) else [res]
        for item in items:
            resource = item.get("item") or item.get("resource") or \
                ((item.get("invocation") or {}).get("module_args") or {}).get("resource")
            if item.get("failed") or item.get("unreachable"):
                errors[node] = "%s: %s" % (resource, item.get("msg", "check failed to run"))
                continue
            if item.get("skipped") or resource is None:
                continue
            found.setdefault(node, {})[resource] = list(item.get("drifted") or [])
    return found, errors


def is_desired_result(event):
    return event.get("event") in ("runner_on_ok", "runner_on_failed") and \
        (event.get("event_data") or {}).get("task") == DESIRED_TASK


def desired_result(events):
    """The ``nodewright_desired`` that rollout.yml registered on localhost, from its job
    events: the desired_state result as a later task reads it, or None when the task
    failed or never ran."""
    found = None
    for event in events:
        data = event.get("event_data") or {}
        if not is_desired_result(event) or data.get("host") not in (None, "localhost"):
            continue
        res = data.get("res")
        if event.get("event") != "runner_on_ok" or not isinstance(res, dict) or res.get("failed"):
            found = None
            continue
        found = {k: v for k, v in res.items() if not k.startswith("_ansible") and k != "invocation"}
    return found
