# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which nodes a resource targets: its nodeSelectors minus the nodes labelled to be
left alone (NodeWright's ignore label, or upstream's under either prefix)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import targets
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import SelectorError

pytestmark = pytest.mark.unit


def resource(selectors):
    return {"metadata": {"name": "r"}, "spec": {"nodeSelectors": selectors}}


@pytest.mark.parametrize("labels, ignored", [
    (None, False),
    ({}, False),
    ({"nodewright.io/ignore": "true"}, True),
    ({"nodewright.io/ignore": "false"}, False),
    ({"nodewright.io/ignore": "True"}, False),
    ({"nodewright.nvidia.com/ignore": "true"}, True),
    ({"skyhook.nvidia.com/ignore": "true"}, True),
    ({"nodewright.nvidia.com/ignore": "false"}, False),
    ({"other/ignore": "true"}, False),
])
def test_is_ignored(labels, ignored):
    assert targets.is_ignored(labels) is ignored
    # The selector form agrees with the predicate.
    assert targets.not_ignored().matches(labels or {}) is (not ignored)


def test_ignore_labels():
    assert targets.IGNORE_LABELS == ("nodewright.io/ignore", "nodewright.nvidia.com/ignore",
                                     "skyhook.nvidia.com/ignore")


@pytest.mark.parametrize("selectors, labels, targeted", [
    (None, {"pool": "gpu"}, True),                        # no selector: every node
    ({}, {}, True),
    ({"matchLabels": {"pool": "gpu"}}, {"pool": "gpu"}, True),
    ({"matchLabels": {"pool": "gpu"}}, {"pool": "cpu"}, False),
    ({"matchLabels": {"pool": "gpu"}}, {}, False),
    ({"matchLabels": {"pool": "gpu"}}, {"pool": "gpu", "nodewright.io/ignore": "true"}, False),
    (None, {"skyhook.nvidia.com/ignore": "true"}, False),
    ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}, {"pool": "b"}, True),
    ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {"pool": "a"}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": "x"}, False),
])
def test_targets(selectors, labels, targeted):
    assert targets.targets(resource(selectors), labels) is targeted


def test_a_given_selector_is_used_instead_of_the_resources():
    selector = targets.resource_selector(resource({"matchLabels": {"pool": "cpu"}}))
    assert targets.targets(resource({"matchLabels": {"pool": "gpu"}}), {"pool": "cpu"}, selector) is True
    assert targets.targets(resource({"matchLabels": {"pool": "gpu"}}), {"pool": "gpu"}, selector) is False


@pytest.mark.parametrize("res", [None, {}, {"spec": None}, {"spec": {}}])
def test_a_resource_without_selectors_selects_everything(res):
    assert targets.resource_selector(res).matches({"any": "thing"})


@pytest.mark.parametrize("selectors, field, message", [
    ("pool=gpu", "spec.nodeSelectors", "a LabelSelector must be a mapping"),
    ({"matchLabel": {"pool": "gpu"}}, "spec.nodeSelectors", "unknown LabelSelector field(s): matchLabel"),
    ({"matchExpressions": [{"key": "pool", "operator": "Like", "values": ["a"]}]},
     "spec.nodeSelectors.matchExpressions[0]", "unknown operator 'Like'"),
])
def test_an_invalid_selector_names_its_field(selectors, field, message):
    with pytest.raises(SelectorError) as caught:
        targets.resource_selector(resource(selectors))
    assert caught.value.field == field
    assert message in str(caught.value)
    with pytest.raises(SelectorError):
        targets.targets(resource(selectors), {})


def test_the_field_can_be_named_by_the_caller():
    with pytest.raises(SelectorError) as caught:
        targets.resource_selector(resource("x"), where="nodewrights[0].spec.nodeSelectors")
    assert caught.value.field == "nodewrights[0].spec.nodeSelectors"


def test_upstreams_ignore_label_is_recognised():
    assert targets.is_ignored({"nodewright.nvidia.com/ignore": "true"})
    assert targets.is_ignored({"skyhook.nvidia.com/ignore": "true"})
    assert not targets.is_ignored({"nodewright.nvidia.com/ignore": "false"})
    assert not targets.not_ignored().matches({"nodewright.nvidia.com/ignore": "true"})
