# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What the runner keeps on a host and what it may touch there: records per
resource (two resources with the same package never share flags or config, an
earlier layout is migrated without rerunning anything), package entries that
cannot escape the package or the host root, and steps that are never repeated or
run twice after a crash."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import StepFailed, run_packages
from ansible_collections.nodewright.fleet.plugins.module_utils.package.steps import LOCK_FILE, STEP_RECORD

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
SHELLSCRIPT = os.path.join(REPO, "packages", "shellscript")
SKYHOOK_SHELLSCRIPT = os.path.join(REPO, "tests", "fixtures", "skyhook", "shellscript")


def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


def exists(root, path):
    return os.path.lexists(os.path.join(root, path.lstrip("/")))


def snapshot(root):
    """Every entry of a host root with what it is (file digest, link target, dir)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if rel.startswith(("proc", "run", "tmp")):
                continue
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    out[rel] = hash(fh.read())
            else:
                out[rel] = "dir"
    return out


def scripts(greeting):
    return {"apply.sh": 'echo "%s" >> /var/lib/applied-%s' % (greeting, greeting),
            "apply_check.sh": "test -s /var/lib/applied-%s" % greeting,
            "config.sh": 'cat "$SKYHOOK_DIR/configmaps/greeting" > /etc/greeting-$NODEWRIGHT_RESOURCE',
            "config_check.sh": 'cmp "$SKYHOOK_DIR/configmaps/greeting" /etc/greeting-$NODEWRIGHT_RESOURCE',
            "greeting": greeting}


def shell(root, resource, config, src=SHELLSCRIPT, **kw):
    return run_packages([{"src": src, "name": "shellscript", "config": config}], host_root=root,
                        resource=resource, **kw)


def version_of(tmp_path, version):
    dest = str(tmp_path / ("shellscript-%s" % version))
    shutil.copytree(SHELLSCRIPT, dest)
    with open(os.path.join(dest, "package.json")) as fh:
        data = json.load(fh)
    data["version"] = version
    with open(os.path.join(dest, "package.json"), "w") as fh:
        json.dump(data, fh)
    return dest


# --------------------------------------------------------------------------- a package is its name

def two_from_one_source(beta_version="2.1", src=SHELLSCRIPT):
    env = {"GREETING": "hello"}   # the Skyhook fixture's apply step takes env:GREETING
    return [{"src": src, "name": "alpha", "version": "1.0.0", "config": scripts("alpha"), "env": env},
            {"src": src, "name": "beta", "version": beta_version, "config": scripts("beta"), "env": env}]


@pytest.mark.parametrize("src", [SHELLSCRIPT, SKYHOOK_SHELLSCRIPT], ids=["nodewright", "skyhook"])
def test_two_packages_of_one_resource_from_one_source_keep_their_own_names_and_versions(root, src):
    first = run_packages(two_from_one_source(src=src), host_root=root, resource="res")
    assert [(r["name"], r["action"]) for r in first["results"]] == [("alpha", "apply"), ("beta", "apply")]
    assert read(root, "/var/lib/applied-alpha") == "alpha\n" and read(root, "/var/lib/applied-beta") == "beta\n"
    state = json.loads(read(root, "/var/lib/nodewright/state/res.json"))["packages"]
    assert {n: (e["version"], e["state"]) for n, e in state.items()} == {
        "alpha": ("1.0.0", "complete"), "beta": ("2.1", "complete")}
    for name, version in (("alpha", "1.0.0"), ("beta", "2.1")):
        copy = "/var/lib/nodewright/packages/res/%s/%s" % (name, version)
        assert read(root, copy + "/configmaps/greeting") == name
        if src == SHELLSCRIPT:   # the host copy's manifest says what it runs as
            manifest = json.loads(read(root, copy + "/package.json"))
            assert (manifest["name"], manifest["version"]) == (name, version)
        assert json.loads(read(root, "/var/lib/nodewright/history/res/%s.json" % name))["version"] == version
    assert not run_packages(two_from_one_source(src=src), host_root=root, resource="res")["changed"]

    # The resource's version wins: beta 2.1 -> 2.2 from the same source is an upgrade of beta alone.
    upgraded = run_packages(two_from_one_source("2.2", src=src), host_root=root, resource="res")
    assert [(r["name"], r["action"]) for r in upgraded["results"]] == [("alpha", "none"), ("beta", "upgrade")]
    assert exists(root, "/var/lib/nodewright/packages/res/beta/2.2")
    assert not exists(root, "/var/lib/nodewright/packages/res/beta/2.1")
    assert exists(root, "/var/lib/nodewright/packages/res/alpha/1.0.0")


# --------------------------------------------------------------------------- per resource

def test_two_resources_with_the_same_package_keep_their_own_records(root, tmp_path):
    first = shell(root, "team-a", scripts("alpha"))
    second = shell(root, "team-b", scripts("beta"))
    assert [r["stages"] for r in first["results"]] == [["apply", "config"]]
    assert [r["stages"] for r in second["results"]] == [["apply", "config"]], "team-b's apply was not skipped"
    assert read(root, "/var/lib/applied-alpha") == "alpha\n" and read(root, "/var/lib/applied-beta") == "beta\n"
    assert read(root, "/etc/greeting-team-a") == "alpha" and read(root, "/etc/greeting-team-b") == "beta"
    for resource, greeting in (("team-a", "alpha"), ("team-b", "beta")):
        copy = "/var/lib/nodewright/packages/%s/shellscript/1.0.0" % resource
        assert read(root, copy + "/configmaps/greeting") == greeting, "each keeps its own config"
        assert exists(root, "/var/lib/nodewright/flags/%s/shellscript/1.0.0/apply" % resource)
        state = json.loads(read(root, "/var/lib/nodewright/state/%s.json" % resource))
        assert state["packages"]["shellscript"]["state"] == "complete"

    before = snapshot(root)
    upgraded = shell(root, "team-a", scripts("alpha"), src=version_of(tmp_path, "1.1.0"))
    assert [r["action"] for r in upgraded["results"]] == ["upgrade"]
    after = snapshot(root)
    theirs = [p for p in set(before) | set(after) if "team-b" in p]
    assert theirs and all(before.get(p) == after.get(p) for p in theirs), "team-b's records untouched"
    assert exists(root, "/var/lib/nodewright/packages/team-b/shellscript/1.0.0")
    assert not exists(root, "/var/lib/nodewright/packages/team-a/shellscript/1.0.0")
    assert not shell(root, "team-b", scripts("beta"))["changed"]


def test_a_host_in_the_earlier_layout_is_migrated_without_rerunning_finished_steps(root, tmp_path):
    shell(root, "gpu", scripts("alpha"))
    base = os.path.join(root, "var/lib/nodewright")
    # Lay the records out as the earlier runner did: per package, without the resource.
    os.rename(os.path.join(base, "packages/gpu/shellscript"), os.path.join(base, "packages/shellscript"))
    os.rename(os.path.join(base, "flags/gpu/shellscript"), os.path.join(base, "flags/shellscript"))
    os.rename(os.path.join(base, "history/gpu/shellscript.json"), os.path.join(base, "history/shellscript.json"))
    for kind in ("packages", "flags", "history"):
        os.rmdir(os.path.join(base, kind, "gpu"))
    # A config change makes the copy and the flags matter: apply must not run again.
    changed = dict(scripts("alpha"), greeting="bonjour")
    result = shell(root, "gpu", changed)
    assert [(r["action"], r["stages"]) for r in result["results"]] == [("config", ["config"])]
    assert read(root, "/var/lib/applied-alpha") == "alpha\n", "apply did not run again"
    assert read(root, "/etc/greeting-gpu") == "bonjour"
    assert exists(root, "/var/lib/nodewright/packages/gpu/shellscript/1.0.0")
    assert not exists(root, "/var/lib/nodewright/packages/shellscript"), "the old record is gone"
    history = json.loads(read(root, "/var/lib/nodewright/history/gpu/shellscript.json"))["history"]
    assert [h["action"] for h in history] == ["apply", "config"]
    again = shell(root, "gpu", dict(scripts("alpha"), greeting="bonjour"))
    assert not again["changed"]


# --------------------------------------------------------------------------- entries that escape

def native_package(where, files=None, links=None, script_link=None):
    root = os.path.join(str(where), "esc")
    os.makedirs(os.path.join(root, "steps"))
    for name in ("apply.sh", "check.sh"):
        with open(os.path.join(root, "steps", name), "w") as fh:
            fh.write("#!/bin/sh\ntrue\n")
        os.chmod(os.path.join(root, "steps", name), 0o755)
    for path, body in (files or {}).items():
        dest = os.path.join(root, "files", path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w") as fh:
            fh.write(body)
    for path, target in (links or {}).items():
        dest = os.path.join(root, path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.symlink(target, dest)
    apply_path = "apply.sh"
    if script_link:
        os.symlink(script_link, os.path.join(root, "steps", "linked.sh"))
        apply_path = "linked.sh"
    manifest = {"name": "esc", "version": "1.0.0", "stages": {"apply": [{"path": apply_path}],
                                                             "apply-check": [{"path": "check.sh"}]}}
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump(manifest, fh)
    return root


def skyhook_package(where, link_target):
    dest = os.path.join(str(where), "sky")
    shutil.copytree(SKYHOOK_SHELLSCRIPT, dest)
    os.symlink(link_target, os.path.join(dest, "root_dir", "etc", "shadow-link"))
    return dest


ESCAPES = [
    ("files/ symlink to an absolute path", lambda t: native_package(t, links={"files/etc/passwd": "/etc/shadow"}),
     "files/etc/passwd is a symlink to the absolute path /etc/shadow"),
    ("files/ symlink climbing out", lambda t: native_package(t, links={"files/etc/x.conf": "../../../../etc/shadow"}),
     "files/etc/x.conf is a symlink to ../../../../etc/shadow, which resolves outside files/"),
    ("step script linked outside the package",
     lambda t: native_package(t, script_link=os.path.join(str(t), "outside.sh")),
     "step script 'linked.sh' resolves outside the package"),
    ("Skyhook root_dir symlink", lambda t: skyhook_package(t, "/etc/shadow"),
     "root_dir/etc/shadow-link is a symlink to the absolute path /etc/shadow"),
]


@pytest.mark.parametrize("build,words", [e[1:] for e in ESCAPES], ids=[e[0] for e in ESCAPES])
def test_an_entry_that_escapes_is_refused_and_nothing_on_the_host_changes(root, tmp_path, build, words):
    with open(str(tmp_path / "outside.sh"), "w") as fh:
        fh.write("#!/bin/sh\ntouch /var/lib/escaped\n")
    os.chmod(str(tmp_path / "outside.sh"), 0o755)
    src = build(tmp_path)
    before = snapshot(root)
    with pytest.raises(ValidationError) as caught:
        run_packages([{"src": src, "name": "esc", "config": {"apply.sh": "true"}}], host_root=root, resource="r")
    assert words in str(caught.value)
    assert snapshot(root) == before, "nothing on the host root changed"


def test_the_runner_refuses_an_escaping_copy_before_it_touches_the_host(root, tmp_path):
    # A package that passed validation and was changed afterwards (a copy edited on the
    # node, a source replaced under the runner): laying it is refused all the same.
    from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
    from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import PackageRunner, UnsafePath
    src = native_package(tmp_path, files={"/etc/nodewright-ok": "ok"})
    package = load_package(src)
    os.symlink("/etc/shadow", os.path.join(src, "files", "etc", "passwd"))
    before = snapshot(root)
    runner = PackageRunner(root, resource="r")
    with pytest.raises(UnsafePath) as caught:
        runner.install(package, {})
    assert "files/etc/passwd is a symlink to the absolute path /etc/shadow" in str(caught.value)
    assert snapshot(root) == before


def test_a_host_symlink_cannot_lead_a_laid_file_outside_the_host_root(root, tmp_path):
    outside = tmp_path / "controller-etc"
    outside.mkdir()
    os.symlink(str(outside), os.path.join(root, "etc", "nodewright-escape"))  # absolute: inside the root in a chroot
    src = native_package(tmp_path, files={"/etc/nodewright-escape/app.conf": "x"})
    run_packages([{"src": src, "name": "esc"}], host_root=root, resource="r")
    assert not os.listdir(str(outside)), "nothing was written outside the host root"
    assert read(root, os.path.join(str(outside), "app.conf").lstrip("/")) == "x", "laid where a chroot puts it"


# --------------------------------------------------------------------------- crashes

SLOW = {
    "apply.sh": 'echo run >> /var/lib/slow-runs\nwhile [ ! -e /etc/slow-go ]; do sleep 0.1; done\necho done > /etc/slow-done',
    "apply_check.sh": "test -s /etc/slow-done",
}


def wait_until(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def _step_status(root):
    """The status in the host's step record (step.json), or None when there is none."""
    return json.loads(read(root, STEP_RECORD)).get("status") if exists(root, STEP_RECORD) else None


