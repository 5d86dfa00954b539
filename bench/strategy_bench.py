#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Strategy benchmark: the overhead of nodewright.fleet.rollout against ansible-core's
own batching, on the same no-op play over the same hosts.

  linear   - `serial: 50` with the default `linear` strategy (the batches are fixed
             before the play starts);
  rollout  - `strategy: nodewright.fleet.rollout` with a DeploymentPolicy whose waves
             are the same: `fixed: {initialBatch: 50}`, `budget: {count: 50}`;
  runner   - (with --runner) nodewright rollout driving the same policy, one
             ansible-playbook run per wave through ansible-runner.

The hosts are plain names with `ansible_connection: local` and `nodewright_node_labels: {}`,
so no cluster is needed; the task is `ansible.builtin.debug` (no connection, no module
transfer), which leaves as little as possible besides the batching itself.

    python bench/strategy_bench.py [--hosts 500] [--batch 50] [--runs 3] [--forks 10]
                                   [--runner] [--out bench/results/strategy.md]

Goal: the rollout strategy takes at most 10% more wall time than `serial`.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
GOAL_PERCENT = 10.0


def write_inputs(workdir, hosts, batch):
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "nodewright_node_labels": {}},
                         "hosts": {"node-%04d" % i: None for i in range(hosts)}}}
    task = {"name": "no-op", "ansible.builtin.debug": {"msg": "patched {{ inventory_hostname }}"}}
    policy = {"default": {"budget": {"count": batch}, "strategy": {"fixed": {"initialBatch": batch}}}}
    plays = {
        "linear": {"name": "bench", "hosts": "all", "gather_facts": False, "serial": batch, "tasks": [task]},
        "rollout": {"name": "bench", "hosts": "all", "gather_facts": False, "strategy": "nodewright.fleet.rollout",
                    "vars": {"nodewright_rollout_policy": policy}, "tasks": [task]},
        "runner": {"name": "bench", "hosts": "all", "gather_facts": False, "tasks": [task]},
    }
    paths = {"inventory": os.path.join(workdir, "inventory.yml"), "policy": os.path.join(workdir, "policy.yml")}
    with open(paths["inventory"], "w") as fh:
        yaml.safe_dump(inventory, fh)
    with open(paths["policy"], "w") as fh:
        yaml.safe_dump(policy, fh)
    for name, play in plays.items():
        paths[name] = os.path.join(workdir, "%s.yml" % name)
        with open(paths[name], "w") as fh:
            yaml.safe_dump([play], fh, sort_keys=False)
    return paths


def command(variant, paths, forks, workdir):
    if variant == "runner":
        return [os.path.join(VENV_BIN, "nodewright"), "rollout", paths["runner"],
                "-i", paths["inventory"], "--policy", paths["policy"], "--forks", str(forks),
                "--report", os.path.join(workdir, "runner-report.json")]
    return [os.path.join(VENV_BIN, "ansible-playbook"), "-i", paths["inventory"], paths[variant],
            "--forks", str(forks)]


def run_once(variant, paths, forks, workdir, hosts):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command(variant, paths, forks, workdir), capture_output=True, text=True, env=env,
                          cwd=workdir)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of ansible-playbook and its workers: steadier than wall time on a shared machine.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit("%s failed (rc %d):\n%s\n%s" % (variant, proc.returncode, proc.stdout[-3000:],
                                                        proc.stderr[-3000:]))
    if variant != "runner":
        recap = proc.stdout.split("PLAY RECAP")[-1]
        done = sum(1 for line in recap.splitlines() if ": ok=1 " in line)
        if done != hosts:
            raise SystemExit("%s: %d of %d hosts ran the task" % (variant, done, hosts))
    return elapsed, cpu


def ansible_version():
    out = subprocess.run([os.path.join(VENV_BIN, "ansible"), "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--runner", action="store_true", help="also time nodewright rollout")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "strategy.md"))
    args = parser.parse_args()

    variants = ["linear", "rollout"] + (["runner"] if args.runner else [])
    load_start = ", ".join("%.1f" % x for x in os.getloadavg())
    times = {v: [] for v in variants}
    cpus = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="nodewright-strategy-bench-") as workdir:
        paths = write_inputs(workdir, args.hosts, args.batch)
        run_once("rollout", paths, args.forks, workdir, args.hosts)  # warm caches (bytecode, plugin loader)
        for n in range(args.runs):
            # Alternate the order so that drift on a shared machine hits both alike.
            order = variants if n % 2 == 0 else list(reversed(variants))
            for variant in order:
                elapsed, cpu = run_once(variant, paths, args.forks, workdir, args.hosts)
                times[variant].append(elapsed)
                cpus[variant].append(cpu)
                print("run %d %-8s %6.2f s wall %6.2f s CPU" % (n + 1, variant, elapsed, cpu), flush=True)

    base = statistics.median(times["linear"])
    base_cpu = statistics.median(cpus["linear"])
    rows = []
    for variant in variants:
        median = statistics.median(times[variant])
        cpu = statistics.median(cpus[variant])
        rows.append("| %s | %.2f | %.2f | %.2f | %+.1f%% | %+.1f%% | %.2f | %+.1f%% |" % (
            {"linear": "`linear`, `serial: %d`" % args.batch,
             "rollout": "`nodewright.fleet.rollout`, fixed %d" % args.batch,
             "runner": "`nodewright rollout`, fixed %d" % args.batch}[variant],
            median, min(times[variant]), max(times[variant]), (median / base - 1) * 100,
            (min(times[variant]) / min(times["linear"]) - 1) * 100, cpu, (cpu / base_cpu - 1) * 100))
    overhead = (statistics.median(times["rollout"]) / base - 1) * 100
    best_overhead = (min(times["rollout"]) / min(times["linear"]) - 1) * 100
    cpu_overhead = (statistics.median(cpus["rollout"]) / base_cpu - 1) * 100

    def verdict(percent):
        return "%+.1f%% (%s)" % (percent, "met" if percent <= GOAL_PERCENT else "NOT met")

    text = "\n".join([
        "# Strategy overhead: `nodewright.fleet.rollout` vs `serial`",
        "",
        "%d hosts (`ansible_connection: local`), one `ansible.builtin.debug` task, %d waves of %d, "
        "`--forks %d`, %d runs each (alternating order, after one warm-up run)." % (
            args.hosts, -(-args.hosts // args.batch), args.batch, args.forks, args.runs),
        "",
        "| Variant | Median wall s | Best | Worst | Median vs `serial` | Best vs `serial` | Median CPU s "
        "| CPU vs `serial` |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ] + rows + [
        "",
        "Goal: the strategy at most %+.0f%% against `serial`. Median wall time %s; best wall time %s; "
        "median CPU time %s." % (GOAL_PERCENT, verdict(overhead), verdict(best_overhead), verdict(cpu_overhead)),
        "",
        "CPU is user + system time of `ansible-playbook` and its workers. On a shared machine wall times swing",
        "with the other load (see best and worst); CPU time varies least. Load average (1, 5, 15 min) at start:",
        "%s; at end: %s." % (load_start, ", ".join("%.1f" % x for x in os.getloadavg())),
        "",
        "Machine: %s, %s CPUs, Python %s, %s." % (platform.platform(), os.cpu_count(),
                                                 platform.python_version(), ansible_version()),
        "Generated by `python bench/strategy_bench.py%s`." % "".join(" " + a for a in sys.argv[1:]),
        "",
    ])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
