# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pure parts of a rollout run (module_utils/fleet/rollout.py): play variables, node labels from host
variables, the wave facts and the report record, table by table."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    HALTED,
    WAVE,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import WaveRun
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    next_wave,
    record_wave_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import rollout

pytestmark = pytest.mark.unit

POLICY = {"default": {"budget": {"count": 2}, "strategy": {"fixed": {"initialBatch": 2}}}}


@pytest.mark.parametrize("variables, expected", [
    ({"nodewright_rollout_policy": POLICY}, {"policy_spec": POLICY, "policy_name": None, "wait_for_window": True}),
    ({"nodewright_rollout_policy_name": "h100"}, {"policy_spec": None, "policy_name": "h100"}),
    ({"nodewright_rollout_policy_name": "h100", "nodewright_rollout_wait_for_window": "no"},
     {"wait_for_window": False}),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_wait_for_window": False}, {"wait_for_window": False}),
    ({"nodewright_rollout_policy_name": "p", "nodewright_rollout_k8s_auth": {"context": "prod"}},
     {"k8s_auth": {"context": "prod"}}),
    # Under `nodewright rollout` the play needs no policy of its own.
    ({"nodewright_rollout_driver": "wave_runner"}, {"driver": "wave_runner", "policy_spec": None}),
])
def test_read_settings(variables, expected):
    settings = rollout.read_settings(variables)
    for key, value in expected.items():
        assert getattr(settings, key) == value


@pytest.mark.parametrize("variables, message", [
    ({}, "needs a DeploymentPolicy"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_policy_name": "x"}, "sets both"),
    ({"nodewright_rollout_policy_name": ["x"]}, "must be the name of a DeploymentPolicy"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_wait_for_window": "later"}, "must be true or false"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_k8s_auth": "prod"}, "must be a mapping"),
])
def test_read_settings_explains_mistakes(variables, message):
    with pytest.raises(NodeWrightError) as info:
        rollout.read_settings(variables)
    assert message in str(info.value)


def test_serial_is_refused_with_a_way_out():
    rollout.check_serial([], "roll")
    with pytest.raises(NodeWrightError) as info:
        rollout.check_serial([2, "50%"], "roll")
    assert "play 'roll' sets serial: [2, '50%']" in str(info.value)
    assert "remove serial" in info.value.hint


@pytest.mark.parametrize("variables, expected", [
    ({"k8s_node": {"labels": {"pool": "a"}, "creationTimestamp": "2026-01-02T03:04:05Z"},
      "nodewright_node_labels": {"pool": "ignored"}},
     {"name": "n1", "labels": {"pool": "a"}, "creationTimestamp": "2026-01-02T03:04:05Z"}),
    ({"k8s_node": {"name": "n1"}, "nodewright_node_labels": {"gpu.count": 8}},
     {"name": "n1", "labels": {"gpu.count": "8"}, "creationTimestamp": None}),
    ({"nodewright_node_labels": {}}, {"name": "n1", "labels": {}, "creationTimestamp": None}),
    ({}, None),
    ({"k8s_node": {"name": "n1"}}, None),
])
def test_node_from_vars(variables, expected):
    assert rollout.node_from_vars("n1", variables) == expected


def test_node_labels_must_be_a_mapping():
    with pytest.raises(NodeWrightError) as info:
        rollout.node_from_vars("n1", {"nodewright_node_labels": ["pool=a"]})
    assert "host n1: nodewright_node_labels must be a mapping" in str(info.value)


def test_collect_nodes_keeps_host_order_and_needs_no_cluster_when_labels_are_known():
    variables = {"b": {"nodewright_node_labels": {"x": "1"}}, "a": {"k8s_node": {"labels": {}}}}
    nodes = rollout.collect_nodes(["b", "a"], lambda h: variables[h])
    assert [n["name"] for n in nodes] == ["b", "a"]


def test_collect_nodes_says_what_to_do_when_labels_are_missing_and_the_cluster_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(NodeWrightError) as info:
        rollout.collect_nodes(["a", "b"], lambda h: {})
    assert "2 host(s) have no node labels (a, b)" in str(info.value)
    assert "nodewright_node_labels" in info.value.hint


