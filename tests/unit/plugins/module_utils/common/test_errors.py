# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright's errors: what their messages say (field, source, line, hint), and a
partial result carried by a failure."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    ClusterError,
    NodeWrightError,
    SelectorError,
    TimeoutExceeded,
    ValidationError,
    carry_result,
    name_list,
)

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ NodeWrightError

def test_the_hint_follows_the_message():
    err = NodeWrightError("drain timed out", hint="check the PodDisruptionBudgets")
    assert str(err) == "drain timed out (check the PodDisruptionBudgets)"
    assert err.message == "drain timed out" and err.hint == "check the PodDisruptionBudgets"
    assert err.args == ("drain timed out",)


def test_no_hint_no_parentheses_and_details_are_kept():
    err = NodeWrightError("drain timed out", node="n1", changed=True)
    assert str(err) == "drain timed out"
    assert err.hint is None and err.details == {"node": "n1", "changed": True}


def test_an_empty_hint_is_no_hint():
    assert str(NodeWrightError("x", hint="")) == "x"


@pytest.mark.parametrize("cls", [ValidationError, SelectorError, ClusterError, TimeoutExceeded])
def test_every_error_is_a_nodewright_error(cls):
    assert issubclass(cls, NodeWrightError) and issubclass(cls, Exception)


def test_a_selector_error_is_a_validation_error():
    err = SelectorError("unbalanced parenthesis", field="spec.selector")
    assert isinstance(err, ValidationError) and str(err) == "spec.selector: unbalanced parenthesis"


def test_a_timeout_carries_what_was_seen():
    err = TimeoutExceeded("timed out after 5s", result={"still_present": ["ns/a"]})
    assert err.details["result"] == {"still_present": ["ns/a"]}


# ------------------------------------------------------------------ ValidationError

@pytest.mark.parametrize("message,field,text", [
    ("timeout must be between 1 second and 7 days", "timeout", "timeout must be between 1 second and 7 days"),
    ("must be a whole number", "timeout", "timeout: must be a whole number"),
    ("timeouts are odd", "timeout", "timeout: timeouts are odd"),
    ("spec.priority: must be", "spec.priority", "spec.priority: must be"),
])
def test_a_message_that_names_its_field_is_not_prefixed_twice(message, field, text):
    assert str(ValidationError(message, field=field)) == text


@pytest.mark.parametrize("kwargs,text", [
    ({}, "must be a mapping"),
    ({"field": "spec.packages"}, "spec.packages: must be a mapping"),
    ({"source": "policy.yaml"}, "policy.yaml: must be a mapping"),
    ({"source": "policy.yaml", "line": 12}, "policy.yaml:12: must be a mapping"),
    ({"source": "policy.yaml", "line": 0}, "policy.yaml: must be a mapping"),
    ({"source": "policy.yaml", "line": 3, "field": "spec"}, "policy.yaml:3: spec: must be a mapping"),
    ({"field": "spec", "hint": "see the docs"}, "spec: must be a mapping (see the docs)"),
    ({"field": ""}, "must be a mapping"),
])
def test_where_a_problem_is_comes_first(kwargs, text):
    assert str(ValidationError("must be a mapping", **kwargs)) == text


def test_a_message_that_names_its_source_is_not_prefixed_with_it():
    err = ValidationError("policy.yaml is empty", source="policy.yaml", line=1, field="spec")
    assert str(err) == "spec: policy.yaml is empty"


def test_the_parts_of_a_validation_error_stay_apart():
    err = ValidationError("must be a whole number", field="spec.count", hint="e.g. 3", source="p.yaml",
                          line=4)
    assert err.reason == err.problem == "must be a whole number"
    assert (err.field, err.source, err.line, err.hint) == ("spec.count", "p.yaml", 4, "e.g. 3")
    assert err.message == "p.yaml:4: spec.count: must be a whole number"
    assert str(err) == "p.yaml:4: spec.count: must be a whole number (e.g. 3)"
    assert err.details == {}


@pytest.mark.parametrize("message,field,prefixed", [
    ("timeout", "timeout", False),
    ("timeout: bad", "timeout", False),
    ("timeout bad", "timeout", False),
    ("timeouts bad", "timeout", True),
    ("timeout.x bad", "timeout", True),
    ("bad timeout", "timeout", True),
])
def test_a_message_names_its_field_only_as_a_whole_word(message, field, prefixed):
    text = str(ValidationError(message, field=field))
    assert text == (field + ": " + message if prefixed else message)


# ------------------------------------------------------------------ carry_result

def test_a_nodewright_failure_carries_the_result_so_far():
    result = {"changed": False, "node": "n1"}
    with pytest.raises(ClusterError) as err:
        with carry_result(result):
            result["changed"] = True
            raise ClusterError("HTTP 500")
    assert err.value.details["result"] == {"changed": True, "node": "n1"}


def test_the_errors_own_result_wins_but_changed_stays_true():
    with pytest.raises(TimeoutExceeded) as err:
        with carry_result({"changed": True, "step": "cordon", "node": "n1"}):
            raise TimeoutExceeded("timed out", result={"changed": False, "step": "drain"})
    assert err.value.details["result"] == {"changed": True, "step": "drain", "node": "n1"}


@pytest.mark.parametrize("result,details,changed", [
    ({}, {}, False),
    ({"changed": False}, {"changed": True}, True),
    ({}, {"result": {"changed": True}}, True),
    ({"changed": True}, {"result": "not a mapping"}, True),
    ({"changed": False}, {"result": "not a mapping"}, False),
])
def test_changed_is_true_when_anything_says_so(result, details, changed):
    with pytest.raises(NodeWrightError) as err:
        with carry_result(result):
            raise NodeWrightError("failed", **details)
    assert err.value.details["result"]["changed"] is changed


def test_any_other_failure_carries_a_copy_of_the_result_on_itself():
    result = {"changed": True}
    with pytest.raises(KeyError) as err:
        with carry_result(result):
            raise KeyError("boom")
    assert err.value.nodewright_result == {"changed": True}
    assert err.value.nodewright_result is not result


def test_an_exception_that_cannot_carry_the_result_passes_through():
    class Bare(Exception):
        def __setattr__(self, name, value):
            if name == "nodewright_result":
                raise AttributeError(name)
            super().__setattr__(name, value)

    with pytest.raises(Bare):
        with carry_result({"changed": True}):
            raise Bare("boom")


def test_success_yields_the_result_untouched():
    result = {"changed": False}
    with carry_result(result) as inside:
        inside["changed"] = True
    assert result == {"changed": True}


@pytest.mark.parametrize("items, limit, text", [
    ([], 5, ""),
    (["a"], 5, "a"),
    (["a", "b", "c"], 2, "a, b and 1 more"),
    (("n%d" % i for i in range(12)), 10, "n0, n1, n2, n3, n4, n5, n6, n7, n8, n9 and 2 more"),
])
def test_name_list_shows_the_first_names_and_counts_the_rest(items, limit, text):
    assert name_list(items, limit) == text
