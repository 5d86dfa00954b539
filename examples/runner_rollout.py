#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Run NodeWright's rollout from Python with ansible-runner and print what happened
to each node.

    python examples/runner_rollout.py -i inventory/simulator.k8s_nodes.yml
    python examples/runner_rollout.py -i fleet.k8s_nodes.yml -e nodewright_resource=gpu-host-tuning

What it shows (docs/operating.md walks through it):

* ``ansible_runner.run(...)`` with the collection's ``playbooks/rollout.yml``, the
  ``nodewright.fleet.report`` callback enabled and its JSON report (and the report's
  HTML page) written into the run's artifacts directory, ``artifacts/<ident>/``;
* an ``event_handler`` that follows the run live (which node starts, which fails);
* per-node outcomes read afterwards from the run report (outcome, failed task and
  why, wave) and from ansible-runner's own record (``runner.stats``,
  ``runner.host_events(node)``).

Exit status: 0 every node ok, 2 some node failed, 1 the run itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid

COLLECTION = ("ansible_collections", "nodewright", "fleet")


def find_collection_root():
    """The directory that holds ansible_collections/nodewright/fleet."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [os.path.join(here, ".collections")]  # a development checkout (make link)
    candidates += [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p]
    candidates += [os.path.expanduser("~/.ansible/collections"), "/usr/share/ansible/collections"]
    for root in candidates:
        if os.path.isdir(os.path.join(root, *COLLECTION)):
            return root
    raise SystemExit("the nodewright.fleet collection was not found; set ANSIBLE_COLLECTIONS_PATH")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("-i", "--inventory", required=True, help="inventory (e.g. a *.k8s_nodes.yml file)")
    p.add_argument("-e", "--extra-var", action="append", default=[], help="KEY=VALUE, repeatable")
    p.add_argument("--private-data-dir", help="ansible-runner's directory (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the per-node outcomes as JSON")
    return p.parse_args(argv)


def main(argv=None):
    import ansible_runner

    args = parse_args(argv)
    root = find_collection_root()
    playbook = os.path.join(root, *COLLECTION, "playbooks", "rollout.yml")
    private = os.path.abspath(args.private_data_dir or tempfile.mkdtemp(prefix="nodewright-runner-"))
    os.makedirs(private, exist_ok=True)
    # The run's ident is chosen here, so the report can go into its artifacts directory.
    ident = uuid.uuid4().hex
    report_path = os.path.join(private, "artifacts", ident, "nodewright-report.json")
    extravars = dict(v.split("=", 1) for v in args.extra_var)

    def on_event(event):
        # Follow the run: each node's failures as they happen.
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            res = data.get("res") or {}
            print("  ! %s failed at '%s': %s" % (data.get("host"), data.get("task"), str(res.get("msg", ""))[:200]),
                  file=sys.stderr)
        return True  # keep the event in the artifacts too

    runner = ansible_runner.run(
        private_data_dir=private,
        ident=ident,
        playbook=playbook,
        inventory=os.path.abspath(args.inventory),
        extravars=extravars,
        envvars={
            "ANSIBLE_COLLECTIONS_PATH": root,
            "ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
            "NODEWRIGHT_REPORT_PATH": report_path,
            "ANSIBLE_LOCALHOST_WARNING": "false",
        },
        event_handler=on_event,
        quiet=True,
    )

    try:
        with open(report_path) as fh:
            report = json.load(fh)
    except (OSError, ValueError):
        report = {"hosts": {}}
    outcomes = {}
    for node, entry in sorted(report.get("hosts", {}).items()):
        if node == "localhost":
            continue
        failed = [e for e in runner.host_events(node) if e.get("event") == "runner_on_failed"
                  and not (e.get("event_data") or {}).get("ignore_errors")]
        outcomes[node] = {"outcome": entry.get("outcome"), "wave": entry.get("wave"),
                          "failed_task": entry.get("failed_task"), "msg": entry.get("msg"),
                          "duration": entry.get("duration"), "failed_events": len(failed)}
    # Nodes the play recap knows but the report does not (e.g. unreachable before any task).
    for node in sorted((runner.stats or {}).get("processed", {})):
        if node != "localhost" and node not in outcomes:
            dark = node in (runner.stats or {}).get("dark", {})
            outcomes[node] = {"outcome": "unreachable" if dark else "failed"
                              if node in (runner.stats or {}).get("failures", {}) else "ok"}

    if args.json:
        print(json.dumps({"status": runner.status, "rc": runner.rc, "nodes": outcomes}, indent=2, sort_keys=True))
    else:
        print("rollout %s (rc %s); artifacts in %s" % (runner.status, runner.rc, runner.config.artifact_dir))
        for node, o in outcomes.items():
            line = "%-20s %-12s" % (node, o["outcome"])
            if o.get("wave"):
                line += " wave %s" % o["wave"]
            if o["outcome"] != "ok":
                line += "  %s: %s" % (o.get("failed_task"), str(o.get("msg") or "").splitlines()[0][:200]
                                      if o.get("msg") else "")
            print(line)
        if not outcomes:
            print("no node had work")
    if runner.status not in ("successful", "failed"):
        return 1
    return 2 if any(o["outcome"] != "ok" for o in outcomes.values()) else (0 if runner.rc == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
