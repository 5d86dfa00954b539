# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Admission: what counts as disrupted, and the reservation record's shape and expiry."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
    AdmissionError,
    FleetView,
    Holder,
    NodeInfo,
    node_info,
    parse_record,
    policy_digest,
    render_record,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


def info(name, **kw):
    base = {"labels": {}, "created": None, "unschedulable": False, "cordoned_by": None, "statuses": {}}
    base.update(kw)
    return NodeInfo(name=name, **base)


def test_node_info_reads_cordon_owner_and_statuses():
    obj = {"metadata": {"name": "n1", "labels": {"nodewright.io/status-a": "in_progress", "nodewright.io/status": "x",
                                                 "zone": "z"},
                        "annotations": {"nodewright.io/cordoned-by": json.dumps({"owner": "nodewright",
                                                                                  "resource": "a"})}},
           "spec": {"unschedulable": True}}
    n = node_info(obj)
    assert n.unschedulable and n.cordoned_by == "a" and n.statuses == {"a": "in_progress"}
    assert n.in_progress_under() == ["a"]
    assert node_info({"metadata": {"name": "n2"}}).cordoned_by is None


@pytest.mark.parametrize("node, reserved, pickable, expected", [
    (info("n"), None, True, "free"),
    # Cordoned by someone outside NodeWright, with work for us: ours to take, counted.
    (info("n", unschedulable=True), None, True, "resumable"),
    (info("n", unschedulable=True), None, False, "busy"),
    # Our own leftover (a crashed run): resumed.
    (info("n", unschedulable=True, cordoned_by="mine", statuses={"mine": "in_progress"}), None, True,
     "resumable"),
    # Left cordoned by another resource (erroring there), or in progress under it: not ours.
    (info("n", unschedulable=True, cordoned_by="other", statuses={"other": "erroring"}), None, True, "busy"),
    (info("n", statuses={"other": "in_progress"}), None, True, "busy"),
    # Reserved by another live run: never taken, even when it is our resource's node.
    (info("n"), ("someone", "mine"), True, "busy"),
    # Reserved by this run itself: neither.
    (info("n", statuses={"mine": "in_progress"}), ("me", "mine"), True, "free"),
])
def test_what_a_wave_may_take_and_what_counts(node, reserved, pickable, expected):
    holders = {}
    if reserved:
        holders[reserved[0]] = Holder(id=reserved[0], renewed=NOW, nodes={node.name: reserved[1]})
    view = FleetView([node], holders, NOW)
    busy, resumable = view.split("me", "mine", {node.name} if pickable else set())
    found = "busy" if node.name in busy else "resumable" if node.name in resumable else "free"
    assert found == expected


def test_records_round_trip_and_expire_on_the_servers_clock():
    holder = Holder(id="h1", renewed=NOW, ttl=30, run="laptop pid 1", nodes={"n1": "r"}, policies={"r": "abc"})
    parsed = parse_record(render_record({"h1": holder}))
    assert parsed["h1"].nodes == {"n1": "r"} and parsed["h1"].policies == {"r": "abc"}
    assert not parsed["h1"].expired(NOW + datetime.timedelta(seconds=29))
    assert parsed["h1"].expired(NOW + datetime.timedelta(seconds=30))
    assert parse_record("") == {} and parse_record(None) == {}


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"),
    ('["a"]', "must be a mapping"),
    ('{"version": 9, "holders": {}}', "version 9"),
    ('{"holders": {"h": {"renewTime": "yesterday", "ttlSeconds": 5}}}', "renewTime 'yesterday' is not a time"),
    ('{"holders": {"h": {"renewTime": "2026-12-01T12:00:00Z", "ttlSeconds": -1}}}', "ttlSeconds -1"),
    ('{"holders": {"h": {"renewTime": "2026-12-01T12:00:00Z", "ttlSeconds": 5, "nodes": ["n1"]}}}',
     "nodes must map node names"),
])
def test_a_record_edited_into_nonsense_is_refused_with_the_reason(text, message):
    with pytest.raises(AdmissionError) as info_:
        parse_record(text)
    assert message in str(info_.value)


def test_policy_digests_tell_policies_apart():
    assert policy_digest({"a": 1, "b": [1, 2]}) == policy_digest({"b": [1, 2], "a": 1})
    assert policy_digest({"a": 1}) != policy_digest({"a": 2})


