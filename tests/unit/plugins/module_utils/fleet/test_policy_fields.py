# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Each strategy field of a DeploymentPolicy changes the waves, whether it is set on
the default compartment or on a named one (tests/crd_field_coverage.yml maps the CRD
fields here): the same fleet is rolled out with the field set and without it, and the
wave sizes, a batch's verdict or the halt differ as the field says. Also the
compartment selector's matchExpressions, and a resource's deploymentPolicyOptions."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.desired_state import policy_for
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    DEFAULT_COMPARTMENT,
    HALTED,
    INCOMPLETE,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    assign_nodes,
    next_wave,
    record_wave_result,
)
from test_policy import run_waves as roll  # (wave sizes, final decision, state) of a rollout

pytestmark = pytest.mark.unit

PLACES = ("default", "compartment")
COMPARTMENT = "gpu"


def make_nodes(count):
    return [{"name": "n%02d" % i, "labels": {"pool": "gpu"}, "creationTimestamp": "2025-01-01T00:%02d:00Z" % i}
            for i in range(count)]


def policy_with(strategy, place):
    """``strategy`` on the default compartment, or on a compartment that takes every node."""
    if place == "default":
        return parse_policy({"default": {"budget": {"percent": 100}, "strategy": strategy}}), DEFAULT_COMPARTMENT
    return parse_policy({"default": {"budget": {"count": 1}},
                         "compartments": [{"name": COMPARTMENT, "selector": {"matchLabels": {"pool": "gpu"}},
                                           "budget": {"percent": 100}, "strategy": strategy}]}), COMPARTMENT


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ["fixed", "linear", "exponential"])
def test_initial_batch_is_the_first_wave(place, kind):
    assert roll(policy_with({kind: {}}, place)[0], make_nodes(12))[0][0] == 1
    assert roll(policy_with({kind: {"initialBatch": 3}}, place)[0], make_nodes(12))[0][0] == 3


@pytest.mark.parametrize("place", PLACES)
def test_linear_delta_is_what_each_good_batch_adds(place):
    assert roll(policy_with({"linear": {}}, place)[0], make_nodes(10))[0] == [1, 2, 3, 4]
    assert roll(policy_with({"linear": {"delta": 3}}, place)[0], make_nodes(12))[0] == [1, 4, 7]


@pytest.mark.parametrize("place", PLACES)
def test_exponential_growth_factor_multiplies_each_good_batch(place):
    assert roll(policy_with({"exponential": {}}, place)[0], make_nodes(7))[0] == [1, 2, 4]
    assert roll(policy_with({"exponential": {"growthFactor": 3}}, place)[0], make_nodes(13))[0] == [1, 3, 9]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ["fixed", "linear", "exponential"])
def test_batch_threshold_decides_whether_a_batch_with_one_failure_failed(place, kind):
    """A first batch of 4 with one failure: 75% succeeded."""
    verdicts = {}
    for threshold in (75, 100):
        pol, comp = policy_with({kind: {"initialBatch": 4, "batchThreshold": threshold}}, place)
        state = RolloutState(pol)
        wave = next_wave(state, make_nodes(8), ignore_windows=True).wave
        result = record_wave_result(state, succeeded=wave.nodes[1:], failed=wave.nodes[:1])
        assert result[comp]["batchFailed"] is state.batches[comp].last_batch_failed
        verdicts[threshold] = state.batches[comp].last_batch_failed
    assert verdicts == {75: False, 100: True}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ["fixed", "linear", "exponential"])
def test_failure_threshold_halts_the_rollout_or_never(place, kind):
    def every_node_fails(_wave, _name):
        return "failed"

    pol, comp = policy_with({kind: {}}, place)
    sizes, decision, _state = roll(pol, make_nodes(6), every_node_fails)
    assert decision.status == INCOMPLETE and sum(sizes) == 6
    pol, comp = policy_with({kind: {"failureThreshold": 2}}, place)
    sizes, decision, state = roll(pol, make_nodes(6), every_node_fails)
    assert decision.status == HALTED and decision.halted == {comp: 2}
    assert len(sizes) == 2 and state.batches[comp].should_stop is True


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("kind", ["fixed", "linear", "exponential"])
def test_safety_limit_is_the_progress_past_which_failures_no_longer_halt(place, kind):
    """The first wave succeeds, every later one fails, failureThreshold 1: below
    safetyLimit the first failed batch halts the rollout, past it nothing stops."""
    def first_wave_succeeds(wave, _name):
        return "succeeded" if wave == 1 else "failed"

    outcomes = {}
    for limit in (1, 100):
        pol, comp = policy_with({kind: {"initialBatch": 2, "failureThreshold": 1, "safetyLimit": limit}}, place)
        _sizes, decision, _state = roll(pol, make_nodes(8), first_wave_succeeds)
        outcomes[limit] = decision.status
    assert outcomes == {1: INCOMPLETE, 100: HALTED}


@pytest.mark.parametrize("operator,values,members", [
    ("In", ["a", "b"], ["n00", "n01"]),
    ("NotIn", ["a", "b"], ["n02", "n03"]),
    ("Exists", None, ["n00", "n01", "n02"]),
    ("DoesNotExist", None, ["n03"]),
])
def test_a_compartment_selector_match_expression_picks_its_nodes(operator, values, members):
    expression = {"key": "rack", "operator": operator}
    if values:
        expression["values"] = values
    pol = parse_policy({"default": {"budget": {"count": 1}},
                        "compartments": [{"name": "picked", "budget": {"count": 1},
                                          "selector": {"matchExpressions": [expression]}}]})
    nodes = [{"name": "n00", "labels": {"rack": "a"}}, {"name": "n01", "labels": {"rack": "b"}},
             {"name": "n02", "labels": {"rack": "c"}}, {"name": "n03", "labels": {}}]
    groups = assign_nodes(pol, nodes)
    assert sorted(groups.get("picked", [])) == members
    assert sorted(groups.get(DEFAULT_COMPARTMENT, [])) == sorted(set(n["name"] for n in nodes) - set(members))


def test_deployment_policy_options_of_a_resource_override_its_policy():
    """A resource's deploymentPolicyOptions.resetBatchStateOnCompletion wins over its
    DeploymentPolicy: with false, the batch state survives a completed rollout."""
    policies = {"waves": {"spec": {"default": {"budget": {"percent": 100}, "strategy": {"linear": {}}}}}}
    resource = {"spec": {"deploymentPolicy": "waves"}}
    pol = policy_for(resource, policies)
    _sizes, decision, state = roll(pol, make_nodes(3))
    assert decision.status == COMPLETE and state.batches == {}
    resource["spec"]["deploymentPolicyOptions"] = {"resetBatchStateOnCompletion": False}
    pol = policy_for(resource, policies)
    _sizes, decision, state = roll(pol, make_nodes(3))
    assert decision.status == COMPLETE and state.batches[DEFAULT_COMPARTMENT].last_batch_size == 2


@pytest.mark.parametrize("budget,sizes", [
    (None, [8]),
    ({"percent": 25}, [2, 2, 2, 2]),
    ({"percent": 50}, [4, 4]),
    ({"count": 3}, [3, 3, 2]),
])
def test_the_interruption_budget_of_a_resource_without_a_policy_is_its_wave_size(budget, sizes):
    spec = {"interruptionBudget": budget} if budget else {}
    assert roll(policy_for({"spec": spec}, {}), make_nodes(8))[0] == sizes
