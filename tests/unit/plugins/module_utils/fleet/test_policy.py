# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Table tests of the DeploymentPolicy engine: parsing, batch math, waves, extensions."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    DEFAULT_COMPARTMENT,
    HALTED,
    INCOMPLETE,
    WAITING,
    WAVE,
    Budget,
    parse_policy,
    policy_from_interruption_budget,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
    assign_nodes,
    is_ignored,
    next_wave,
    order_nodes,
    record_wave_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

from engine_dry_run import make_nodes, plan_waves, policy

pytestmark = pytest.mark.unit

UTC = datetime.timezone.utc




def run_waves(pol, nodes, outcome=None, limit=50):
    """Drive next_wave/record_wave_result; ``outcome(wave_number, name)`` says how each node ends.

    Returns (wave sizes, final decision, state).
    """
    state = RolloutState(pol)
    sizes = []
    for _ in range(limit):
        decision = next_wave(state, nodes, ignore_windows=True)
        if decision.status != WAVE:
            return sizes, decision, state
        sizes.append(len(decision.wave.nodes))
        results = {"succeeded": [], "failed": [], "blocked": []}
        for name in decision.wave.nodes:
            results[outcome(decision.wave.number, name) if outcome else "succeeded"].append(name)
        record_wave_result(state, **results)
    raise AssertionError("rollout did not finish in %d waves" % limit)


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize("budget,matched,ceiling", [
    # The rounding table of Skyhook's deployment-policy docs.
    ({"percent": 25}, 10, 2),
    ({"percent": 30}, 10, 3),
    ({"percent": 10}, 5, 1),
    ({"percent": 1}, 100, 1),
    ({"percent": 100}, 7, 7),
    ({"percent": 50}, 0, 0),
    ({"count": 3}, 10, 3),
    ({"count": 3}, 0, 0),
])
def test_ceiling(budget, matched, ceiling):
    assert Budget(**budget).ceiling(matched) == ceiling


# --------------------------------------------------------------------------- batch growth


@pytest.mark.parametrize("strategy,count,sizes", [
    ({"fixed": {"initialBatch": 2}}, 5, [2, 2, 1]),
    ({"fixed": {}}, 3, [1, 1, 1]),
    ({"linear": {}}, 15, [1, 2, 3, 4, 5]),
    ({"linear": {"initialBatch": 2, "delta": 3}}, 20, [2, 5, 8, 5]),
    ({"exponential": {}}, 15, [1, 2, 4, 8]),
    ({"exponential": {"growthFactor": 3}}, 40, [1, 3, 9, 27]),
    ({"exponential": {"initialBatch": 5}}, 12, [5, 7]),
    (None, 4, [4]),
])
def test_batch_growth_when_every_node_succeeds(strategy, count, sizes):
    assert plan_waves(policy(strategy), make_nodes(count)).sizes == sizes


def test_budget_is_a_hard_cap_under_a_strategy():
    # Skyhook only reports the ceiling under a strategy; NodeWright enforces it.
    pol = policy({"exponential": {}}, budget={"count": 3})
    assert plan_waves(pol, make_nodes(15)).sizes == [1, 2, 3, 3, 3, 3]


def test_percent_budget_without_strategy_fills_to_the_ceiling():
    assert plan_waves(policy(budget={"percent": 25}), make_nodes(8)).sizes == [2, 2, 2, 2]


@pytest.mark.parametrize("strategy,count,fail_wave,sizes", [
    # A failed batch below safetyLimit shrinks the next one.
    ({"linear": {"initialBatch": 3}}, 20, 2, [3, 4, 3, 4, 5, 1]),
    ({"exponential": {}}, 30, 3, [1, 2, 4, 2, 4, 8, 9]),
    # fixed never changes size
    ({"fixed": {"initialBatch": 2}}, 6, 1, [2, 2, 2]),
])
def test_shrink_after_a_failed_batch(strategy, count, fail_wave, sizes):
    def outcome(wave, _name):
        return "failed" if wave == fail_wave else "succeeded"

    got, decision, _state = run_waves(policy(strategy), make_nodes(count), outcome)
    assert got == sizes
    assert decision.status == INCOMPLETE


def test_no_shrink_after_safety_limit():
    # Wave 2 fails at 70% progress (>= safetyLimit 30): the next batch still grows.
    pol = policy({"linear": {"initialBatch": 3, "safetyLimit": 30, "failureThreshold": 1}})
    sizes, decision, state = run_waves(pol, make_nodes(20), lambda w, n: "failed" if w == 2 else "succeeded")
    assert sizes == [3, 4, 5, 6, 2]
    assert decision.status == INCOMPLETE
    assert state.batches[DEFAULT_COMPARTMENT].should_stop is False


