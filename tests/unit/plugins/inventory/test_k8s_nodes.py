# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pieces of the k8s_nodes inventory plugin that need no cluster: the fast path for
simple compose / keyed_groups / groups expressions (it must answer exactly as Jinja2
does, or step aside), field selector checks, error messages, file names and docs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleError, AnsibleOptionsError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.nodewright.fleet.plugins.inventory import k8s_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
VARS = {
    "k8s_node": {
        "name": "h100-0003",
        "labels": {"nodepool": "h100", "topology.kubernetes.io/zone": "zone-a", "items": "label-called-items"},
        "gpu": {"model": "h100", "count": 8, "grace": False, "present": True, "clique": None},
        "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}],
        "addresses": {"InternalIP": "10.0.0.3"},
    },
    "pool": "h100",
}


def jinja(expression, conditional=False):
    templar = Templar(loader=DataLoader(), variables=VARS)
    if conditional:
        return templar.evaluate_conditional(trust_as_template(expression))
    return templar.evaluate_expression(trust_as_template(expression))


@pytest.mark.parametrize("expression", [
    "k8s_node.name",
    "k8s_node.labels['nodepool']",
    'k8s_node.labels["topology.kubernetes.io/zone"]',
    "k8s_node.labels",
    "k8s_node.gpu.model",
    "k8s_node.gpu.count",
    "k8s_node.gpu.clique",
    "k8s_node.taints[1].key",
    "k8s_node.taints[-1]['effect']",
    "  k8s_node . gpu",
    "pool",
])
def test_simple_paths_answer_as_jinja_does(expression):
    path = k8s_nodes.parse_simple_path(expression)
    if path is None:  # not a simple path: Jinja2 answers it, nothing to compare
        return
    assert k8s_nodes.resolve_simple_path(path, (VARS,)) == jinja(expression)


@pytest.mark.parametrize("expression", [
    "k8s_node.labels.items",           # a dict method for Jinja2, not the label
    "k8s_node.labels['missing']",      # undefined: Jinja2's error or default applies
    "k8s_node.taints[5].key",
    "k8s_node.name.upper",
    "missing.var",
])
def test_simple_paths_step_aside_where_jinja_might_differ(expression):
    path = k8s_nodes.parse_simple_path(expression)
    assert path is not None
    assert k8s_nodes.resolve_simple_path(path, (VARS,)) is k8s_nodes._MISSING


@pytest.mark.parametrize("expression", [
    "k8s_node.labels['nodepool'] | default('none')",
    "k8s_node.name.split('-')[0]",
    "k8s_node.gpu.count + 1",
    "'x' ~ pool",
    "true",
    "k8s_node.labels[pool]",
    "",
    None,
    42,
])
def test_other_expressions_are_not_simple(expression):
    assert k8s_nodes.parse_simple_path(expression) is None


@pytest.mark.parametrize("conditional", [
    "k8s_node.gpu.model == 'h100'",
    'k8s_node.gpu.model != "h100"',
    "k8s_node.gpu.count == 8",
    "k8s_node.gpu.count != 4",
    "k8s_node.gpu.grace",
    "k8s_node.gpu.present == true",
    "k8s_node.gpu.clique == None",
    "k8s_node.gpu.clique == none",
    "k8s_node.labels['nodepool'] == 'b200'",
])
def test_simple_conditions_answer_as_jinja_does(conditional):
    parsed = k8s_nodes.parse_simple_condition(conditional)
    assert parsed is not None
    path, op, literal = parsed
    value = k8s_nodes.resolve_simple_path(path, (VARS,))
    result = value == literal if op == "==" else value != literal if op == "!=" else value
    assert result == jinja(conditional, conditional=True)


@pytest.mark.parametrize("conditional", [
    "k8s_node.gpu.count > 4",
    "'h100' in k8s_node.name",
    "k8s_node.gpu.model == 'h100' and k8s_node.gpu.grace",
    "k8s_node.labels['a==b'] == 'x'",
    "k8s_node.gpu.model != 'x!=y' == 1",
])
def test_other_conditions_go_to_jinja(conditional):
    assert k8s_nodes.parse_simple_condition(conditional) is None


def test_extra_vars_scope_wins():
    path = k8s_nodes.parse_simple_path("pool")
    assert k8s_nodes.resolve_simple_path(path, ({"pool": "override"}, VARS)) == "override"


@pytest.mark.parametrize("value,expected", [
    (None, ""),
    ("", ""),
    ("spec.unschedulable=false", "spec.unschedulable=false"),
    ("metadata.name != gpu-7, spec.unschedulable==true", "metadata.name!=gpu-7,spec.unschedulable==true"),
    (["metadata.name=a", "spec.unschedulable=false"], "metadata.name=a,spec.unschedulable=false"),
])
def test_field_selectors(value, expected):
    assert k8s_nodes._field_selector(value) == expected


@pytest.mark.parametrize("value,field", [
    ("metadata.name", "field_selectors[0]"),
    ("metadata.name=a,", "field_selectors[0]"),
    ("metadata.name in (a,b)", "field_selectors[0]"),
    (["spec.unschedulable=false", 3], "field_selectors[1]"),
    ({"metadata.name": "a"}, "field_selectors"),
])
def test_bad_field_selectors(value, field):
    with pytest.raises(ValidationError) as err:
        k8s_nodes._field_selector(value)
    assert err.value.field == field


def test_one_line_error_message_keeps_the_cause_once():
    try:
        try:
            raise ValueError("Valid values are: ssh, k8s, local")
        except ValueError as inner:
            raise AnsibleOptionsError("Invalid value 'telnet' for config 'connection'.") from inner
    except AnsibleError as exc:
        text = k8s_nodes._one_line(exc)
    assert text.count("telnet") == 1 and "Valid values are: ssh, k8s, local" in text


@pytest.mark.parametrize("name,accepted", [
    ("fleet.k8s_nodes.yml", True),
    ("fleet.k8s_nodes.yaml", True),
    ("k8s_nodes.yml", True),
    ("fleet.yml", False),
    ("fleet.k8s_nodes.yml.bak", False),
])
def test_verify_file_accepts_only_its_names(tmp_path, name, accepted):
    path = tmp_path / name
    path.write_text("plugin: nodewright.fleet.k8s_nodes\n")
    assert k8s_nodes.InventoryModule().verify_file(str(path)) is accepted


def test_ansible_doc_renders():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"))
    doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    proc = subprocess.run([doc, "-t", "inventory", "nodewright.fleet.k8s_nodes"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for option in ("label_selectors", "field_selectors", "nodewright", "connection", "host_var", "pod_counts",
                   "keyed_groups", "cache_plugin", "kubeconfig", "api_key"):
        assert option in proc.stdout
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr
