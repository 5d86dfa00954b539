# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The rollout driver: several resources, each under its own policy, priority order per
node, one view of the fleet's disruption, and the dry run that is the run."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import FleetView, Holder, NodeInfo
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import plan_run
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    COMPLETE,
    HALTED,
    INCOMPLETE,
    WAITING,
    Hooks,
    ResourceRollout,
    RolloutDriver,
    SimulatedFleet,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


def node(name, minute, labels=None, unschedulable=False, statuses=None, cordoned_by=None):
    return NodeInfo(name=name, labels=dict(labels or {}), created="2026-01-01T00:%02d:00Z" % minute,
                    unschedulable=unschedulable, cordoned_by=cordoned_by, statuses=dict(statuses or {}))


def fleet(count, prefix="n", labels=None, **kw):
    return [node("%s%02d" % (prefix, i), i, labels(i) if callable(labels) else labels, **kw) for i in range(count)]


def policy(strategy=None, budget=None, **extra):
    spec = {"default": {"budget": budget or {"percent": 100}}}
    if strategy:
        spec["default"]["strategy"] = strategy
    spec.update(extra)
    return parse_policy(spec)


def resource(name, pol, names, work=None, priority=200, eligible=None):
    return ResourceRollout(name, pol, targets=names, work=names if work is None else work, priority=priority,
                           eligible=eligible)


class Recorder(Hooks):
    """Runs waves against a view: admitted nodes are disrupted while the wave runs, then
    complete (or erroring and cordoned, when ``fail`` says so)."""

    def __init__(self, view, fail=()):
        self.view = view
        self.fail = set(fail)
        self.disrupted_max = 0
        self.waves = []

    def run_wave(self, wave):
        self.waves.append(dict(wave.assignment))
        busy = sum(1 for n in self.view.nodes if self.view.disrupted(n)) + len(
            [n for n in wave.nodes if not self.view.disrupted(n)])
        self.disrupted_max = max(self.disrupted_max, busy)
        out = {}
        for name, res in wave.assignment.items():
            info = self.view.nodes[name]
            if name in self.fail:
                info.statuses[res] = "erroring"
                info.unschedulable = True
                info.cordoned_by = res
                out[name] = "failed"
            else:
                info.statuses[res] = "complete"
                out[name] = "ok"
        return out


class ViewFleet(SimulatedFleet):
    """A fleet whose nodes change only as the Recorder says (no automatic completion)."""

    def reserve(self, obj, view, assignment, digests):
        return True


def run(resources, nodes, fail=(), holders=None):
    view = FleetView(nodes, holders or {}, NOW)
    hooks = Recorder(view, fail)
    driver = RolloutDriver(resources, ViewFleet(view), hooks, holder_id="me", now=NOW)
    status, reason = driver.run()
    return driver, hooks, status, reason


def sizes(waves):
    return [len(w) for w in waves]


def test_each_resource_follows_its_own_policy_and_their_nodes_run_together():
    nodes = fleet(4, "a") + fleet(4, "b")
    a = resource("ra", policy({"fixed": {"initialBatch": 1}}), ["a%02d" % i for i in range(4)])
    b = resource("rb", policy({"fixed": {"initialBatch": 2}}), ["b%02d" % i for i in range(4)])
    driver, hooks, status, _ = run([a, b], nodes)
    assert status == COMPLETE
    # Wave 1 holds a canary of ra and a pair of rb: nodes of both resources in one wave.
    assert hooks.waves[0] == {"a00": "ra", "b00": "rb", "b01": "rb"}
    assert [sorted(n for n, r in w.items() if r == "ra") for w in hooks.waves] == [
        ["a00"], ["a01"], ["a02"], ["a03"]]
    assert [len([n for n, r in w.items() if r == "rb"]) for w in hooks.waves] == [2, 2, 0, 0]


def test_a_node_of_two_resources_gets_them_in_priority_order():
    nodes = fleet(2)
    first = resource("first", policy(), ["n00", "n01"], priority=10)
    second = resource("second", policy(), ["n00", "n01"], priority=20)
    driver, hooks, status, _ = run([second, first], nodes)
    assert status == COMPLETE
    assert hooks.waves == [{"n00": "first", "n01": "first"}, {"n00": "second", "n01": "second"}]


