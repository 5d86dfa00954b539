# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Waves: the batch state and its status form, node order, compartment assignment,
the next-wave decision (each reason in words), recording a wave's outcome and the
compartment statuses written to the resource."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    DEFAULT_COMPARTMENT,
    HALTED,
    INCOMPLETE,
    WAITING,
    WAVE,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
    Wave,
    WaveDecision,
    assign_nodes,
    compartment_statuses,
    next_wave,
    order_nodes,
    record_wave_result,
)

from engine_dry_run import make_nodes, policy

pytestmark = pytest.mark.unit

UTC = datetime.timezone.utc




# --------------------------------------------------------------------------- batch state


def test_batch_state_round_trips_in_camel_case():
    state = BatchState(current_batch=3, consecutive_failures=1, completed_nodes=4, failed_nodes=2,
                       should_stop=True, last_batch_size=2, last_batch_failed=True)
    data = state.to_dict()
    assert data == {"currentBatch": 3, "consecutiveFailures": 1, "completedNodes": 4, "failedNodes": 2,
                    "shouldStop": True, "lastBatchSize": 2, "lastBatchFailed": True}
    assert BatchState.from_dict(data) == state


@pytest.mark.parametrize("data", [None, {}, {"currentBatch": None}])
def test_batch_state_defaults(data):
    assert BatchState.from_dict(data) == BatchState()


@pytest.mark.parametrize("data, field, message", [
    ({"currentBatch": "2"}, "bs.currentBatch", "must be a whole number >= 0, got '2'"),
    ({"failedNodes": 1.5}, "bs.failedNodes", "must be a whole number >= 0, got 1.5"),
    ({"completedNodes": True}, "bs.completedNodes", "must be a whole number >= 0, got True"),
    ({"lastBatchSize": -3}, "bs.lastBatchSize", "must be a whole number >= 0, got -3"),
    ({"shouldStop": "true"}, "bs.shouldStop", "must be true or false, got 'true'"),
    ({"lastBatchFailed": 1}, "bs.lastBatchFailed", "must be true or false, got 1"),
])
def test_batch_state_errors_name_the_field(data, field, message):
    with pytest.raises(ValidationError) as caught:
        BatchState.from_dict(data, "bs")
    assert caught.value.field == field
    assert message in str(caught.value)


def test_batch_state_number_error_has_a_hint():
    with pytest.raises(ValidationError) as caught:
        BatchState.from_dict({"currentBatch": -1})
    assert caught.value.hint == "reset the rollout's batch state if the status was edited by hand"
    assert caught.value.field == "batchState.currentBatch"


def test_batch_state_must_be_a_mapping():
    with pytest.raises(ValidationError) as caught:
        BatchState.from_dict(["x"], "bs")
    assert caught.value.field == "bs"


def test_wave_round_trips():
    wave = Wave(number=2, nodes=["a", "b"], compartments={"c": ["a"], DEFAULT_COMPARTMENT: ["b"]},
                totals={"c": 1, DEFAULT_COMPARTMENT: 5})
    assert Wave.from_dict(wave.to_dict()) == wave
    assert Wave.from_dict({"number": "3", "nodes": [], "compartments": {}}).totals == {}


# --------------------------------------------------------------------------- rollout state


def test_rollout_state_defaults_and_reset():
    state = RolloutState(policy())
    assert state.to_dict() == {"version": None, "waveNumber": 0, "succeeded": [], "failed": [], "blocked": [],
                               "pendingWave": None, "batchStates": {}}
    assert state.batch("x") is state.batch("x")
    state.reset_batches()
    assert state.batches == {}


def test_from_dict_of_nothing():
    state = RolloutState.from_dict(policy(), None)
    assert state.wave_number == 0 and state.pending is None and state.batches == {}


@pytest.mark.parametrize("pending", [{"nodes": ["a"]}, {"number": "x", "nodes": [], "compartments": {}},
                                     {"number": 1, "nodes": [], "compartments": []}, "wave"])
