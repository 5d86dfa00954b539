# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The retry budget and limits of a package (package/retries.py): the backoff schedule,
the downgrade rule, what the planner decides from them, and the runner retrying a stage
on a real host root."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import retry_options, validate_nodewright
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import plan
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import StepFailed, run_packages

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("count, base, expected", [
    (3, 10, [10.0, 20.0, 40.0]),
    (5, 100, [100.0, 200.0, 300.0, 300.0, 300.0]),   # capped at 5 minutes
    (2, 0, [0.0, 0.0]),                               # no pause
    (0, 10, []),
])
def test_the_backoff_doubles_up_to_its_cap(count, base, expected):
    assert [retries.backoff_delay(n, base) for n in range(1, count + 1)] == expected
    assert retries.backoff_delay(0, base) == 0.0


@pytest.mark.parametrize("entry, retries_given, spent", [
    ({"state": "erroring", "stage": "apply", "attempts": {"apply": 4}}, 3, True),
    ({"state": "erroring", "stage": "apply", "attempts": {"apply": 3}}, 3, False),
    ({"state": "erroring", "stage": "config", "attempts": {"apply": 4}}, 3, False),   # another stage's count
    ({"state": "in_progress", "stage": "apply", "attempts": {"apply": 9}}, 3, False),  # a rerun was asked for
    ({"state": "erroring", "stage": "apply", "attempts": {"apply": 1}}, 0, True),
    ({"state": "erroring", "stage": "apply"}, 3, False),                              # no count recorded
    ({"state": "erroring", "stage": "apply", "attempts": {"apply": 9}}, None, False),  # no budget given
    ({"state": "erroring", "stage": "apply", "attempts": {"apply": True}}, 0, False),  # not a count
])
def test_a_budget_is_spent_when_the_failed_stage_used_every_attempt(entry, retries_given, spent):
    assert retries.exhausted(entry, retries_given) is spent


# --------------------------------------------------------------------------- planner

def _desired(version="1.0.0", **extra):
    return dict({"name": "demo", "version": version, "configHashes": {"k": "x"}}, **extra)


def _recorded(version="2.0.0", **extra):
    return {"packages": {"demo": dict({"name": "demo", "version": version, "stage": "config", "state": "complete",
                                       "configHashes": {"k": "x"}}, **extra)}}


def test_a_downgrade_of_a_package_with_uninstall_enabled_is_refused_and_runs_nothing():
    refused = plan([_desired(refuseDowngrade=True, interrupt={"type": "reboot"})], _recorded())
    (entry,) = refused["packages"]
    assert entry["action"] == "downgrade-refused" and entry["stages"] == [] and entry["from_version"] == "2.0.0"
    assert "the node has 2.0.0, the resource wants 1.0.0" in entry["reason"]
    assert "uninstall.apply: true" in entry["reason"]
    assert refused["changed"] is False and refused["interrupt"]["type"] == "noop"
    # Without the rule (no uninstall.enabled) the documented downgrade stands.
    assert plan([_desired()], _recorded())["packages"][0]["action"] == "downgrade"
    # Once uninstalled (nothing recorded) the older version is a fresh apply; an upgrade is never refused.
    assert plan([_desired(refuseDowngrade=True)], {})["packages"][0]["action"] == "apply"
    assert plan([_desired("3.0.0", refuseDowngrade=True)], _recorded())["packages"][0]["action"] == "upgrade"


def test_a_spent_budget_is_planned_exhausted_until_something_new_is_asked():
    failed = _recorded("1.0.0", stage="apply", state="erroring", attempts={"apply": 4})
    (entry,) = plan([_desired(stageRetries=3)], failed)["packages"]
    assert entry["action"] == "exhausted" and entry["stages"] == []
    assert "failed 4 time(s), its whole retry budget (stageRetries 3)" in entry["reason"]
    assert "nodewright package rerun NODE demo apply" in entry["reason"]
    # A larger budget, changed config, another version: the package runs again.
    assert plan([_desired(stageRetries=5)], failed)["packages"][0]["action"] == "resume"
    assert plan([_desired(stageRetries=3, configHashes={"k": "y"})], failed)["packages"][0]["action"] == "resume"
    assert plan([_desired("1.1.0", stageRetries=3)], failed)["packages"][0]["action"] == "reinstall"
    rerun = _recorded("1.0.0", stage="apply", state="in_progress", attempts={"apply": 4}, rerun="apply")
    assert plan([_desired(stageRetries=3)], rerun)["packages"][0]["action"] == "rerun"


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("spec, field", [
    ({"stageRetries": -1}, "spec.stageRetries"),
    ({"stageRetries": 11}, "spec.stageRetries"),
    ({"stageRetries": "3"}, "spec.stageRetries"),
    ({"interruptRestartLimit": True}, "spec.interruptRestartLimit"),
    ({"stageRetryBackoff": "soon"}, "spec.stageRetryBackoff"),
    ({"stageRetryBackoff": 10}, "spec.stageRetryBackoff"),
    ({"packages": {"demo": {"version": "1.0.0", "stageRetries": 2.5}}}, "spec.packages.demo.stageRetries"),
])
def test_bad_retry_fields_are_refused_with_their_field(spec, field):
    with pytest.raises(ValidationError) as caught:
        validate_nodewright({"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright",
                             "metadata": {"name": "r"}, "spec": spec})
    assert field in str(caught.value)


