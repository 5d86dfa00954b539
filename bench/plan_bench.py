#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Planning benchmark: ``playbooks/plan.yml`` and the planning play of
``playbooks/rollout.yml`` ("Read the desired state") at fleet scale, three NodeWright
resources on overlapping label sets of the nodes.

    python bench/plan_bench.py [--nodes 5000] [--runs 2] [--out bench/results/plan.md]

The simulator (a fresh one, ``--name perf-plan-<pid>`` unless given) holds API-only
nodes (``nodewright-sim add-nodes --no-host-root --unmanaged``), half h100, half b200,
and, in the shipped examples' style, the ``gpu-canary`` DeploymentPolicy of
deploy/examples and three resources:

* ``bench-h100-sysctl``: the sysctl package on the H100 nodes;
* ``bench-b200-sysctl``: the sysctl package, other parameters, on the B200 nodes
  (disjoint from the first);
* ``bench-script``: the shellscript package with ``apply.sh`` and ``apply_check.sh`` on
  every GPU node (overlapping both).

Two commands, alternating, ``--runs`` times each:

* ``plan.yml``: ``ansible-playbook playbooks/plan.yml`` (localhost only; it reads every
  NodeWright resource, DeploymentPolicy and node and plans every node);
* ``rollout.yml planning``: ``ansible-playbook -i inventory/all-gpus.k8s_nodes.yml
  -i localhost.ini playbooks/rollout.yml --check --limit localhost`` (localhost.ini:
  the controller as ``localhost ansible_connection=local``, which the limit needs). Check mode and the limit keep
  the run to planning: the first play reads the inventory (the plugin lists every
  node) and the desired state, plans every node and says what would happen; the
  rollout play then has no node in the limit (only localhost) and is skipped, and the
  status play only predicts (check mode). The benchmark checks
  afterwards that no node and no resource was written to.

Per run: wall time, CPU seconds of the process and every descendant it reaped
(``os.wait4`` rusage, user + system), the peak resident (RSS) and proportional (PSS)
memory of the process tree, sampled every 0.5 s. The table gives the median of the
runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "simulator"))
sys.path.insert(0, HERE)

import yaml  # noqa: E402
from nodewright_sim.cluster import Cluster, bin_dir  # noqa: E402
from scale_bench import measure  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
INVENTORY_FILE = os.path.join(REPO, "inventory", "all-gpus.k8s_nodes.yml")
POLICY_FILE = os.path.join(REPO, "deploy", "examples", "deploymentpolicy-gpu-canary.yaml")
COMMANDS = ("plan.yml", "rollout.yml planning")


def resources():
    """The three NodeWright resources, as the shipped examples write them."""
    def nodewright(name, selector, packages, priority):
        return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": name},
                "spec": {"nodeSelectors": selector, "priority": priority, "deploymentPolicy": "gpu-canary",
                         "podNonInterruptLabels": {"matchLabels": {"app.kubernetes.io/component": "training"}},
                         "packages": packages}}
    product = "nvidia.com/gpu.product"
    return [
        nodewright("bench-h100-sysctl", {"matchLabels": {product: "NVIDIA-H100-80GB-HBM3"}},
                   {"sysctl": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["containerd"]},
                               "configMap": {"vm.max_map_count": "1048576",
                                             "net.core.rmem_max": "268435456"}}}, 100),
        nodewright("bench-b200-sysctl", {"matchExpressions": [{"key": product, "operator": "In",
                                                               "values": ["NVIDIA-B200"]}]},
                   {"sysctl": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["containerd"]},
                               "configMap": {"vm.max_map_count": "2097152",
                                             "net.core.wmem_max": "268435456"}}}, 110),
        nodewright("bench-script", {"matchLabels": {"nvidia.com/gpu.present": "true"}},
                   {"shellscript": {"version": "1.0.0", "configMap": {
                       "apply.sh": "#!/bin/sh\nset -eu\nmkdir -p /etc/bench\necho ok > /etc/bench/marker\n",
                       "apply_check.sh": "#!/bin/sh\ngrep -qx ok /etc/bench/marker\n"}}}, 200),
    ]


