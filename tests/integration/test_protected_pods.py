# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A waiting node is not a failing node: a training job (a pod matched by
podNonInterruptLabels) that outlives a run's wait leaves its node cordoned and marked
blocked - label, annotation, node condition, resource condition, Event - without
counting against failureThreshold, without stopping the rollout, and the next run takes
the node up again once the job ended. Past podNonInterruptWait.giveUpAfter the node is
erroring instead."""

from __future__ import annotations

import json
import time

import pytest

from fleet_helpers import Fleet

pytestmark = pytest.mark.integration

TRAINING = {"matchLabels": {"app.kubernetes.io/component": "training"}}
SERVICE = {"type": "service", "services": ["containerd"]}


def _spec(fleet, **extra):
    """One disruptive package (a containerd restart, so every node is cordoned and drained),
    one node per batch, and a rollout that halts at the first failed batch."""
    return dict({
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "podNonInterruptLabels": TRAINING,
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo on > /etc/protected-test\n", "apply_check.sh": "test -s /etc/protected-test\n"}}},
        "deploymentPolicy": fleet.policy,
    }, **extra)


def _policy(fleet):
    name = "one-at-a-time-" + fleet.label
    # A budget of 2: a blocked node stays cordoned and so holds one of them; the other goes on.
    fleet.create("DeploymentPolicy", name, {"default": {"budget": {"count": 2}, "strategy": {
        "fixed": {"initialBatch": 1, "batchThreshold": 100, "failureThreshold": 1}}}})
    return name


def _condition(conditions, ctype):
    found = [c for c in conditions or [] if (c.get("type") if isinstance(c, dict) else c.type) == ctype]
    return found[0] if found else None


def _training_pod(sim, fleet, node, run_for):
    ns = sim.namespace("protect")
    sim.fleet.create_training_job("train", run_for=run_for, gpus=4, namespace=ns, node_name=node)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = [p for p in sim.core.list_namespaced_pod(ns, label_selector="app=train").items
                if p.status.phase == "Running"]
        if pods:
            return ns, pods[0].metadata.name
        time.sleep(0.5)
    raise AssertionError("the training pod on %s never ran" % node)


def test_a_job_outliving_the_wait_leaves_its_node_blocked_and_the_rollout_goes_on(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 3)])
    fleet.policy = _policy(fleet)
    held = sorted(fleet.nodes)[0]
    ns, pod = _training_pod(sim, fleet, held, "600s")
    res = "protected-" + fleet.label
    fleet.create("NodeWright", res, _spec(fleet, podNonInterruptWait={"timeout": "3s"}))
    # The plan says which node will wait, and for what.
    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res)
    assert plan.returncode == 0, (plan.stdout + plan.stderr)[-3000:]
    assert "%s waits for non-interruptible pods: %s/%s" % (held, ns, pod) in plan.stdout

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    output = proc.stdout + proc.stderr
    # Not a failure: the exit status is 0, the other nodes are done, and the run says what is left.
    assert proc.returncode == 0, output[-4000:]
    assert "1 blocked by non-interruptible pods (%s)" % held in output
    others = [n for n in fleet.nodes if n != held]
    for node in others:
        assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"
        assert not sim.core.read_node(node).spec.unschedulable
    assert proc.report["hosts"][held]["outcome"] == "blocked"
    assert "%s/%s" % (ns, pod) in proc.report["hosts"][held]["msg"]
    assert {proc.report["hosts"][n]["outcome"] for n in others} == {"ok"}

    # The node: cordoned (nothing new lands there), marked blocked with the pods that hold it.
    node = sim.core.read_node(held)
    assert node.spec.unschedulable
    assert node.metadata.labels["nodewright.io/status-%s" % res] == "blocked"
    assert node.metadata.annotations["nodewright.io/blocked-by"] == "%s/%s" % (ns, pod)
    state = json.loads(node.metadata.annotations["nodewright.io/state-%s" % res])
    assert state["blockedBy"] == ["%s/%s" % (ns, pod)] and state["blockedSince"]
    cond = _condition(node.status.conditions, "nodewright.io/NonInterruptPodsRunning")
    assert cond.status == "True" and "%s/%s" % (ns, pod) in cond.message
    assert sim.core.read_namespaced_pod(pod, ns).status.phase == "Running", "the training pod was touched"
    events = sim.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % held).items
    assert any(e.reason == "NodeWrightBlocked" and e.type == "Warning" and pod in e.message for e in events)
    # The resource: the condition names the pod while it runs (it does not claim none runs).
    status = fleet.resource(res)["status"]
    assert status["status"] != "complete" and status["nodeStatus"][held] == "blocked"
    cond = _condition(status["conditions"], "NonInterruptPodsRunning")
    assert cond["status"] == "True" and "%s/%s" % (ns, pod) in cond["message"] and held in cond["message"]
    assert status["completeNodes"] == "2/3"

    # The job ends: the next run takes the node up again and finishes it.
    sim.batch.delete_collection_namespaced_job(ns, propagation_policy="Foreground")
    sim.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    again = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert set(again.report["hosts"]) - {"localhost"} == {held}
    node = sim.core.read_node(held)
    assert node.metadata.labels["nodewright.io/status-%s" % res] == "complete"
    assert not node.spec.unschedulable
    assert "nodewright.io/blocked-by" not in (node.metadata.annotations or {})
    assert _condition(node.status.conditions, "nodewright.io/NonInterruptPodsRunning").status == "False"
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "3/3"
    assert _condition(status["conditions"], "NonInterruptPodsRunning")["status"] == "False"


def test_a_node_blocked_past_give_up_after_is_erroring(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    fleet.policy = _policy(fleet)
    (held,) = fleet.nodes
    ns, pod = _training_pod(sim, fleet, held, "600s")
    res = "giveup-" + fleet.label
    fleet.create("NodeWright", res, _spec(fleet, podNonInterruptWait={"timeout": "2s", "giveUpAfter": "4s"}))

    first = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert fleet.node_labels(held)["nodewright.io/status-%s" % res] == "blocked"
    time.sleep(4)  # the node has now been blocked longer than giveUpAfter
    second = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    assert second.returncode != 0
    assert fleet.node_labels(held)["nodewright.io/status-%s" % res] == "erroring"
    host = second.report["hosts"][held]
    assert host["outcome"] == "failed"
    assert "longer than its giveUpAfter (4s)" in host["msg"] and "%s/%s" % (ns, pod) in host["msg"]
    assert sim.core.read_namespaced_pod(pod, ns).status.phase == "Running", "the training pod was touched"


def test_the_wait_is_a_resource_field_and_a_play_variable_overrides_it(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    fleet.policy = _policy(fleet)
    (held,) = fleet.nodes
    ns, pod = _training_pod(sim, fleet, held, "600s")
    res = "waitvar-" + fleet.label
    fleet.create("NodeWright", res, _spec(fleet, podNonInterruptWait={"timeout": "1h"}))
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true",
                          "-e", "safe_update_wait_timeout=2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.report["hosts"][held]["outcome"] == "blocked"
    assert "still run after 2s" in proc.report["hosts"][held]["msg"]


def _nodewright(sim, *args):
    import os
    import subprocess
    import sys
    env = sim.env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(fleet_repo(), "cli"), os.path.join(fleet_repo(), ".collections")])
    return subprocess.run([sys.executable, "-m", "nodewright_cli"] + list(args), capture_output=True, text=True,
                          env=env)


def fleet_repo():
    import os
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wait_for(what, check, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError("timed out waiting for %s" % what)


def test_pause_mid_wave_stops_the_nodes_in_flight_at_their_next_step_and_resume_goes_on(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 3)])
    name = "two-at-a-time-" + fleet.label
    fleet.create("DeploymentPolicy", name, {"default": {"budget": {"count": 2}, "strategy": {
        "fixed": {"initialBatch": 2, "batchThreshold": 100, "failureThreshold": 1}}}})
    fleet.policy = name
    res = "pausable-" + fleet.label
    fleet.create("NodeWright", res, _spec(fleet, podNonInterruptWait={"timeout": "5m"}))
    plan = fleet.plan(res)
    first = plan["waves"]["waves"][0]["nodes"]
    held = sorted(first)[0]
    ns, pod = _training_pod(sim, fleet, held, "600s")
    proc = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true",
                       name="paused")
    label = "nodewright.io/status-%s" % res
    # The held node waits for its training pod (cordoned, nothing evicted): pause now.
    _wait_for("the node to wait for its training pod", lambda: fleet.node_labels(held).get(label) == "blocked")
    paused = _nodewright(sim, "pause", res)
    assert paused.returncode == 0, paused.stderr
    sim.batch.delete_collection_namespaced_job(ns, propagation_policy="Foreground")
    sim.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    proc = fleet.finished(proc)
    assert proc.returncode == 0, proc.output[-4000:]
    assert "paused during the run" in proc.output

    # The node in flight stopped before its packages, cordoned and drained, and says where.
    host = proc.report["hosts"][held]
    assert host["outcome"] == "paused" and "stopped before its packages" in host["msg"]
    node = sim.core.read_node(held)
    assert node.spec.unschedulable
    assert json.loads(node.metadata.annotations["nodewright.io/state-%s" % res])["pausedAt"] == "packages"
    assert hostroot_file(sim, held) == ""
    # No node was admitted after the pause.
    later = [n for n in fleet.nodes if n not in first]
    assert later and all(label not in fleet.node_labels(n) for n in later)
    assert all(n not in proc.report["hosts"] for n in later)
    assert fleet.resource(res)["status"]["status"] == "paused"

    # Resume: the next run takes the stopped node up where it stopped, then the rest.
    resumed = _nodewright(sim, "resume", res)
    assert resumed.returncode == 0, resumed.stderr
    again = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "safe_update_drain_force=true")
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    for node in fleet.nodes:
        assert fleet.node_labels(node)[label] == "complete"
        assert not sim.core.read_node(node).spec.unschedulable
    assert hostroot_file(sim, held) == "on"
    assert fleet.resource(res)["status"]["status"] == "complete"


def hostroot_file(sim, node):
    from nodewright_sim import hostroot
    return hostroot.run(sim.host_root(node), "cat /etc/protected-test 2>/dev/null || true").stdout.strip()
