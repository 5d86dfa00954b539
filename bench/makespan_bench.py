#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Makespan of a rollout whose nodes take different times: measured against the ideal.

A simulator fleet of N nodes (with host roots) and one disruptive package: its apply
step sleeps a per-node time written into the node's host root
(``/etc/nodewright-bench/apply-seconds``, seeded: 80% of the nodes 3-8 s, 15% 15-25 s,
5% 45-60 s), and its interrupt restarts containerd, so every node is cordoned, drained
and uncordoned. A DeploymentPolicy of fixed batches of B with ``budget: {count: B}``.

Modes, each on the same fleet under a resource of its own (fresh node state):

* ``waves``: ``playbooks/rollout.yml`` under the rollout strategy, ``ANSIBLE_FORKS=B``;
* ``slices``: the AWX job-slicing equivalent: ``--slices`` runs of ``rollout.yml`` at
  once, each limited to every k-th node (as AWX slices an inventory), sharing the
  fleet limit through the admission Lease; the policy's ``initialBatch`` is the budget
  over the slices (``--slice-batch``), so that together they fill it.

Per mode, from the run reports (each node's timeline: when its first task started and
its last ended): the makespan, the ideal ``fixed + max(sum(d_i + o) / B, max(d_i + o))``
(``fixed``: before the first node and after the last; ``o``: the median time a node
takes besides its sleep), the ratio, slot utilisation (node busy time over B x the
rollout's span) and the most nodes in progress at once.

    .venv/bin/python bench/makespan_bench.py                      # 60 nodes, B 10
    .venv/bin/python bench/makespan_bench.py --nodes 300 --modes waves
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "simulator"))
sys.path.insert(0, HERE)

import yaml  # noqa: E402
from kubernetes import client  # noqa: E402
from scale_bench import fresh_fleet  # noqa: E402

GROUP, VERSION = "nodewright.io", "v1alpha1"
VENV_BIN = os.path.dirname(sys.executable)
RESULTS = os.path.join(HERE, "results", "makespan.md")
DURATION_FILE = "etc/nodewright-bench/apply-seconds"
APPLY = 'sleep "$(cat /%s 2>/dev/null || echo 0)"\n' % DURATION_FILE


def durations(names, seed):
    """node -> seconds its apply step sleeps (seeded)."""
    rnd = random.Random(seed)
    out = {}
    for name in names:
        roll = rnd.random()
        out[name] = round(rnd.uniform(3, 8) if roll < 0.80 else rnd.uniform(15, 25) if roll < 0.95 else
                          rnd.uniform(45, 60), 1)
    return out


def make_fleet(name, nodes):
    cluster, fleet, names = fresh_fleet(name, [("h100", nodes)])
    subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "install_crds.yml")],
                   check=True, capture_output=True,
                   env=dict(os.environ, KUBECONFIG=cluster.kubeconfig,
                            ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections")))
    return cluster, fleet, names


def write_durations(fleet, seconds):
    for node, value in seconds.items():
        path = os.path.join(fleet.host_root(node), DURATION_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("%s\n" % value)


def create_resource(fleet, resource, batch, initial):
    custom = client.CustomObjectsApi(fleet.api)
    custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DeploymentPolicy", "metadata": {"name": resource},
        "spec": {"default": {"budget": {"count": batch}, "strategy": {"fixed": {"initialBatch": initial}}}}})
    custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": resource},
        "spec": {"nodeSelectors": {"matchLabels": {"type": "kwok"}}, "deploymentPolicy": resource,
                 "packages": {"shellscript": {"version": "1.0.0", "configMap": {"apply.sh": APPLY, "apply_check.sh": "true\n"},
                                              "interrupt": {"type": "service", "services": ["containerd"]}}}}})
    return custom


def run_mode(mode, cluster, names, resource, batch, slices, workdir):
    """``[(report, rc)]``: one report for ``waves``, one per slice for ``slices``."""
    inv = os.path.join(workdir, "fleet.k8s_nodes.yml")
    with open(inv, "w") as fh:
        yaml.safe_dump({"plugin": "nodewright.fleet.k8s_nodes", "label_selectors": "type=kwok",
                        "connection": "local"}, fh)
    parts = [names] if mode == "waves" else [names[k::slices] for k in range(slices)]
    procs = []
    for k, part in enumerate(parts):
        report = os.path.join(workdir, "%s-%d.json" % (mode, k))
        cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inv, os.path.join(REPO, "playbooks", "rollout.yml"),
               "-e", "nodewright_resource=" + resource]
        if mode == "slices":
            cmd += ["--limit", "localhost," + ",".join(part)]
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, ANSIBLE_FORKS=str(batch),
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
                   ANSIBLE_CALLBACKS_ENABLED="nodewright.fleet.report", NODEWRIGHT_REPORT_PATH=report,
                   ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false")
        log = open(os.path.join(workdir, "%s-%d.log" % (mode, k)), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), report, log))
    out = []
    for proc, report, log in procs:
        rc = proc.wait()
        log.close()
        with open(report) as fh:
            out.append((json.load(fh), rc))
    return out