def test_stop_before_safety_limit():
    pol = policy({"exponential": {"failureThreshold": 2}})
    sizes, decision, state = run_waves(pol, make_nodes(20), lambda w, n: "failed")
    assert sizes == [1, 1]
    assert decision.status == HALTED
    assert decision.halted == {DEFAULT_COMPARTMENT: 2}
    assert "halted after 2 consecutive failed batch(es)" in decision.reason
    assert "n00" in decision.reason and "n01" in decision.reason
    batch = state.batches[DEFAULT_COMPARTMENT]
    assert (batch.consecutive_failures, batch.should_stop, batch.failed_nodes) == (2, True, 2)


def test_no_stop_after_safety_limit():
    # Half the nodes succeed, then every batch fails: past safetyLimit nothing stops.
    pol = policy({"fixed": {"initialBatch": 2, "failureThreshold": 1, "safetyLimit": 50}})
    sizes, decision, state = run_waves(pol, make_nodes(8), lambda w, n: "succeeded" if w <= 2 else "failed")
    assert sizes == [2, 2, 2, 2]
    assert decision.status == INCOMPLETE
    assert state.batches[DEFAULT_COMPARTMENT].should_stop is False
    assert state.batches[DEFAULT_COMPARTMENT].consecutive_failures == 2


def test_without_failure_threshold_a_rollout_never_stops():
    sizes, decision, _state = run_waves(policy({"linear": {}}), make_nodes(6), lambda w, n: "failed")
    assert sum(sizes) == 6
    assert decision.status == INCOMPLETE
    assert "6 failed" in decision.reason


def test_a_good_batch_resets_consecutive_failures():
    pol = policy({"fixed": {"failureThreshold": 2}})
    sizes, decision, state = run_waves(pol, make_nodes(6), lambda w, n: "failed" if w in (1, 3) else "succeeded")
    assert sizes == [1] * 6
    assert decision.status == INCOMPLETE
    assert state.batches[DEFAULT_COMPARTMENT].should_stop is False


@pytest.mark.parametrize("threshold,failed_in_batch_of_4,batch_failed", [
    (100, 0, False),
    (100, 1, True),
    (75, 1, False),   # 75% succeeded
    (76, 1, True),
    (50, 2, False),
    (1, 3, False),    # 25% succeeded
])
def test_batch_threshold(threshold, failed_in_batch_of_4, batch_failed):
    pol = policy({"fixed": {"initialBatch": 4, "batchThreshold": threshold}})
    state = RolloutState(pol)
    wave = next_wave(state, make_nodes(8), ignore_windows=True).wave
    failed = wave.nodes[:failed_in_batch_of_4]
    result = record_wave_result(state, succeeded=wave.nodes[failed_in_batch_of_4:], failed=failed)
    assert result[DEFAULT_COMPARTMENT]["batchFailed"] is batch_failed
    assert state.batches[DEFAULT_COMPARTMENT].last_batch_failed is batch_failed


def test_blocked_only_batch_does_not_count():
    pol = policy({"linear": {"failureThreshold": 1}})
    state = RolloutState(pol)
    nodes = make_nodes(5)
    wave = next_wave(state, nodes, ignore_windows=True).wave
    result = record_wave_result(state, blocked=wave.nodes)
    assert result[DEFAULT_COMPARTMENT]["evaluated"] is False
    assert state.batches[DEFAULT_COMPARTMENT] == BatchState()
    # The blocked node waits; the next wave is still the first batch size.
    again = next_wave(state, nodes, ignore_windows=True).wave
    assert again.nodes == ["n01"]


def test_blocked_nodes_are_not_counted_in_the_success_percent():
    pol = policy({"fixed": {"initialBatch": 3}})
    state = RolloutState(pol)
    wave = next_wave(state, make_nodes(6), ignore_windows=True).wave
    result = record_wave_result(state, succeeded=wave.nodes[:1], blocked=wave.nodes[1:])
    assert result[DEFAULT_COMPARTMENT]["successPercent"] == 100
    assert state.batches[DEFAULT_COMPARTMENT].last_batch_size == 1


def test_blocked_nodes_wait_for_the_next_run():
    state = RolloutState(policy({"fixed": {"initialBatch": 2}}))
    nodes = make_nodes(2)
    wave = next_wave(state, nodes, ignore_windows=True).wave
    record_wave_result(state, succeeded=["n00"], blocked=["n01"])
    decision = next_wave(state, nodes, ignore_windows=True)
    assert decision.status == INCOMPLETE
    assert "1 blocked by non-interruptible pods (n01)" in decision.reason
    # A run starts from a fresh state (resume_state keeps batch states, not node outcomes).
    again = RolloutState(state.policy, batches=state.batches)
    assert next_wave(again, nodes, done=["n00"], ignore_windows=True).wave.nodes == ["n01"]
    assert wave.number == 1