def test_malformed_pending_wave_says_how_to_recover(pending):
    with pytest.raises(ValidationError) as caught:
        RolloutState.from_dict(policy(), {"pendingWave": pending})
    assert caught.value.field == "rolloutState.pendingWave"
    assert caught.value.hint == "reset the rollout state of this resource, then rerun"
    assert "the recorded pending wave is malformed" in str(caught.value)


def test_from_dict_names_the_compartment_of_a_bad_batch_state():
    with pytest.raises(ValidationError) as caught:
        RolloutState.from_dict(policy(), {"batchStates": {"canary": {"currentBatch": "1"}}})
    assert caught.value.field == "batchStates.canary.currentBatch"


def test_state_round_trips_through_a_dict():
    pol = policy({"exponential": {"failureThreshold": 3}})
    state = RolloutState(pol, version="v1")
    nodes = make_nodes(10)
    wave = next_wave(state, nodes, ignore_windows=True).wave
    record_wave_result(state, succeeded=wave.nodes)
    next_wave(state, nodes, ignore_windows=True)
    data = state.to_dict()
    assert data["batchStates"][DEFAULT_COMPARTMENT] == {
        "currentBatch": 2, "consecutiveFailures": 0, "completedNodes": 1, "failedNodes": 0,
        "shouldStop": False, "lastBatchSize": 1, "lastBatchFailed": False}
    restored = RolloutState.from_dict(pol, data)
    assert restored.to_dict() == data
    record_wave_result(restored, succeeded=["n01"], failed=["n02"])
    assert restored.batches[DEFAULT_COMPARTMENT].consecutive_failures == 1


def test_malformed_pending_wave_is_reported():
    with pytest.raises(ValidationError) as err:
        RolloutState.from_dict(policy(), {"pendingWave": {"nodes": ["a"]}})
    assert err.value.field == "rolloutState.pendingWave"


def test_batch_state_from_partial_status():
    # Skyhook-style status omits zero values.
    assert BatchState.from_dict({"currentBatch": 3, "shouldStop": True}) == BatchState(current_batch=3, should_stop=True)
    with pytest.raises(ValidationError) as err:
        BatchState.from_dict({"currentBatch": -1}, "status.compartmentStatuses.a.batchState")
    assert err.value.field == "status.compartmentStatuses.a.batchState.currentBatch"


def test_next_wave_needs_the_previous_result_first():
    state = RolloutState(policy())
    next_wave(state, make_nodes(2), ignore_windows=True)
    with pytest.raises(NodeWrightError, match="wave 1 has no recorded result yet"):
        next_wave(state, make_nodes(2), ignore_windows=True)


@pytest.mark.parametrize("kwargs,message", [
    ({"succeeded": ["n00"], "failed": ["n00"]}, "reported as both succeeded and failed"),
    ({"failed": ["n00"], "blocked": ["n00"]}, "reported as both failed and blocked"),
    ({"succeeded": ["stranger"]}, "not in wave 1"),
])
def test_record_wave_result_rejects_bad_reports(kwargs, message):
    state = RolloutState(policy())
    next_wave(state, make_nodes(2), ignore_windows=True)
    with pytest.raises(NodeWrightError, match=message):
        record_wave_result(state, **kwargs)


def test_record_without_a_wave():
    with pytest.raises(NodeWrightError, match="no wave in progress"):
        record_wave_result(RolloutState(policy()), succeeded=["n00"])


def test_compartment_statuses():
    pol = parse_policy({
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
        "compartments": [{"name": "canary", "selector": "pool=canary", "budget": {"count": 1}}],
    })
    nodes = make_nodes(2, {"pool": "canary"}, prefix="c") + make_nodes(4, prefix="d")
    state = RolloutState(pol)
    wave = next_wave(state, nodes, ignore_windows=True).wave
    record_wave_result(state, succeeded=wave.nodes)
    next_wave(state, nodes, ignore_windows=True)
    statuses = compartment_statuses(state, nodes)
    assert statuses["canary"] == {"matched": 2, "ceiling": 1, "inProgress": 1, "completed": 1,
                                  "progressPercent": 50, "batchState": state.batches["canary"].to_dict()}
    assert statuses[DEFAULT_COMPARTMENT]["inProgress"] == 2
    assert statuses[DEFAULT_COMPARTMENT]["completed"] == 2


