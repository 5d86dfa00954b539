# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The step side of the package runner, without running a step: output tails, check
summaries, the lock holder in words, a step's environment, failure messages and hints,
finished steps skipped by their flags, outcomes adopted from a run that did not
return, and interrupts a step asks for. Every host root is a temporary directory."""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.package import steps
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import Step, load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import PackageRunner
from ansible_collections.nodewright.fleet.plugins.module_utils.package.steps import StepFailed
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import read_json, write_json

pytestmark = pytest.mark.unit


def make_package(root, stages=None):
    root = str(root)
    os.makedirs(os.path.join(root, "steps"), exist_ok=True)
    stages = stages or {"apply": [{"path": "apply.sh", "arguments": ["a"]}, {"path": "again.sh", "idempotent": True}],
                        "apply-check": [{"path": "check.sh", "idempotent": True}]}
    for items in stages.values():
        for item in items:
            with open(os.path.join(root, "steps", item["path"]), "w") as fh:
                fh.write("#!/bin/sh\nexit 0\n")
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump({"name": "demo", "version": "1.0.0", "stages": stages}, fh)
    return load_package(root)


@pytest.fixture
def host(tmp_path):
    path = tmp_path / "host"
    path.mkdir()
    return PackageRunner(str(path), resource="res")


@pytest.fixture
def package(tmp_path):
    return make_package(tmp_path / "pkg")


# --------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize("text, lines, expected", [
    (None, 20, ""),
    ("", 20, ""),
    ("a\nb\nc\n", 2, "b\nc"),
    ("a\nb\nc", 20, "a\nb\nc"),
    ("x" * 5000, 20, "x" * steps.TAIL_CHARS),
    ("\n".join(str(n) for n in range(30)) + "\n\n", 20, "\n".join(str(n) for n in range(10, 30))),
])
def test_tail(text, lines, expected):
    assert steps.tail(text, lines) == expected


def result(stage, step="s", ok=True, skipped=False, exit_code=0, reason=""):
    return {"stage": stage, "step": step, "ok": ok, "skipped": skipped, "exit_code": exit_code, "reason": reason}


@pytest.mark.parametrize("results, expected", [
    ([], None),
    ([result("apply")], None),
    ([result("apply-check", "c1")], {"result": "passed", "exitCode": 0, "step": "c1"}),
    ([result("apply-check", "c1"), result("apply-check", "c2", skipped=True, reason="flag")],
     {"result": "passed", "exitCode": 0, "step": "c1"}),
    ([result("apply-check", "c1", skipped=True, exit_code=None, reason="no script")],
     {"result": "skipped", "exitCode": None, "step": "c1", "reason": "no script"}),
    ([result("apply-check", "c1"), result("apply-check", "c2", ok=False, exit_code=3)],
     {"result": "failed", "exitCode": 3, "step": "c2", "reason": None}),
    ([result("apply-check", "c1", ok=False, exit_code=None, reason="killed")],
     {"result": "failed", "exitCode": None, "step": "c1", "reason": "killed"}),
    ([result("config-check", "c1", ok=False)], None),
])
def test_check_summary(results, expected):
    assert steps.check_summary(results, "apply") == expected


def test_lock_holder_text():
    assert steps.lock_holder_text(None) == ""
    assert steps.lock_holder_text({}) == ""
    record = {"step": "apply.sh", "stage": "apply", "package": "demo", "version": "1.0.0", "resource": "res",
              "started": "2026-12-01T00:00:00Z", "status": "finished"}
    assert steps.lock_holder_text(record) == ("step 'apply.sh' of stage apply of package demo 1.0.0 (resource res), "
                                              "started 2026-12-01T00:00:00Z")
    running = dict(record, status="running", pid=42, log="/var/log/x.log")
    assert steps.lock_holder_text(running).endswith(", is still running (process 42, log /var/log/x.log)")


def _own_argv0():
    with open("/proc/self/cmdline", "rb") as fh:
        return fh.read().split(b"\0")[0].decode()


@pytest.mark.parametrize("record", [
    None,
    {},
    {"status": "finished", "pid": 1, "argv0": "x"},
    {"status": "running", "argv0": "x"},
    {"status": "running", "pid": "not-a-pid", "argv0": "x"},
    {"status": "running", "pid": os.getpid(), "argv0": "/steps/surely-not-this-script.sh"},
    {"status": "running", "pid": os.getpid(), "argv0": ""},
])
def test_step_alive_is_false_unless_the_step_runs(record):
    assert steps.step_alive(record) is False


def test_step_alive_for_a_running_process():
    if not os.path.exists("/proc/self/cmdline"):
        pytest.skip("needs /proc")
    assert steps.step_alive({"status": "running", "pid": os.getpid(), "argv0": "/x/" + _own_argv0()}) is True


# --------------------------------------------------------------------------- the environment


def test_environment(host, package):
    env = host.environment(package, "apply", {"action": "install", "env": {"EXTRA": "1", "PATH": "/mine"},
                                             "changed_keys": ["a", "b"]})
    pkg_dir = "/var/lib/nodewright/packages/res/demo/1.0.0"
    assert env["PATH"] == "/mine" and env["HOME"] == "/root" and env["LANG"] == "C.UTF-8"
    assert host.environment(package, "apply", {})["PATH"] == steps.PATH
    assert env["EXTRA"] == "1"
    assert {k: env[k] for k in ("NODEWRIGHT_PACKAGE", "NODEWRIGHT_VERSION", "NODEWRIGHT_STAGE", "NODEWRIGHT_ACTION",
                                "NODEWRIGHT_RESOURCE", "NODEWRIGHT_CHANGED_KEYS")} == {
        "NODEWRIGHT_PACKAGE": "demo", "NODEWRIGHT_VERSION": "1.0.0", "NODEWRIGHT_STAGE": "apply",
        "NODEWRIGHT_ACTION": "install", "NODEWRIGHT_RESOURCE": "res", "NODEWRIGHT_CHANGED_KEYS": "a b"}
    assert env["NODEWRIGHT_PACKAGE_DIR"] == env["SKYHOOK_DIR"] == pkg_dir
    assert env["NODEWRIGHT_STEPS_DIR"] == env["STEP_ROOT"] == pkg_dir + "/steps"
    assert env["NODEWRIGHT_CONFIG_DIR"] == pkg_dir + "/configmaps"
    assert env["NODEWRIGHT_LOG_DIR"] == env["SKYHOOK_LOG_DIR"] == "/var/log/nodewright/res/demo/1.0.0"
    assert env["NODEWRIGHT_DATA_DIR"] == "/var/lib/nodewright/data/res/demo"
    assert env["NODEWRIGHT_INTERRUPT_FILE"] == "/var/lib/nodewright/interrupts/res/demo"
    assert env["SKYHOOK_ROOT_DIR"] == "/var/lib/nodewright/resources/res"
    assert env["SKYHOOK_RESOURCE_ID"] == "res_demo_1.0.0"
    for absent in ("NODEWRIGHT_STAGE_SCRIPT", "NODEWRIGHT_PREVIOUS_VERSION", "PREVIOUS_VERSION"):
        assert absent not in env


@pytest.mark.parametrize("stage, upgrade_vars", [("upgrade", True), ("upgrade-check", True), ("apply", False)])
def test_environment_of_an_upgrade(host, package, stage, upgrade_vars):
    env = host.environment(package, stage, {"from_version": "0.9.0", "stage_script": "run.sh"})
    assert env["NODEWRIGHT_PREVIOUS_VERSION"] == "0.9.0" and env["NODEWRIGHT_CURRENT_VERSION"] == "1.0.0"
    assert env["NODEWRIGHT_STAGE_SCRIPT"] == "/var/lib/nodewright/packages/res/demo/1.0.0/configmaps/run.sh"
    assert ("PREVIOUS_VERSION" in env) is upgrade_vars
    if upgrade_vars:
        assert (env["PREVIOUS_VERSION"], env["CURRENT_VERSION"]) == ("0.9.0", "1.0.0")


def test_prepare_dirs(host, package):
    host.prepare_dirs(package)
    for inner in ("/var/log/nodewright/res/demo/1.0.0", "/var/lib/nodewright/data/res/demo",
                  "/var/lib/nodewright/resources/res", "/var/lib/nodewright/interrupts/res"):
        assert os.path.isdir(host.root.outer(inner)), inner


# --------------------------------------------------------------------------- steps that are not run


def test_finished_steps_are_skipped_by_their_flags(host, package):
    apply_step = package.steps("apply")[0]
    flag = host._flag_path(package, "apply", apply_step)
    assert flag.endswith("/flags/res/demo/1.0.0/apply/apply.sh.%s" % apply_step.fingerprint())
    write_json(flag, {"finished": "x"})
    only_flagged = make_package(os.path.dirname(package.root) + "/one",
                                {"apply": [{"path": "apply.sh", "arguments": ["a"]}],
                                 "apply-check": [{"path": "check.sh", "idempotent": True}]})
    results = host.run_stage(only_flagged, "apply")
    assert [(r["step"], r["skipped"], r["ok"]) for r in results] == [("apply.sh", True, True)]
    assert results[0]["reason"] == "finished before (flag %s)" % flag


def test_a_changed_step_has_another_flag(package):
    one = Step("apply.sh", arguments=["a"])
    assert one.fingerprint() != Step("apply.sh", arguments=["b"]).fingerprint()
    assert one.fingerprint() == Step("apply.sh", arguments=["a"]).fingerprint()


def test_an_unset_env_argument_fails_before_the_step_starts(host, tmp_path):
    pkg = make_package(tmp_path / "envpkg", {"apply": [{"path": "apply.sh", "arguments": ["env:NOPE", "env:PATH",
                                                                                         "env:ALSO_NOPE"]}],
                                             "apply-check": [{"path": "check.sh", "idempotent": True}]})
    step = pkg.steps("apply")[0]
    out = host.run_step(pkg, "apply", step, {})
    assert out["ok"] is False and out["exit_code"] is None
    assert out["reason"] == "argument env:NOPE, env:ALSO_NOPE names an unset variable"
    assert not os.path.exists(host.root.outer(steps.STEP_RECORD))


def test_a_step_past_the_stage_deadline_is_not_started(host, package):
    step = package.steps("apply")[0]
    out = host.run_step(package, "apply", step, {"deadline": time.monotonic() - 1, "stage": "apply",
                                                  "stage_timeout": 60})
    assert out["ok"] is False and out["stage_timeout"] is True
    assert out["reason"] == "was not started: stage apply ran past its stageTimeout of 60s"


# --------------------------------------------------------------------------- failures in words


@pytest.mark.parametrize("stage, values, hint", [
    ("apply", {"exit_code": 3}, "read the log, fix the package or the node, then run again: finished steps are not "
                                "repeated"),
    ("apply-check", {"exit_code": 1}, "the apply stage ran but its check says the host is not as it should be; "
                                      "read the log, fix the package or the node, then run again"),
    ("apply", {"reason": "was killed: stage apply ran past its stageTimeout of 5s", "stage_timeout": True},
     "the stage ran past its stageTimeout; raise spec.packages.demo.stageTimeout (or spec.stageTimeout) if it "
     "needs longer, or find what it waits for in the log"),
])
def test_failure_hints(host, package, stage, values, hint):
    step = package.steps("apply")[0]
    res = host._result(package, stage, step, ok=False, **values)
    err = host._failure(package, stage, step, res, [res])
    assert isinstance(err, StepFailed)
    assert err.hint == hint
    assert err.results == [res]


def test_failure_message(host, package):
    step = package.steps("apply")[0]
    res = host._result(package, "apply", step, ok=False, exit_code=3, log="/var/log/x.log", stdout_tail="out",
                       stderr_tail="err")
    err = host._failure(package, "apply", step, res, [res])
    assert err.message == ("package demo 1.0.0: step 'apply.sh' of stage apply exited 3 (accepted: 0) on host "
                           "root %s\nlog: /var/log/x.log\nlast output:\nout\nerr" % host.root.path)
    assert err.log == "/var/log/x.log"
    check = host._failure(package, "apply-check", step, host._result(package, "apply-check", step, ok=False,
                                                                        reason="killed by signal 9"), [])
    assert check.message.startswith("package demo 1.0.0: check 'apply.sh' of stage apply-check killed by signal 9")


def test_a_failure_on_the_real_root_names_no_host_root(package):
    runner = PackageRunner("/", resource="res")
    step = package.steps("apply")[0]
    err = runner._failure(package, "apply", step, runner._result(package, "apply", step, ok=False, exit_code=1), [])
    assert err.message == "package demo 1.0.0: step 'apply.sh' of stage apply exited 1 (accepted: 0)"


# --------------------------------------------------------------------------- records on the host


def _record(host, package, step, **extra):
    record = dict(host._record(package, "apply", step), **extra)
    write_json(host.root.outer(steps.STEP_RECORD), record)
    return record


def test_running_step(host, package):
    assert host.running_step() is None
    record = _record(host, package, package.steps("apply")[0], status="running")
    assert host.running_step() == record


def test_adopt_the_outcome_of_a_finished_step(host, package):
    step = package.steps("apply")[0]
    _record(host, package, step, status="finished", exit_code=0, reason="", finished="2026-12-01T00:00:00Z",
            stdout_tail="a\nb", log="/var/log/x.log", duration_s=1.5)
    out = host._adopt(package, "apply", step)
    assert out["ok"] is True and out["adopted"] is True and out["exit_code"] == 0
    assert out["reason"] == "finished in a run that did not return (2026-12-01T00:00:00Z)"
    assert (out["stdout_tail"], out["log"], out["duration_s"]) == ("a\nb", "/var/log/x.log", 1.5)
    assert host.running_step() is None   # taken


@pytest.mark.parametrize("extra, ok", [
    ({"status": "finished", "exit_code": 2, "reason": ""}, False),
    ({"status": "finished", "exit_code": 0, "reason": "killed by signal 9"}, False),
])
def test_adopt_a_failed_step(host, package, extra, ok):
    step = package.steps("apply")[0]
    _record(host, package, step, **extra)
    assert host._adopt(package, "apply", step)["ok"] is ok


def test_a_step_that_never_finished_is_run_again(host, package):
    step = package.steps("apply")[0]
    _record(host, package, step, status="running")
    assert host._adopt(package, "apply", step) is None
    assert host.running_step() is None


def test_another_steps_record_is_left_alone(host, package):
    first, second = package.steps("apply")
    _record(host, package, first, status="finished", exit_code=0)
    assert host._adopt(package, "apply", second) is None
    assert host._adopt(package, "config", first) is None
    assert host.running_step() is not None


def test_rotate_logs_keeps_the_newest(host, tmp_path):
    host.keep_logs = 2
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    for stamp in ("1", "2", "3"):
        (log_dir / ("apply.s.%s.log" % stamp)).write_text("")
    (log_dir / "apply.other.1.log").write_text("")
    host._rotate_logs(str(log_dir), "apply.s.")
    assert sorted(os.listdir(str(log_dir))) == ["apply.other.1.log", "apply.s.2.log", "apply.s.3.log"]


@pytest.mark.parametrize("text, expected", [
    ("reboot\n", {"type": "reboot", "services": []}),
    ("service containerd kubelet", {"type": "service", "services": ["containerd", "kubelet"]}),
    ("", None),
])
def test_take_interrupt_request(host, text, expected):
    path = host.root.outer(host.interrupt_file("demo"))
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as fh:
        fh.write(text)
    assert host.take_interrupt_request("demo") == expected
    assert not os.path.exists(path)
    assert host.take_interrupt_request("demo") is None


def test_an_unknown_interrupt_request_fails_the_package(host):
    path = host.root.outer(host.interrupt_file("demo"))
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as fh:
        fh.write("halt now")
    with pytest.raises(StepFailed) as caught:
        host.take_interrupt_request("demo")
    assert caught.value.message.startswith("package demo asked for an interrupt NodeWright does not know: 'halt now'")
    assert caught.value.hint == ("write reboot, restartAllServices or 'service <unit>...' to "
                                 "$NODEWRIGHT_INTERRUPT_FILE")
    assert read_json(path) is None
