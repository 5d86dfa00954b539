#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Fleet-scale rollout benchmark: the same no-op walk of N simulator nodes by three
tools, alternating, in one invocation.

* ``nodewright``: playbooks/rollout.yml through the k8s_nodes inventory, one no-op
  package (``shellscript`` without scripts), a DeploymentPolicy of fixed batches
  (``budget`` and ``initialBatch`` = --batch), ``--forks`` forks;
* ``kubernetes.core``: the playbook an operator would otherwise write
  (``rollout_bench.BASELINE_PLAY``: ``serial`` batches, a label before and after a
  no-op command through ``kubernetes.core.k8s``);
* ``floor``: bench/floor.py, the least any tool must do (three Node PATCHes and one
  chroot exec per node, 25 threads in one Python process).

Each run gets a fresh simulator of N nodes (half h100, half b200, with host roots), in
which the tools run one after the other, their order rotating between runs (their
marks do not overlap). Per tool run: wall time, CPU seconds of the process and every
descendant it reaped (``os.wait4`` rusage: user + system), the peak resident memory of
the process tree (sampled every 0.5 s) and whether every node was done. Each result is
appended to --jsonl as it comes; the table of medians is printed at the end (and
written to --out).

    python bench/scale_bench.py --sizes 100 300 1000 --runs 2
    python bench/scale_bench.py --sizes 1000 --tools nodewright floor --runs 2
    python bench/scale_bench.py --render     # the table again from the JSON lines
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "simulator"))
sys.path.insert(0, HERE)

from nodewright_sim.cluster import Cluster, tree_pids  # noqa: E402
from nodewright_sim.fleet import Fleet, create_fleet  # noqa: E402
from rollout_bench import GROUP, VERSION, install_bench_resources, playbook_command, tree_rss_mib  # noqa: E402

TOOLS = ("nodewright", "nodewright-threads", "kubernetes.core", "floor")
# NodeWright's rollout with each node's maintain task in a thread of the controller
# (nodewright_rollout_workers=threads) instead of a forked worker process, as
# ansible-core runs every task (the default).
NODEWRIGHT_TOOLS = ("nodewright", "nodewright-threads")
RESOURCE = "bench-noop"


def tree_pss_mib(root_pid):
    """Proportional set size of a process and all its descendants: pages the forked
    workers share with the controller counted once, not once per worker as RSS is."""
    total = 0
    for pid in tree_pids(root_pid):
        try:
            with open("/proc/%d/smaps_rollup" % pid) as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total / 1024.0


def measure(cmd, env, log_path):
    """Run ``cmd``; (rc, wall s, CPU s of it and its reaped descendants, peak tree RSS
    MiB, peak tree PSS MiB)."""
    with open(log_path, "w") as log:
        start = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak = [0.0, 0.0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_mib(proc.pid))
                peak[1] = max(peak[1], tree_pss_mib(proc.pid))
                done.wait(0.5)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - start
        done.set()
        t.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, peak[0], peak[1]


def fresh_fleet(name, pools):
    """A fresh simulator ``name`` with ``pools`` (``[(pool, count)]``) of nodes with host
    roots, all Ready: ``(cluster, fleet, node names)``."""
    cluster = Cluster(name)
    if cluster.running():
        cluster.down()
    cluster.up(fleet_size=sum(count for _pool, count in pools))
    create_fleet(cluster, "bare", nodes=0)
    fleet = Fleet(cluster)
    names = [n for pool, count in pools for n in fleet.add_nodes(pool, count)]
    fleet.wait_ready(len(names), timeout=900)
    return cluster, fleet, names


