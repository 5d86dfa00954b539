# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodeOrder: workload``: a batch takes the nodes with no non-interruptible pod running
first, then those whose pods are expected to end soonest, and leaves the ones nobody can
say anything about for last; ``creation`` (the default) takes the oldest node first
whatever runs there. Pods, their annotations and the order are the real API server's."""

from __future__ import annotations

import datetime
import time

import pytest

from fleet_helpers import Fleet, waves_from_report

pytestmark = pytest.mark.integration

TRAINING = {"matchLabels": {"app.kubernetes.io/component": "training"}}
SERVICE = {"type": "service", "services": ["containerd"]}


def _training_pod(sim, ns, name, node):
    sim.fleet.create_training_job(name, run_for="600s", gpus=4, namespace=ns, node_name=node)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = [p for p in sim.core.list_namespaced_pod(ns, label_selector="app=%s" % name).items
                if p.status.phase == "Running"]
        if pods:
            return pods[0].metadata.name
        time.sleep(0.5)
    raise AssertionError("the training pod on %s never ran" % node)


def _policy(fleet, order):
    name = "%s-%s" % (order, fleet.label)
    # One node per batch, room for three: a node left blocked (cordoned) does not stop the next.
    fleet.create("DeploymentPolicy", name, {"nodeOrder": order, "default": {"budget": {"count": 3}, "strategy": {
        "fixed": {"initialBatch": 1, "batchThreshold": 100}}}})
    return name


def _resource(fleet, name, policy):
    fleet.create("NodeWright", name, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "podNonInterruptLabels": TRAINING,
        "podNonInterruptWait": {"timeout": "2s"},
        "deploymentPolicy": policy,
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo on > /etc/order-test\n", "apply_check.sh": "test -s /etc/order-test\n"}}}})


def _order(plan):
    return [node for wave in plan["waves"]["waves"] for names in wave["compartments"].values() for node in names]


def test_free_nodes_first_then_the_soonest_end_and_unknown_ends_last(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 3)])
    oldest, middle, newest = sorted(fleet.nodes)
    ns = sim.namespace("order")
    _training_pod(sim, ns, "unknown-end", oldest)
    soon = _training_pod(sim, ns, "ends-soon", middle)
    end = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sim.core.patch_namespaced_pod(soon, ns, {"metadata": {"annotations": {"nodewright.io/expected-end": end}}})

    # The default takes the oldest node first, whatever runs there.
    _resource(fleet, "by-creation-" + fleet.label, _policy(fleet, "creation"))
    assert _order(fleet.plan("by-creation-" + fleet.label)) == [oldest, middle, newest]

    res = "by-workload-" + fleet.label
    _resource(fleet, res, _policy(fleet, "workload"))
    assert _order(fleet.plan(res)) == [newest, middle, oldest]

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert waves_from_report(proc.report) == [[newest], [middle], [oldest]]
    assert proc.report["hosts"][newest]["outcome"] == "ok"
    assert {proc.report["hosts"][n]["outcome"] for n in (middle, oldest)} == {"blocked"}
    # The run's report says why the older nodes waited.
    notes = [note for run in proc.report["rollout"] for d in run["decisions"] for note in d.get("notes") or []]
    assert "default compartment: 2 node(s) still running protected pods left for later (nodeOrder: workload): " \
           "%s, %s" % (oldest, middle) in notes
    status = fleet.resource(res)["status"]
    assert status["nodeStatus"] == {newest: "complete", middle: "blocked", oldest: "blocked"}
