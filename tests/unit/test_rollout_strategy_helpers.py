# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pure parts of the rollout strategy: play variables, node labels from host
variables, the wave facts and the report record, table by table."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.policy import (
    HALTED,
    WAVE,
    RolloutState,
    next_wave,
    parse_policy,
    record_wave_result,
)
from ansible_collections.nodewright.fleet.plugins.strategy import rollout

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
    # Under bin/nodewright-rollout the play needs no policy of its own.
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
    assert rollout.wave_facts(wave, "inline") == {
        "c1": {"wave": 1, "compartment": "canary", "wave_size": 3, "policy": "inline"},
        "g1": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"},
        "g2": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"}}
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    assert rollout.seconds_until(now + datetime.timedelta(minutes=5), now) == 300
    assert rollout.seconds_until(now - datetime.timedelta(minutes=5), now) == 0


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
