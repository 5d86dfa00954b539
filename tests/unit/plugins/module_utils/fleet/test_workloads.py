# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Workload-aware node order (``nodeOrder: workload``): free nodes first, then the
nodes whose protected pods end soonest, unknown ends last, nobody starved."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import workloads
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    WAVE,
    RolloutState,
    next_wave,
    record_wave_result,
)

pytestmark = pytest.mark.unit

UTC = datetime.timezone.utc
TRAINING = {"matchLabels": {"app.kubernetes.io/component": "training"}}


def pod(node, name, annotations=None, deadline=None, started=None, phase="Running", labels=None):
    spec = {"nodeName": node}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    status = {"phase": phase}
    if started:
        status["startTime"] = started
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {},
                         "labels": labels if labels is not None else {"app.kubernetes.io/component": "training"}},
            "spec": spec, "status": status}


@pytest.mark.parametrize("given, expected", [
    (pod("n", "p", annotations={workloads.ANNOTATION_EXPECTED_END: "2026-12-04T18:00:00Z"}),
     datetime.datetime(2026, 12, 4, 18, 0, tzinfo=UTC)),
    # The annotation wins over the deadline.
    (pod("n", "p", annotations={workloads.ANNOTATION_EXPECTED_END: "2026-12-04T18:00:00+01:00"}, deadline=60,
         started="2026-12-04T10:00:00Z"), datetime.datetime(2026, 12, 4, 17, 0, tzinfo=UTC)),
    (pod("n", "p", deadline=3600, started="2026-12-04T10:00:00Z"), datetime.datetime(2026, 12, 4, 11, 0, tzinfo=UTC)),
    (pod("n", "p", deadline=3600), None),                      # not started: no clock yet
    (pod("n", "p", annotations={workloads.ANNOTATION_EXPECTED_END: "tomorrow"}), None),
    (pod("n", "p", deadline=True, started="2026-12-04T10:00:00Z"), None),
    (pod("n", "p"), None),
])
def test_expected_end(given, expected):
    assert workloads.expected_end(given) == expected


def test_occupancy_counts_the_protected_pods_that_have_not_ended():
    end = {workloads.ANNOTATION_EXPECTED_END: "2026-12-04T18:00:00Z"}
    later = {workloads.ANNOTATION_EXPECTED_END: "2026-12-04T20:00:00Z"}
    pods = [pod("a", "p1", annotations=end), pod("a", "p2", annotations=later),
            pod("b", "p3"), pod("b", "p4", annotations=end),
            pod("c", "done", phase="Succeeded"), pod("d", "web", labels={"app": "web"}),
            dict(pod("e", "unscheduled"), spec={})]
    occupied = workloads.occupancy(pods, TRAINING)
    assert sorted(occupied) == ["a", "b"]
    assert occupied["a"].until == datetime.datetime(2026, 12, 4, 20, 0, tzinfo=UTC) and not occupied["a"].unknown
    assert occupied["a"].describe() == "2 protected pod(s) until 2026-12-04T20:00+00:00"
    assert occupied["b"].unknown and occupied["b"].describe() == "2 protected pod(s), end unknown"
    keys = workloads.order_keys(occupied)
    assert workloads.FREE_KEY < keys["a"] < keys["b"]
    assert workloads.occupancy(pods, {}) == {}


def nodes(count):
    return [{"name": "n%02d" % i, "labels": {}, "creationTimestamp": "2025-01-01T00:%02d:00Z" % i}
            for i in range(count)]


def policy(order):
    return parse_policy({"default": {"budget": {"count": 1}}, "nodeOrder": order})


def test_free_nodes_go_first_then_the_soonest_ends_then_unknown():
    keys = {"n00": (2, workloads._EPOCH),
            "n01": (1, datetime.datetime(2026, 12, 5, tzinfo=UTC)),
            "n02": (1, datetime.datetime(2026, 12, 4, tzinfo=UTC))}
    state = RolloutState(policy("workload"))
    order = []
    notes = []
    while True:
        decision = next_wave(state, nodes(4), ignore_windows=True, order_keys=keys)
        if decision.status != WAVE:
            break
        order.extend(decision.wave.nodes)
        notes.extend(decision.notes)
        record_wave_result(state, succeeded=decision.wave.nodes)
    assert order == ["n03", "n02", "n01", "n00"]
    assert "default compartment: 3 node(s) still running protected pods left for later (nodeOrder: workload): " \
           "n00, n01, n02" in notes


def test_creation_order_is_the_default_and_ignores_what_runs():
    assert parse_policy({"default": {"budget": {"count": 1}}}).node_order == "creation"
    state = RolloutState(policy("creation"))
    decision = next_wave(state, nodes(3), ignore_windows=True)
    assert decision.wave.nodes == ["n00"]


def test_a_node_passed_over_max_deferrals_times_goes_first():
    # n00 is held with an unknown end; a new free node turns up before every batch.
    keys = {"n00": (2, workloads._EPOCH)}
    state = RolloutState(policy("workload"))
    order = []
    for count in range(2, 2 + workloads.MAX_DEFERRALS + 1):
        decision = next_wave(state, nodes(count), done=order, ignore_windows=True, order_keys=keys)
        order.extend(decision.wave.nodes)
        record_wave_result(state, succeeded=decision.wave.nodes)
    assert order[:workloads.MAX_DEFERRALS] == ["n01", "n02", "n03"]
    assert order[workloads.MAX_DEFERRALS] == "n00"


def test_nodes_with_a_place_in_node_priority_keep_it():
    keys = {"n00": (2, workloads._EPOCH)}
    given = nodes(2)
    given[0]["nodewrightOrder"] = "2025-02-01T00:00:00Z"
    decision = next_wave(RolloutState(policy("workload")), given, ignore_windows=True, order_keys=keys)
    assert decision.wave.nodes == ["n00"]


def test_a_bad_node_order_is_refused_with_the_choices():
    with pytest.raises(ValidationError) as err:
        parse_policy({"default": {"budget": {"count": 1}}, "nodeOrder": "fastest"})
    assert err.value.field == "spec.nodeOrder" and "creation, workload" in str(err.value)
    assert parse_policy({"default": {"budget": {"count": 1}}, "nodeOrder": "workload"}).to_dict()["nodeOrder"] == \
        "workload"