def _let_the_orphaned_step_finish(root):
    """Let SLOW's step go on, and wait until its supervisor has recorded it finished."""
    hostroot.run(root, "touch /etc/slow-go")
    wait_until(lambda: _step_status(root) == "finished", "the step to finish")


def _kill_a_run_while_its_step_runs(root):
    """Start a package run of SLOW in a process of its own and kill it (its whole process
    group) once the step runs; the step's supervisor, a session of its own, lives on."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import run_packages\n"
            "run_packages([{'src': %r, 'name': 'shellscript', 'config': %r}], host_root=%r, resource='slow')\n"
            % (os.path.join(REPO, ".collections"), SHELLSCRIPT, SLOW, root))
    module = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    wait_until(lambda: exists(root, "/var/lib/slow-runs"), "the step to start")
    # ... and its supervisor to have recorded it running (its process ID), as it does at once.
    wait_until(lambda: _step_status(root) == "running", "the step recorded running")
    os.killpg(module.pid, signal.SIGKILL)  # the module and its process group die; the step's does not
    module.wait()


def test_a_step_outliving_its_killed_run_is_never_started_twice_nor_repeated(root, tmp_path):
    _kill_a_run_while_its_step_runs(root)

    with pytest.raises(StepFailed) as caught:
        shell(root, "slow", SLOW)
    assert "another NodeWright package run holds" in str(caught.value)
    assert "step 'apply' of stage apply of package shellscript 1.0.0 (resource slow)" in str(caught.value)
    assert "is still running" in str(caught.value)
    assert read(root, "/var/lib/slow-runs") == "run\n", "no second copy started"

    _let_the_orphaned_step_finish(root)
    result = shell(root, "slow", SLOW)
    assert read(root, "/var/lib/slow-runs") == "run\n", "the finished step was not repeated"
    (apply_step,) = [s for s in result["results"][0]["steps"] if s["stage"] == "apply"]
    assert apply_step["adopted"] and apply_step["exit_code"] == 0
    assert "finished in a run that did not return" in apply_step["reason"]
    assert result["state"]["packages"]["shellscript"]["state"] == "complete"
    assert not exists(root, STEP_RECORD)


def _orphaned_finished_step(root):
    """A run killed while its step ran; the step then finished under its supervisor,
    which recorded it finished (step.json) and gave the lock back."""
    _kill_a_run_while_its_step_runs(root)
    _let_the_orphaned_step_finish(root)


def _hold_lock(root, seconds):
    """A process holding the host's package lock for ``seconds``, as a step supervisor
    does between recording its step finished and exiting (longer on a loaded host)."""
    lock = os.path.join(root, LOCK_FILE.lstrip("/"))
    code = ("import fcntl, os, sys, time\n"
            "fd = os.open(%r, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "sys.stdout.write('held\\n'); sys.stdout.flush()\n"
            "time.sleep(%r)\n" % (lock, seconds))
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    return holder


def test_a_run_waits_for_the_supervisor_of_a_finished_step_to_give_the_lock_back(root):
    # The window CI once hit: the orphaned supervisor has written "finished" but not yet
    # exited. A run arriving then waits for the lock instead of failing, and adopts the step.
    _orphaned_finished_step(root)
    holder = _hold_lock(root, 1.0)
    try:
        result = shell(root, "slow", SLOW)
    finally:
        holder.wait()
    assert read(root, "/var/lib/slow-runs") == "run\n", "the finished step was not repeated"
    (apply_step,) = [s for s in result["results"][0]["steps"] if s["stage"] == "apply"]
    assert apply_step["adopted"] and apply_step["exit_code"] == 0
    assert result["state"]["packages"]["shellscript"]["state"] == "complete"


def test_a_lock_held_past_the_handover_is_reported_with_the_finished_step(root, monkeypatch):
    from ansible_collections.nodewright.fleet.plugins.module_utils.package import runner
    _orphaned_finished_step(root)
    monkeypatch.setattr(runner, "LOCK_HANDOVER_S", 0.3)
    holder = _hold_lock(root, 3.0)
    try:
        with pytest.raises(StepFailed) as caught:
            shell(root, "slow", SLOW)
    finally:
        holder.kill()
        holder.wait()
    assert "another NodeWright package run holds" in str(caught.value)
    assert "step 'apply' of stage apply of package shellscript 1.0.0 (resource slow)" in str(caught.value)
    assert "is still running" not in str(caught.value)
    assert read(root, "/var/lib/slow-runs") == "run\n"
    # Once the holder is gone, the next run adopts the step's outcome.
    result = shell(root, "slow", SLOW)
    assert result["state"]["packages"]["shellscript"]["state"] == "complete"
    assert read(root, "/var/lib/slow-runs") == "run\n"


# --------------------------------------------------------------------------- stage timeouts, reruns, uninstall-interrupt

def counting(tmp_path, interrupt=None, apply_body=None):
    config = {"apply.sh": apply_body or 'echo x >> /var/lib/count-runs', "apply_check.sh": "test -s /var/lib/count-runs",
              "uninstall.sh": "rm -f /var/lib/count-runs", "uninstall_check.sh": "test ! -e /var/lib/count-runs"}
    spec = {"src": SHELLSCRIPT, "name": "shellscript", "config": config}
    if interrupt:
        spec["interrupt"] = interrupt
    return spec


def test_a_stage_past_its_timeout_marks_the_package_erroring_with_the_stage_named(root, tmp_path):
    spec = dict(counting(tmp_path, apply_body="echo x >> /var/lib/count-runs; sleep 60"), stage_timeout="1s")
    with pytest.raises(StepFailed) as caught:
        run_packages([spec], host_root=root, resource="r")
    assert "step 'apply' of stage apply was killed: stage apply ran past its stageTimeout of 1s" in str(caught.value)
    assert "stageTimeout" in caught.value.hint
    entry = caught.value.state["packages"]["shellscript"]
    assert (entry["stage"], entry["state"]) == ("apply", "erroring")
    assert entry["checks"]["apply-check"]["result"] == "not-run"


def test_a_negative_stage_timeout_is_refused_before_the_node_is_touched(root, tmp_path):
    before = snapshot(root)
    with pytest.raises(ValidationError) as caught:
        run_packages([dict(counting(tmp_path), stage_timeout="-5m")], host_root=root, resource="r")
    assert caught.value.field == "packages[0].stage_timeout" and "must not be negative" in str(caught.value)
    assert snapshot(root) == before


def test_a_rerun_runs_finished_steps_again(root, tmp_path):
    from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import mark_rerun
    first = run_packages([counting(tmp_path)], host_root=root, resource="r")
    assert not run_packages([counting(tmp_path)], host_root=root, resource="r")["changed"]
    again = run_packages([counting(tmp_path)], host_root=root, resource="r",
                         recorded_state=mark_rerun(first["state"], "shellscript", "apply"))
    assert [(r["action"], r["stages"]) for r in again["results"]] == [("rerun", ["apply", "config"])]
    assert read(root, "/var/lib/count-runs") == "x\nx\n", "the finished apply step ran again"
    assert "rerun" not in again["state"]["packages"]["shellscript"]
    assert again["state"]["status"] == "complete"


def test_an_uninstall_asks_for_the_package_interrupt_then_the_entry_goes(root, tmp_path):
    reboot = {"type": "reboot"}
    applied = run_packages([counting(tmp_path, reboot)], host_root=root, resource="r")
    hostroot.boot(root)
    run_packages([], host_root=root, resource="r", phase="post-interrupt")
    removed = run_packages([dict(counting(tmp_path, reboot), state="absent")], host_root=root, resource="r")
    assert applied["interrupt"]["type"] == "reboot"
    assert removed["interrupt"] == {"type": "reboot", "services": []}
    entry = removed["state"]["packages"]["shellscript"]
    assert (entry["stage"], entry["state"]) == ("uninstall-interrupt", "in_progress")
    assert not exists(root, "/var/lib/count-runs") and removed["state"]["status"] == "in_progress"
    waiting = run_packages([dict(counting(tmp_path, reboot), state="absent")], host_root=root, resource="r")
    assert [r["action"] for r in waiting["results"]] == ["interrupt"] and waiting["interrupt"]["type"] == "reboot"
    with pytest.raises(StepFailed) as caught:
        run_packages([], host_root=root, resource="r", phase="post-interrupt")
    assert "has not rebooted" in str(caught.value)
    hostroot.boot(root)
    done = run_packages([], host_root=root, resource="r", phase="post-interrupt")
    assert done["state"] == {"packages": {}, "status": "complete"}
