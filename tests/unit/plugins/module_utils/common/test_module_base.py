# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What every module shares: the argument spec with the auth options, a result or a
failure a person can act on (``changed`` included), and bounded free-text options."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    ClusterError,
    NodeWrightError,
    TimeoutExceeded,
    ValidationError,
    carry_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import (
    InProcessModule,
    NodeWrightModule,
    check_text,
    full_argument_spec,
    result_of,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import AUTH_ARG_SPEC

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ result_of

def test_a_result_without_changed_says_unchanged():
    assert result_of(lambda: {"node": "n1"}) == {"node": "n1", "changed": False}
    assert result_of(lambda: {"changed": True}) == {"changed": True}


def test_a_failure_keeps_the_hint_and_the_details():
    def fn():
        raise NodeWrightError("node n1 is not Ready", hint="check the kubelet", node="n1")
    assert result_of(fn) == {"failed": True, "changed": False, "msg": "node n1 is not Ready",
                             "hint": "check the kubelet", "node": "n1"}


def test_the_message_is_the_errors_without_the_hint():
    def fn():
        raise ValidationError("must be a whole number", field="spec.count", hint="e.g. 3")
    result = result_of(fn)
    assert result["msg"] == "spec.count: must be a whole number" and result["hint"] == "e.g. 3"


def test_a_failure_that_carries_a_changed_result_says_changed():
    def fn():
        raise NodeWrightError("drain timed out", result={"changed": True, "evicted": ["ns/a"]})
    result = result_of(fn)
    assert result["failed"] is True and result["changed"] is True and result["evicted"] == ["ns/a"]


def test_a_failure_inside_carry_result_keeps_what_was_done():
    def fn():
        result = {"changed": False, "node": "n1"}
        with carry_result(result):
            result["changed"] = True  # the node was cordoned
            raise ClusterError("list pods on node n1: HTTP 500")
    result = result_of(fn)
    assert result["failed"] and result["changed"] is True and result["node"] == "n1"
    assert result["msg"] == "list pods on node n1: HTTP 500"


def test_the_errors_own_result_wins_but_changed_stays_true():
    def fn():
        result = {"changed": True, "step": "cordon"}
        with carry_result(result):
            raise TimeoutExceeded("timed out", result={"changed": False, "step": "drain"})
    result = result_of(fn)
    assert result["changed"] is True and result["step"] == "drain"


def test_an_unexpected_error_after_a_change_says_changed():
    def fn():
        result = {"changed": False}
        with carry_result(result):
            result["changed"] = True
            raise KeyError("boom")
    result = result_of(fn)
    assert result["failed"] and result["changed"] is True and "unexpected error" in result["msg"]


def test_a_failure_before_any_change_says_unchanged():
    def fn():
        raise ValidationError("is not a valid node name", field="name")
    result = result_of(fn)
    assert result["changed"] is False and result["msg"] == "name: is not a valid node name"


@pytest.mark.parametrize("details,changed", [
    ({}, False),
    ({"changed": True}, True),
    ({"changed": False, "result": {"changed": True}}, True),
    ({"result": {"changed": False}}, False),
    ({"result": "not a mapping"}, False),
])
def test_changed_on_failure(details, changed):
    def fn():
        raise NodeWrightError("failed", **details)
    assert result_of(fn)["changed"] is changed


def test_the_failure_has_the_last_word_over_a_carried_result():
    def fn():
        raise NodeWrightError("drain timed out",
                              result={"failed": False, "msg": "so far so good", "node": "n1"})
    result = result_of(fn)
    assert result["failed"] is True and result["msg"] == "drain timed out" and result["node"] == "n1"
    assert "result" not in result


def test_an_unexpected_error_leads_with_a_sentence_and_keeps_the_traceback():
    def fn():
        raise ZeroDivisionError("division by zero")
    result = result_of(fn)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == "unexpected error: division by zero"
    assert "ZeroDivisionError" in result["exception"] and "Traceback" in result["exception"]


# ------------------------------------------------------------------ the module

class _Recorder(object):
    """Stands in for the AnsibleModule's exits."""

    def __init__(self):
        self.exits = []

    def fail_json(self, **result):
        self.exits.append(("fail", result))

    def exit_json(self, **result):
        self.exits.append(("exit", result))


def test_run_exits_with_the_result():
    module = _Recorder()
    NodeWrightModule.run(module, lambda: {"changed": True, "node": "n1"})
    assert module.exits == [("exit", {"changed": True, "node": "n1"})]


def test_run_fails_with_the_failure_without_the_failed_key():
    module = _Recorder()

    def fn():
        raise ValidationError("is required", field="name")
    NodeWrightModule.run(module, fn)
    assert module.exits[0] == ("fail", {"changed": False, "msg": "name: is required"})


def test_the_argument_spec_carries_the_auth_options():
    spec = full_argument_spec({"name": {"type": "str", "required": True}})
    assert spec["name"] == {"type": "str", "required": True}
    for option in AUTH_ARG_SPEC:
        assert option in spec
    assert spec["api_key"]["no_log"] is True


def test_a_module_option_overrides_an_auth_option_and_the_shared_spec_stays():
    before = dict(AUTH_ARG_SPEC)
    spec = full_argument_spec({"context": {"type": "raw"}})
    assert spec["context"] == {"type": "raw"}
    assert AUTH_ARG_SPEC == before


def test_in_process_module_holds_the_params_and_the_mode():
    module = InProcessModule({"name": "n1"}, check_mode=True)
    assert module.params == {"name": "n1"} and module.check_mode is True


# ------------------------------------------------------------------ free text

def test_free_text_options_are_bounded():
    assert check_text("kernel tuning", "reason") == "kernel tuning"
    with pytest.raises(ValidationError) as err:
        check_text("x" * 2000, "reason")
    assert "reason: is 2000 characters long; at most 1024 fit" in str(err.value)
    with pytest.raises(ValidationError):
        check_text(7, "reason")
    with pytest.raises(ValidationError):
        check_text("", "event.message", required=True)


@pytest.mark.parametrize("value,kwargs,result", [
    (None, {}, None),
    ("", {}, ""),
    ("x" * 1024, {}, "x" * 1024),
    ("x" * 10, {"max_length": 10}, "x" * 10),
    ("  spaced  ", {"required": True}, "  spaced  "),
])
def test_check_text_accepts(value, kwargs, result):
    assert check_text(value, "reason", **kwargs) == result


@pytest.mark.parametrize("value,kwargs,message,hint", [
    (None, {"required": True}, "reason: is required", None),
    ("   ", {"required": True}, "reason: must not be empty", None),
    (7, {}, "reason: must be text, got int", None),
    (b"bytes", {}, "reason: must be text, got bytes", None),
    ("x" * 11, {"max_length": 10}, "reason: is 11 characters long; at most 10 fit",
     "shorten it; the full text belongs in a log or the task's result"),
    ("a\0b", {}, "reason: contains a NUL character", None),
])
def test_check_text_refuses(value, kwargs, message, hint):
    with pytest.raises(ValidationError) as err:
        check_text(value, "reason", **kwargs)
    assert err.value.message == message and err.value.hint == hint