def make_fleet(name, nodes, batch):
    cluster, fleet, names = fresh_fleet(name, [("h100", nodes // 2), ("b200", nodes - nodes // 2)])
    custom = install_bench_resources(cluster, fleet, batch, RESOURCE)
    return cluster, fleet, custom, names


def run_tool(tool, cluster, fleet, custom, names, batch, forks, work):
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, ANSIBLE_FORKS=str(forks),
               ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false")
    if tool == "floor":
        cmd = [sys.executable, os.path.join(HERE, "floor.py"), "--kubeconfig", cluster.kubeconfig,
               "--threads", "25"]
    else:
        cmd, more = playbook_command("nodewright" if tool in NODEWRIGHT_TOOLS else tool, names, batch, work, RESOURCE)
        if tool == "nodewright-threads":
            cmd += ["-e", "nodewright_rollout_workers=threads"]
        env.update(more)
    rc, wall, cpu, peak, pss = measure(cmd, env, os.path.join(work, tool + ".log"))
    if tool == "floor":
        done = len(fleet.node_names("bench.nodewright.io/floor=done"))
    elif tool == "kubernetes.core":
        done = len(fleet.node_names("example.com/maintenance=done"))
    else:  # a NodeWright rollout
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", RESOURCE).get("status", {})
        done = status.get("completeNodes")
        done = int(str(done).split("/")[0]) if done is not None else 0
    return {"rc": rc, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mib": round(peak), "peak_pss_mib": round(pss),
            "done": done, "log": None if rc == 0 else open(os.path.join(work, tool + ".log")).read()[-2000:]}


def render(results, out):
    rows = {}
    for r in results:
        rows.setdefault((r["nodes"], r["tool"]), []).append(r)
    base = {}
    lines = ["| tool | nodes | runs | wall s (median) | wall s (all) | per node ms | CPU s | CPU ms per node | "
             "peak RSS MiB | peak PSS MiB | per node vs 100 | done |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for (nodes, tool) in sorted(rows, key=lambda k: (TOOLS.index(k[1]), k[0])):
        rs = rows[(nodes, tool)]
        wall = statistics.median(r["wall_s"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        per = wall * 1000.0 / nodes
        if nodes == 100:
            base[tool] = per
        ratio = "%.2f" % (per / base[tool]) if tool in base and nodes != 100 else "-"
        lines.append("| %s | %d | %d | %.1f | %s | %.0f | %.1f | %.1f | %d | %d | %s | %s |" % (
            tool, nodes, len(rs), wall, ", ".join("%.1f" % r["wall_s"] for r in rs), per, cpu,
            cpu * 1000.0 / nodes, max(r["peak_rss_mib"] for r in rs), max(r.get("peak_pss_mib", 0) for r in rs), ratio,
            ", ".join("%s/%d%s" % (r["done"], nodes, "" if r["rc"] == 0 else " rc=%d" % r["rc"]) for r in rs)))
    table = "\n".join(lines) + "\n"
    if out:
        with open(out, "w") as fh:
            fh.write(table)
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    ap.add_argument("--max-kubernetes-core", type=int, default=300,
                    help="largest fleet the kubernetes.core playbook walks (about 0.8 s a node)")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--forks", type=int, default=25)
    ap.add_argument("--name", default="bench-scale", help="simulator name")
    ap.add_argument("--jsonl", default=os.path.join(HERE, "results", "scale.jsonl"))
    ap.add_argument("--out", help="also write the table (medians) to this file")
    ap.add_argument("--render", action="store_true", help="only write the table from --jsonl")
    args = ap.parse_args()
    if not args.render:
        for nodes in args.sizes:
            tools = [t for t in args.tools if t != "kubernetes.core" or nodes <= args.max_kubernetes_core]
            for run in range(args.runs):
                order = tools[run % len(tools):] + tools[:run % len(tools)]
                cluster, fleet, custom, names = make_fleet(args.name, nodes, args.batch)
                try:
                    with tempfile.TemporaryDirectory() as work:
                        rolled = False
                        for tool in order:
                            if tool in NODEWRIGHT_TOOLS:
                                if rolled:  # the fleet is done: the next NodeWright variant gets a fresh one
                                    cluster, fleet, custom, names = make_fleet(args.name, nodes, args.batch)
                                rolled = True
                            load = os.getloadavg()[0]
                            r = run_tool(tool, cluster, fleet, custom, names, args.batch, args.forks, work)
                            r.update(tool=tool, nodes=nodes, run=run, batch=args.batch, forks=args.forks,
                                     load_before=round(load, 2), time=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime()),
                                     python=platform.python_version())
                            print(json.dumps(r), flush=True)
                            with open(args.jsonl, "a") as fh:
                                fh.write(json.dumps(r) + "\n")
                finally:
                    cluster.down()
    with open(args.jsonl) as fh:
        results = [json.loads(line) for line in fh if line.strip()]
    print(render(results, args.out))


if __name__ == "__main__":
    main()