# --------------------------------------------------------------------------- unavailable nodes

NOT_READY = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "node is rebooting"}


def node_obj(conditions=None, taints=None, labels=None):
    obj = {"metadata": {"name": "n", "labels": dict(labels or {})}, "spec": {}, "status": {}}
    if conditions is not None:
        obj["status"]["conditions"] = conditions
    if taints is not None:
        obj["spec"]["taints"] = [{"key": k, "effect": "NoSchedule"} for k in taints]
    return obj


@pytest.mark.parametrize("obj, reasons, recovering", [
    (node_obj([{"type": "Ready", "status": "True"}]), [], False),
    # No Ready condition reported at all: not known to be down.
    (node_obj(), [], False),
    (node_obj([NOT_READY]), ["NotReady (Ready is False: KubeletNotReady, node is rebooting)"], False),
    (node_obj([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}],
              ["node.kubernetes.io/unreachable"]),
     ["NotReady (Ready is Unknown: NodeStatusUnknown)"], False),
    # The taint alone, with no Ready condition reported: unavailable all the same.
    (node_obj(taints=["node.kubernetes.io/unreachable"]), ["tainted node.kubernetes.io/unreachable"], False),
    # Ready again, the node lifecycle controller's taint not lifted yet.
    (node_obj([{"type": "Ready", "status": "True"}], ["node.kubernetes.io/not-ready", "example.com/other"]),
     ["tainted node.kubernetes.io/not-ready although Ready again"], True),
    # Another taint is nobody's unavailability.
    (node_obj([{"type": "Ready", "status": "True"}], ["nvidia.com/gpu"]), [], False),
    (node_obj([{"type": "Ready", "status": "True"}], labels={"nvidia.com/gpu-driver-upgrade-state": "drain-required"}),
     ["under the GPU Operator's driver upgrade (nvidia.com/gpu-driver-upgrade-state=drain-required)"], False),
])
def test_node_info_reads_readiness_lifecycle_taints_and_the_gpu_operator_upgrade(obj, reasons, recovering):
    n = node_info(obj)
    assert n.unavailable() == reasons
    assert n.recovering() is recovering


def test_node_info_names_nvsentinel_and_other_requestors_node_maintenance():
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import maintenance_reason
    ready = [{"type": "Ready", "status": "True"}]
    state = node_obj(ready, labels={"dgxc.nvidia.com/nvsentinel-state": "draining"})
    assert node_info(state).unavailable() == [
        "under NVSentinel's fault handling (dgxc.nvidia.com/nvsentinel-state=draining)"]
    quarantined = node_obj(ready)
    quarantined["metadata"]["annotations"] = {"quarantineHealthEvent": "[...]"}
    assert node_info(quarantined).unavailable() == ["quarantined by NVSentinel (annotation quarantineHealthEvent)"]
    request = {"metadata": {"name": "fw", "namespace": "ops"}, "spec": {"requestorID": "network.operator",
                                                                        "nodeName": "n"}}
    pending = maintenance_reason(request)
    assert pending == "under maintenance requested by network.operator (NodeMaintenance ops/fw, Pending)"
    request["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}
    n = node_info(node_obj(ready, ["node.kubernetes.io/not-ready"]), {"n": [maintenance_reason(request)]})
    assert n.unavailable()[-1] == "under maintenance requested by network.operator (NodeMaintenance ops/fw, Ready)"
    assert n.recovering() is False, "another controller's maintenance does not end within seconds"
    assert node_info(node_obj(ready), {"other": [pending]}).unavailable() == []


GPU_ACTIVE = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
              "drain-required", "pod-restart-required", "validation-required", "uncordon-required", "upgrade-failed"]