def test_a_node_missing_from_the_result_counts_as_failed():
    state = RolloutState(policy({"fixed": {"initialBatch": 2}}))
    wave = next_wave(state, make_nodes(4), ignore_windows=True).wave
    result = record_wave_result(state, succeeded=[wave.nodes[0]])
    assert result[DEFAULT_COMPARTMENT]["failed"] == 1
    assert state.failed == {wave.nodes[1]}


# --------------------------------------------------------------------------- compartments


def skyhook_overlap_policy():
    # The overlap example of Skyhook's deployment-policy docs.
    return parse_policy({
        "default": {"budget": {"percent": 100}},
        "compartments": [
            {"name": "us-west", "selector": {"matchLabels": {"region": "us-west"}},
             "budget": {"count": 20}, "strategy": {"exponential": {}}},
            {"name": "production", "selector": {"matchLabels": {"env": "production"}},
             "budget": {"count": 10}, "strategy": {"linear": {}}},
            {"name": "critical", "selector": {"matchLabels": {"priority": "critical"}},
             "budget": {"count": 3}, "strategy": {"fixed": {}}},
        ],
    })


@pytest.mark.parametrize("labels,compartment", [
    ({"region": "us-west", "env": "production", "priority": "critical"}, "critical"),
    ({"region": "us-west", "env": "production"}, "production"),
    ({"region": "us-west"}, "us-west"),
    ({"region": "eu"}, DEFAULT_COMPARTMENT),
    ({}, DEFAULT_COMPARTMENT),
])
def test_overlap_tie_break_by_strategy(labels, compartment):
    assignment = assign_nodes(skyhook_overlap_policy(), [{"name": "gpu-1", "labels": labels}])
    assert assignment[compartment] == ["gpu-1"]


def test_overlap_tie_break_by_ceiling_then_name():
    pol = parse_policy({
        "default": {"budget": {"percent": 100}},
        "compartments": [
            {"name": "b-wide", "selector": "pool=h100", "budget": {"count": 5}, "strategy": {"linear": {}}},
            {"name": "c-narrow", "selector": "zone=a", "budget": {"count": 2}, "strategy": {"linear": {}}},
            {"name": "a-narrow", "selector": "rack=r1", "budget": {"count": 2}, "strategy": {"linear": {}}},
        ],
    })
    nodes = [{"name": "both", "labels": {"pool": "h100", "zone": "a"}},
             {"name": "all", "labels": {"pool": "h100", "zone": "a", "rack": "r1"}}]
    assignment = assign_nodes(pol, nodes)
    assert assignment["c-narrow"] == ["both"]   # smaller ceiling than b-wide
    assert assignment["a-narrow"] == ["all"]    # same ceiling as c-narrow, first by name


def test_tie_break_uses_the_inherited_default_strategy():
    pol = parse_policy({
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {}}},
        "compartments": [
            {"name": "fast", "selector": "pool=h100", "budget": {"count": 1}, "strategy": {"exponential": {}}},
            {"name": "inherits-fixed", "selector": "zone=a", "budget": {"count": 9}},
        ],
    })
    assert assign_nodes(pol, [{"name": "x", "labels": {"pool": "h100", "zone": "a"}}])["inherits-fixed"] == ["x"]


def test_two_compartments_contribute_to_each_wave():
    pol = parse_policy({
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {}}},
        "compartments": [
            {"name": "canary", "selector": {"matchLabels": {"pool": "canary"}},
             "budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
            {"name": "fleet", "selector": {"matchLabels": {"pool": "fleet"}},
             "budget": {"percent": 50}, "strategy": {"exponential": {}}},
        ],
    })
    nodes = make_nodes(2, {"pool": "canary"}, prefix="c") + make_nodes(8, {"pool": "fleet"}, prefix="f")
    plan = plan_waves(pol, nodes)
    assert [w.compartments for w in plan] == [
        {"canary": ["c00"], "fleet": ["f00"]},
        {"canary": ["c01"], "fleet": ["f01", "f02"]},
        {"fleet": ["f03", "f04", "f05", "f06"]},   # exponential 4, ceiling 50% of 8 = 4
        {"fleet": ["f07"]},
    ]
    assert plan.status == COMPLETE