def test_wave_facts_and_seconds_until():
    state = RolloutState(parse_policy({"default": {"budget": {"count": 3}},
                                       "compartments": [{"name": "canary", "selector": "pool=canary",
                                                         "budget": {"count": 1}}]}))
    nodes = [{"name": "c1", "labels": {"pool": "canary"}}, {"name": "g1", "labels": {}},
             {"name": "g2", "labels": {}}]
    wave = next_wave(state, nodes).wave

    class Record(object):
        source, resource = "inline", None

    run = WaveRun(number=1, assignment={n: "r" for n in wave.nodes}, waves={"r": wave})
    assert rollout.wave_facts(run, {"r": Record()}) == {
        "c1": {"wave": 1, "compartment": "canary", "wave_size": 3, "policy": "inline"},
        "g1": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"},
        "g2": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"}}


def test_record_follows_the_engine_to_a_halt():
    policy = parse_policy({"default": {"budget": {"count": 1},
                                       "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1}}}})
    nodes = [{"name": "n%d" % i, "labels": {}, "creationTimestamp": "2026-01-0%dT00:00:00Z" % (5 - i)}
             for i in range(1, 5)]
    state = RolloutState(policy)
    record = rollout.RolloutRecord("patch", policy, "inline", nodes, driver="strategy")
    record.leave_out(["gone"], "failed earlier")
    decision = next_wave(state, nodes)
    record.decision(decision)
    assert decision.status == WAVE and decision.wave.nodes == ["n4"]  # oldest first
    record.wave_started(decision.wave)
    outcome = record_wave_result(state, failed=["n4"])
    record.wave_finished([], ["n4"], outcome)
    decision = next_wave(state, nodes)
    record.decision(decision)
    assert decision.status == HALTED
    message = rollout.halt_message(decision, record.untouched())
    record.finish(HALTED, message)
    data = record.to_dict(state)
    assert data["status"] == HALTED and data["untouched"] == ["n3", "n2", "n1"]
    assert "default compartment halted after 1 consecutive failed batch(es)" in message
    assert message.endswith("3 node(s) were never admitted and are untouched: n3, n2, n1")
    assert data["assignment"] == {"n4": {"wave": 1, "compartment": "__default__"}}
    assert data["waves"][0]["failed"] == ["n4"] and data["waves"][0]["batches"]["__default__"]["shouldStop"]
    assert data["leftOut"] == {"gone": "failed earlier"}
    assert data["failed"] == ["n4"] and data["compartments"]["__default__"]["matched"] == 4
    assert [d["status"] for d in data["decisions"]] == ["wave", "halted"]
    assert data["policy"] == {"source": "inline", "spec": policy.to_dict()}


# ------------------------------------------------------------- batch state between runs

LINEAR = parse_policy({"default": {"budget": {"percent": 100}, "strategy": {"linear": {
    "initialBatch": 1, "delta": 1, "failureThreshold": 1, "safetyLimit": 100}}}})
NODES = [{"name": "n%d" % i, "labels": {}} for i in range(8)]


def resource(generation=1, version="1.0.0", status=None):
    return {"metadata": {"name": "tune", "generation": generation},
            "spec": {"packages": {"sysctl": {"version": version}, "agent": {"version": "2.1"}}},
            "status": status or {}}


def saved_after(waves, failed=()):
    """The status a run leaves after ``waves`` waves (nodes of ``failed`` fail)."""
    state = RolloutState(LINEAR, version=rollout.spec_key(resource()))
    for _ in range(waves):
        decision = next_wave(state, NODES)
        record_wave_result(state, succeeded=[n for n in decision.wave.nodes if n not in failed],
                           failed=[n for n in decision.wave.nodes if n in failed])
    return rollout.state_patch(state, NODES)["status"]


def test_spec_key_names_the_packages_and_the_generation():
    assert rollout.spec_key(resource(generation=4)) == "agent:2.1,sysctl:1.0.0 (generation 4)"


def test_a_new_run_resumes_the_recorded_batch():
    status = saved_after(2)  # batches of 1 and 2: the next is 3
    assert status["compartmentStatuses"]["__default__"]["batchState"]["currentBatch"] == 3
    state, note = rollout.resume_state(LINEAR, resource(status=status))
    assert "resuming" in note and "batch 3" in note
    remaining = [n for n in NODES if n["name"] not in ("n0", "n1", "n2")]
    assert len(next_wave(state, remaining).wave.nodes) == 3


def test_a_halted_compartment_stays_halted_in_the_next_run():
    status = saved_after(1, failed=("n0",))
    state, note = rollout.resume_state(LINEAR, resource(status=status))
    assert "halted: __default__" in note and "nodewright reset-batches tune" in note
    decision = next_wave(state, NODES)
    assert decision.status == HALTED and decision.wave is None
    assert "nodewright reset-batches" in decision.reason


@pytest.mark.parametrize("changed", [
    {"version": "1.0.1"},   # a new package version
    {"generation": 2},      # new config, another policy: any spec change
])
def test_a_changed_spec_starts_from_the_first_batch(changed):
    status = saved_after(1, failed=("n0",))
    state, note = rollout.resume_state(LINEAR, resource(status=status, **changed))
    assert "starting from the first batch" in note
    decision = next_wave(state, NODES)
    assert decision.status == WAVE and len(decision.wave.nodes) == 1
    assert state.version == rollout.spec_key(resource(**changed))


@pytest.mark.parametrize("status", [
    {},
    {"rolloutState": {"version": "x", "batchStates": {}}},
])
def test_nothing_recorded_means_a_fresh_start(status):
    state, note = rollout.resume_state(LINEAR, resource(status=status))
    assert note is None and state.batches == {} and state.version == rollout.spec_key(resource())


def test_an_unusable_record_starts_fresh_and_says_why():
    key = rollout.spec_key(resource())
    bad = {"rolloutState": {"version": key, "batchStates": {"__default__": {"currentBatch": -3}}}}
    state, note = rollout.resume_state(LINEAR, resource(status=bad))
    assert state.batches == {} and "cannot be used" in note and "currentBatch" in note


def test_compartments_gone_from_the_policy_are_dropped_and_removed_from_the_status():
    key = rollout.spec_key(resource())
    old = {"rolloutState": {"version": key, "batchStates": {"retired": {"currentBatch": 5}}},
           "compartmentStatuses": {"retired": {"matched": 3}}}
    state, note = rollout.resume_state(LINEAR, resource(status=old))
    assert state.batches == {} and note is None
    patch = rollout.state_patch(state, NODES, old)["status"]
    assert patch["compartmentStatuses"]["retired"] is None
    assert patch["rolloutState"]["batchStates"]["retired"] is None
    assert patch["rolloutState"]["version"] == key


def test_the_state_resource_variable():
    settings = rollout.read_settings({"nodewright_rollout_policy": POLICY, "nodewright_rollout_state_resource": "t"})
    assert settings.state_resource == "t"
    assert rollout.read_settings({"nodewright_rollout_policy": POLICY,
                                  "nodewright_rollout_state_resource": ""}).state_resource is None
    with pytest.raises(NodeWrightError, match="name of a NodeWright resource"):
        rollout.read_settings({"nodewright_rollout_policy": POLICY, "nodewright_rollout_state_resource": ["x"]})
