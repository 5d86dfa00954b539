# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Requestor mode of the maintenance-operator: settings, the request NodeWright writes and
how it reads the operator's answer (the protocol against the API server:
tests/integration/test_maintenance_requests.py)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.node import maintenance

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value, expected", [
    (None, None), (False, None), ("false", None), ("", None), ({}, {"namespace": "default", "timeout": 3600}),
    (True, {"namespace": "default", "timeout": 3600}), ("yes", {"namespace": "default", "timeout": 3600}),
    ({"namespace": "maint", "timeout": "60"}, {"namespace": "maint", "timeout": 60}),
])
def test_settings_from_the_option_or_a_play_variable(value, expected):
    assert maintenance.settings(value) == expected


def test_one_request_per_node_named_after_it():
    assert maintenance.object_name("h100-0") == "nodewright-h100-0"
    long_name = "n" * 250
    assert len(maintenance.object_name(long_name)) <= 253
    assert maintenance.object_name(long_name) != maintenance.object_name("m" * 250)


def test_the_request_carries_the_drain_and_the_pods_to_wait_for():
    body = maintenance.request_body(
        "h100-0", "maint", drain={"force": True, "timeout": 120, "delete_emptydir_data": False},
        wait_for_pods={"pod_selector": {"matchLabels": {"app": "train"}}, "timeout": 600})
    assert body["apiVersion"] == "maintenance.nvidia.com/v1alpha1" and body["kind"] == "NodeMaintenance"
    assert body["metadata"] == {"name": "nodewright-h100-0", "namespace": "maint"}
    assert body["spec"] == {"requestorID": "nodewright.io", "nodeName": "h100-0", "cordon": True,
                            "drainSpec": {"force": True, "deleteEmptyDir": False, "timeoutSeconds": 120},
                            "waitForPodCompletion": {"podSelector": "app=train", "timeoutSeconds": 600}}
    # No drain asked: the operator only cordons; an empty selector waits for nothing.
    bare = maintenance.request_body("h100-0", "maint", wait_for_pods={"pod_selector": {}})
    assert bare["spec"] == {"requestorID": "nodewright.io", "nodeName": "h100-0", "cordon": True}


@pytest.mark.parametrize("conditions, expected", [
    (None, (False, "Pending")),
    ([{"type": "Ready", "status": "False", "reason": "Draining"}], (False, "Draining")),
    ([{"type": "Ready", "status": "True", "reason": "Ready"}], (True, "Ready")),
    ([{"type": "Other", "status": "True"}], (False, "Pending")),
])
def test_the_phase_is_the_ready_conditions_reason(conditions, expected):
    obj = {"status": {"conditions": conditions}} if conditions is not None else {}
    assert maintenance.phase(obj) == expected


@pytest.mark.parametrize("value, message", [
    ("sometimes", "maintenance_request must be a mapping (namespace, timeout) or true/false, got 'sometimes'"),
    ({"namespace": "maint", "timout": 60}, "maintenance_request: unknown key(s) timout (it takes namespace and timeout)"),
    ({"timeout": "an hour"}, "maintenance_request.timeout must be a positive number of seconds, got 'an hour'"),
    ({"timeout": 0}, "maintenance_request.timeout must be a positive number of seconds, got 0"),
    ({"timeout": True}, "maintenance_request.timeout must be a positive number of seconds, got True"),
    ({"namespace": "Maint_NS"}, "maintenance_request.namespace"),
])
def test_settings_refuse_what_no_request_could_be_made_with(value, message):
    with pytest.raises(NodeWrightError) as exc:
        maintenance.settings(value)
    assert message in str(exc.value)
