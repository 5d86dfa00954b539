# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Fleet-wide limits that hold across resources and concurrent runs: several
``rollout.yml`` runs at once, a run killed while it holds reservations, AWX-style job
slices, and plan equals run. Disruption is sampled from a watch on the nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import watch

from fleet_helpers import Fleet, kill_tree, waves_from_report
from k8s_helpers import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sim():
    """A simulator of this module's own: fleet-wide limits count every node of the
    cluster, and other tests leave nodes cordoned for triage in the shared one."""
    from conftest import Sim
    from nodewright_sim.cluster import Cluster
    from nodewright_sim.fleet import create_fleet
    cluster = Cluster("admission-%d" % os.getpid())
    cluster.up(reboot_delay=2.0)
    try:
        create_fleet(cluster, "bare")
        yield Sim(cluster)
    finally:
        cluster.down()

LOCK = ("kube-system", "nodewright-admission")


class DisruptionWatch(object):
    """The most nodes of ``nodes`` in progress (any resource) or cordoned at one moment,
    overall and per value of ``key``."""

    def __init__(self, sim, nodes, key=None):
        self.sim = sim
        self.nodes = set(nodes)
        self.key = key
        self.state = {}
        self.max = 0
        self.max_per_value = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def disrupted(node):
        labels = node.metadata.labels or {}
        in_progress = any(k.startswith("nodewright.io/status-") and v == "in_progress" for k, v in labels.items())
        return in_progress or bool(node.spec.unschedulable)

    def _run(self):
        while not self._stop.is_set():
            w = watch.Watch()
            for event in w.stream(self.sim.core.list_node, timeout_seconds=5):
                node = event["object"]
                if node.metadata.name not in self.nodes:
                    continue
                value = (node.metadata.labels or {}).get(self.key) if self.key else None
                self.state[node.metadata.name] = (self.disrupted(node), value)
                busy = [v for d, v in self.state.values() if d]
                self.max = max(self.max, len(busy))
                for v in set(busy):
                    self.max_per_value[v] = max(self.max_per_value.get(v, 0), busy.count(v))
                if self._stop.is_set():
                    w.stop()
                    return

    def __enter__(self):
        self._thread.start()
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)
        return False


def slow_resource(fleet, nodes, policy, seconds=3, name=None):
    """A resource on ``nodes`` whose package takes ``seconds`` on each node (no interrupt)."""
    name = name or "slow-%s-%d" % (fleet.label, len(fleet.resources))
    label = "%s-%s" % (fleet.label, name[-8:])
    for n in nodes:
        fleet.sim.core.patch_node(n, {"metadata": {"labels": {"admission-test": label}}})
    fleet.create("NodeWright", name, {
        "nodeSelectors": {"matchLabels": {"admission-test": label}}, "deploymentPolicy": policy,
        "packages": {"shellscript": {"version": "1.0.0", "configMap": {
            "apply.sh": "sleep %d\ntouch /var/lib/%s-done\n" % (seconds, name),
            "apply_check.sh": "test -e /var/lib/%s-done\n" % name}}}})
    fleet.resources.append(name)
    return name


def make_fleet(sim, tmp_path, count, policy_spec):
    fleet = Fleet(sim, tmp_path, [("h100", count)])
    fleet.resources = []
    fleet.policy = "adm-" + fleet.label
    fleet.create("DeploymentPolicy", fleet.policy, policy_spec)
    return fleet


def lease_raw(sim):
    from kubernetes import client
    return client.CoordinationV1Api(sim.api).read_namespaced_lease(LOCK[1], LOCK[0])


def holders_now(sim):
    try:
        lease = lease_raw(sim)
    except Exception:  # noqa: BLE001 - no record yet
        return {}
    text = (lease.metadata.annotations or {}).get("nodewright.io/reservations") or "{}"
    return json.loads(text).get("holders") or {}


def statuses(fleet, resource):
    return {n: fleet.node_labels(n).get("nodewright.io/status-%s" % resource) for n in fleet.nodes}


