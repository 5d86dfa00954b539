# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Reading user input field by field: field paths, suggestions for unknown keys,
numbers, booleans, durations, and collecting every problem of one input."""

from __future__ import annotations

import re

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    DURATION_PATTERN,
    Problems,
    ValidationErrors,
    check_keys,
    did_you_mean,
    field_path,
    parse_duration,
    read_bool,
    read_int,
    require_mapping,
)

pytestmark = pytest.mark.unit

DURATION_HINT = "a duration such as 90s, 30m or 1h30m (0 for none), or a whole number of seconds"


# ------------------------------------------------------------------ paths and suggestions

@pytest.mark.parametrize("where,key,path", [
    ("spec", "budget", "spec.budget"),
    ("spec.packages", 2, "spec.packages[2]"),
    ("", "spec", "spec"),
    (None, "spec", "spec"),
    ("", 0, "[0]"),
])
def test_field_path(where, key, path):
    assert field_path(where, key) == path


@pytest.mark.parametrize("value,known,suggestion", [
    ("budgett", ["budget", "interruptionBudget"], "did you mean 'budget'?"),
    ("configmap", ["configMap", "env"], "did you mean 'configMap'?"),
    ("zzz", ["budget"], None),
    ("x", [], None),
    (3, [1, 2, 3], "did you mean '3'?"),
])
def test_did_you_mean(value, known, suggestion):
    assert did_you_mean(value, known) == suggestion


def test_require_mapping():
    assert require_mapping({"a": 1}, "spec", "spec") == {"a": 1}
    with pytest.raises(ValidationError) as err:
        require_mapping(["a"], "spec.default", "the default", hint="write key: value pairs")
    assert str(err.value) == "spec.default: the default must be a mapping, got list (write key: value pairs)"


def test_check_keys_accepts_known_keys():
    check_keys({"count": 1, "percent": None}, ("count", "percent"), "spec.budget")
    check_keys({}, (), "spec")


def test_check_keys_suggests_the_nearest_known_key():
    with pytest.raises(ValidationError) as err:
        check_keys({"count": 1, "percnet": 5}, ("count", "percent"), "spec.budget")
    assert err.value.field == "spec.budget.percnet"
    assert err.value.reason == "unknown field 'percnet'"
    assert err.value.hint == "did you mean 'percent'? allowed here: count, percent"


def test_check_keys_lists_the_allowed_keys_when_nothing_is_near():
    with pytest.raises(ValidationError) as err:
        check_keys({"zzz": 1}, ("count", "percent"), "")
    assert str(err.value) == "zzz: unknown field 'zzz' (allowed here: count, percent)"


# ------------------------------------------------------------------ numbers and booleans

@pytest.mark.parametrize("mapping,kwargs,value", [
    ({"count": 3}, {"minimum": 0}, 3),
    ({"count": 0}, {"minimum": 0, "maximum": 0}, 0),
    ({}, {"minimum": 1, "default": 7}, 7),
    ({"count": None}, {"minimum": 1}, None),
])
def test_read_int(mapping, kwargs, value):
    assert read_int(mapping, "count", "spec", **kwargs) == value


@pytest.mark.parametrize("raw,kwargs,message", [
    (True, {"minimum": 0}, "must be a whole number, got True"),
    ("3", {"minimum": 0}, "must be a whole number, got '3'"),
    (2.5, {"minimum": 0}, "must be a whole number, got 2.5"),
    (-1, {"minimum": 0}, "must be >= 0, got -1"),
    (11, {"minimum": 1, "maximum": 10}, "must be from 1 to 10, got 11"),
    (0, {"minimum": 1, "maximum": 10}, "must be from 1 to 10, got 0"),
])
def test_read_int_refuses(raw, kwargs, message):
    with pytest.raises(ValidationError) as err:
        read_int({"count": raw}, "count", "spec.budget", hint="a number of nodes", **kwargs)
    assert (err.value.field, err.value.reason, err.value.hint) == (
        "spec.budget.count", message, "a number of nodes")


@pytest.mark.parametrize("mapping,value", [
    ({"paused": True}, True), ({"paused": False}, False), ({}, "default"), ({"paused": None}, "default"),
])
def test_read_bool(mapping, value):
    assert read_bool(mapping, "paused", "spec", "default") == value


@pytest.mark.parametrize("raw", ["true", 1, "yes"])
def test_read_bool_takes_only_booleans(raw):
    with pytest.raises(ValidationError) as err:
        read_bool({"paused": raw}, "paused", "spec", False)
    assert str(err.value) == "spec.paused: must be true or false, got %r" % (raw,)


# ------------------------------------------------------------------ durations

@pytest.mark.parametrize("value,seconds", [
    ("90s", 90), ("30m", 1800), ("1h30m", 5400), ("1h", 3600), ("0", 0), ("120", 120), (" 45s ", 45),
    ("1.5s", 1.5), ("1.5m", 90), ("500ms", 0.5), ("2000ms", 2), ("1h0m0s", 3600),
    (0, 0), (15, 15), (2.5, 2.5), (None, None),
])
def test_parse_duration(value, seconds):
    got = parse_duration(value, "spec.timeout")
    assert got == seconds
    if isinstance(value, str) and seconds == int(seconds):
        assert isinstance(got, int)


@pytest.mark.parametrize("value,message", [
    ("-5s", "timeout must not be negative, got '-5s'"),
    (-1, "timeout must not be negative, got -1"),
    (True, "timeout must be a duration, got True"),
    (["90s"], "timeout must be a duration, got ['90s']"),
    ("ninety", "timeout 'ninety' is not a duration"),
    ("1d", "timeout '1d' is not a duration"),
    ("90 s", "timeout '90 s' is not a duration"),
    ("1us", "timeout '1us' is not a duration"),
    ("", "timeout '' is not a duration"),
    ("s", "timeout 's' is not a duration"),
])
def test_parse_duration_refuses(value, message):
    with pytest.raises(ValidationError) as err:
        parse_duration(value, "spec.timeout", "timeout")
    assert (err.value.field, err.value.reason, err.value.hint) == ("spec.timeout", message, DURATION_HINT)


def test_a_required_duration_must_be_given():
    with pytest.raises(ValidationError) as err:
        parse_duration(None, "spec.timeout", "the timeout", allow_none=False)
    assert err.value.reason == "the timeout is required" and err.value.hint == DURATION_HINT


@pytest.mark.parametrize("text,accepted", [
    ("0", True), ("90s", True), ("1h30m", True), ("1.5h", True), ("250ms", True),
    ("-1s", False), ("1d", False), ("00", False), ("90", False), ("", False),
])
def test_the_crd_pattern_agrees(text, accepted):
    assert bool(re.match(DURATION_PATTERN, text)) is accepted


# ------------------------------------------------------------------ collecting problems

def test_several_problems_read_as_one_numbered_list():
    problems = Problems()
    with problems.collect():
        raise ValidationError("first", field="a")
    with problems.collect():
        raise ValidationError("second", field="b", hint="fix b")
    with pytest.raises(ValidationErrors) as err:
        problems.raise_if_any()
    assert str(err.value) == "2 problems: (1) a: first; (2) b: second (fix b)"
    assert [e.field for e in err.value.errors] == ["a", "b"]


def test_one_problem_is_raised_as_it_is():
    problems = Problems()
    with problems.collect():
        raise ValidationError("only", field="a")
    with pytest.raises(ValidationError) as err:
        problems.raise_if_any()
    assert not isinstance(err.value, ValidationErrors) and str(err.value) == "a: only"


def test_no_problem_raises_nothing():
    problems = Problems(source="policy.yaml")
    with problems.collect() as part:
        pass
    assert problems.ok and not part.failed and problems.source == "policy.yaml"
    problems.raise_if_any()


def test_a_collected_part_says_it_failed_and_the_rest_goes_on():
    problems = Problems()
    with problems.collect() as part:
        raise ValidationError("bad", field="a")
    assert part.failed and not problems.ok
    reached = []
    with problems.collect():
        reached.append(True)
    assert reached == [True] and len(problems.errors) == 1


def test_other_exceptions_are_not_collected():
    problems = Problems()
    with pytest.raises(KeyError):
        with problems.collect():
            raise KeyError("bug")
    assert problems.ok


def test_collected_problems_of_several_are_flattened():
    inner = Problems()
    for field in ("a", "b"):
        with inner.collect():
            raise ValidationError("bad", field=field)
    outer = Problems()
    with outer.collect():
        inner.raise_if_any()
    with outer.collect():
        raise ValidationError("worse", field="c")
    assert [e.field for e in outer.errors] == ["a", "b", "c"]
    with pytest.raises(ValidationErrors) as err:
        outer.raise_if_any()
    assert str(err.value) == "3 problems: (1) a: bad; (2) b: bad; (3) c: worse"


def test_add_takes_one_error_or_an_error_holding_several():
    problems = Problems()
    problems.add(ValidationError("one", field="a"))
    problems.add(ValidationErrors([ValidationError("two", field="b"), ValidationError("three", field="c")]))
    assert [e.reason for e in problems.errors] == ["one", "two", "three"]


def test_several_problems_keep_the_first_ones_place():
    first = ValidationError("first", field="spec.a", source="p.yaml", line=3)
    err = ValidationErrors([first, ValidationError("second", field="spec.b")])
    assert (err.field, err.source, err.line) == ("spec.a", "p.yaml", 3)
    assert err.problems == ["p.yaml:3: spec.a: first", "spec.b: second"]
    assert err.errors[0] is first
    assert isinstance(err, ValidationError)
