# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The play variables of a rollout run (module_utils/fleet/run_settings.py), table by table."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import (
    run_settings,
)

pytestmark = pytest.mark.unit


POLICY = {"default": {"budget": {"count": 2}, "strategy": {"fixed": {"initialBatch": 2}}}}


@pytest.mark.parametrize("variables, expected", [
    ({"nodewright_rollout_policy": POLICY}, {"policy_spec": POLICY, "policy_name": None, "wait_for_window": True}),
    ({"nodewright_rollout_policy_name": "h100"}, {"policy_spec": None, "policy_name": "h100"}),
    ({"nodewright_rollout_policy_name": "h100", "nodewright_rollout_wait_for_window": "no"},
     {"wait_for_window": False}),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_wait_for_window": False}, {"wait_for_window": False}),
    ({"nodewright_rollout_policy_name": "p", "nodewright_rollout_k8s_auth": {"context": "prod"}},
     {"k8s_auth": {"context": "prod"}}),
    # Under `nodewright rollout` the play needs no policy of its own.
    ({"nodewright_rollout_driver": "wave_runner"}, {"driver": "wave_runner", "policy_spec": None}),
])
def test_read_settings(variables, expected):
    settings = run_settings.read_settings(variables)
    for key, value in expected.items():
        assert getattr(settings, key) == value


@pytest.mark.parametrize("variables, message", [
    ({}, "needs a DeploymentPolicy"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_policy_name": "x"}, "sets both"),
    ({"nodewright_rollout_policy_name": ["x"]}, "must be the name of a DeploymentPolicy"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_wait_for_window": "later"}, "must be true or false"),
    ({"nodewright_rollout_policy": POLICY, "nodewright_rollout_k8s_auth": "prod"}, "must be a mapping"),
])
def test_read_settings_explains_mistakes(variables, message):
    with pytest.raises(NodeWrightError) as info:
        run_settings.read_settings(variables)
    assert message in str(info.value)


def test_serial_is_refused_with_a_way_out():
    run_settings.check_serial([], "roll")
    with pytest.raises(NodeWrightError) as info:
        run_settings.check_serial([2, "50%"], "roll")
    assert "play 'roll' sets serial: [2, '50%']" in str(info.value)
    assert "remove serial" in info.value.hint


def test_the_state_resource_variable():
    settings = run_settings.read_settings({"nodewright_rollout_policy": POLICY, "nodewright_rollout_state_resource": "t"})
    assert settings.state_resource == "t"
    assert run_settings.read_settings({"nodewright_rollout_policy": POLICY,
                                  "nodewright_rollout_state_resource": ""}).state_resource is None
    with pytest.raises(NodeWrightError, match="name of a NodeWright resource"):
        run_settings.read_settings({"nodewright_rollout_policy": POLICY, "nodewright_rollout_state_resource": ["x"]})