def test_compartment_statuses_of_nothing():
    assert compartment_statuses(RolloutState(policy()), []) == {}


def test_compartment_statuses_count_done_failed_and_in_progress():
    state = RolloutState(policy(), failed=["n01"])
    statuses = compartment_statuses(state, make_nodes(4), done=["n00"], in_progress=["n02"])
    assert statuses == {DEFAULT_COMPARTMENT: {
        "matched": 4, "ceiling": 4, "inProgress": 1, "completed": 1, "progressPercent": 50,
        "batchState": BatchState().to_dict()}}


def test_compartment_statuses_keep_a_compartment_with_batch_state_but_no_nodes():
    pol = parse_policy({"default": {"budget": {"count": 1}},
                        "compartments": [{"name": "canary", "selector": "pool=canary", "budget": {"count": 1}}]})
    state = RolloutState(pol)
    state.batch("canary").current_batch = 3
    statuses = compartment_statuses(state, make_nodes(1))
    assert statuses["canary"]["matched"] == 0 and statuses["canary"]["progressPercent"] == 0
    assert statuses["canary"]["batchState"]["currentBatch"] == 3


# --------------------------------------------------------------------------- node order


def test_order_nodes_oldest_first_then_name_then_undated():
    nodes = [{"name": "c", "creationTimestamp": "2025-01-02T00:00:00Z"},
             {"name": "b", "creationTimestamp": "2025-01-01T00:00:00Z"},
             {"name": "a", "creationTimestamp": "2025-01-02T00:00:00Z"},
             {"name": "undated"},
             "by-name-only",
             {"metadata": {"name": "api", "creationTimestamp": "2025-01-01T12:00:00+00:00"}}]
    assert order_nodes(nodes) == ["b", "api", "a", "c", "by-name-only", "undated"]


def test_order_nodes_keeps_sticky_nodes_first_in_their_order():
    nodes = make_nodes(4)
    sticky = {"n03": "2025-02-01T00:00:00Z", "n02": "2025-02-02T00:00:00Z"}
    assert order_nodes(nodes, sticky) == ["n03", "n02", "n00", "n01"]


def test_order_nodes_accepts_datetimes_and_naive_is_utc():
    nodes = [{"name": "a", "creationTimestamp": datetime.datetime(2025, 1, 2)},
             {"name": "b", "creationTimestamp": datetime.datetime(2025, 1, 1, 23, tzinfo=UTC)}]
    assert order_nodes(nodes) == ["b", "a"]


@pytest.mark.parametrize("node, field, message", [
    ({"name": "a", "creationTimestamp": "yesterday"}, "nodes[0]",
     "creationTimestamp 'yesterday' is not an RFC 3339 time"),
    ({"name": "a", "creationTimestamp": 5}, "nodes[0]", "creationTimestamp 5 is not an RFC 3339 time"),
    ({"labels": {}}, "nodes[0]", "a node needs a name"),
    ({"name": 7}, "nodes[0]", "a node needs a name"),
    (42, "nodes[0]", "a node must be a mapping or a name, got int"),
])
def test_order_nodes_errors(node, field, message):
    with pytest.raises(ValidationError) as caught:
        order_nodes([node])
    assert caught.value.field == field
    assert message in str(caught.value)


def test_a_bad_timestamp_has_a_hint():
    with pytest.raises(ValidationError) as caught:
        order_nodes([{"name": "a", "creationTimestamp": "x"}])
    assert caught.value.hint == "pass the node's metadata.creationTimestamp as the API returns it"