def node_intervals(reports, names):
    """node -> (start, end) in seconds since the epoch, from the timelines of the reports."""
    out = {}
    for report, _rc in reports:
        base = report["started"]
        for host, entry in (report.get("hosts") or {}).items():
            if host not in names:
                continue
            steps = [s for s in entry.get("timeline") or [] if "start" in s]
            if not steps:
                continue
            start = base + min(s["start"] for s in steps)
            end = base + max(s["start"] + s.get("duration", 0) for s in steps)
            out[host] = (min(start, out.get(host, (start, end))[0]), max(end, out.get(host, (start, end))[1]))
    return out


def measure(reports, names, seconds, batch):
    intervals = node_intervals(reports, names)
    run_start = min(r["started"] for r, _rc in reports)
    run_end = max(r["finished"] for r, _rc in reports)
    first = min(s for s, _e in intervals.values())
    last = max(e for _s, e in intervals.values())
    makespan = run_end - run_start
    fixed = (first - run_start) + (run_end - last)
    busy = {n: e - s for n, (s, e) in intervals.items()}
    overhead = statistics.median(busy[n] - seconds[n] for n in busy)
    per_node = [seconds[n] + overhead for n in names]
    ideal = fixed + max(sum(per_node) / batch, max(per_node))
    events = sorted([(s, 1) for s, _e in intervals.values()] + [(e, -1) for _s, e in intervals.values()])
    now = peak = 0
    for _t, step in events:
        now += step
        peak = max(peak, now)
    return {"nodes": len(names), "done": len(intervals), "rc": [rc for _r, rc in reports],
            "makespan_s": round(makespan, 1), "ideal_s": round(ideal, 1), "ratio": round(makespan / ideal, 2),
            "fixed_s": round(fixed, 1), "overhead_s": round(overhead, 1),
            "utilisation": round(sum(busy.values()) / (batch * (last - first)), 2), "max_in_progress": peak,
            "sum_sleep_s": round(sum(seconds.values()), 1)}


def render(rows, batch, seed):
    lines = ["| nodes | mode | initialBatch | makespan | ideal | ratio | slot utilisation | max in progress | fixed "
             "| o per node |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %d | %s | %s | %.0f s | %.0f s | %.2fx | %d%% | %d | %.0f s | %.1f s |" % (
            r["nodes"], r["mode"], r.get("initial_batch", batch), r["makespan_s"], r["ideal_s"], r["ratio"],
            round(100 * r["utilisation"]),
            r["max_in_progress"], r["fixed_s"], r["overhead_s"]))
    return "\n".join(lines) + "\n\nB = %d, seed %d, %s\n" % (batch, seed, datetime.date.today().isoformat())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[60])
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--slices", type=int, default=3)
    parser.add_argument("--slice-batch", type=int, default=None,
                        help="initialBatch of the slices' policy (default: the budget over the slices, rounded up)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=["waves", "slices"], choices=["waves", "slices"])
    parser.add_argument("--jsonl", default=None, help="append each result as a JSON line")
    args = parser.parse_args()
    rows = []
    for count in args.nodes:
        cluster, fleet, names = make_fleet("bench-makespan", count)
        try:
            seconds = durations(names, args.seed)
            write_durations(fleet, seconds)
            for mode in args.modes:
                resource = "makespan-%s" % mode
                # Slices: each slice's waves as large as its share of the budget, so that the
                # slices together fill it (the budget still caps the fleet).
                initial = args.batch if mode == "waves" else args.slice_batch or -(-args.batch // args.slices)
                create_resource(fleet, resource, args.batch, initial)
                work = tempfile.mkdtemp(prefix="nw-makespan-%s-" % mode)  # the logs and reports stay
                started = time.time()
                reports = run_mode(mode, cluster, names, resource, args.batch, args.slices, work)
                if any(rc for _r, rc in reports):
                    raise SystemExit("the %s run failed (rc %s): see %s" % (mode, [rc for _r, rc in reports], work))
                row = dict(measure(reports, names, seconds, args.batch), mode=mode, initial_batch=initial,
                           wall_s=round(time.time() - started, 1))
                print("%s: logs and reports in %s" % (mode, work), flush=True)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.jsonl:
                    with open(args.jsonl, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
        finally:
            cluster.down()
    print(render(rows, args.batch, args.seed))


if __name__ == "__main__":
    main()
