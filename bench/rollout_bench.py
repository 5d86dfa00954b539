#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Fleet rollout benchmark: playbooks/rollout.yml over N simulator nodes with a
no-op package (the shipped `shellscript` package with an empty config), under a
DeploymentPolicy of fixed batches. Reports total wall time, time per node and the
controller's peak memory (ansible-playbook and its workers together).

With ``--tool kubernetes.core`` the same fleet is walked instead by the playbook an
operator would otherwise write: ``serial`` batches of the same size under the
``linear`` strategy, a static inventory of the node names, and per node only the
bookkeeping - a label saying the node is in maintenance, the no-op, a label saying
it is done - through ``kubernetes.core.k8s`` (no health gate, no plan, no package
state, no resource status).

    python bench/rollout_bench.py --nodes 1000 --batch 100 --forks 25
    python bench/rollout_bench.py --nodes 300 --batch 100 --forks 25 --tool kubernetes.core
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "simulator"))

import yaml  # noqa: E402
from kubernetes import client  # noqa: E402
from nodewright_sim.cluster import Cluster, rss_kib, tree_pids  # noqa: E402
from nodewright_sim.fleet import Fleet, create_fleet  # noqa: E402

GROUP, VERSION = "nodewright.io", "v1alpha1"
VENV_BIN = os.path.dirname(sys.executable)

BASELINE_PLAY = """\
- name: Walk the fleet in batches, marking each node
  hosts: nodes
  gather_facts: false
  serial: %(batch)d
  tasks:
    - name: Mark the node in maintenance
      kubernetes.core.k8s:
        api_version: v1
        kind: Node
        name: "{{ inventory_hostname }}"
        state: patched
        definition: {metadata: {labels: {example.com/maintenance: in-progress}}}
    - name: Apply the package (a no-op)
      ansible.builtin.command: "true"
      changed_when: false
    - name: Mark the node done
      kubernetes.core.k8s:
        api_version: v1
        kind: Node
        name: "{{ inventory_hostname }}"
        state: patched
        definition: {metadata: {labels: {example.com/maintenance: done}}}
"""


def tree_rss_mib(root_pid):
    """Resident memory of a process and all its descendants."""
    return rss_kib(tree_pids(root_pid)) / 1024.0


def install_bench_resources(cluster, fleet, batch, resource):
    """The CRDs, a DeploymentPolicy of fixed batches of ``batch`` and the no-op resource
    ``resource`` over every kwok node; the custom objects API."""
    subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "install_crds.yml")],
                   check=True, capture_output=True,
                   env=dict(os.environ, KUBECONFIG=cluster.kubeconfig,
                            ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections")))
    custom = client.CustomObjectsApi(fleet.api)
    custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DeploymentPolicy", "metadata": {"name": "bench"},
        "spec": {"default": {"budget": {"count": batch}, "strategy": {"fixed": {"initialBatch": batch}}}}})
    custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": resource},
        "spec": {"nodeSelectors": {"matchLabels": {"type": "kwok"}}, "deploymentPolicy": "bench",
                 "packages": {"shellscript": {"version": "1.0.0"}}}})
    return custom


def playbook_command(tool, names, batch, workdir, resource):
    """``(argv, environment)`` of the no-op walk of ``names``: NodeWright's rollout.yml of
    ``resource`` through the k8s_nodes inventory, or the kubernetes.core playbook an
    operator would otherwise write (``serial: batch``, a static inventory)."""
    if tool == "kubernetes.core":
        from drain_bench import ensure_kubernetes_core
        inv = os.path.join(workdir, "nodes.ini")
        with open(inv, "w") as fh:
            fh.write("[nodes]\n" + "".join("%s ansible_connection=local ansible_python_interpreter=%s\n"
                                           % (name, sys.executable) for name in names))
        play = os.path.join(workdir, "baseline.yml")
        with open(play, "w") as fh:
            fh.write(BASELINE_PLAY % {"batch": batch})
        return ([os.path.join(VENV_BIN, "ansible-playbook"), "-i", inv, play],
                {"ANSIBLE_COLLECTIONS_PATH": ensure_kubernetes_core()})
    inv = os.path.join(workdir, "fleet.k8s_nodes.yml")
    with open(inv, "w") as fh:
        yaml.safe_dump({"plugin": "nodewright.fleet.k8s_nodes", "label_selectors": "type=kwok",
                        "connection": "local"}, fh)
    return ([os.path.join(VENV_BIN, "ansible-playbook"), "-i", inv, os.path.join(REPO, "playbooks", "rollout.yml"),
             "-e", "nodewright_resource=" + resource],
            {"ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
             "ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
             "NODEWRIGHT_REPORT_PATH": os.path.join(workdir, "report.json")})


def run(nodes, batch, forks, workdir, tool="nodewright"):
    cluster = Cluster("bench-rollout")
    if cluster.running():
        cluster.down()
    cluster.up()
    try:
        t0 = time.time()
        create_fleet(cluster, "bare", nodes=0)
        fleet = Fleet(cluster)
        per_pool = nodes // 2
        names = fleet.add_nodes("h100", per_pool, workers=16) + fleet.add_nodes("b200", nodes - per_pool, workers=16)
        fleet.wait_ready(len(names), timeout=600)
        setup = time.time() - t0
        custom = install_bench_resources(cluster, fleet, batch, "bench-noop")
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, ANSIBLE_FORKS=str(forks),
                   ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_LOCALHOST_WARNING="false")
        cmd, more = playbook_command(tool, names, batch, workdir, "bench-noop")
        env.update(more)
        log = open(os.path.join(workdir, "rollout.log"), "w")
        start = time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak = [0.0]

        def sample():
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_rss_mib(proc.pid))
                time.sleep(0.5)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        rc = proc.wait()
        wall = time.time() - start
        t.join()
        if tool == "kubernetes.core":
            done = len(fleet.core.list_node(label_selector="example.com/maintenance=done").items)
            complete = "%d/%d" % (done, nodes)
        else:
            status = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", "bench-noop").get("status", {})
            complete = status.get("completeNodes")
        return {"tool": tool, "nodes": nodes, "batch": batch, "forks": forks, "rc": rc, "wall_s": round(wall, 1),
                "per_node_ms": round(wall * 1000 / nodes, 1), "peak_rss_mib": round(peak[0]),
                "fleet_setup_s": round(setup, 1), "complete": complete}
    finally:
        cluster.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--tool", choices=["nodewright", "kubernetes.core"], default="nodewright")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "rollout.md"))
    args = ap.parse_args()
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        result = run(args.nodes, args.batch, args.forks, work, args.tool)
    print(json.dumps(result))
    with open(args.out, "a") as fh:
        fh.write("| %(tool)s | %(nodes)d | %(batch)d | %(forks)d | %(wall_s).1f | %(per_node_ms).1f | %(peak_rss_mib)d | "
                 "%(complete)s | %(rc)d |\n" % result)


if __name__ == "__main__":
    main()
