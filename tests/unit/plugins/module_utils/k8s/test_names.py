# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Names, keys and values against the Kubernetes API's rules, and the one path builder.

Each refusal names the option or field, says what is wrong, states the rule and the fix.
"""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import SelectorError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, group_path
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

pytestmark = pytest.mark.unit

LONG = "a" * 254


@pytest.mark.parametrize("value", ["h100-0001", "gpu.node-1.example.com", "10.0.0.7", "a", "0", "a" * 253])
def test_valid_node_names(value):
    assert names.node_name(value, "name") == value


@pytest.mark.parametrize("value,problem", [
    ("h200-0000/status", "'/' is not allowed"),
    ("h100-0001/proxy", "'/' is not allowed"),
    ("..", "each part between dots must start and end with a letter or digit"),
    ("h100-0001/../status", "'/' is not allowed"),
    ("h100%2F0001", "'%' is not allowed (not URL-encoded)"),
    ("%2E%2E", "'%' is not allowed"),
    ("H100-0001", "it has upper-case letters"),
    (LONG, "it is 254 characters long"),
    ("", "it is empty"),
    ("-h100", "it must start and end with a letter or digit"),
    ("h100-", "it must start and end with a letter or digit"),
    ("h100..0001", "each part between dots"),
    ("h100-0001,metadata.name=x", "',' is not allowed"),
    ("h100 0001", "it contains white space"),
    ("h100-0001\n", "it contains white space"),
    ("h100?x=1", "'?' is not allowed"),
    ("h100#frag", "'#' is not allowed"),
    ("nöde", "'ö' is not allowed"),
    ("h100_0001", "'_' is not allowed"),
])
def test_bad_node_names_say_what_is_wrong_the_rule_and_the_fix(value, problem):
    with pytest.raises(ValidationError) as err:
        names.node_name(value, "name")
    text = str(err.value)
    assert err.value.field == "name"
    assert text.startswith("name: ")
    assert problem in text
    assert "a node name is a DNS-1123 subdomain" in text
    assert "kubectl get nodes" in err.value.hint


def test_a_fix_is_offered_when_one_is_obvious():
    with pytest.raises(ValidationError) as err:
        names.node_name("H100-0001", "name")
    assert "did you mean 'h100-0001'?" in err.value.hint
    with pytest.raises(ValidationError) as err:
        names.node_name(" h100-0001", "name")
    assert "did you mean 'h100-0001'?" in err.value.hint


@pytest.mark.parametrize("value", [None, 7, True, ["h1"], {"name": "h1"}])
def test_a_name_must_be_a_string(value):
    with pytest.raises(ValidationError) as err:
        names.node_name(value, "name")
    assert "must be a string" in str(err.value)


@pytest.mark.parametrize("value,problem", [
    ("Kube-System", "upper-case"),
    ("a.b", "'.' is not allowed"),
    ("a/b", "'/' is not allowed"),
    ("a" * 64, "64 characters long"),
])
def test_namespaces_are_dns_labels(value, problem):
    with pytest.raises(ValidationError) as err:
        names.namespace(value, "skip_namespaces[0]")
    assert err.value.field == "skip_namespaces[0]"
    assert problem in str(err.value) and "a namespace name is a DNS-1123 label" in str(err.value)


def test_nodewright_names_fit_in_label_keys():
    assert names.nodewright_name("a" * 56, "resource")
    with pytest.raises(ValidationError) as err:
        names.nodewright_name("a" * 57, "resource")
    assert "57 characters long" in str(err.value) and "at most 56" in str(err.value)
    for bad in ("../etc", "Bad/Resource", "a_b"):
        with pytest.raises(ValidationError):
            names.nodewright_name(bad, "resource")


@pytest.mark.parametrize("key", ["nodepool", "nvidia.com/gpu.product", "a.b/c_d-e.f", "A1", "x" * 63,
                                 "kubernetes.io/hostname"])
def test_valid_label_keys(key):
    assert names.label_key(key, "labels") == key


@pytest.mark.parametrize("key,problem", [
    ("bad key", "white space"),
    ("nvidia.com/", "its name part after '/' is wrong: it is empty"),
    ("/gpu", "the prefix before '/' is empty"),
    ("a/b/c", "more than one '/'"),
    ("Nvidia.com/gpu", "its prefix 'Nvidia.com' is not a DNS-1123 subdomain"),
    ("x" * 64, "64 characters long"),
    ("-x", "must start and end"),
    ("key=value", "'=' is not allowed"),
    ("", "it is empty"),
])
def test_bad_label_keys(key, problem):
    with pytest.raises(ValidationError) as err:
        names.label_key(key, "labels")
    assert problem in str(err.value)
    assert "a label key is an optional DNS-1123 subdomain prefix" in str(err.value)


@pytest.mark.parametrize("value,problem", [
    ("bad value!", "white space"),
    ("x" * 64, "64 characters long"),
    ("-x", "must start and end"),
    ("a,b", "',' is not allowed"),
])
def test_bad_label_values(value, problem):
    with pytest.raises(ValidationError) as err:
        names.label_value(value, "labels.pool")
    assert problem in str(err.value) and "a label value is empty, or at most 63" in str(err.value)


def test_every_bad_label_of_a_mapping_is_named():
    with pytest.raises(ValidationError) as err:
        names.labels({"bad key": "ok", "ok": "bad value!", "fine": "yes"}, "labels")
    text = str(err.value)
    assert text.startswith("2 problems")
    assert 'labels["bad key"]' in text and 'labels["ok"]' in text


def test_selectors_use_the_same_rules():
    with pytest.raises(SelectorError) as err:
        to_selector({"matchLabels": {"a": "b c"}}, "selectors")
    assert "is not a valid label value: it contains white space" in str(err.value)
    with pytest.raises(SelectorError):
        to_selector("Nvidia.com/gpu=x", "selectors")


# --------------------------------------------------------------------------- paths

def test_api_path_quotes_and_builds_each_segment():
    assert api_path("v1", "nodes") == "/api/v1/nodes"
    assert api_path("v1", "nodes", "h100-0001", name_rule="node") == "/api/v1/nodes/h100-0001"
    assert api_path("v1", "pods", "p-1", namespace="nodewright") == "/api/v1/namespaces/nodewright/pods/p-1"
    assert api_path("nodewright.io/v1alpha1", "nodewrights", "gpu.tuning", name_rule="nodewright") == \
        "/apis/nodewright.io/v1alpha1/nodewrights/gpu.tuning"
    assert api_path("v1", "nodes", "h1", name_rule="node", subresource="status") == "/api/v1/nodes/h1/status"
    assert group_path("apiextensions.k8s.io/v1") == "/apis/apiextensions.k8s.io/v1"


@pytest.mark.parametrize("name", ["h200-0000/status", "h100-0001/proxy", "..", ".", "%2F", "a/../b"])
def test_api_path_refuses_names_that_would_leave_their_segment(name):
    for rule in ("node", "subdomain", "segment"):
        with pytest.raises(ValidationError) as err:
            api_path("v1", "nodes", name, name_rule=rule, field="node (ansible_host)")
        assert err.value.field == "node (ansible_host)"


def test_a_name_that_stays_in_its_segment_is_quoted():
    # The API server's own rule for a path segment is only: not . or .., no / or %.
    assert api_path("v1", "things", "x?y#z", name_rule="segment") == "/api/v1/things/x%3Fy%23z"
    with pytest.raises(ValidationError):
        api_path("v1", "nodes", "x?y", name_rule="node")


def test_api_path_names_the_namespace_option():
    with pytest.raises(ValidationError) as err:
        api_path("v1", "pods", "p", namespace="kube-system/../x", namespace_field="namespace")
    assert err.value.field == "namespace"


@pytest.mark.parametrize("group_version", ["", "v1/", "apps", "a b/v1", "Apps/v1", "../v1", "v1beta"])
def test_api_path_refuses_odd_group_versions(group_version):
    with pytest.raises(ValidationError):
        api_path(group_version, "things", "x")
