# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright's own API objects: the group, version, plurals and request paths, and
names refused before any request is made."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api as api
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import InvalidName

pytestmark = pytest.mark.unit


def test_group_version_and_plurals():
    assert api.GROUP_VERSION == "nodewright.io/v1alpha1"
    assert (api.NODEWRIGHTS, api.DEPLOYMENT_POLICIES) == ("nodewrights", "deploymentpolicies")


@pytest.mark.parametrize("args, expected", [
    (("nodewrights",), "/apis/nodewright.io/v1alpha1/nodewrights"),
    (("nodewrights", "tuning"), "/apis/nodewright.io/v1alpha1/nodewrights/tuning"),
    (("nodewrights", "tuning", "status"), "/apis/nodewright.io/v1alpha1/nodewrights/tuning/status"),
    (("nodewrights", "a.b-1"), "/apis/nodewright.io/v1alpha1/nodewrights/a.b-1"),
    (("deploymentpolicies", "canary.policy"), "/apis/nodewright.io/v1alpha1/deploymentpolicies/canary.policy"),
    (("deploymentpolicies", "d" * 253), "/apis/nodewright.io/v1alpha1/deploymentpolicies/" + "d" * 253),
])
def test_path(args, expected):
    assert api.path(*args) == expected


@pytest.mark.parametrize("plural, name, message, hint", [
    ("nodewrights", "Bad_Name", "'Bad_Name' is not a valid NodeWright name: it has upper-case letters",
     "as the name is part of label keys on nodes"),
    ("nodewrights", "a" * 57, "is not a valid NodeWright name: it is 57 characters long", "at most 56 characters"),
    ("deploymentpolicies", "UP", "'UP' is not a valid DeploymentPolicy name: it has upper-case letters",
     "did you mean 'up'?"),
    ("deploymentpolicies", "a/b", "'a/b' is not a valid DeploymentPolicy name: '/' is not allowed",
     "give the DeploymentPolicy's name as `kubectl get` prints it"),
])
def test_path_refuses_names_by_the_kinds_rule(plural, name, message, hint):
    with pytest.raises(InvalidName) as caught:
        api.path(plural, name, field="spec.name")
    assert message in str(caught.value)
    assert hint in caught.value.hint
    assert caught.value.field == "spec.name"


def test_path_needs_a_name_for_a_subresource():
    with pytest.raises(InvalidName, match="subresource status needs a name"):
        api.path("nodewrights", None, "status")


@pytest.mark.parametrize("call", [
    lambda: api.get(None, "nodewrights", "Bad"),
    lambda: api.get(None, "deploymentpolicies", "x/y"),
    lambda: api.patch_status(None, "Bad", {"phase": "x"}),
    lambda: api.patch(None, "nodewrights", "../x", {"metadata": {}}),
    lambda: api.list_all(None, "NodeWrights"),
])
def test_invalid_requests_are_refused_before_reaching_the_api(call):
    # The api handle is None: a request that were made would fail differently.
    with pytest.raises(InvalidName):
        call()


def test_get_names_the_field_the_name_came_from():
    with pytest.raises(InvalidName) as caught:
        api.get(None, "nodewrights", "Bad", field="resource")
    assert caught.value.field == "resource"


# --------------------------------------------------------------------------- conditions

def test_a_condition_keeps_its_transition_time_while_its_status_stays():
    old = [{"type": "Ready", "status": "True", "reason": "A", "lastTransitionTime": "2026-01-01T00:00:00Z"},
           {"type": "Drift", "status": "False", "reason": "None", "lastTransitionTime": "2026-01-02T00:00:00Z"}]
    new = [{"type": "Ready", "status": "True", "reason": "B", "message": "other words",
            "lastTransitionTime": "2026-06-01T00:00:00Z"},
           {"type": "Drift", "status": "True", "reason": "Found"},
           {"type": "AlertGate", "status": "False", "reason": "NoAlerts", "lastTransitionTime": "2026-06-01T00:00:00Z"}]
    merged = api.merge_conditions(old, new, now="2026-06-02T00:00:00Z")
    assert [c["lastTransitionTime"] for c in merged] == [
        "2026-01-01T00:00:00Z",     # same status, other reason and message: the transition stays
        "2026-06-02T00:00:00Z",     # the status changed and the new one gave no time: now
        "2026-06-01T00:00:00Z"]     # a new type keeps the time it came with
    assert merged[0]["reason"] == "B" and new[0]["lastTransitionTime"] == "2026-06-01T00:00:00Z"  # inputs untouched


def test_no_old_conditions_means_every_new_one_transitions_now():
    merged = api.merge_conditions(None, [{"type": "Ready", "status": "True"}], now="T")
    assert merged == [{"type": "Ready", "status": "True", "lastTransitionTime": "T"}]
