# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The Erroring condition over every resource on a node, and what a failed drain
blames - pure logic, no cluster."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.node import drain
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------- Erroring over all resources

def node(labels=None, annotations=None, conditions=None):
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}},
            "status": {"conditions": conditions or []}}


def state(**fields):
    return json.dumps(fields, sort_keys=True)


ERRORING_A = {"nodewright.io/status-a": "erroring", "nodewright.io/status-b": "complete",
              "nodewright.io/status": "erroring"}
STATE_A = {"nodewright.io/state-a": state(status="erroring", step="Drain the node", reason="drain timed out"),
           "nodewright.io/state-b": state(status="complete", step="done", reason="")}


def test_a_succeeding_resource_does_not_clear_another_ones_error():
    n = node(ERRORING_A, STATE_A, [{"type": "nodewright.io/Erroring", "status": "True", "reason": "MaintenanceFailed",
                                    "message": "Drain the node: drain timed out"}])
    status, reason, message = ops.erroring_condition(n, resource="b", error=None)
    assert (status, reason, message) == ("True", "MaintenanceFailed", "a: Drain the node: drain timed out")
    assert ops.erroring_condition_patch(n, resource="b")["status"]["conditions"][0]["message"] == message


def test_two_failing_resources_are_both_named():
    n = node(ERRORING_A, STATE_A)
    status, reason, message = ops.erroring_condition(n, resource="b",
                                                     error={"reason": "PackageFailed", "message": "sysctl failed"})
    assert status == "True" and reason == "PackageFailed"
    assert message == "2 NodeWright resources are erroring: a: Drain the node: drain timed out; b: sysctl failed"


def test_a_malformed_state_annotation_counts_as_erroring():
    n = node({}, {"nodewright.io/state-c": "{not json"})
    status, _, message = ops.erroring_condition(n)
    assert status == "True" and message.startswith("c: annotation nodewright.io/state-c on node n1 is malformed")


def test_the_condition_clears_only_when_no_resource_is_erroring():
    healthy = node({"nodewright.io/status-a": "complete"}, {},
                   [{"type": "nodewright.io/Erroring", "status": "True", "reason": "MaintenanceFailed", "message": "x"}])
    assert ops.erroring_condition(healthy, resource="a") == ("False", "Healthy", "no NodeWright error")
    patch = ops.erroring_condition_patch(healthy, resource="a")
    assert patch["status"]["conditions"][0]["status"] == "False"
    # A node that never erred gets no condition at all.
    assert ops.erroring_condition_patch(node({"nodewright.io/status-a": "complete"})) is None


def test_check_mode_sees_the_labels_a_patch_would_leave():
    n = node(ERRORING_A, STATE_A)
    after = ops.merged(n, ops.clear_marks_patch(n, "a"))
    assert "nodewright.io/status-a" not in after["metadata"]["labels"]
    assert ops.erroring_condition(after)[0] == "False"


# --------------------------------------------------------------------------- what a failed drain blames

def stuck_result(finalizers=("example.com/upload",), pdbs=()):
    return {"blocking_pdbs": list(pdbs), "errors": {}, "still_present": ["jobs/etl-0"], "timed_out": True,
            "stuck": [{"pod": "jobs/etl-0", "terminating": True, "since": "2026-01-01T10:00:00Z",
                       "grace_period": 30, "finalizers": list(finalizers), "phase": "Running"}]}


def test_a_pod_held_by_a_finalizer_is_named_not_a_pdb():
    result = stuck_result()
    message = drain.describe_failure("n1", result, 5)
    assert message == ("drain of node n1 timed out after 5s: jobs/etl-0 has been terminating since "
                       "2026-01-01T10:00:00Z (grace period 30s), held by finalizer example.com/upload, which "
                       "nothing has removed. The node stays cordoned.")
    hint = drain.failure_hint(result)
    assert "finalizer" in hint and "PodDisruptionBudget" not in hint


def test_a_pod_the_kubelet_never_confirmed_gone_is_named():
    result = stuck_result(finalizers=())
    assert "the node's kubelet has not confirmed that it ended" in drain.describe_failure("n1", result, 5)
    assert "check that the node is Ready" in drain.failure_hint(result)


def test_a_pdb_is_blamed_only_when_it_refused():
    result = {"blocking_pdbs": [{"pdb": "ns/strict", "message": "needs 2", "pods": ["ns/a"]}], "errors": {},
              "still_present": ["ns/a"], "timed_out": True, "stuck": []}
    assert "PodDisruptionBudget ns/strict allowed no disruption" in drain.describe_failure("n1", result, 5)
    assert drain.failure_hint(result).startswith("the PodDisruptionBudgets named need more healthy replicas")


def test_pod_holdup_reads_the_pod():
    pod = {"metadata": {"namespace": "jobs", "name": "etl-0", "deletionTimestamp": "2026-01-01T10:00:00Z",
                        "deletionGracePeriodSeconds": 30, "finalizers": ["example.com/upload"]},
           "status": {"phase": "Running"}}
    assert drain.pod_holdup(pod) == stuck_result()["stuck"][0]