def kubectl_json(kubectl, env, *args):
    out = subprocess.run([kubectl, *args, "-o", "json"], env=env, capture_output=True, check=True).stdout
    return json.loads(out)


def written(kubectl, env):
    """Nodes carrying a NodeWright label or annotation, and resources with a status."""
    nodes = 0
    for node in kubectl_json(kubectl, env, "get", "nodes")["items"]:
        meta = node["metadata"]
        keys = list(meta.get("labels") or {}) + list(meta.get("annotations") or {})
        nodes += any(k.startswith("nodewright.io/") for k in keys)
    statuses = sum(1 for r in kubectl_json(kubectl, env, "get", "nodewrights")["items"] if r.get("status"))
    return nodes, statuses


def wait_nodes(kubectl, env, expected):
    import time
    deadline = time.time() + 900
    while time.time() < deadline:
        out = subprocess.run([kubectl, "get", "nodes", "--no-headers", "-o", "custom-columns=N:.metadata.name"],
                             env=env, capture_output=True, text=True, check=True).stdout
        if len(out.split()) >= expected:
            return
        time.sleep(5)
    raise SystemExit("the simulator did not reach %d nodes" % expected)


def setup(cluster, env, kubectl, nodes):
    sim = os.path.join(VENV_BIN, "nodewright-sim")
    subprocess.run([sim, "--name", cluster.name, "up", "--profile", "bare", "--nodes", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    half = nodes // 2
    for pool, count in (("h100", half), ("b200", nodes - half)):
        subprocess.run([sim, "--name", cluster.name, "add-nodes", "--pool", pool, "--count", str(count),
                        "--no-host-root", "--unmanaged"], env=env, check=True, stdout=subprocess.DEVNULL)
    wait_nodes(kubectl, env, nodes)
    subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "install_crds.yml")],
                   env=env, check=True, capture_output=True)
    subprocess.run([kubectl, "apply", "-f", POLICY_FILE], env=env, check=True, stdout=subprocess.DEVNULL)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump_all(resources(), fh)
    try:
        subprocess.run([kubectl, "apply", "-f", fh.name], env=env, check=True, stdout=subprocess.DEVNULL)
    finally:
        os.unlink(fh.name)


def command(label, work):
    playbook = os.path.join(VENV_BIN, "ansible-playbook")
    if label == "plan.yml":
        return [playbook, os.path.join(REPO, "playbooks", "plan.yml"),
                "-e", "nodewright_plan_path=" + os.path.join(work, "plan.json")]
    # --limit needs localhost in the inventory (the implicit one matches no limit): the
    # controller, as Ansible's implicit localhost would be.
    local = os.path.join(work, "localhost.ini")
    with open(local, "w") as fh:
        fh.write("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    return [playbook, "-i", INVENTORY_FILE, "-i", local, os.path.join(REPO, "playbooks", "rollout.yml"), "--check",
            "--limit", "localhost"]


def plan_summary(work):
    with open(os.path.join(work, "plan.json")) as fh:
        plan = json.load(fh)
    return {r["name"]: (len(r["targets"]), len(r["work"])) for r in plan["rollouts"]}, len(plan["blocked"])


def load_average():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "n/a"