def test_halt_in_one_compartment_leaves_the_others_going():
    pol = parse_policy({
        "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"failureThreshold": 1}}},
        "compartments": [{"name": "canary", "selector": "pool=canary", "budget": {"count": 1}}],
    })
    nodes = make_nodes(4, {"pool": "canary"}, prefix="c") + make_nodes(4, prefix="d")
    state = RolloutState(pol)
    wave = next_wave(state, nodes, ignore_windows=True).wave
    assert wave.compartments == {"canary": ["c00"], DEFAULT_COMPARTMENT: ["d00"]}
    record_wave_result(state, succeeded=["d00"], failed=["c00"])
    decision = next_wave(state, nodes, ignore_windows=True)
    assert decision.status == WAVE
    assert decision.wave.compartments == {DEFAULT_COMPARTMENT: ["d01"]}
    assert decision.halted == {"canary": 1}
    assert any("compartment 'canary' halted" in note for note in decision.notes)


def test_batch_order_oldest_first_then_name_and_ignored_nodes_left_out():
    nodes = [
        {"name": "young", "creationTimestamp": "2025-03-01T00:00:00Z"},
        {"name": "b-old", "creationTimestamp": "2024-01-01T00:00:00Z"},
        {"name": "a-old", "creationTimestamp": "2024-01-01T00:00:00+00:00"},
        {"name": "unknown-age"},
        {"name": "middle", "creationTimestamp": datetime.datetime(2024, 6, 1, tzinfo=UTC)},
        {"name": "ignored", "labels": {"nodewright.io/ignore": "true"}, "creationTimestamp": "2020-01-01T00:00:00Z"},
        {"metadata": {"name": "api-shaped", "creationTimestamp": "2024-03-01T00:00:00Z", "labels": {}}},
    ]
    assert order_nodes(nodes)[:5] == ["ignored", "a-old", "b-old", "api-shaped", "middle"]
    plan = plan_waves(policy({"fixed": {}}), nodes)
    assert [w.nodes[0] for w in plan] == ["a-old", "b-old", "api-shaped", "middle", "young", "unknown-age"]


@pytest.mark.parametrize("labels,ignored", [
    ({"nodewright.io/ignore": "true"}, True),
    ({"skyhook.nvidia.com/ignore": "true"}, True),
    ({"nodewright.io/ignore": "True"}, False),
    ({"nodewright.io/ignore": "false"}, False),
    ({}, False),
])
def test_ignore_label(labels, ignored):
    assert is_ignored(labels) is ignored


def test_ignored_nodes_are_noted():
    nodes = make_nodes(2) + [{"name": "skip-me", "labels": {"nodewright.io/ignore": "true"}}]
    decision = next_wave(RolloutState(policy()), nodes, ignore_windows=True)
    assert decision.wave.nodes == ["n00", "n01"]
    assert any("skip-me" in note for note in decision.notes)


def test_done_nodes_count_toward_progress():
    # 6 of 10 nodes were already done: progress is 60%, past safetyLimit, so a failed
    # batch neither shrinks the next one nor stops the rollout.
    pol = policy({"linear": {"initialBatch": 2, "failureThreshold": 1}})
    nodes = make_nodes(10)
    state = RolloutState(pol)
    done = ["n00", "n01", "n02", "n03", "n04", "n05"]
    wave = next_wave(state, nodes, done=done, ignore_windows=True).wave
    assert wave.nodes == ["n06", "n07"]
    record_wave_result(state, failed=wave.nodes)
    decision = next_wave(state, nodes, done=done, ignore_windows=True)
    assert decision.status == WAVE
    assert decision.wave.nodes == ["n08", "n09"]
    assert plan_waves(pol, nodes, done=done).sizes == [2, 2]


# --------------------------------------------------------------------------- extensions


def clique_nodes():
    return make_nodes(6, lambda i: {"nvidia.com/gpu.clique": "clique-%d" % (i % 2)})


def test_topology_limits_nodes_in_progress_per_label_value():
    pol = policy({"fixed": {"initialBatch": 6}}, topology={"key": "nvidia.com/gpu.clique"})
    plan = plan_waves(pol, clique_nodes())
    assert [w.nodes for w in plan] == [["n00", "n01"], ["n02", "n03"], ["n04", "n05"]]


def test_topology_max_in_progress_two():
    pol = policy({"fixed": {"initialBatch": 6}}, topology={"key": "nvidia.com/gpu.clique", "maxInProgress": 2})
    assert plan_waves(pol, clique_nodes()).sizes == [4, 2]


def test_topology_counts_nodes_in_progress_elsewhere():
    pol = policy({"fixed": {"initialBatch": 6}}, topology={"key": "nvidia.com/gpu.clique"})
    other = {"name": "other-node", "labels": {"nvidia.com/gpu.clique": "clique-0"}}
    decision = next_wave(RolloutState(pol), clique_nodes(), in_progress_elsewhere=[other], ignore_windows=True)
    assert decision.wave.nodes == ["n01"]
    assert any("held back" in note for note in decision.notes)


