#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Drain benchmark: one node carrying 110 pods (the kubelet's default maximum),
drained by nodewright.fleet.node_drain, by `kubectl drain`, and by
kubernetes.core.k8s_drain, on the same simulator, side by side.

Scenarios:
  plain  - 10 Deployments x 11 pods (one slot is the DaemonSet pod), no PDBs;
  pdb    - the same with a PodDisruptionBudget maxUnavailable=1 per Deployment, so
           evictions are refused (429) until replacements are Ready elsewhere.

    python bench/drain_bench.py [--runs 3] [--out bench/results/drain.md]

kubernetes.core is taken from the `ansible` package on PyPI into a cache directory
(it is not a dependency of the collection).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "simulator"))

from kubernetes import client  # noqa: E402
from nodewright_sim.cluster import Cluster, bin_dir, cache_dir  # noqa: E402
from nodewright_sim.fleet import Fleet, create_fleet  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
DEPLOYMENTS = 10


def ensure_kubernetes_core():
    """Unpack kubernetes.core from the `ansible` wheel into the cache, once."""
    dest = os.path.join(cache_dir(), "bench-collections")
    marker = os.path.join(dest, "ansible_collections", "kubernetes", "core", "MANIFEST.json")
    if os.path.exists(marker):
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, "ansible==12.3.0"],
                       check=True)
        wheel = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as zf:
            for name in zf.namelist():
                if name.startswith("ansible_collections/kubernetes/core/"):
                    zf.extract(name, dest)
    return dest


def wait(pred, timeout=300, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise RuntimeError("timed out waiting for %s" % what)


def running_on(core, node):
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def prepare(sim, src, targets, ns, with_pdb, per_deployment):
    core, apps, policy = sim["core"], sim["apps"], sim["policy"]
    for t in targets:
        core.patch_node(t, {"spec": {"unschedulable": True}})
    core.patch_node(src, {"spec": {"unschedulable": None}})
    core.create_namespace({"metadata": {"name": ns}})
    wait(lambda: _has_sa(core, ns), what="default service account")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [src] + targets}]}]}}}
    for i in range(DEPLOYMENTS):
        labels = {"app": "load-%d" % i}
        apps.create_namespaced_deployment(ns, {
            "metadata": {"name": "load-%d" % i},
            "spec": {"replicas": per_deployment[i], "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "affinity": affinity, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": "registry.invalid/load:1",
                                         "resources": {"requests": {"cpu": "10m"}}}]}}}})
        if with_pdb:
            policy.create_namespaced_pod_disruption_budget(ns, {
                "metadata": {"name": "load-%d" % i},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})
    total = sum(per_deployment)
    wait(lambda: len([p for p in running_on(core, src) if p.metadata.namespace == ns]) == total, what="pods running")
    if with_pdb:
        wait(lambda: all((policy.read_namespaced_pod_disruption_budget("load-%d" % i, ns).status.disruptions_allowed
                          or 0) >= 1 for i in range(DEPLOYMENTS)), what="PDBs ready")
    for t in targets:
        core.patch_node(t, {"spec": {"unschedulable": None}})
    return len(running_on(core, src))


def _has_sa(core, ns):
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except client.ApiException:
        return False


def cleanup(sim, src, ns):
    core = sim["core"]
    core.delete_namespace(ns)
    wait(lambda: not [p for p in core.list_namespaced_pod(ns).items], timeout=300, what="namespace pods gone")
    node = core.read_node(src)
    ann = node.metadata.annotations or {}
    patch = {"spec": {"unschedulable": None}}
    if "nodewright.io/cordoned-by" in ann:
        patch["metadata"] = {"annotations": {"nodewright.io/cordoned-by": None}}
    core.patch_node(src, patch)