@pytest.mark.parametrize("node, reserved, pickable, expected", [
    # NotReady, with work for us: counted, and waits until it is healthy.
    (info("n", ready="False", ready_reason="KubeletNotReady"), None, True, "busy"),
    (info("n", ready="Unknown"), None, True, "busy"),
    (info("n", lifecycle_taints=["node.kubernetes.io/unreachable"]), None, True, "busy"),
    (info("n", lifecycle_taints=["node.kubernetes.io/not-ready"]), None, False, "busy"),
    # Cordoned by someone outside NodeWright and NotReady: no longer ours to take.
    (info("n", unschedulable=True, ready="False"), None, True, "busy"),
    # This resource left it in progress (rebooting when the run died): resumed as before.
    (info("n", unschedulable=True, cordoned_by="mine", statuses={"mine": "in_progress"}, ready="False"), None, True,
     "resumable"),
    (info("n", statuses={"mine": "in_progress"}, lifecycle_taints=["node.kubernetes.io/unreachable"]), None, True,
     "resumable"),
    # Left erroring by this resource, or in progress under another one, and NotReady: not taken.
    (info("n", unschedulable=True, cordoned_by="mine", statuses={"mine": "erroring"}, ready="False"), None, True,
     "busy"),
    (info("n", statuses={"other": "in_progress"}, ready="False"), None, True, "busy"),
    # Reserved by this run itself (rebooting in its own wave): neither.
    (info("n", statuses={"mine": "in_progress"}, ready="False"), ("me", "mine"), True, "free"),
] + [(info("n", labels={"nvidia.com/gpu-driver-upgrade-state": s}), None, True, "busy") for s in GPU_ACTIVE] + [
    (info("n", labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}), None, True, "free"),
    (info("n", labels={"nvidia.com/gpu-driver-upgrade-state": ""}), None, True, "free"),
    (info("n", labels={"nvidia.com/gpu-driver-upgrade.skip": "true"}), None, True, "free"),
])
def test_unavailable_nodes_count_and_wait_until_healthy(node, reserved, pickable, expected):
    holders = {}
    if reserved:
        holders[reserved[0]] = Holder(id=reserved[0], renewed=NOW, nodes={node.name: reserved[1]})
    view = FleetView([node], holders, NOW)
    busy, resumable = view.split("me", "mine", {node.name} if pickable else set(), watched={node.name})
    found = "busy" if node.name in busy else "resumable" if node.name in resumable else "free"
    assert found == expected


@pytest.mark.parametrize("watched, counted", [(None, True), ({"n"}, True), ({"other"}, False)])
def test_unavailability_counts_for_the_watched_nodes(watched, counted):
    view = FleetView([info("n", ready="False")], {}, NOW)
    assert view.disrupted("n", watched) is counted
    assert bool(view.unavailable_nodes(watched)) is counted
    busy, _resumable = view.split("me", "mine", {"n"}, watched)
    assert ("n" in busy) is counted


# --------------------------------------------------------------------------- what the driver then admits

def _node(name, minute, **kw):
    return info(name, created="2026-01-01T00:%02d:00Z" % minute, **kw)


def _run(nodes, pol_spec, work=None, capacity_timeout=0.0, on_wait=None):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
        Hooks,
        ResourceRollout,
        RolloutDriver,
        SimulatedFleet,
    )
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy

    class Recorder(Hooks):
        def __init__(self):
            self.waves, self.said, self.waits = [], [], 0

        def run_wave(self, wave):
            self.waves.append(sorted(wave.nodes))
            return {n: "ok" for n in wave.nodes}

        def wait(self, seconds, reason):
            self.waits += 1
            if on_wait is not None:
                on_wait(view)
            return True

        def say(self, text, level="info"):
            self.said.append(text)

    names = [n.name for n in nodes]
    res = ResourceRollout("mine", parse_policy(pol_spec), targets=names, work=names if work is None else work)
    view = FleetView(nodes, {}, NOW)
    hooks = Recorder()
    driver = RolloutDriver([res], SimulatedFleet(view), hooks, holder_id="me", now=NOW,
                           capacity_timeout=capacity_timeout, poll=0)
    status, reason = driver.run()
    return driver, hooks, res, status, reason