def test_topology_looks_up_labels_of_known_nodes_in_progress_elsewhere():
    pol = policy({"fixed": {"initialBatch": 6}}, topology={"key": "nvidia.com/gpu.clique"})
    nodes = clique_nodes()
    decision = next_wave(RolloutState(pol), nodes, in_progress_elsewhere=["n00", "n01"], ignore_windows=True)
    assert decision.status == WAITING
    assert "nvidia.com/gpu.clique" in decision.reason


def test_nodes_without_the_topology_label_are_not_grouped():
    pol = policy({"fixed": {"initialBatch": 3}}, topology={"key": "rack"})
    assert plan_waves(pol, make_nodes(3)).sizes == [3]


@pytest.mark.parametrize("limit,elsewhere,fleet_size,size", [
    ({"count": 3}, [], None, 3),
    ({"count": 3}, ["x1"], None, 2),
    ({"percent": 10}, [], 50, 5),
    ({"percent": 10}, ["x1", "x2"], 50, 3),
    ({"percent": 1}, [], 10, 1),
])
def test_fleet_disruption_limit(limit, elsewhere, fleet_size, size):
    pol = policy(budget={"percent": 100}, fleetDisruptionLimit=limit)
    decision = next_wave(RolloutState(pol), make_nodes(8), in_progress_elsewhere=elsewhere,
                         fleet_size=fleet_size, ignore_windows=True)
    assert len(decision.wave.nodes) == size


def test_fleet_disruption_limit_reached():
    pol = policy(fleetDisruptionLimit={"count": 2})
    decision = next_wave(RolloutState(pol), make_nodes(4), in_progress_elsewhere=["x1", "x2"], ignore_windows=True)
    assert decision.status == WAITING
    assert decision.reason.startswith("fleet disruption limit reached: 2 node(s) in progress")
    assert "x1, x2" in decision.reason


def test_ceiling_counts_compartment_nodes_in_progress_elsewhere():
    pol = policy(budget={"count": 2})
    decision = next_wave(RolloutState(pol), make_nodes(4), in_progress_elsewhere=["n00"], ignore_windows=True)
    assert decision.wave.nodes == ["n01"]
    full = next_wave(RolloutState(pol), make_nodes(4), in_progress_elsewhere=["n00", "n01"], ignore_windows=True)
    assert full.status == WAITING
    assert "ceiling 2 reached" in full.reason


def test_waiting_when_only_nodes_held_elsewhere_remain():
    decision = next_wave(RolloutState(policy()), make_nodes(2), done=["n00"], in_progress_elsewhere=["n01"],
                         ignore_windows=True)
    assert decision.status == WAITING
    assert "in progress under other NodeWright resources (n01)" in decision.reason


WEEKEND_NIGHT = {"days": ["Sat"], "start": "22:00", "end": "04:00"}


def test_no_wave_starts_outside_a_window():
    pol = policy(maintenanceWindows=[WEEKEND_NIGHT])
    state = RolloutState(pol)
    friday = datetime.datetime(2025, 1, 3, 12, 0, tzinfo=UTC)
    decision = next_wave(state, make_nodes(2), now=friday)
    assert decision.status == WAITING
    assert decision.next_window == datetime.datetime(2025, 1, 4, 22, 0, tzinfo=UTC)
    assert "outside every maintenance window (Sat 22:00-04:00 UTC)" in decision.reason
    assert state.pending is None
    saturday_night = datetime.datetime(2025, 1, 4, 23, 0, tzinfo=UTC)
    assert next_wave(state, make_nodes(2), now=saturday_night).status == WAVE


def test_complete_is_reported_even_outside_a_window():
    pol = policy(maintenanceWindows=[WEEKEND_NIGHT])
    decision = next_wave(RolloutState(pol), make_nodes(1), done=["n00"],
                         now=datetime.datetime(2025, 1, 3, 12, 0, tzinfo=UTC))
    assert decision.status == COMPLETE


# --------------------------------------------------------------------------- state


def test_reset_on_completion():
    pol = policy({"linear": {}})
    nodes = make_nodes(3)
    _sizes, decision, state = run_waves(pol, nodes)
    assert decision.status == COMPLETE
    assert state.batches == {}


def test_no_reset_on_completion_when_disabled():
    pol = policy({"linear": {}}, resetBatchStateOnCompletion=False)
    _sizes, decision, state = run_waves(pol, make_nodes(3))
    assert decision.status == COMPLETE
    assert state.batches[DEFAULT_COMPARTMENT].last_batch_size == 2


def test_deployment_policy_options_override_the_policy():
    pol = policy({"linear": {}}).with_options({"resetBatchStateOnCompletion": False})
    assert pol.reset_batch_state_on_completion is False
    with pytest.raises(ValidationError) as err:
        pol.with_options({"bogus": 1})
    assert err.value.field == "spec.deploymentPolicyOptions.bogus"