def run_tool(tool, src, kubeconfig, kcore_path, workdir):
    env = dict(os.environ, KUBECONFIG=kubeconfig, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_DEPRECATION_WARNINGS="false")
    if tool == "kubectl drain":
        cmd = [os.path.join(bin_dir(), "kubectl"), "drain", src, "--ignore-daemonsets", "--delete-emptydir-data",
               "--timeout=600s"]
    else:
        if tool == "nodewright.fleet.node_drain":
            task = {"nodewright.fleet.node_drain": {"name": src, "timeout": 600}}
            env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(REPO, ".collections")
        else:
            task = {"kubernetes.core.k8s_drain": {"name": src, "state": "drain", "delete_options": {
                "ignore_daemonsets": True, "delete_emptydir_data": True, "wait_timeout": 600}}}
            env["ANSIBLE_COLLECTIONS_PATH"] = kcore_path
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [dict(name="drain", **task)]}]
        path = os.path.join(workdir, "drain.yml")
        with open(path, "w") as fh:
            json.dump(play, fh)
        cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
               "-e", "ansible_python_interpreter=%s" % sys.executable, path]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - t0
    ok = proc.returncode == 0
    detail = "" if ok else (proc.stdout + proc.stderr).strip().splitlines()[-1][:300]
    return elapsed, ok, detail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "drain.md"))
    ap.add_argument("--scenarios", default="plain,pdb")
    args = ap.parse_args()
    kcore = ensure_kubernetes_core()
    cluster = Cluster("bench-drain")
    if cluster.running():
        cluster.down()
    cluster.up()
    results = []
    try:
        create_fleet(cluster, "bare", nodes=0)
        fleet = Fleet(cluster)
        src, t1, t2 = fleet.add_nodes("h100", 3, host_roots=False)
        apps = client.AppsV1Api(fleet.api)
        sim = {"core": fleet.core, "apps": apps, "policy": client.PolicyV1Api(fleet.api)}
        # One DaemonSet pod per node, as a real GPU node has (monitoring agent).
        fleet._ensure_namespace("gpu-monitoring")
        apps.create_namespaced_daemon_set("gpu-monitoring", {
            "metadata": {"name": "dcgm-exporter"},
            "spec": {"selector": {"matchLabels": {"app": "dcgm"}}, "template": {
                "metadata": {"labels": {"app": "dcgm"}},
                "spec": {"tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "c", "image": "registry.invalid/dcgm:1"}]}}}})
        wait(lambda: len(running_on(fleet.core, src)) == 1, what="DaemonSet pod")
        per = [11] * 9 + [10]  # 109 + the DaemonSet pod = 110 pods on the node
        tools = ["nodewright.fleet.node_drain", "kubectl drain", "kubernetes.core.k8s_drain"]
        n = 0
        with tempfile.TemporaryDirectory() as work:
            for scenario in args.scenarios.split(","):
                for rep in range(args.runs):
                    for tool in tools:
                        n += 1
                        ns = "bench-%d" % n
                        pods = prepare(sim, src, [t1, t2], ns, scenario == "pdb", per)
                        elapsed, ok, detail = run_tool(tool, src, cluster.kubeconfig, kcore, work)
                        left = len([p for p in running_on(fleet.core, src) if p.metadata.namespace == ns])
                        results.append({"scenario": scenario, "tool": tool, "run": rep + 1, "pods": pods,
                                        "seconds": round(elapsed, 2), "ok": ok and left == 0, "left": left,
                                        "detail": detail})
                        print(json.dumps(results[-1]), flush=True)
                        cleanup(sim, src, ns)
    finally:
        cluster.down()
    write_report(results, args.out)


def write_report(results, out):
    lines = ["# Drain benchmark: one node with 110 pods", "",
             "Simulator (real kube-apiserver, controller-manager, scheduler; kwok kubelets), "
             "10 Deployments (109 pods) + 1 DaemonSet pod on the node, 2 empty target nodes. "
             "Wall time of the whole command (ansible-playbook for the modules), median of runs.", "",
             "| scenario | tool | median s | runs (s) | drained |", "|---|---|---|---|---|"]
    keys = []
    for r in results:
        if (r["scenario"], r["tool"]) not in keys:
            keys.append((r["scenario"], r["tool"]))
    for scenario, tool in keys:
        rs = [r for r in results if r["scenario"] == scenario and r["tool"] == tool]
        ok = [r for r in rs if r["ok"]]
        med = statistics.median(r["seconds"] for r in rs)
        lines.append("| %s | %s | %.2f | %s | %s |" % (
            scenario, tool, med, ", ".join("%.2f" % r["seconds"] for r in rs),
            "%d/%d" % (len(ok), len(rs)) + ("" if len(ok) == len(rs) else
                                            " (%s)" % (rs[0]["detail"] or "%d pods left" % rs[0]["left"]))))
    lines += ["", "Reproduce: `make setup && .venv/bin/python bench/drain_bench.py --runs 3`", ""]
    with open(out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