def report(samples, info, args):
    lines = [
        "# Planning benchmark",
        "",
        "`playbooks/plan.yml` next to the planning play of `playbooks/rollout.yml` (\"Read the desired state\"),",
        "at %s API-only nodes (half h100, half b200, from `nodewright-sim add-nodes --no-host-root --unmanaged`)" % (
            "{:,}".format(args.nodes)),
        "and three NodeWright resources under the `gpu-canary` DeploymentPolicy of deploy/examples:",
        "`bench-h100-sysctl` (sysctl, the H100 nodes), `bench-b200-sysctl` (sysctl, the B200 nodes, disjoint)",
        "and `bench-script` (shellscript with `apply.sh` and `apply_check.sh`, every GPU node, overlapping both).",
        "",
        "- `plan.yml`: `ansible-playbook playbooks/plan.yml -e nodewright_plan_path=...` (localhost; reads the",
        "  resources, policies and nodes, plans every node, prints and writes the plan).",
        "- `rollout.yml planning`: `ansible-playbook -i inventory/all-gpus.k8s_nodes.yml -i localhost.ini",
        "  playbooks/rollout.yml --check --limit localhost` (localhost.ini: `localhost ansible_connection=local`,",
        "  which the limit needs): the inventory (every node) and the first play; the rollout play has no",
        "  node in the limit and is skipped, the status play only predicts (check mode). After all runs,",
        "  %d nodes carried a NodeWright label or annotation and %d resources a status (nothing was written)." % (
            info["written"][0], info["written"][1]),
        "",
        "Median of %d runs per command (the commands alternating); CPU is user + system of the process and" % args.runs,
        "every descendant it reaped (`os.wait4`); peak RSS / PSS of the process tree, sampled every 0.5 s.",
        "",
        "Produced by `python bench/plan_bench.py --nodes %d --runs %d` on %s." % (args.nodes, args.runs, info["date"]),
        "",
        "| command | nodes | wall s (median) | wall s (all) | CPU s (median) | peak RSS MiB | peak PSS MiB |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for label in COMMANDS:
        rs = samples[label]
        lines.append("| `%s` | %s | %.1f | %s | %.1f | %d | %d |" % (
            label, "{:,}".format(args.nodes), statistics.median(r[1] for r in rs), ", ".join("%.1f" % r[1] for r in rs),
            statistics.median(r[2] for r in rs), max(r[3] for r in rs), max(r[4] for r in rs)))
    if info.get("plan"):
        per, blocked = info["plan"]
        lines += ["", "The plan: %s; %d blocked." % ("; ".join("%s %d targets, %d with work" % (n, t, w)
                                                              for n, (t, w) in sorted(per.items())), blocked)]
    if info.get("split"):
        lines += ["", "Inside `rollout.yml planning` (`-vv`, one run): the inventory plugin read %s nodes in %.2f s "
                  "and built the inventory in %.2f s." % info["split"]]
    lines += [
        "",
        "Machine: %s, %d CPUs; load average %s at the start, %s at the end (the machine is shared, so" % (
            info["machine"], os.cpu_count() or 0, info["load_start"], info["load_end"]),
        "absolute times vary between runs; the two commands always ran under the same conditions).",
        "",
    ]
    text = "\n".join(lines)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--name", default="perf-plan-%d" % os.getpid(), help="simulator instance to start (and stop)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "plan.md"))
    args = p.parse_args(argv)

    kubectl = os.path.join(bin_dir(), "kubectl")
    cluster = Cluster(args.name)
    if cluster.running():
        raise SystemExit("simulator %r is already running; name another" % args.name)
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false")
    info = {"date": datetime.date.today().isoformat(), "machine": platform.machine()}
    samples = {label: [] for label in COMMANDS}
    try:
        setup(cluster, env, kubectl, args.nodes)
        info["load_start"] = load_average()
        with tempfile.TemporaryDirectory() as work:
            for run in range(args.runs):
                order = COMMANDS if run % 2 == 0 else tuple(reversed(COMMANDS))
                for label in order:
                    log = os.path.join(work, "%s-%d.log" % (label.split()[0], run))
                    rc, wall, cpu, rss, pss = measure(command(label, work), env, log)
                    print("%s run %d: rc=%d wall %.1fs CPU %.1fs RSS %d MiB PSS %d MiB"
                          % (label, run, rc, wall, cpu, rss, pss), file=sys.stderr, flush=True)
                    if rc != 0:
                        with open(log) as fh:
                            raise SystemExit("%s failed (rc %d):\n%s" % (label, rc, fh.read()[-3000:]))
                    samples[label].append((rc, wall, cpu, rss, pss))
            info["plan"] = plan_summary(work)
            proc = subprocess.run(command("rollout.yml planning", work) + ["-vv"], env=env, capture_output=True,
                                  text=True)
            m = re.search(r"(\d+) nodes read in ([\d.]+)s, inventory built in ([\d.]+)s", proc.stdout + proc.stderr)
            if m:
                info["split"] = ("{:,}".format(int(m.group(1))), float(m.group(2)), float(m.group(3)))
        info["written"] = written(kubectl, env)
        info["load_end"] = load_average()
    finally:
        cluster.down()
    report(samples, info, args)


if __name__ == "__main__":
    main()