@pytest.mark.parametrize("runs", [2, 3])
def test_concurrent_runs_of_different_resources_hold_the_fleet_limit(sim, tmp_path, runs):
    fleet = make_fleet(sim, tmp_path, 3 * runs, {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 2}})
    names = [slow_resource(fleet, fleet.nodes[3 * i:3 * i + 3], fleet.policy, seconds=3) for i in range(runs)]
    with DisruptionWatch(sim, fleet.nodes) as watcher:
        procs = [fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % name, name="run%d" % i)
                 for i, name in enumerate(names)]
        procs = [fleet.finished(p) for p in procs]
    for proc in procs:
        assert proc.returncode == 0, proc.output[-3000:]
    assert watcher.max <= 2, "at most 2 nodes in progress at once, saw %d" % watcher.max
    assert watcher.max >= 1
    for name in names:
        assert fleet.resource(name)["status"]["status"] == "complete"
    # Somebody waited for somebody: at least one run recorded a wait for capacity.
    waits = [d for p in procs for r in p.report["rollout"] for d in r["decisions"] if d["status"] == "waiting"]
    assert waits and "fleet disruption limit reached" in waits[0]["reason"]
    assert not holders_now(sim), "nothing is left reserved"


def test_concurrent_runs_hold_a_topology_limit_across_resources(sim, tmp_path):
    fleet = make_fleet(sim, tmp_path, 4, {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "topology": {"key": "nvidia.com/gpu.clique", "maxInProgress": 1}})
    for n in fleet.nodes:
        sim.core.patch_node(n, {"metadata": {"labels": {"nvidia.com/gpu.clique": "clique-%s" % fleet.label}}})
    a = slow_resource(fleet, fleet.nodes[:2], fleet.policy, seconds=2)
    b = slow_resource(fleet, fleet.nodes[2:], fleet.policy, seconds=2)
    with DisruptionWatch(sim, fleet.nodes, key="nvidia.com/gpu.clique") as watcher:
        procs = [fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % r, name=r) for r in (a, b)]
        procs = [fleet.finished(p) for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.output[-2000:] for p in procs]
    assert watcher.max_per_value == {"clique-%s" % fleet.label: 1}
    assert all(fleet.resource(r)["status"]["status"] == "complete" for r in (a, b))


def test_a_killed_run_frees_its_reservations_after_their_lifetime(sim, tmp_path):
    fleet = make_fleet(sim, tmp_path, 2, {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 2}})
    # The step outlives the reservations' lifetime (15 s) by a few seconds: the second run
    # waits for them to expire, then takes the nodes over while the step still runs.
    res = slow_resource(fleet, fleet.nodes, fleet.policy, seconds=25)
    first = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res,
                        "-e", "nodewright_rollout_reservation_ttl=15", name="first")
    wait_for(lambda: any(set(h.get("nodes") or {}) == set(fleet.nodes) for h in holders_now(sim).values()),
             what="the first run's reservation", timeout=120)
    wait_for(lambda: all(s == "in_progress" for s in statuses(fleet, res).values()), timeout=120, what="nodes in progress")
    kill_tree(first.pid)
    killed_at = time.time()
    first.wait()
    # The same resource again (a rerun, or another job slice): it waits while the dead
    # run's reservations live, then takes the nodes over and finishes them.
    second = fleet.finished(fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res,
                                        "-e", "nodewright_rollout_reservation_ttl=15", name="second"))
    assert second.returncode == 0, second.output[-4000:]
    decisions = [d for r in second.report["rollout"] for d in r["decisions"]]
    assert decisions[0]["status"] == "waiting", decisions
    took_over = [d for d in decisions if d["status"] == "wave"][0]
    assert statuses(fleet, res) == {n: "complete" for n in fleet.nodes}
    assert not holders_now(sim)
    # Not before the reservations expired: they live 15 s from their last renewal, which
    # came at most a third of that before the kill (the decision's time has whole seconds).
    import datetime
    freed = datetime.datetime.fromisoformat(took_over["at"]).timestamp() - killed_at
    print("the killed run's reservations were taken over %.1f s after the kill (lifetime 15 s)" % freed)
    assert freed >= 15 - 15 / 3.0 - 1, took_over