def test_selector_objects_serialise_as_strings():
    pol = parse_policy({"default": {"budget": {"count": 1}},
                        "compartments": [{"name": "a", "selector": to_selector("pool=a"), "budget": {"count": 1}}]})
    assert pol.to_dict()["compartments"][0]["selector"] == "pool=a"


# --------------------------------------------------------------------------- planner


def test_plan_to_dict():
    plan = plan_waves(policy({"linear": {}}), make_nodes(3))
    assert plan.to_dict() == {
        "waves": [
            {"number": 1, "nodes": ["n00"], "compartments": {DEFAULT_COMPARTMENT: ["n00"]},
             "totals": {DEFAULT_COMPARTMENT: 3}},
            {"number": 2, "nodes": ["n01", "n02"], "compartments": {DEFAULT_COMPARTMENT: ["n01", "n02"]},
             "totals": {DEFAULT_COMPARTMENT: 3}},
        ],
        "status": COMPLETE,
        "reason": "all 3 node(s) are complete",
    }
    assert len(plan) == 2


def test_plan_stops_when_nodes_elsewhere_hold_the_fleet_limit():
    pol = policy(fleetDisruptionLimit={"count": 1})
    plan = plan_waves(pol, make_nodes(3), in_progress_elsewhere=["x"])
    assert plan.sizes == []
    assert plan.status == WAITING


def test_plan_of_nothing():
    plan = plan_waves(policy(), [])
    assert (plan.sizes, plan.status) == ([], COMPLETE)


def test_policy_from_interruption_budget():
    assert plan_waves(policy_from_interruption_budget(), make_nodes(5)).sizes == [5]
    assert plan_waves(policy_from_interruption_budget({"count": 2}), make_nodes(5)).sizes == [2, 2, 1]
    with pytest.raises(ValidationError) as err:
        policy_from_interruption_budget({"percent": 10, "count": 1})
    assert err.value.field == "spec.interruptionBudget"


# --------------------------------------------------------------------------- parsing


def test_parse_fills_defaults_and_round_trips():
    pol = parse_policy({
        "default": {"budget": {"percent": 25}, "strategy": {"fixed": {}}},
        "compartments": [
            {"name": "a", "selector": {"matchLabels": {"pool": "a"}}, "budget": {"count": 1},
             "strategy": {"linear": {}}},
            {"name": "b", "selector": "pool=b", "budget": {"percent": 10},
             "strategy": {"exponential": {"failureThreshold": 2}}},
        ],
        "topology": {"key": "nvidia.com/gpu.clique"},
        "fleetDisruptionLimit": {"count": 4},
        "maintenanceWindows": [{"days": ["Sat", "Sun"], "start": "22:00", "end": "04:00", "timeZone": "UTC"}],
    })
    spec = pol.to_dict()
    assert spec["default"] == {"budget": {"percent": 25}, "strategy": {"fixed": {
        "initialBatch": 1, "batchThreshold": 100, "safetyLimit": 50}}}
    assert spec["compartments"][0]["strategy"] == {"linear": {
        "initialBatch": 1, "batchThreshold": 100, "safetyLimit": 50, "delta": 1}}
    assert spec["compartments"][1]["strategy"]["exponential"]["growthFactor"] == 2
    assert spec["compartments"][1]["strategy"]["exponential"]["failureThreshold"] == 2
    assert spec["resetBatchStateOnCompletion"] is True
    assert spec["topology"] == {"key": "nvidia.com/gpu.clique", "maxInProgress": 1}
    assert spec["maintenanceWindows"] == [{"days": ["Sat", "Sun"], "start": "22:00", "end": "04:00",
                                           "timeZone": "UTC"}]
    assert parse_policy(spec).to_dict() == spec


def test_selector_string_and_mapping_forms_are_equivalent():
    a = parse_policy({"default": {"budget": {"count": 1}},
                      "compartments": [{"name": "x", "selector": "pool in (a,b)", "budget": {"count": 1}}]})
    b = parse_policy({"default": {"budget": {"count": 1}},
                      "compartments": [{"name": "x", "budget": {"count": 1}, "selector": {
                          "matchExpressions": [{"key": "pool", "operator": "In", "values": ["b", "a"]}]}}]})
    assert a.compartments[0].selector == b.compartments[0].selector


BASE = {"budget": {"count": 1}}


def comp(name, selector, **extra):
    item = {"name": name, "selector": selector, "budget": {"count": 1}}
    item.update(extra)
    return item


