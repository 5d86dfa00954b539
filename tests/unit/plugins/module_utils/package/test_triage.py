# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Triage on the host: reading a package's step logs (live ones included), setting a
package's stage and state by hand, forgetting a package, and marking a stage to run
again - each refusal in words. Every host root is a temporary directory."""

from __future__ import annotations

import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package import triage
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import PackageRunner
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import write_json

pytestmark = pytest.mark.unit


def entry(name="demo", version="1.0.0", stage="config", state="complete", **extra):
    return dict({"name": name, "version": version, "stage": stage, "state": state}, **extra)


STATE = {"packages": {"demo": entry(), "other": entry("other", stage="apply", state="erroring")}}


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "host"
    path.mkdir()
    return str(path)


def log_dir(root, resource="res", name="demo", version="1.0.0"):
    path = os.path.join(root, "var/log/nodewright", resource, name, version)
    os.makedirs(path, exist_ok=True)
    return path


def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)


# --------------------------------------------------------------------------- logs


def test_read_logs_of_an_unknown_stage():
    with pytest.raises(ValidationError) as caught:
        triage.read_logs("/nonexistent", "res", "demo", stage="apply-chek")
    assert caught.value.field == "stage"
    assert "unknown stage 'apply-chek'" in str(caught.value)
    assert caught.value.hint.startswith("one of apply, apply-check, config, config-check")


def test_read_logs_without_any(root):
    out = triage.read_logs(root, "res", "demo")
    assert out == {"package": "demo", "resource": "res", "version": None, "logs": [], "running": None,
                   "recorded": {}}


def test_read_logs_latest_per_step_oldest_first(root):
    d = log_dir(root)
    write(os.path.join(d, "apply.apply.sh.20261201T000000.000001.log"), "first run")
    write(os.path.join(d, "apply.apply.sh.20261201T010000.000001.log"), "second run")
    write(os.path.join(d, "apply-check.check.sh.20261201T000500.000001.log"), "check")
    write(os.path.join(d, "short.log"), "not a step log")
    write(os.path.join(d, "notes.txt"), "ignored")
    out = triage.read_logs(root, "res", "demo")
    assert out["version"] == "1.0.0"   # the only one kept
    assert [(log["stage"], log["step"], log["started"], log["text"], log["live"]) for log in out["logs"]] == [
        ("apply-check", "check.sh", "20261201T000500.000001", "check", False),
        ("apply", "apply.sh", "20261201T010000.000001", "second run", False)]
    first = out["logs"][0]
    assert first["path"] == "/var/log/nodewright/res/demo/1.0.0/apply-check.check.sh.20261201T000500.000001.log"
    assert (first["size"], first["offset"]) == (5, 0)
    every = triage.read_logs(root, "res", "demo", every=True, stage="apply")
    assert [log["text"] for log in every["logs"]] == ["first run", "second run"]


def test_read_logs_of_the_recorded_version_with_offsets(root):
    log_dir(root, version="2.0.0")
    d = log_dir(root, version="1.0.0")
    name = "apply.apply.sh.20261201T000000.000001.log"
    write(os.path.join(d, name), "0123456789")
    PackageRunner(root, resource="res").write_state({"packages": {"demo": entry(checks={"apply": "passed"})}})
    inner = "/var/log/nodewright/res/demo/1.0.0/" + name
    out = triage.read_logs(root, "res", "demo", offsets={inner: 4})
    assert out["version"] == "1.0.0"
    assert out["recorded"] == {"stage": "config", "state": "complete", "checks": {"apply": "passed"}}
    assert (out["logs"][0]["offset"], out["logs"][0]["text"]) == (4, "456789")
    beyond = triage.read_logs(root, "res", "demo", offsets={inner: 99})
    assert (beyond["logs"][0]["offset"], beyond["logs"][0]["text"]) == (10, "")
    # Without a recorded version, the newest kept one.
    assert triage.read_logs(root, "res", "other")["version"] is None


def test_a_long_log_is_cut_to_its_end(root):
    d = log_dir(root)
    write(os.path.join(d, "apply.s.20261201T000000.000001.log"), "x" * 10 + "y" * triage.MAX_LOG_BYTES)
    log = triage.read_logs(root, "res", "demo")["logs"][0]
    assert log["offset"] == 10 and log["text"] == "y" * triage.MAX_LOG_BYTES


def test_a_running_steps_output_so_far(root):
    d = log_dir(root)
    base = os.path.join(d, "apply.apply.sh.20261201T000000.000001.log")
    write(base + ".stdout", "partial")
    write(base + ".stderr", "warning")
    write_json(os.path.join(root, "var/lib/nodewright/step.json"),
               {"resource": "res", "package": "demo", "status": "running", "step": "apply.sh"})
    out = triage.read_logs(root, "res", "demo")
    assert out["running"]["step"] == "apply.sh"
    (log,) = out["logs"]
    assert log["live"] is True
    assert log["text"] == "partial--- stderr so far ---\nwarning"
    # Once the log is written, the live output is not shown twice.
    write(base, "done")
    (log,) = triage.read_logs(root, "res", "demo")["logs"]
    assert (log["live"], log["text"]) == (False, "done")


@pytest.mark.parametrize("record", [
    {"resource": "other", "package": "demo", "status": "running"},
    {"resource": "res", "package": "other", "status": "running"},
    {"resource": "res", "package": "demo", "status": "finished"},
])
def test_another_step_is_not_reported_as_running(root, record):
    write_json(os.path.join(root, "var/lib/nodewright/step.json"), record)
    assert triage.read_logs(root, "res", "demo")["running"] is None


# --------------------------------------------------------------------------- state by hand


@pytest.mark.parametrize("stage, new_state, expected_stage", [
    (None, "complete", "config"),
    ("apply", "in_progress", "apply"),
    ("post-interrupt", "erroring", "post-interrupt"),
])
def test_set_package_state(stage, new_state, expected_stage):
    state = {"packages": {"demo": entry(rerun="apply")}}
    new = triage.set_package_state(state, "demo", stage, new_state)
    assert new["packages"]["demo"]["stage"] == expected_stage
    assert new["packages"]["demo"]["state"] == new_state
    assert "rerun" not in new["packages"]["demo"]
    assert "status" in new
    assert state["packages"]["demo"]["rerun"] == "apply"   # a copy


@pytest.mark.parametrize("name, stage, new_state, version, field, message, hint", [
    ("Demo", None, "complete", None, "package", "'Demo' is not a package name", None),
    (None, None, "complete", None, "package", "None is not a package name", None),
    ("absent", None, "complete", None, "package", "package 'absent' is not recorded on the node",
     "recorded: demo, other"),
    ("demo", None, "complete", "2.0.0", "version", "package 'demo' is recorded at version 1.0.0 on the node, not 2.0.0",
     None),
    ("demo", "apply-check", "complete", None, "stage",
     "package 'demo' is at stage 'apply-check', which cannot be set by hand",
     "give the stage: one of apply, config, upgrade, uninstall, post-interrupt"),
    ("demo", None, "done", None, "package_state", "state 'done' cannot be set",
     "one of complete, in_progress, erroring"),
    ("demo", "upgrade", "complete", None, "stage",
     "package 'demo' has no unfinished upgrade, so it cannot be at stage upgrade", "give apply, config or post-interrupt"),
])
def test_set_package_state_refuses(name, stage, new_state, version, field, message, hint):
    with pytest.raises(ValidationError) as caught:
        triage.set_package_state(STATE, name, stage, new_state, version)
    assert caught.value.field == field
    assert message in str(caught.value)
    if hint is not None:
        assert caught.value.hint == hint


def test_an_unfinished_upgrade_may_be_set():
    state = {"packages": {"demo": entry(stage="upgrade", state="erroring", fromVersion="0.9.0")}}
    assert triage.set_package_state(state, "demo", "upgrade", "complete")["packages"]["demo"]["state"] == "complete"


def test_an_empty_state_records_nothing():
    with pytest.raises(ValidationError) as caught:
        triage.set_package_state({}, "demo", None, "complete")
    assert caught.value.hint == "recorded: none"


def test_forget_package():
    new = triage.forget_package(STATE, "other")
    assert list(new["packages"]) == ["demo"]
    assert list(STATE["packages"]) == ["demo", "other"]
    with pytest.raises(ValidationError, match="recorded at version 1.0.0 on the node, not 3.0.0"):
        triage.forget_package(STATE, "demo", "3.0.0")


# --------------------------------------------------------------------------- on the host


def test_update_state_on_host(root):
    runner = PackageRunner(root, resource="res")
    runner.write_state(STATE)
    before, after = triage.update_state_on_host(root, "res", "other", None, "complete")
    assert before["packages"]["other"]["state"] == "erroring"
    assert after["packages"]["other"]["state"] == "complete"
    assert triage.recorded(root, "res") == after


def test_reset_on_host_forgets_the_package_and_its_flags(root):
    runner = PackageRunner(root, resource="res")
    runner.write_state(STATE)
    flags = runner.root.outer(runner.flag_dir("demo", "1.0.0", "apply"))
    os.makedirs(flags)
    before, after = triage.reset_on_host(root, "res", "demo")
    assert "demo" in before["packages"] and list(after["packages"]) == ["other"]
    assert not os.path.exists(runner.root.outer(runner.flag_dir("demo")))
    assert list(triage.recorded(root, "res")["packages"]) == ["other"]


def test_mark_rerun_on_host(root):
    PackageRunner(root, resource="res").write_state(STATE)
    new = triage.mark_rerun_on_host(root, "res", "demo", "apply")
    assert new["packages"]["demo"]["rerun"] == "apply"
    assert triage.recorded(root, "res")["packages"]["demo"]["rerun"] == "apply"


def test_recorded_of_a_host_without_state(root):
    assert triage.recorded(root, "res")["packages"] == {}