FIXED_1 = {"default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 1}}}}
FIXED_2 = {"default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}}}
CLIQUE = "nvidia.com/gpu.clique"


@pytest.mark.parametrize("nodes, spec, waves, status, words", [
    # Issue 29: count 1 with one NotReady target admits nothing else; the NotReady node waits.
    ([_node("n00", 0), _node("n01", 1), _node("n02", 2, ready="False", ready_reason="KubeletNotReady"),
      _node("n03", 3)],
     dict(FIXED_1, fleetDisruptionLimit={"count": 1}), [], "waiting",
     ["fleet disruption limit reached", "n02: NotReady (Ready is False: KubeletNotReady)",
      "not admitted until healthy"]),
    # A count of 2: one slot left, one node at a time; the NotReady node is never admitted.
    ([_node("n00", 0, ready="False"), _node("n01", 1), _node("n02", 2)],
     dict(FIXED_2, fleetDisruptionLimit={"count": 2}), [["n01"], ["n02"]], "waiting",
     ["n00: NotReady", "in progress under other NodeWright resources (n00)"]),
    # Under the GPU Operator's upgrade: counted the same way.
    ([_node("n00", 0, labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-required"}), _node("n01", 1)],
     dict(FIXED_2, fleetDisruptionLimit={"count": 1}), [], "waiting",
     ["n00: under the GPU Operator's driver upgrade (nvidia.com/gpu-driver-upgrade-state=upgrade-required)"]),
    ([_node("n00", 0, labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}), _node("n01", 1)],
     dict(FIXED_2, fleetDisruptionLimit={"count": 1}), [["n00"], ["n01"]], "complete", []),
    # Topology: the NotReady node holds its clique; the other clique goes on.
    ([_node("n00", 0, labels={CLIQUE: "c1"}, ready="False"), _node("n01", 1, labels={CLIQUE: "c1"}),
      _node("n02", 2, labels={CLIQUE: "c2"})],
     dict(FIXED_2, topology={"key": CLIQUE, "maxInProgress": 1}), [["n02"]], "waiting",
     ["held back", "n00: NotReady"]),
    # This resource's own node left in progress while rebooting: resumed first, alone under count 1.
    ([_node("n00", 0, statuses={"mine": "in_progress"}, unschedulable=True, cordoned_by="mine", ready="False"),
      _node("n01", 1)],
     dict(FIXED_2, fleetDisruptionLimit={"count": 1}), [["n00"], ["n01"]], "complete", []),
])
def test_unavailable_targets_hold_capacity_and_are_not_admitted(nodes, spec, waves, status, words):
    driver, hooks, res, got, reason = _run(nodes, spec)
    assert hooks.waves == waves
    assert got == status, reason
    for word in words:
        assert word in reason
    if words:
        assert any("not admitted until healthy" in n for n in res.decision.notes)


def test_the_plan_makes_the_same_waves_and_says_why():
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import ResourceRollout
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import plan_run
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
    nodes = [_node("n00", 0), _node("n01", 1, ready="False"), _node("n02", 2), _node("n03", 3)]
    names = [n.name for n in nodes]
    res = ResourceRollout("mine", parse_policy(dict(FIXED_1, fleetDisruptionLimit={"count": 1})), targets=names,
                          work=names)
    planned, status, reason = plan_run([res], FleetView(nodes, {}, NOW))
    assert planned.waves == [] and status == "waiting"
    assert "n01: NotReady (Ready is False)" in reason


def test_a_node_ready_again_with_the_taint_still_on_is_waited_for_not_given_up():
    def lift(view):
        view.nodes["n00"].lifecycle_taints = []
    # n00 is done already: a node this run just rebooted and finished, say.
    nodes = [_node("n00", 0, lifecycle_taints=["node.kubernetes.io/not-ready"]), _node("n01", 1)]
    driver, hooks, res, status, reason = _run(nodes, dict(FIXED_1, fleetDisruptionLimit={"count": 1}),
                                              work=["n01"], capacity_timeout=60, on_wait=lift)
    assert hooks.waits == 1 and hooks.waves == [["n01"]] and status == "complete"
    assert any("lift its taint from n00" in s for s in hooks.said)


def test_a_node_only_notready_ends_the_run_waiting_at_once_and_is_told_once():
    nodes = [_node("n00", 0, ready="False"), _node("n01", 1)]
    driver, hooks, res, status, reason = _run(nodes, dict(FIXED_1, fleetDisruptionLimit={"count": 1}),
                                              capacity_timeout=60)
    assert status == "waiting" and hooks.waits == 0 and hooks.waves == []
    told = [s for s in hooks.said if "n00 is unavailable" in s]
    assert len(told) == 1 and "not admitted until it is healthy" in told[0]