@pytest.mark.parametrize("spec,field,message", [
    ("not a mapping", "spec", "must be a mapping"),
    ({}, "spec.default", "needs a default"),
    ({"default": BASE, "bogus": 1}, "spec.bogus", "unknown field 'bogus'"),
    ({"default": {"budget": {"count": 1}, "stratgy": {}}}, "spec.default.stratgy", "unknown field"),
    ({"default": {"strategy": {"fixed": {}}}}, "spec.default.budget", "needs a budget"),
    ({"default": {"budget": {}}}, "spec.default.budget", "needs percent (1-100) or count"),
    ({"default": {"budget": {"percent": 10, "count": 1}}}, "spec.default.budget", "both percent and count"),
    ({"default": {"budget": {"percent": 0}}}, "spec.default.budget.percent", "from 1 to 100, got 0"),
    ({"default": {"budget": {"percent": 101}}}, "spec.default.budget.percent", "from 1 to 100, got 101"),
    ({"default": {"budget": {"count": 0}}}, "spec.default.budget.count", ">= 1, got 0"),
    ({"default": {"budget": {"count": -2}}}, "spec.default.budget.count", ">= 1, got -2"),
    ({"default": {"budget": {"count": "3"}}}, "spec.default.budget.count", "whole number"),
    ({"default": {"budget": {"count": True}}}, "spec.default.budget.count", "whole number"),
    ({"default": {"budget": {"count": 1.5}}}, "spec.default.budget.count", "whole number"),
    ({"default": {"budget": {"pct": 1}}}, "spec.default.budget.pct", "unknown field"),
    ({"default": dict(BASE, strategy={})}, "spec.default.strategy", "names no strategy"),
    ({"default": dict(BASE, strategy={"canary": {}})}, "spec.default.strategy.canary", "unknown strategy 'canary'"),
    ({"default": dict(BASE, strategy={"fixed": {}, "linear": {}})}, "spec.default.strategy", "fixed and linear"),
    ({"default": dict(BASE, strategy={"fixed": None})}, "spec.default.strategy.fixed", "has no settings"),
    ({"default": dict(BASE, strategy={"fixed": {"initialBatch": 0}})},
     "spec.default.strategy.fixed.initialBatch", ">= 1, got 0"),
    ({"default": dict(BASE, strategy={"linear": {"initialBatch": -1}})},
     "spec.default.strategy.linear.initialBatch", ">= 1, got -1"),
    ({"default": dict(BASE, strategy={"fixed": {"batchThreshold": 0}})},
     "spec.default.strategy.fixed.batchThreshold", "from 1 to 100, got 0"),
    ({"default": dict(BASE, strategy={"fixed": {"batchThreshold": 101}})},
     "spec.default.strategy.fixed.batchThreshold", "from 1 to 100, got 101"),
    ({"default": dict(BASE, strategy={"fixed": {"failureThreshold": 0}})},
     "spec.default.strategy.fixed.failureThreshold", ">= 1, got 0"),
    ({"default": dict(BASE, strategy={"fixed": {"safetyLimit": 0}})},
     "spec.default.strategy.fixed.safetyLimit", "from 1 to 100, got 0"),
    ({"default": dict(BASE, strategy={"exponential": {"safetyLimit": 150}})},
     "spec.default.strategy.exponential.safetyLimit", "from 1 to 100, got 150"),
    ({"default": dict(BASE, strategy={"fixed": {"delta": 2}})}, "spec.default.strategy.fixed.delta", "unknown field"),
    ({"default": dict(BASE, strategy={"linear": {"growthFactor": 2}})},
     "spec.default.strategy.linear.growthFactor", "unknown field"),
    ({"default": BASE, "compartments": "nope"}, "spec.compartments", "must be a list"),
    ({"default": BASE, "compartments": [comp("a", "x=1"), comp("b", "x=2", strategy={"linear": {"delta": 0}})]},
     "spec.compartments[1].strategy.linear.delta", ">= 1, got 0"),
    ({"default": BASE, "compartments": [comp("a", "x=1", strategy={"exponential": {"growthFactor": 1}})]},
     "spec.compartments[0].strategy.exponential.growthFactor", ">= 2, got 1"),
    ({"default": BASE, "compartments": [comp("a", "x=1", strategy={"Fixed": {}})]},
     "spec.compartments[0].strategy.Fixed", "did you mean 'fixed'"),
    ({"default": BASE, "compartments": [comp("a", "x=1"), comp("a", "x=2")]},
     "spec.compartments[1].name", "duplicate compartment name 'a'"),
    ({"default": BASE, "compartments": [comp("a", "x=1"), comp("b", {"matchLabels": {"x": "1"}})]},
     "spec.compartments[1].selector", "same nodes as compartment 'a'"),
    ({"default": BASE, "compartments": [comp("__default__", "x=1")]},
     "spec.compartments[0].name", "reserved"),
    ({"default": BASE, "compartments": [comp("", "x=1")]}, "spec.compartments[0].name", "needs a name"),
    ({"default": BASE, "compartments": [comp("a" * 64, "x=1")]}, "spec.compartments[0].name", "limit is 63"),
    ({"default": BASE, "compartments": [{"name": "a", "budget": {"count": 1}}]},
     "spec.compartments[0].selector", "needs a selector"),
    ({"default": BASE, "compartments": [{"name": "a", "selector": "x=1"}]},
     "spec.compartments[0].budget", "needs a budget"),
    ({"default": BASE, "compartments": [comp("a", "x in (")]}, "spec.compartments[0].selector", "selector"),
    ({"default": BASE, "compartments": [comp("a", "x=1", nodes=3)]}, "spec.compartments[0].nodes", "unknown field"),
    ({"default": BASE, "resetBatchStateOnCompletion": "yes"}, "spec.resetBatchStateOnCompletion", "true or false"),
    ({"default": BASE, "topology": {"maxInProgress": 1}}, "spec.topology.key", "needs a label key"),
    ({"default": BASE, "topology": {"key": "bad key"}}, "spec.topology.key", "is not a valid label key"),
    ({"default": BASE, "topology": {"key": "rack", "maxInProgress": 0}}, "spec.topology.maxInProgress", ">= 1"),
    ({"default": BASE, "topology": {"key": "rack", "max": 1}}, "spec.topology.max", "unknown field"),
    ({"default": BASE, "fleetDisruptionLimit": {"percent": 0}}, "spec.fleetDisruptionLimit.percent", "1 to 100"),
    ({"default": BASE, "fleetDisruptionLimit": {}}, "spec.fleetDisruptionLimit", "needs percent"),
    ({"default": BASE, "maintenanceWindows": {"start": "01:00"}}, "spec.maintenanceWindows", "must be a list"),
    ({"default": BASE, "maintenanceWindows": [{"end": "02:00"}]}, "spec.maintenanceWindows[0].start", "needs start"),
    ({"default": BASE, "maintenanceWindows": [{"start": "1:00", "end": "02:00"}]},
     "spec.maintenanceWindows[0].start", "HH:MM"),
    ({"default": BASE, "maintenanceWindows": [{"start": "24:00", "end": "02:00"}]},
     "spec.maintenanceWindows[0].start", "HH:MM"),
    ({"default": BASE, "maintenanceWindows": [{"start": "01:00", "end": "25:00"}]},
     "spec.maintenanceWindows[0].end", "HH:MM"),
    ({"default": BASE, "maintenanceWindows": [{"start": "01:00", "end": "01:00"}]},
     "spec.maintenanceWindows[0]", "window is empty"),
    ({"default": BASE, "maintenanceWindows": [{"days": ["Funday"], "start": "01:00", "end": "02:00"}]},
     "spec.maintenanceWindows[0].days[0]", "unknown day 'Funday'"),
    ({"default": BASE, "maintenanceWindows": [{"days": ["Sat", "Sat"], "start": "01:00", "end": "02:00"}]},
     "spec.maintenanceWindows[0].days[1]", "listed twice"),
    ({"default": BASE, "maintenanceWindows": [{"days": [], "start": "01:00", "end": "02:00"}]},
     "spec.maintenanceWindows[0].days", "non-empty list"),
    ({"default": BASE, "maintenanceWindows": [{"start": "01:00", "end": "02:00", "timeZone": "Mars/Olympus"}]},
     "spec.maintenanceWindows[0].timeZone", "unknown time zone"),
    ({"default": BASE, "maintenanceWindows": [{"start": "01:00", "end": "02:00", "tz": "UTC"}]},
     "spec.maintenanceWindows[0].tz", "unknown field"),
])
def test_validation_errors_name_the_field(spec, field, message):
    with pytest.raises(ValidationError) as err:
        parse_policy(spec)
    assert err.value.field == field
    assert message in str(err.value)


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ValidationError) as err:
        parse_policy({"default": {"budget": {"count": 1}, "strategy": {"canary": {}}}})
    assert err.value.hint == "valid strategies: fixed, linear, exponential"


def test_errors_say_what_the_number_means():
    with pytest.raises(ValidationError) as err:
        parse_policy({"default": {"budget": {"count": 1}, "strategy": {"linear": {"delta": 0}}}})
    assert "delta is how many nodes each good batch adds" in err.value.hint


def test_node_errors():
    with pytest.raises(ValidationError, match="listed twice"):
        plan_waves(policy(), [{"name": "a"}, {"name": "a"}])
    with pytest.raises(ValidationError, match="needs a name"):
        plan_waves(policy(), [{"labels": {}}])
    with pytest.raises(ValidationError, match="not an RFC 3339 time"):
        plan_waves(policy(), [{"name": "a", "creationTimestamp": "yesterday"}])
