# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run every front-end builds: one policy over the nodes given, the fleet without
admission, and the driver tied to the front-end's hooks (the admission fleet against the
API server: tests/integration/test_rollout_strategy.py and test_rollout_cli_e2e.py)."""

from __future__ import annotations

import types

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import Hooks, StaticFleet
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import COMPLETE, parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import (
    admission_fleet,
    build_driver,
    resources_from_desired,
    single_policy_run,
)

from test_plan import _plan

pytestmark = pytest.mark.unit

NODES = [{"name": "h100-%d" % i, "labels": {"pool": "a" if i < 2 else "b"},
          "creationTimestamp": "2026-12-0%dT00:00:00Z" % (i + 1)} for i in range(4)]


class Runs(Hooks):
    def __init__(self):
        self.waves = []

    def run_wave(self, wave):
        self.waves.append(list(wave.nodes))
        return {n: "ok" for n in wave.nodes}


def test_one_policy_over_the_nodes_given_every_one_with_work():
    policy = parse_policy({"default": {"budget": {"count": 2}}})
    said = []
    resources, records, keepers, view = single_policy_run("patch", policy, "inline", NODES, "Patch the fleet",
                                                          "strategy", say=said.append)
    (res,) = resources
    assert res.name == "patch" and res.source == "inline"
    assert res.targets == [n["name"] for n in NODES] and sorted(res.work) == res.targets
    assert res.state.policy is policy and res.state.wave_number == 0
    assert keepers == {"patch": None} and said == []
    record = records["patch"]
    assert record.labelled and record.source == "inline"
    assert sorted(n.name for n in view.nodes.values()) == res.targets
    assert view.nodes["h100-3"].labels == {"pool": "b"} and not view.nodes["h100-3"].unschedulable


def test_without_admission_the_driver_walks_the_nodes_given_and_holds_nothing():
    policy = parse_policy({"default": {"budget": {"count": 2}}})
    resources, _records, _keepers, view = single_policy_run("patch", policy, "inline", NODES, "play", "strategy")
    fleet = admission_fleet(None, view, admission=False)
    assert isinstance(fleet, StaticFleet)
    hooks = Runs()
    driver = build_driver(resources, fleet, hooks, wait_for_window=False, capacity_timeout=0, poll=1.0)
    assert hooks.driver is driver and driver.holder_id == "" and driver.poll == 1.0
    status, _reason = driver.run()
    assert status == COMPLETE
    assert sorted(n for wave in hooks.waves for n in wave) == [n["name"] for n in NODES]
    assert all(len(wave) <= 2 for wave in hooks.waves)


def test_the_resources_of_a_plan_only_pick_the_hosts_of_the_run_and_say_what_is_left_out():
    plan = _plan()
    data = plan.to_dict()
    for entry in data["rollouts"]:
        entry["from_cluster"] = False  # given to the module: nothing to resume from a status
    settings = types.SimpleNamespace(alert_gate=None, k8s_auth=None)
    resources, records, keepers = resources_from_desired(data, ["n1"], settings, "Roll out", "strategy")
    by_name = {r.name: r for r in resources}
    assert sorted(by_name) == sorted(r.name for r in plan.rollouts if r.rollable)
    tuning = by_name["tuning"]
    assert set(tuning.work) == {"n1"} and tuning.eligible == {"n1"} and tuning.source == "DeploymentPolicy/waves"
    assert tuning.state.wave_number == 0 and keepers["tuning"] is None
    later = by_name["later"]
    left = sorted(set(later.work) - {"n1"})
    assert left and later.eligible == set(later.work) & {"n1"}
    assert records["later"].to_dict(later.state)["leftOut"] == {n: "not in the inventory of this run" for n in left}