def test_a_node_listed_twice_is_refused():
    with pytest.raises(ValidationError) as caught:
        assign_nodes(policy(), ["a", {"name": "a"}])
    assert caught.value.field == "nodes[1]"
    assert "node 'a' is listed twice" in str(caught.value)


def test_assign_nodes_leaves_ignored_nodes_out():
    nodes = make_nodes(3, lambda i: {"nodewright.io/ignore": "true"} if i == 1 else {})
    assert assign_nodes(policy(), nodes) == {DEFAULT_COMPARTMENT: ["n00", "n02"]}


# --------------------------------------------------------------------------- next wave


def test_next_wave_of_no_nodes_is_complete():
    decision = next_wave(RolloutState(policy()), [], ignore_windows=True)
    assert (decision.status, decision.reason, decision.wave) == (COMPLETE, "all 0 node(s) are complete", None)


def test_wave_numbers_and_reason():
    state = RolloutState(policy({"fixed": {"initialBatch": 2}}))
    decision = next_wave(state, make_nodes(3), ignore_windows=True)
    assert decision.status == WAVE
    assert decision.reason == "wave 1: 2 node(s) from __default__ (2)"
    assert state.pending is decision.wave and state.wave_number == 1
    assert decision.wave.totals == {DEFAULT_COMPARTMENT: 3}


def test_incomplete_lists_failed_and_blocked_nodes():
    state = RolloutState(policy(), failed=["n01"], blocked=["n02"])
    decision = next_wave(state, make_nodes(3), done=["n00"], ignore_windows=True)
    assert decision.status == INCOMPLETE
    assert decision.reason == ("nothing left to try in this run: 1 complete, 1 failed (n01), 1 blocked by "
                               "non-interruptible pods (n02); fix or reset the failed nodes and rerun to retry them")


def test_nodes_outside_eligible_are_left_to_other_runs():
    nodes = make_nodes(3)
    decision = next_wave(RolloutState(policy()), nodes, done=["n00"], eligible=["n00"], ignore_windows=True)
    assert decision.status == COMPLETE
    assert decision.reason == "every node this run can reach is complete; 2 node(s) are left to other runs (n01, n02)"
    state = RolloutState(policy(), failed=["n00"])
    decision = next_wave(state, nodes, eligible=["n00"], ignore_windows=True)
    assert decision.status == INCOMPLETE
    assert "1 failed (n00), 2 left to other runs (n01, n02)" in decision.reason


def test_eligible_nodes_are_the_only_ones_picked():
    decision = next_wave(RolloutState(policy()), make_nodes(3), eligible=["n02"], ignore_windows=True)
    assert decision.wave.nodes == ["n02"]


def test_deferred_nodes_are_neither_picked_nor_held():
    decision = next_wave(RolloutState(policy()), make_nodes(2), deferred=["n00"], ignore_windows=True)
    assert decision.wave.nodes == ["n01"]
    decision = next_wave(RolloutState(policy()), make_nodes(1), deferred=["n00"], ignore_windows=True)
    assert decision.status == COMPLETE


def test_resumable_nodes_are_taken_first():
    state = RolloutState(policy({"fixed": {"initialBatch": 1}}))
    decision = next_wave(state, make_nodes(3), resumable=["n02"], ignore_windows=True)
    assert decision.wave.nodes == ["n02"]


def test_names_beyond_five_are_counted():
    decision = next_wave(RolloutState(policy()), make_nodes(7), in_progress_elsewhere=[n["name"] for n in
                                                                                       make_nodes(7)],
                         ignore_windows=True)
    assert decision.status == WAITING
    assert "7 node(s) are in progress under other NodeWright resources (n00, n01, n02, n03, n04 and 2 more)" \
        in decision.reason