def test_job_slices_hold_the_limits_and_report_one_status(sim, tmp_path):
    import ansible_runner
    fleet = make_fleet(sim, tmp_path, 6, {
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "fleetDisruptionLimit": {"count": 2}})
    res = slow_resource(fleet, fleet.nodes, fleet.policy, seconds=2)
    env = sim.env()
    env.update({"ANSIBLE_DEPRECATION_WARNINGS": "false", "ANSIBLE_LOCALHOST_WARNING": "false"})
    # As AWX slices a job: the inventory source synced once (ansible-inventory --list), its
    # hosts ordered by name and dealt to the slices in turn; each slice runs with an
    # inventory script that prints its own hosts, as AWX gives each job.
    synced = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i",
                             str(tmp_path / "fleet.k8s_nodes.yml"), "--list"], capture_output=True, text=True,
                            env=env, check=True)
    meta = json.loads(synced.stdout)["_meta"]
    ordered = sorted(fleet.nodes)
    runs = []
    with DisruptionWatch(sim, fleet.nodes) as watcher:
        for i in range(3):
            private = tmp_path / ("slice%d" % i)
            private.mkdir()
            hosts = ordered[i::3]
            inventory = private / "slice-inventory"
            inventory.write_text("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % json.dumps({
                "all": {"hosts": hosts}, "_meta": dict(meta, hostvars={h: meta["hostvars"][h] for h in hosts})}))
            inventory.chmod(0o755)
            thread, runner = ansible_runner.run_async(
                private_data_dir=str(private), playbook=os.path.join(fleet_repo(), "playbooks", "rollout.yml"),
                inventory=str(inventory), extravars={"nodewright_resource": res},
                envvars=dict({k: v for k, v in env.items() if k.startswith(("ANSIBLE_", "KUBECONFIG"))},
                             # An execution environment has ansible-playbook on PATH; here the virtualenv's.
                             PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")),
                quiet=True)
            runs.append((thread, runner))
        for thread, _ in runs:
            thread.join(timeout=600)
    assert [r.status for _, r in runs] == ["successful"] * 3
    assert watcher.max <= 2
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "6/6"


def fleet_repo():
    from fleet_helpers import REPO
    return REPO


@pytest.mark.parametrize("case", ["fixed", "linear", "exponential", "percent-ceiling", "topology", "fleet-percent",
                                  "done-nodes"])
def test_plan_equals_run(sim, tmp_path, case):
    strategies = {"fixed": {"fixed": {"initialBatch": 2}}, "linear": {"linear": {"initialBatch": 1, "delta": 1}},
                  "exponential": {"exponential": {"initialBatch": 1, "growthFactor": 2}}}
    spec = {"default": {"budget": {"percent": 100}, "strategy": strategies.get(case, {"fixed": {"initialBatch": 3}})}}
    if case == "percent-ceiling":
        spec["default"]["budget"] = {"percent": 50}
    if case == "topology":
        spec["topology"] = {"key": "nvidia.com/gpu.clique", "maxInProgress": 1}
    if case == "fleet-percent":
        spec["fleetDisruptionLimit"] = {"percent": 25}
    fleet = make_fleet(sim, tmp_path, 6, spec)
    if case == "topology":
        for i, n in enumerate(fleet.nodes):
            sim.core.patch_node(n, {"metadata": {"labels": {"nvidia.com/gpu.clique": "c%d-%s" % (i % 2, fleet.label)}}})
    res = slow_resource(fleet, fleet.nodes, fleet.policy, seconds=0)
    if case == "done-nodes":
        # Three nodes are done already; then the package changes for all six.
        first = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "--limit",
                               ",".join(["localhost"] + fleet.nodes[:3]))
        assert first.returncode == 0, first.stdout[-3000:]
    plan = fleet.plan(res)
    planned = [sorted(w["nodes"]) for w in plan["waves"]["waves"]]
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert waves_from_report(proc.report) == planned, (planned, proc.stdout[-2000:])
    assert planned