def test_the_retry_options_default_to_three_retries_one_second_and_three_restarts():
    assert retry_options({}) == {"stage_retries": 3, "retry_backoff": 1.0, "restart_limit": 3}
    spec = validate_nodewright({"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "r"},
                                "spec": {"stageRetries": 0, "stageRetryBackoff": "1m", "interruptRestartLimit": 5}})
    assert retry_options(spec["spec"]) == {"stage_retries": 0, "retry_backoff": 60, "restart_limit": 5}


# --------------------------------------------------------------------------- status

def test_the_status_names_refused_nodes_their_reason_and_the_way_out():
    node = {"metadata": {"name": "n1", "labels": {"nodewright.io/status-r": "complete"},
                         "annotations": {"nodewright.io/state-r": json.dumps(_recorded())}}}
    why = retries.downgrade_reason("demo", "2.0.0", "1.0.0")
    status = compute_status("r", [node], ["n1"], [], refused=[{"node": "n1", "kind": "downgrade-refused",
                                                                 "message": why}])
    assert status["status"] == "blocked" and status["nodeStatus"] == {"n1": "blocked"}
    assert "downgrade refused (uninstall first): n1" in status["message"]
    (cond,) = [c for c in status["conditions"] if c["type"] == "DowngradeRefused"]
    assert cond["status"] == "True" and cond["message"] == "n1: " + why
    assert not [c for c in status["conditions"] if c["type"] == "RetryLimitReached"]
    # Nothing refused: neither condition is there.
    plain = compute_status("r", [node], ["n1"], [])
    assert plain["status"] == "complete"
    assert not {c["type"] for c in plain["conditions"]} & {"DowngradeRefused", "RetryLimitReached"}


# --------------------------------------------------------------------------- runner

FLAKY = ('n=$(cat /var/lib/flaky-count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > /var/lib/flaky-count\n'
         'test "$n" -gt "$(cat "$NODEWRIGHT_CONFIG_DIR/fails")"')


def _flaky_package(where):
    root = os.path.join(str(where), "flaky")
    os.makedirs(os.path.join(root, "steps"))
    for script, body in (("apply.sh", FLAKY), ("check.sh", "test -s /var/lib/flaky-count")):
        with open(os.path.join(root, "steps", script), "w") as fh:
            fh.write("#!/bin/sh\n" + body + "\n")
        os.chmod(os.path.join(root, "steps", script), 0o755)
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump({"name": "flaky", "version": "1.0.0", "expectedConfig": ["fails"],
                   "stages": {"apply": [{"path": "apply.sh"}], "apply-check": [{"path": "check.sh"}]}}, fh)
    return root


def test_a_failing_stage_is_retried_within_its_budget_and_the_attempts_are_recorded(root, tmp_path):
    src = _flaky_package(tmp_path)
    spec = {"src": src, "config": {"fails": "2"}, "stage_retries": 3, "retry_backoff": 0}
    done = run_packages([spec], host_root=root, resource="r")
    (result,) = done["results"]
    assert [(r["stage"], r["attempt"]) for r in result["retries"]] == [("apply", 1), ("apply", 2)]
    entry = done["state"]["packages"]["flaky"]
    assert (entry["state"], entry["attempts"]) == ("complete", {"apply": 3, "config": 1})


def test_a_spent_budget_leaves_the_package_erroring_with_its_attempts_and_a_later_run_refuses(root, tmp_path):
    src = _flaky_package(tmp_path)
    spec = {"src": src, "config": {"fails": "5"}, "stage_retries": 1, "retry_backoff": 0}
    with pytest.raises(StepFailed) as caught:
        run_packages([spec], host_root=root, resource="r")
    assert "stage apply failed 2 time(s): its retry budget is spent (stageRetries 1)" in caught.value.message
    entry = caught.value.state["packages"]["flaky"]
    assert (entry["stage"], entry["state"], entry["attempts"]) == ("apply", "erroring", {"apply": 2})
    with pytest.raises(StepFailed) as again:
        run_packages([spec], host_root=root, resource="r")
    assert "its whole retry budget (stageRetries 1)" in again.value.message
    with open(os.path.join(root, "var/lib/flaky-count")) as fh:
        assert fh.read().strip() == "2", "the later run did not run the step again"
