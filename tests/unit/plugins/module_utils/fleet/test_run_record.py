# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run's record and the wave facts (module_utils/fleet/run_record.py)."""

from __future__ import annotations

import pytest

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
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import (
    run_record,
)

pytestmark = pytest.mark.unit


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
    assert run_record.wave_facts(run, {"r": Record()}) == {
        "c1": {"wave": 1, "compartment": "canary", "wave_size": 3, "policy": "inline"},
        "g1": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"},
        "g2": {"wave": 1, "compartment": "__default__", "wave_size": 3, "policy": "inline"}}


def test_record_follows_the_engine_to_a_halt():
    policy = parse_policy({"default": {"budget": {"count": 1},
                                       "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1}}}})
    nodes = [{"name": "n%d" % i, "labels": {}, "creationTimestamp": "2026-01-0%dT00:00:00Z" % (5 - i)}
             for i in range(1, 5)]
    state = RolloutState(policy)
    record = run_record.RolloutRecord("patch", policy, "inline", nodes, driver="strategy")
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
    message = run_record.halt_message(decision, record.untouched())
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
