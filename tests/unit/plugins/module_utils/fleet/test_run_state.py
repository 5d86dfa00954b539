# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The batch state a run resumes from and writes (module_utils/fleet/run_state.py)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    HALTED,
    WAVE,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    next_wave,
    record_wave_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import (
    run_state,
)

pytestmark = pytest.mark.unit


LINEAR = parse_policy({"default": {"budget": {"percent": 100}, "strategy": {"linear": {
    "initialBatch": 1, "delta": 1, "failureThreshold": 1, "safetyLimit": 100}}}})
NODES = [{"name": "n%d" % i, "labels": {}} for i in range(8)]


def resource(generation=1, version="1.0.0", status=None):
    return {"metadata": {"name": "tune", "generation": generation},
            "spec": {"packages": {"sysctl": {"version": version}, "agent": {"version": "2.1"}}},
            "status": status or {}}


def saved_after(waves, failed=()):
    """The status a run leaves after ``waves`` waves (nodes of ``failed`` fail)."""
    state = RolloutState(LINEAR, version=run_state.spec_key(resource()))
    for _ in range(waves):
        decision = next_wave(state, NODES)
        record_wave_result(state, succeeded=[n for n in decision.wave.nodes if n not in failed],
                           failed=[n for n in decision.wave.nodes if n in failed])
    return run_state.state_patch(state, NODES)["status"]


def test_spec_key_names_the_packages_and_the_generation():
    assert run_state.spec_key(resource(generation=4)) == "agent:2.1,sysctl:1.0.0 (generation 4)"


def test_a_new_run_resumes_the_recorded_batch():
    status = saved_after(2)  # batches of 1 and 2: the next is 3
    assert status["compartmentStatuses"]["__default__"]["batchState"]["currentBatch"] == 3
    state, note = run_state.resume_state(LINEAR, resource(status=status))
    assert "resuming" in note and "batch 3" in note
    remaining = [n for n in NODES if n["name"] not in ("n0", "n1", "n2")]
    assert len(next_wave(state, remaining).wave.nodes) == 3


def test_a_halted_compartment_stays_halted_in_the_next_run():
    status = saved_after(1, failed=("n0",))
    state, note = run_state.resume_state(LINEAR, resource(status=status))
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
    state, note = run_state.resume_state(LINEAR, resource(status=status, **changed))
    assert "starting from the first batch" in note
    decision = next_wave(state, NODES)
    assert decision.status == WAVE and len(decision.wave.nodes) == 1
    assert state.version == run_state.spec_key(resource(**changed))


@pytest.mark.parametrize("status", [
    {},
    {"rolloutState": {"version": "x", "batchStates": {}}},
])
def test_nothing_recorded_means_a_fresh_start(status):
    state, note = run_state.resume_state(LINEAR, resource(status=status))
    assert note is None and state.batches == {} and state.version == run_state.spec_key(resource())


def test_an_unusable_record_starts_fresh_and_says_why():
    key = run_state.spec_key(resource())
    bad = {"rolloutState": {"version": key, "batchStates": {"__default__": {"currentBatch": -3}}}}
    state, note = run_state.resume_state(LINEAR, resource(status=bad))
    assert state.batches == {} and "cannot be used" in note and "currentBatch" in note


def test_compartments_gone_from_the_policy_are_dropped_and_removed_from_the_status():
    key = run_state.spec_key(resource())
    old = {"rolloutState": {"version": key, "batchStates": {"retired": {"currentBatch": 5}}},
           "compartmentStatuses": {"retired": {"matched": 3}}}
    state, note = run_state.resume_state(LINEAR, resource(status=old))
    assert state.batches == {} and note is None
    patch = run_state.state_patch(state, NODES, old)["status"]
    assert patch["compartmentStatuses"]["retired"] is None
    assert patch["rolloutState"]["batchStates"]["retired"] is None
    assert patch["rolloutState"]["version"] == key
