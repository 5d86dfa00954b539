# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run plan's types: what describe_all builds goes through to_dict (the Ansible
boundary, JSON) and back unchanged; a plan of another schema version, or with a key this
version does not know, is refused naming it; the registered module result's own keys are
left aside; the policy is parsed once, on the way in."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import (
    SCHEMA_VERSION,
    NodePlan,
    PackageSpec,
    PlanError,
    ResourcePlan,
    RunPlan,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import DeploymentPolicy
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

from test_desired_state import PACKAGES, complete_state, node, nodewright

pytestmark = pytest.mark.unit

POLICIES = {"waves": {"spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}}}}


def _plan():
    nodes = [node("n1"), node("n2", "2026-01-02T00:00:00Z",
                              annotations={markers.state_annotation("tuning"): complete_state()}),
             node("n3", "2026-01-03T00:00:00Z", annotations={markers.state_annotation("tuning"): "{hand edited"})]
    resources = [nodewright(deploymentPolicy="waves", drainConfig={"force": True}),
                 nodewright("later", priority=300, packages={"shellscript": {"version": "2.0.0"}})]
    return desired_state.describe_all(resources, nodes, POLICIES, PACKAGES)


def test_describe_all_builds_typed_plans_with_the_policy_parsed():
    plan = _plan()
    tuning = plan.resource("tuning")
    assert isinstance(tuning, ResourcePlan) and isinstance(tuning.policy, DeploymentPolicy)
    assert tuning.source == "DeploymentPolicy/waves" and plan.resource("later").source == "interruptionBudget of later"
    assert tuning.work == ["n1"] and tuning.drain == {"force": True}
    assert isinstance(tuning.node("n1"), NodePlan) and tuning.node("n1").actions == {"shellscript": "apply"}
    assert tuning.node("n3").malformed and tuning.malformed[0]["node"] == "n3"
    assert tuning.node("elsewhere") == NodePlan()
    assert [r.name for r in plan.rollouts] == ["tuning", "later"] and plan.resource("nope") is None


def test_the_serialized_plan_is_json_and_reads_back_the_same():
    plan = _plan()
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["schema"] == SCHEMA_VERSION and all(r["schema"] == SCHEMA_VERSION for r in data["rollouts"])
    again = RunPlan.from_dict(data)
    assert again.to_dict() == plan.to_dict()
    assert again.resource("tuning").policy.to_dict() == plan.resource("tuning").policy.to_dict()
    assert RunPlan.from_dict(plan) is plan


def test_a_registered_module_result_reads_as_a_plan():
    data = dict(_plan().to_dict(), changed=False, failed=False, invocation={"module_args": {}},
                warnings=["x"], _ansible_no_log=False)
    assert [r.name for r in RunPlan.from_dict(data).rollouts] == ["tuning", "later"]


@pytest.mark.parametrize("where,version", [("run", 2), ("run", None), ("resource", 0), ("resource", None)])
def test_a_plan_of_another_schema_version_is_refused(where, version):
    data = _plan().to_dict()
    target = data if where == "run" else data["rollouts"][0]
    if version is None:
        del target["schema"]
    else:
        target["schema"] = version
    with pytest.raises(PlanError) as err:
        RunPlan.from_dict(data, "nodewright_rollout_desired")
    text = str(err.value)
    assert "nodewright_rollout_desired" in text
    assert "written with run plan schema %s; this collection reads schema %d" % (
        "(none)" if version is None else version, SCHEMA_VERSION) in text
    assert "plan again with this collection" in err.value.hint


@pytest.mark.parametrize("path", [("node_views",), ("nodes", "n1", "speed"), ("policy_spec",), ("packages", 0, "image")])
def test_a_key_this_schema_does_not_know_is_refused_naming_it(path):
    data = _plan().to_dict()
    target = data["rollouts"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = 1
    with pytest.raises(PlanError, match=r"unknown key\(s\) %s \(run plan schema 1\)" % path[-1]):
        RunPlan.from_dict(data)


def test_a_run_level_key_this_schema_does_not_know_is_refused():
    with pytest.raises(PlanError, match="unknown key"):
        RunPlan.from_dict(dict(_plan().to_dict(), batches=[]))


@pytest.mark.parametrize("bad", [None, [], {"rollouts": "x"}, {"blocked": []}])
def test_something_else_than_a_plan_is_refused(bad):
    with pytest.raises(PlanError, match="must be the result of nodewright.fleet.desired_state"):
        RunPlan.from_dict(bad)


def test_a_resource_plan_without_a_policy_or_with_a_bad_one_is_refused():
    data = _plan().to_dict()
    broken = copy.deepcopy(data)
    del broken["rollouts"][0]["policy"]
    with pytest.raises(PlanError, match="resource tuning: missing policy"):
        RunPlan.from_dict(broken)
    data["rollouts"][0]["policy"] = {"default": {"budget": {"count": "many"}}}
    with pytest.raises(Exception, match="budget"):
        RunPlan.from_dict(data)
    data["rollouts"][0] = "tuning"
    with pytest.raises(PlanError, match="must be a mapping"):
        RunPlan.from_dict(data)


def test_a_node_plan_keeps_what_a_resolver_set_under_its_own_key():
    plan = NodePlan.from_dict({"actions": {}, "interrupt": {"type": "noop"}, "changed": False, "disruptive": False,
                               "packages": [], "nvidia_tuning": {"profile": "h100"}})
    assert plan.resolved == {"nvidia_tuning": {"profile": "h100"}}
    assert plan.to_dict()["nvidia_tuning"] == {"profile": "h100"}
    with pytest.raises(PlanError, match="expected a mapping"):
        NodePlan.from_dict(["n1"])


def test_a_package_spec_is_typed_and_serializes_as_the_package_modules_spec():
    plan = _plan()
    (spec,) = plan.resource("tuning").packages
    assert isinstance(spec, PackageSpec) and spec.name == "shellscript" and spec.src.endswith("shellscript")
    data = spec.to_dict()
    # What is not set is left out, as the package module's options are.
    assert {"name", "src", "version", "config"} <= set(data) and "state" not in data and "env_from" not in data
    assert PackageSpec.from_dict(json.loads(json.dumps(data))) == spec
    uninstall = PackageSpec("sysctl", src="/p/sysctl", version="1.0.0", state="absent", refuse_downgrade=True)
    assert uninstall.to_dict() == {"name": "sysctl", "src": "/p/sysctl", "version": "1.0.0", "config": {},
                                   "state": "absent", "refuse_downgrade": True}


@pytest.mark.parametrize("bad", [None, {}, {"version": "1.0.0"}, "sysctl"])
def test_a_package_spec_without_a_name_is_refused(bad):
    data = _plan().to_dict()
    data["rollouts"][0]["packages"] = [bad]
    with pytest.raises(PlanError, match="a package spec must be a mapping with a name"):
        RunPlan.from_dict(data)