def test_halted_reason_says_how_to_resume():
    pol = policy({"fixed": {"initialBatch": 1, "failureThreshold": 1}})
    state = RolloutState(pol)
    nodes = make_nodes(4)
    next_wave(state, nodes, ignore_windows=True)
    record_wave_result(state, failed=["n00"])
    decision = next_wave(state, nodes, ignore_windows=True)
    assert decision.status == HALTED
    assert decision.halted == {DEFAULT_COMPARTMENT: 1}
    assert decision.reason.startswith("default compartment halted after 1 consecutive failed batch(es) "
                                      "(failureThreshold 1, progress 25% below safetyLimit 50%)")
    assert decision.reason.endswith("fix the failed nodes (n00), then reset the rollout's batch state to resume "
                                    "(nodewright reset-batches NAME, or any change of the resource's spec)")


def test_decision_to_dict():
    now = datetime.datetime(2025, 1, 3, 12, 0, tzinfo=UTC)
    pol = policy(maintenanceWindows=[{"days": ["Sat"], "start": "22:00", "end": "04:00"}])
    data = next_wave(RolloutState(pol), make_nodes(1), now=now).to_dict()
    assert data == {"status": WAITING, "wave": None, "notes": [], "halted": {},
                    "nextWindow": "2025-01-04T22:00:00+00:00",
                    "reason": "outside every maintenance window (Sat 22:00-04:00 UTC); the next opens at "
                              "2025-01-04T22:00:00+00:00"}
    plain = WaveDecision(status=COMPLETE, reason="done")
    assert plain.to_dict() == {"status": COMPLETE, "reason": "done", "wave": None, "notes": [], "halted": {},
                               "nextWindow": None}
    soaking = WaveDecision(status=WAITING, reason="soak", soak_until=now)
    assert soaking.to_dict()["soakUntil"] == "2025-01-03T12:00:00+00:00"


def test_soak_time_holds_the_next_wave_until_it_passes():
    pol = parse_policy({"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}, "soakTime": "1h30m"}})
    state = RolloutState(pol)
    start = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    nodes = make_nodes(2)
    next_wave(state, nodes, now=start)
    outcome = record_wave_result(state, succeeded=["n00"], now=start)
    assert outcome[DEFAULT_COMPARTMENT]["soakUntil"] == "2026-12-01T13:30:00+00:00"
    waiting = next_wave(state, nodes, now=start + datetime.timedelta(minutes=10))
    assert waiting.status == WAITING
    assert waiting.soak_until == datetime.datetime(2026, 12, 1, 13, 30, tzinfo=UTC)
    assert waiting.reason == ("no node may start now: default compartment: soaking until 2026-12-01T13:30:00+00:00 "
                              "(soakTime 1h30m after its last batch)")
    assert next_wave(state, nodes, now=start, ignore_soak=True).status == WAVE


# --------------------------------------------------------------------------- recording


def test_record_wave_result_outcome_per_compartment():
    state = RolloutState(policy({"fixed": {"initialBatch": 3}}))
    next_wave(state, make_nodes(3), ignore_windows=True)
    outcome = record_wave_result(state, succeeded=["n00"], blocked=["n02"])
    result = outcome[DEFAULT_COMPARTMENT]
    assert (result["succeeded"], result["failed"], result["blocked"]) == (1, 1, 1)   # n01 unreported: failed
    assert state.succeeded == {"n00"} and state.failed == {"n01"} and state.blocked == {"n02"}
    assert state.pending is None


def test_record_wave_result_error_hints():
    state = RolloutState(policy())
    next_wave(state, make_nodes(2), ignore_windows=True)
    with pytest.raises(NodeWrightError) as caught:
        record_wave_result(state, succeeded=["n00", "x"], blocked=["n00"])
    assert "node(s) n00 reported as both succeeded and blocked" in str(caught.value)
    assert caught.value.hint == "report each node of the wave exactly once"
    with pytest.raises(NodeWrightError) as caught:
        record_wave_result(state, succeeded=["x", "y"])
    assert "node(s) x, y are not in wave 1" in str(caught.value)
    assert caught.value.hint == "report only the nodes next_wave() returned for this wave"
    assert state.pending is not None   # nothing recorded
