#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Inventory benchmark: ``ansible-inventory -i inventory/all-gpus.k8s_nodes.yml --list``
side by side with ``kubectl get nodes -o json`` on the same simulator, at 1,000 and
5,000 API-only GPU nodes; each also as an AWX/AAP sync runs it (``--list --export``), and
with the lean host variables of ``inventory/fleet-sync.k8s_nodes.yml`` (``node_facts``).

    python bench/inventory_bench.py [--sizes 1000 5000] [--runs 3] [--out bench/results/inventory.md]

The nodes are created with ``nodewright-sim add-nodes --pool h100 --no-host-root
--unmanaged`` (kwok does not play them; the node lifecycle controller marks them
NotReady, so both tools print the same, settled objects). Each command runs ``--runs``
times, the two tools alternating; wall time is measured around the process and the
peak memory is the child's own maximum resident set (``wait4`` rusage). An extra
``ansible-inventory --graph -vv`` run per size records how much of the time is the
plugin (reading the cluster, building the inventory) and how much is
``ansible-inventory`` printing every host variable.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "simulator"))

from nodewright_sim.cluster import Cluster, bin_dir  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
ANSIBLE_INVENTORY = os.path.join(VENV_BIN, "ansible-inventory")
INVENTORY_FILE = os.path.join(REPO, "inventory", "all-gpus.k8s_nodes.yml")
# The same nodes with the lean host variables of the shipped AWX/AAP sync example (node_facts).
LEAN_FILE = os.path.join(REPO, "inventory", "fleet-sync.k8s_nodes.yml")
LEAN = "ansible-inventory --list (fleet-sync, node_facts)"
# What an AWX/AAP inventory sync runs: --export prints each host's own variables (those
# of the inventory and of vars plugins) instead of every variable Ansible would give it.
EXPORT = "ansible-inventory --list --export"
LEAN_EXPORT = "ansible-inventory --list --export (fleet-sync, node_facts)"
# What ansible-core itself costs for the same hosts and host variables, without the
# plugin: the plugin's own --export output, saved once per size and replayed through a
# script inventory that prints it (no Kubernetes call, no facts to derive).
REPLAY = "ansible-inventory --list (the same variables replayed, no plugin)"
LEAN_REPLAY = "ansible-inventory --list (the fleet-sync variables replayed, no plugin)"
COMMANDS = ("kubectl get nodes -o json", "ansible-inventory --list", EXPORT, LEAN, LEAN_EXPORT,
            "ansible-inventory --graph", REPLAY, LEAN_REPLAY)
GOAL_RATIO = 1.3


def run_measured(argv, env):
    """Run ``argv`` with stdout to a scratch file; return (seconds, peak RSS MiB, output bytes)."""
    with tempfile.TemporaryFile() as out, open(os.devnull, "wb") as devnull:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=devnull)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit("%s failed with exit code %d" % (" ".join(argv), proc.returncode))
        size = out.seek(0, os.SEEK_END)
    return elapsed, usage.ru_maxrss / 1024.0, size


