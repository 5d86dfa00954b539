# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run context: what a rollout publishes once for every node's task to read."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context

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


def test_publish_keeps_named_mappings_only():
    a, b = {"name": "a", "packages": {}}, {"name": "b"}
    run_context.publish([b, a, {"name": ""}, {"packages": {}}, "c", None], {"runtime_required": True})
    assert run_context.names() == ["a", "b"]
    assert run_context.resource("a") is a
    assert run_context.resource("c") is None
    assert run_context.setting("runtime_required") is True


def test_a_later_publish_replaces_everything():
    run_context.publish([{"name": "a"}], {"x": 1})
    run_context.publish([{"name": "b"}])
    assert run_context.names() == ["b"]
    assert run_context.resource("a") is None
    assert run_context.setting("x") is None


def test_the_last_entry_of_a_name_wins():
    run_context.publish([{"name": "a", "n": 1}, {"name": "a", "n": 2}])
    assert run_context.resource("a") == {"name": "a", "n": 2}


@pytest.mark.parametrize("rollouts", [None, (), []])
def test_publish_nothing(rollouts):
    run_context.publish([{"name": "a"}], {"x": 1})
    run_context.publish(rollouts, None)
    assert run_context.names() == [] and run_context.setting("x") is None


def test_clear():
    run_context.publish([{"name": "a"}], {"x": 1})
    run_context.clear()
    assert run_context.names() == [] and run_context.setting("x") is None
