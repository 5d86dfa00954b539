#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Where a no-op rollout's controller time goes: py-spy over the controller and all its
workers, for each worker mode, on a fresh simulator fleet of N nodes each.

    .venv/bin/pip install py-spy
    .venv/bin/python bench/profile_rollout.py --nodes 300
    .venv/bin/python bench/profile_rollout.py --nodes 3000 --modes processes

Prints, per mode, the samples as milliseconds per node in a few buckets, and keeps the raw
profiles under --out. Only the thread holding the interpreter lock of each process is
sampled (``--gil``), one sample every 1/rate s: Python's CPU time in each process, as
threads waiting for the lock or for the network would otherwise count as busy.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from scale_bench import RESOURCE, make_fleet  # noqa: E402
from rollout_bench import playbook_command  # noqa: E402

FORK = "fork (the controller forking a worker)"
ACTION = "the maintain action (API calls, package run)"
EXECUTOR = "task executor around it (templating, connection)"
WORKER = "forked worker start-up and exit"
RESULTS = "result processing and callbacks"
QUEUE = "queueing (variables per host)"
REST = "the rest (start, planning, admission, waves)"
ORDER = (FORK, ACTION, EXECUTOR, WORKER, RESULTS, QUEUE, REST)


def bucket(stack):
    """The bucket of one collapsed stack (outermost frame first)."""
    frames = stack.split(";")
    if "popen_fork.py" in frames[-1]:
        return FORK
    if "worker.py" in stack:  # a forked worker (WorkerProcess) or a thread (ThreadWorker)
        if "maintain.py" in stack or "plugins/action/package.py" in stack:
            return ACTION
        if "task_executor.py" in stack:
            return EXECUTOR
        return WORKER
    if "_process_pending_results" in stack or "send_callback" in stack or "_results_thread_main" in stack:
        return RESULTS
    if "_queue_task" in stack or "get_vars" in stack:
        return QUEUE
    return REST


def summarize(path, nodes, rate):
    ms = 1000.0 / rate
    counts = collections.Counter()
    with open(path) as fh:
        for line in fh:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not n.isdigit():
                continue
            counts[bucket(stack)] += int(n)
            counts["all samples"] += int(n)
    return {k: v * ms / nodes for k, v in counts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--rate", type=int, default=20)
    ap.add_argument("--name", default="perf-profile")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "nodewright-profile"))
    ap.add_argument("--modes", nargs="+", choices=("threads", "processes"), default=["threads", "processes"])
    args = ap.parse_args()
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    os.makedirs(args.out, exist_ok=True)
    rows = {}
    for mode in args.modes:
        cluster, fleet, _custom, names = make_fleet(args.name, args.nodes, 100)
        try:
            with tempfile.TemporaryDirectory() as work:
                cmd, more = playbook_command("nodewright", names, 100, work, RESOURCE)
                env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, ANSIBLE_FORKS="25",
                           ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false", **more)
                raw = os.path.join(args.out, "%s-%d.txt" % (mode, args.nodes))
                subprocess.run([spy, "record", "--subprocesses", "--gil", "--format", "raw", "-r", str(args.rate),
                                "-o", raw, "--"] + cmd + ["-e", "nodewright_rollout_workers=" + mode], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                rows[mode] = summarize(raw, args.nodes, args.rate)
        finally:
            cluster.down()
    keys = ("all samples",) + ORDER
    print("| ms per node, %d nodes | %s |" % (args.nodes, " | ".join(args.modes)))
    print("|---|" + "---:|" * len(args.modes))
    for key in keys:
        print("| %s | %s |" % (key, " | ".join("%.1f" % rows[mode].get(key, 0.0) for mode in args.modes)))


if __name__ == "__main__":
    main()