def node_count(kubectl, env):
    out = subprocess.run([kubectl, "get", "nodes", "--no-headers", "-o", "custom-columns=N:.metadata.name"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return len(out.split())


def wait_settled(kubectl, env, expected, timeout=600):
    """Until every node exists and carries a Ready condition (Unknown for these nodes)."""
    template = "{range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([kubectl, "get", "nodes", "-o", "jsonpath=" + template], env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        if len(out) >= expected and all(not line.endswith("=") for line in out):
            return
        time.sleep(5)
    raise SystemExit("nodes did not settle within %ds" % timeout)


def add_nodes(name, env, count):
    if count <= 0:
        return
    subprocess.run([os.path.join(VENV_BIN, "nodewright-sim"), "--name", name, "add-nodes", "--pool", "h100",
                    "--count", str(count), "--no-host-root", "--unmanaged"],
                   env=env, check=True, stdout=subprocess.DEVNULL)


def plugin_split(env):
    """The plugin's own -vv line: nodes read in X s, inventory built in Y s."""
    proc = subprocess.run([ANSIBLE_INVENTORY, "-i", INVENTORY_FILE, "--graph", "-vv"],
                          env=env, capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) nodes read in ([\d.]+)s, inventory built in ([\d.]+)s", proc.stdout + proc.stderr)
    return (int(m.group(1)), float(m.group(2)), float(m.group(3))) if m else None


def replay_script(source, env, workdir):
    """An executable script inventory that prints what ``source`` gave (``--list --export``)."""
    data = os.path.join(workdir, os.path.basename(source) + ".json")
    with open(data, "wb") as out:
        subprocess.run([ANSIBLE_INVENTORY, "-i", source, "--list", "--export"], env=env,
                       stdout=out, stderr=subprocess.DEVNULL, check=True)
    script = os.path.join(workdir, os.path.basename(source) + ".replay.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/sh\n# a script inventory: the same hosts and variables, read from a file\n"
                 "[ \"$1\" = --list ] && exec cat %s\necho '{}'\n" % data)
    os.chmod(script, 0o755)
    return script


def measure(size, runs, env, kubectl):
    workdir = tempfile.mkdtemp(prefix="inventory-replay-")
    replay, lean_replay = replay_script(INVENTORY_FILE, env, workdir), replay_script(LEAN_FILE, env, workdir)
    commands = {
        "kubectl get nodes -o json": [kubectl, "get", "nodes", "-o", "json"],
        "ansible-inventory --list": [ANSIBLE_INVENTORY, "-i", INVENTORY_FILE, "--list"],
        LEAN: [ANSIBLE_INVENTORY, "-i", LEAN_FILE, "--list"],
        EXPORT: [ANSIBLE_INVENTORY, "-i", INVENTORY_FILE, "--list", "--export"],
        LEAN_EXPORT: [ANSIBLE_INVENTORY, "-i", LEAN_FILE, "--list", "--export"],
        "ansible-inventory --graph": [ANSIBLE_INVENTORY, "-i", INVENTORY_FILE, "--graph"],
        REPLAY: [ANSIBLE_INVENTORY, "-i", replay, "--list"],
        LEAN_REPLAY: [ANSIBLE_INVENTORY, "-i", lean_replay, "--list"],
    }
    samples = {k: [] for k in commands}
    try:
        for _ in range(runs):
            for label, argv in commands.items():
                samples[label].append(run_measured(argv, env))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    for label, values in samples.items():
        walls = [v[0] for v in values]
        rows.append({"size": size, "command": label, "wall_median": statistics.median(walls),
                     "wall_min": min(walls), "rss_max": max(v[1] for v in values), "bytes": values[-1][2]})
    return rows, plugin_split(env)


def load_average():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "n/a"


def versions(kubectl, env):
    import ansible
    import kubernetes
    kc = subprocess.run([kubectl, "version", "--client", "-o", "yaml"], env=env, capture_output=True,
                        text=True).stdout
    m = re.search(r"gitVersion: (\S+)", kc)
    return {"ansible-core": ansible.__version__, "kubernetes (Python)": kubernetes.__version__,
            "kubectl": m.group(1) if m else "?", "Python": platform.python_version()}


def report(rows, splits, info, runs, out):
    by = {(r["size"], r["command"]): r for r in rows}
    sizes = sorted({r["size"] for r in rows})
    lines = [
        "# Inventory benchmark",
        "",
        "`ansible-inventory -i inventory/all-gpus.k8s_nodes.yml --list` next to `kubectl get nodes -o json` on",
        "the same simulator (API-only H100 nodes from `nodewright-sim add-nodes --no-host-root --unmanaged`).",
        "Median wall time of %d runs per command (the tools alternating), and the highest peak RSS of the" % runs,
        "process itself. Goal: the inventory at most %.1fx kubectl's wall time at 5,000 nodes." % GOAL_RATIO,
        "",
        "Produced by `python bench/inventory_bench.py` on %s." % info["date"],
        "",
        "| nodes | command | wall median (s) | wall min (s) | peak RSS (MiB) | output (MB) | vs kubectl |",
        "|------:|---------|----------------:|-------------:|---------------:|------------:|-----------:|",
    ]
    for size in sizes:
        base = by[(size, "kubectl get nodes -o json")]["wall_median"]
        for command in COMMANDS:
            r = by[(size, command)]
            ratio = "" if command.startswith("kubectl") else "%.2fx" % (r["wall_median"] / base)
            lines.append("| %s | `%s` | %.2f | %.2f | %.0f | %.1f | %s |" % (
                "{:,}".format(size), command, r["wall_median"], r["wall_min"], r["rss_max"], r["bytes"] / 1e6, ratio))
    lines += ["", "Inside the plugin (`ansible-inventory --graph -vv`, one run):", ""]
    for size in sizes:
        split = splits.get(size)
        if split:
            lines.append("- %s nodes: nodes read (paginated LIST, raw JSON, facts) in %.2f s, inventory built "
                         "(hosts, variables, groups) in %.2f s." % ("{:,}".format(split[0]), split[1], split[2]))
    top = max(sizes)
    kc = by[(top, "kubectl get nodes -o json")]
    lines.append("")
    for command, what in (("ansible-inventory --list", "every fact (all-gpus.k8s_nodes.yml)"),
                          (EXPORT, "every fact, as an AWX/AAP sync runs it (--export)"),
                          (LEAN, "lean host variables (fleet-sync.k8s_nodes.yml)"),
                          (LEAN_EXPORT, "lean host variables, as an AWX/AAP sync runs it (--export)")):
        inv = by[(top, command)]
        ratio = inv["wall_median"] / kc["wall_median"]
        lines.append("Result at %s nodes, %s: %.2fx kubectl's median wall time (goal: at most %.1fx): %s; best "
                     "against best: %.2fx." % ("{:,}".format(top), what, ratio, GOAL_RATIO,
                                               "met" if ratio <= GOAL_RATIO else "NOT met",
                                               inv["wall_min"] / kc["wall_min"]))
    lines += [
        "",
        "Machine: %s, %d CPUs; load average %s at the start, %s at the end (the machine is shared, so" % (
            info["machine"], os.cpu_count() or 0, info["load_start"], info["load_end"]),
        "absolute times vary between runs; the two tools always ran under the same conditions).",
        "Versions: %s." % ", ".join("%s %s" % kv for kv in info["versions"].items()),
        "",
    ]
    text = "\n".join(lines)
    # The hand-written analysis after the generated part (its first "## " heading) is kept.
    if os.path.exists(out):
        with open(out) as fh:
            previous = fh.read()
        if "\n## " in previous:
            text += "\n" + previous[previous.index("\n## ") + 1:]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        fh.write(text)
    print(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--name", default="bench-inventory", help="simulator instance to start (and stop)")
    p.add_argument("--reuse", help="use this running simulator instead; it must hold no other nodes")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "inventory.md"))
    args = p.parse_args(argv)

    kubectl = os.path.join(bin_dir(), "kubectl")
    cluster = Cluster(args.reuse or args.name)
    if args.reuse:
        if not cluster.running():
            raise SystemExit("simulator %r is not running" % args.reuse)
    else:
        subprocess.run([os.path.join(VENV_BIN, "nodewright-sim"), "--name", args.name, "up", "--profile", "bare",
                        "--nodes", "0"], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig,
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"))
    info = {"date": datetime.date.today().isoformat(), "machine": platform.machine(), "load_start": load_average(),
            "versions": versions(kubectl, env)}
    rows, splits = [], {}
    try:
        for size in sorted(args.sizes):
            add_nodes(cluster.name, env, size - node_count(kubectl, env))
            wait_settled(kubectl, env, size)
            print("measuring %d nodes ..." % size, file=sys.stderr)
            size_rows, split = measure(size, args.runs, env, kubectl)
            rows += size_rows
            splits[size] = split
    finally:
        if not args.reuse:
            cluster.down()
    info["load_end"] = load_average()
    report(rows, splits, info, args.runs, args.out)


if __name__ == "__main__":
    main()
