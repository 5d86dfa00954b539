# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run context: what a rollout publishes once for every node's task to read."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan, RunPlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy

POLICY = parse_policy({"default": {"budget": {"count": 1}}})

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean():
    run_context.clear()
    yield
    run_context.clear()


def test_nothing_published():
    assert run_context.resource("a") is None
    assert run_context.names() == []
    assert run_context.setting("x") is None
    assert run_context.setting("x", 3) == 3


def _plan(*entries):
    return RunPlan(rollouts=[ResourcePlan(name, POLICY, runtime_required=required) for name, required in entries])


def test_publish_makes_each_resource_plan_findable_by_name():
    run_context.publish(_plan(("b", False), ("a", True)))
    assert run_context.names() == ["a", "b"]
    assert run_context.resource("a").name == "a" and run_context.resource("a").runtime_required
    assert run_context.resource("c") is None
    assert run_context.setting("runtime_required") is True


def test_runtime_required_is_set_when_any_resource_asks_for_it():
    run_context.publish(_plan(("a", False), ("b", False)))
    assert run_context.setting("runtime_required") is False


def test_a_later_publish_replaces_everything():
    run_context.publish(_plan(("a", True)))
    run_context.publish(_plan(("b", False)))
    assert run_context.names() == ["b"]
    assert run_context.resource("a") is None
    assert run_context.setting("runtime_required") is False


def test_publish_nothing():
    run_context.publish(_plan(("a", True)))
    run_context.publish(RunPlan())
    assert run_context.names() == [] and run_context.setting("runtime_required") is False


def test_clear():
    run_context.publish(_plan(("a", True)))
    run_context.clear()
    assert run_context.names() == [] and run_context.setting("runtime_required") is None