def test_a_node_whose_first_resource_failed_never_gets_the_second():
    nodes = fleet(2)
    first = resource("first", policy(), ["n00", "n01"], priority=10)
    second = resource("second", policy(), ["n00", "n01"], priority=20)
    driver, hooks, status, reason = run([first, second], nodes, fail={"n00"})
    assert hooks.waves == [{"n00": "first", "n01": "first"}, {"n01": "second"}]
    assert status == INCOMPLETE
    assert "wait for first" in reason and "n00" in reason


def test_a_fleet_limit_holds_across_the_resources_of_one_run():
    limit = {"count": 2}
    nodes = fleet(4, "a") + fleet(4, "b")
    a = resource("ra", policy({"fixed": {"initialBatch": 2}}, fleetDisruptionLimit=limit),
                 ["a%02d" % i for i in range(4)])
    b = resource("rb", policy({"fixed": {"initialBatch": 2}}, fleetDisruptionLimit=limit),
                 ["b%02d" % i for i in range(4)])
    driver, hooks, status, _ = run([a, b], nodes)
    assert status == COMPLETE
    assert max(sizes(hooks.waves)) == 2 and hooks.disrupted_max == 2


def test_nodes_disrupted_elsewhere_count_against_the_limits():
    # Two nodes cordoned and in progress under another resource, same clique: the topology
    # limit (1 per clique) and the fleet limit (3) both see them.
    clique = {"nvidia.com/gpu.clique": "c1"}
    nodes = fleet(2, "x", clique, unschedulable=True, statuses={"other": "in_progress"}, cordoned_by="other") + \
        fleet(4, "n", lambda i: clique if i < 2 else {"nvidia.com/gpu.clique": "c2"})
    res = resource("mine", policy(fleetDisruptionLimit={"count": 3}, topology={"key": "nvidia.com/gpu.clique"}),
                   ["n%02d" % i for i in range(4)])
    driver, hooks, status, reason = run([res], nodes)
    # Only one more node fits under the fleet limit, and none in clique c1.
    assert hooks.waves[0] == {"n02": "mine"}


def test_nodes_reserved_by_a_live_run_count_and_are_never_taken():
    nodes = fleet(4)
    other = Holder(id="other", renewed=NOW, ttl=90, nodes={"n00": "mine", "n01": "other-res"})
    res = resource("mine", policy(fleetDisruptionLimit={"count": 3}), ["n00", "n02", "n03"])
    driver, hooks, status, reason = run([res], nodes, holders={"other": other})
    assert "n00" not in hooks.waves[0] and len(hooks.waves[0]) == 1


def test_nodes_left_in_progress_by_an_earlier_run_are_resumed_first_and_counted():
    nodes = fleet(2, "n", statuses={"mine": "in_progress"}, unschedulable=True, cordoned_by="mine")[:1] + \
        [node("n01", 1), node("n02", 2)]
    res = resource("mine", policy({"fixed": {"initialBatch": 2}}, fleetDisruptionLimit={"count": 2}),
                   ["n00", "n01", "n02"])
    driver, hooks, status, _ = run([res], nodes)
    assert list(hooks.waves[0]) == ["n00", "n01"]  # the leftover first, then one new node: 2 in all


def test_only_the_hosts_of_this_run_are_taken():
    res = resource("mine", policy(), ["n00", "n01", "n02"], eligible={"n01"})
    driver, hooks, status, reason = run([res], fleet(3))
    assert hooks.waves == [{"n01": "mine"}]
    assert status == COMPLETE and "left to other runs" in reason


def test_a_halt_of_one_resource_leaves_the_others_going():
    a = resource("ra", policy({"fixed": {"initialBatch": 1, "failureThreshold": 1}}), ["a00", "a01", "a02", "a03"])
    b = resource("rb", policy({"fixed": {"initialBatch": 1}}), ["b00", "b01"])
    driver, hooks, status, reason = run([a, b], fleet(4, "a") + fleet(2, "b"), fail={"a00"})
    assert status == HALTED
    assert [n for w in hooks.waves for n, r in w.items() if r == "rb"] == ["b00", "b01"]
    assert [n for w in hooks.waves for n, r in w.items() if r == "ra"] == ["a00"]


