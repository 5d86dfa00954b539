# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""CRD fields whose effect no other test showed, in one small rollout (two nodes):
a package's env reaches its steps, a podNonInterruptLabels matchExpressions holds
the node whose pod it matches and not the other, and the resource's status carries
every field NodeWright writes there, with the values the rollout implies
(tests/crd_field_coverage.yml maps the CRD fields to these tests)."""

from __future__ import annotations

import datetime
import json
import os
import time

import pytest

from fleet_helpers import GROUP, VERSION, Fleet

pytestmark = pytest.mark.integration

GREETING = "hello from the resource's env"
TOKEN = "s3cr3t-token-from-a-secret"
ZONE = "zone-b-from-a-configmap"


def _running_pod(sim, ns, app):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = [p for p in sim.core.list_namespaced_pod(ns, label_selector="app=%s" % app).items
                if p.status.phase == "Running"]
        if pods:
            return pods[0]
        time.sleep(0.5)
    raise AssertionError("pod app=%s never ran" % app)


def config(**changes):
    return dict({"apply.sh": 'printf "%s|%s|%s|%s" "$GREETING" "$TOKEN" "$ZONE" "${UNSET-unset}" '
                             '> /etc/crd-fields-env\n',
                 "apply_check.sh": "test -s /etc/crd-fields-env\n", "mode": "one", "note": "one"}, **changes)


def restarts(sim, node, unit="containerd.service"):
    path = os.path.join(sim.host_root(node), "run", "nodewright-sim", "units", unit + ".restarts")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return len(f.read().split())


@pytest.fixture(scope="module")
def run(sim, tmp_path_factory):
    fleet = Fleet(sim, tmp_path_factory.mktemp("crd-fields"), [("h100", 2)])
    held, free = sorted(fleet.nodes)
    ns = sim.namespace("crdfields")
    # Two pods of the same kind (a Job's, so both may be evicted by the drain's rules);
    # only the one the expression matches is protected.
    sim.fleet.create_training_job("train", run_for="600s", gpus=4, namespace=ns, node_name=held)
    sim.fleet.create_training_job("warmup", run_for="600s", gpus=4, namespace=ns, node_name=free)
    pods = {"train": _running_pod(sim, ns, "train"), "warmup": _running_pod(sim, ns, "warmup")}
    # env[].valueFrom: a Secret's and a ConfigMap's key in the nodewright namespace, and
    # an optional reference to a key that does not exist.
    sim.fleet._ensure_namespace("nodewright")
    refs = "crd-fields-env-" + fleet.label
    sim.core.create_namespaced_secret("nodewright", {"metadata": {"name": refs}, "stringData": {"token": TOKEN}})
    sim.core.create_namespaced_config_map("nodewright", {"metadata": {"name": refs}, "data": {"zone": ZONE}})
    policy = "crd-fields-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"count": 2},
                                                          "strategy": {"fixed": {"initialBatch": 2}}}})
    res = "crd-fields-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "podNonInterruptLabels": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}]},
        "podNonInterruptWait": {"timeout": "3s"},
        "deploymentPolicy": policy,
        "packages": {"shellscript": {
            "version": "1.0.0", "interrupt": {"type": "service", "services": ["containerd"]},
            "env": [{"name": "GREETING", "value": GREETING},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": refs, "key": "token"}}},
                    {"name": "ZONE", "valueFrom": {"configMapKeyRef": {"name": refs, "key": "zone"}}},
                    {"name": "UNSET", "valueFrom": {"secretKeyRef": {"name": refs, "key": "absent",
                                                                     "optional": True}}}],
            "configInterrupts": {"mode": {"type": "service", "services": ["containerd"]}},
            "configMap": config()}}})
    started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    proc.output = proc.stdout + proc.stderr
    return {"fleet": fleet, "res": res, "held": held, "free": free, "ns": ns, "pods": pods, "proc": proc,
            "started": started, "status": fleet.resource(res), "refs": refs, "policy": policy}


def test_env_values_reach_the_package_steps(sim, run):
    assert run["proc"].returncode == 0, run["proc"].output[-4000:]
    with open(os.path.join(sim.host_root(run["free"]), "etc", "crd-fields-env")) as f:
        assert f.read() == "%s|%s|%s|unset" % (GREETING, TOKEN, ZONE)
    # The Secret's value reaches the steps only: not the run's output, not the status.
    assert TOKEN not in run["proc"].output
    assert TOKEN not in json.dumps(run["status"])


def test_a_missing_secret_key_refuses_the_resource_before_any_node_is_touched(sim, run):
    fleet = run["fleet"]
    res = "crd-fields-nokey-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": run["policy"],
        "packages": {"shellscript": {"version": "1.0.0", "configMap": config(), "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": run["refs"], "key": "missing"}}},
            {"name": "SITE", "valueFrom": {"configMapKeyRef": {"name": "absent-" + fleet.label, "key": "site"}}}]}}})
    before = {n: fleet.node_labels(n) for n in fleet.nodes}
    try:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    finally:
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", res)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "Secret nodewright/%s has no key 'missing'" % run["refs"] in output, output[-3000:]
    assert "spec.packages.shellscript.env.TOKEN.valueFrom" in output, output[-3000:]
    # A Secret or ConfigMap that does not exist at all is named the same way.
    assert "ConfigMap nodewright/absent-%s has no key 'site'" % fleet.label in output, output[-3000:]
    assert {n: fleet.node_labels(n) for n in fleet.nodes} == before
    assert not any(sim.core.read_node(n).spec.unschedulable for n in fleet.nodes if n == run["free"])


def test_a_match_expression_of_pod_non_interrupt_labels_holds_only_the_node_whose_pod_it_matches(sim, run):
    proc, held, free, ns = run["proc"], run["held"], run["free"], run["ns"]
    assert proc.report["hosts"][held]["outcome"] == "blocked"
    assert "%s/%s" % (ns, run["pods"]["train"].metadata.name) in proc.report["hosts"][held]["msg"]
    assert sim.core.read_namespaced_pod(run["pods"]["train"].metadata.name, ns).status.phase == "Running"
    assert run["fleet"].node_labels(held)["nodewright.io/status-%s" % run["res"]] == "blocked"
    # The same kind of pod on the other node is not matched: it was drained and the node finished.
    assert proc.report["hosts"][free]["outcome"] == "ok"
    assert run["fleet"].node_labels(free)["nodewright.io/status-%s" % run["res"]] == "complete"
    left = {p.metadata.uid for p in sim.core.list_namespaced_pod(ns).items if p.metadata.deletion_timestamp is None}
    assert run["pods"]["warmup"].metadata.uid not in left


def test_the_status_carries_every_field_nodewright_writes(sim, run):
    obj = run["status"]
    status, held, free = obj["status"], run["held"], run["free"]
    generation = obj["metadata"]["generation"]
    assert status["status"] == "in_progress" and status["observedGeneration"] == generation
    assert status["message"].startswith("1 of 2 nodes complete"), status["message"]
    assert status["nodeStatus"] == {held: "blocked", free: "complete"}
    entry = status["nodeState"][free]["shellscript|1.0.0"]
    assert (entry["name"], entry["version"], entry["state"]) == ("shellscript", "1.0.0", "complete")
    assert entry["stage"]
    for node in (held, free):
        assert status["nodeBootIds"][node] == sim.core.read_node(node).status.node_info.boot_id
        when = datetime.datetime.strptime(status["nodePriority"][node], "%Y-%m-%dT%H:%M:%SZ")
        assert when.replace(tzinfo=datetime.timezone.utc) >= run["started"]
    assert (status["nodesMatched"], status["nodesComplete"], status["nodesInProgress"],
            status["nodesErroring"]) == (2, 1, 1, 0)
    assert status["completeNodes"] == "1/2" and status["packageList"] == "shellscript:1.0.0"
    conditions = {c["type"]: c for c in status["conditions"]}
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InProgress") and ready["message"] == status["message"]
    waiting = conditions["NonInterruptPodsRunning"]
    assert waiting["status"] == "True" and held in waiting["message"]
    for cond in conditions.values():
        when = datetime.datetime.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
        assert when.replace(tzinfo=datetime.timezone.utc) >= run["started"]
        assert cond["observedGeneration"] == generation, cond
    rollout = status["rolloutState"]
    assert rollout["version"] == "shellscript:1.0.0 (generation %d)" % generation
    assert rollout["waveNumber"] == 1
    batch = rollout["batchStates"]["__default__"]
    comp = status["compartmentStatuses"]["__default__"]
    assert comp["batchState"] == batch
    assert (comp["matched"], comp["ceiling"], comp["completed"]) == (2, 2, 1)
    # Of the batch of 2, the blocked node is not decided: 1 node, a good batch; fixed keeps size 2.
    assert batch == {"currentBatch": 2, "consecutiveFailures": 0, "completedNodes": 1, "failedNodes": 0,
                     "shouldStop": False, "lastBatchSize": 1, "lastBatchFailed": False}
    # The blocked node is cordoned but not in progress in its compartment.
    assert (comp["inProgress"], comp["progressPercent"]) == (0, 50)


def test_a_config_change_asks_only_for_the_interrupts_its_keys_match(sim, run):
    """configInterrupts: a changed key without one needs no interrupt; a changed key
    with one gets its type and services, and the rollout restarts that service."""
    fleet, res, free = run["fleet"], run["res"], run["free"]
    assert run["proc"].returncode == 0, run["proc"].output[-4000:]
    before = restarts(sim, free)
    assert before >= 1, "the install's own interrupt restarted containerd"

    def change(**keys):
        body = {"spec": {"packages": {"shellscript": {
            "version": "1.0.0", "interrupt": {"type": "service", "services": ["containerd"]},
            "env": [{"name": "GREETING", "value": GREETING}],
            "configInterrupts": {"mode": {"type": "service", "services": ["containerd"]}},
            "configMap": config(**keys)}}}}
        fleet.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", res, body)
        return fleet.plan(res)["nodes"][free]

    planned = change(note="two")
    assert [p["action"] for p in planned["packages"]] == ["config"]
    assert planned["interrupt"]["type"] == "noop"
    planned = change(note="two", mode="two")
    assert [p["action"] for p in planned["packages"]] == ["config"]
    assert planned["interrupt"] == {"type": "service", "services": ["containerd"]}
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.report["hosts"][free]["outcome"] == "ok", (proc.stdout + proc.stderr)[-4000:]
    assert restarts(sim, free) == before + 1


def test_a_new_version_upgrades_the_package_on_the_node(sim, run):
    fleet, res, free = run["fleet"], run["res"], run["free"]
    body = {"spec": {"packages": {"shellscript": {"version": "1.1.0"}}}}
    fleet.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", res, body)
    planned = fleet.plan(res)["nodes"][free]["packages"]
    assert [(p["action"], p.get("from_version")) for p in planned] == [("upgrade", "1.0.0")], planned
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.report["hosts"][free]["outcome"] == "ok", (proc.stdout + proc.stderr)[-4000:]
    status = fleet.resource(res)["status"]
    assert status["packageList"] == "shellscript:1.1.0"
    assert status["nodeState"][free]["shellscript|1.1.0"]["state"] == "complete"