def test_the_dry_run_makes_the_waves_the_run_makes():
    cases = [
        (policy({"fixed": {"initialBatch": 2}}), 7),
        (policy({"linear": {"initialBatch": 1, "delta": 2}}), 9),
        (policy({"exponential": {"initialBatch": 1, "growthFactor": 2}}, budget={"percent": 50}), 12),
        (policy(budget={"percent": 25}, fleetDisruptionLimit={"percent": 25}), 8),
    ]
    for pol, count in cases:
        names = ["n%02d" % i for i in range(count)]
        planned, _status, _reason = plan_run([resource("r", pol, names)], FleetView(fleet(count), {}, NOW))
        _driver, hooks, status, _ = run([resource("r", pol, names)], fleet(count))
        assert [w.nodes for w in planned.waves] == [list(w) for w in hooks.waves]


def test_done_nodes_count_towards_percent_ceilings():
    # budget 50% of 8 targets = 4 in progress at once, even though 4 are already done.
    names = ["n%02d" % i for i in range(8)]
    res = resource("r", policy(budget={"percent": 50}), names, work=names[4:])
    driver, hooks, status, _ = run([res], fleet(8))
    assert sizes(hooks.waves) == [4]


def test_waiting_when_another_runs_reservations_fill_the_fleet():
    other = Holder(id="other", renewed=NOW, ttl=90, nodes={"x00": "r2", "x01": "r2"})
    res = resource("r", policy(fleetDisruptionLimit={"count": 2}), ["n00"])
    view = FleetView(fleet(2, "x") + fleet(1), {"other": other}, NOW)
    driver = RolloutDriver([res], ViewFleet(view), Recorder(view), holder_id="me", now=NOW, capacity_timeout=0)
    status, reason = driver.run()
    assert status == WAITING and "fleet disruption limit reached" in reason


def test_a_lost_reservation_race_decides_again():
    class Racy(ViewFleet):
        tries = 0

        def reserve(self, obj, view, assignment, digests):
            self.tries += 1
            return self.tries > 2

    view = FleetView(fleet(3), {}, NOW)
    res = resource("r", policy({"fixed": {"initialBatch": 1}}), ["n00", "n01", "n02"])
    hooks = Recorder(view)
    driver = RolloutDriver([res], Racy(view), hooks, holder_id="me", now=NOW)
    status, _ = driver.run()
    assert status == COMPLETE and sizes(hooks.waves) == [1, 1, 1]
    assert [w.number for w in driver.waves] == [1, 2, 3]


class PausingFleet(ViewFleet):
    """A fleet whose resources are paused (or disabled) from its ``pause_after``-th admission on."""

    def __init__(self, view, how, pause_after):
        super(PausingFleet, self).__init__(view)
        self.how, self.pause_after, self.reads = how, pause_after, 0

    def stopped_resources(self):
        self.reads += 1
        return {"rp": self.how, "other": self.how} if self.reads > self.pause_after else {}


@pytest.mark.parametrize("how, verb", [("paused", "resume"), ("disabled", "enable")])
def test_a_resource_paused_during_the_run_admits_no_further_node(how, verb):
    nodes = fleet(4)
    res = resource("rp", policy({"fixed": {"initialBatch": 1}}), ["n%02d" % i for i in range(4)])
    view = FleetView(nodes, {}, NOW)
    hooks = Recorder(view)
    driver = RolloutDriver([res], PausingFleet(view, how, pause_after=1), hooks, holder_id="me", now=NOW)
    status, reason = driver.run()
    assert hooks.waves == [{"n00": "rp"}], "a wave started after the pause"
    assert status == WAITING and res.stopped == how
    assert "%s during the run: no node is admitted" % how in reason and "`nodewright %s rp`" % verb in reason
