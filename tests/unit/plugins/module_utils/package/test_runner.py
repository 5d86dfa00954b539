# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The runner on real simulator host roots (chroot): stages and checks, logs,
flags, history, files, upgrades and downgrades, interrupts, Skyhook packages."""

from __future__ import annotations

import fcntl
import json
import os
import shutil

import pytest
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import (
    PackageRunner,
    StepFailed,
    run_packages,
)

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
SKYHOOK_FIXTURES = os.path.join(REPO, "tests", "fixtures", "skyhook")



def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


def exists(root, path):
    return os.path.lexists(os.path.join(root, path.lstrip("/")))


def make_package(where, name="demo", version="1.0.0", scripts=None, stages=None, files=None, **manifest):
    """A package directory: ``scripts`` maps script name to its body, ``stages``
    maps stage to a list of steps (a string is a script name)."""
    root = os.path.join(str(where), "%s-%s" % (name, version))
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "steps"))
    for script, body in (scripts or {}).items():
        with open(os.path.join(root, "steps", script), "w") as fh:
            fh.write("#!/bin/sh\nset -e\n" + body + "\n")
        os.chmod(os.path.join(root, "steps", script), 0o755)
    for path, body in (files or {}).items():
        dest = os.path.join(root, "files", path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w") as fh:
            fh.write(body)
    data = dict(name=name, version=version,
                stages={s: [{"path": x} if isinstance(x, str) else x for x in steps]
                        for s, steps in (stages or {}).items()}, **manifest)
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump(data, fh, indent=2)
    return root


COUNTING = {
    # apply counts its runs, so a test can see whether it ran again
    "apply.sh": 'n=$(cat /var/lib/demo-count 2>/dev/null || echo 0); echo $((n + 1)) > /var/lib/demo-count\n'
                'echo "apply of $NODEWRIGHT_PACKAGE $NODEWRIGHT_VERSION"',
    "check.sh": "test -s /var/lib/demo-count",
    "config.sh": 'mkdir -p /etc/demo; cat "$NODEWRIGHT_CONFIG_DIR/level" > /etc/demo/level\n'
                 'echo "changed: $NODEWRIGHT_CHANGED_KEYS"',
    "config-check.sh": 'test "$(cat /etc/demo/level)" = "$(cat "$NODEWRIGHT_CONFIG_DIR/level")"',
    "upgrade.sh": 'echo "$NODEWRIGHT_PREVIOUS_VERSION -> $NODEWRIGHT_CURRENT_VERSION" > /var/lib/demo-upgraded',
    "uninstall.sh": "rm -rf /etc/demo /var/lib/demo-count",
    "uninstall-check.sh": "test ! -e /etc/demo",
    "post.sh": 'echo "post-interrupt $NODEWRIGHT_VERSION" >> /var/lib/demo-post',
}
FULL_STAGES = {
    "apply": ["apply.sh"], "apply-check": ["check.sh"], "config": [{"path": "config.sh", "idempotent": True}],
    "config-check": ["config-check.sh"], "upgrade": ["upgrade.sh"], "upgrade-check": ["check.sh"],
    "uninstall": ["uninstall.sh"], "uninstall-check": ["uninstall-check.sh"],
    "post-interrupt": ["post.sh"], "post-interrupt-check": ["check.sh"],
}


def demo(where, version="1.0.0", **manifest):
    manifest.setdefault("expectedConfig", ["level"])
    return make_package(where, version=version, scripts=COUNTING, stages=FULL_STAGES, **manifest)


def run(root, src, config=None, **kw):
    spec = {"src": src, "config": config if config is not None else {"level": "1"}}
    spec.update({k: kw.pop(k) for k in ("env", "interrupt", "config_interrupts", "state", "name") if k in kw})
    return run_packages([spec], host_root=root, resource="test", **kw)


def stages_run(result):
    return [(r["name"], r["action"], r["stages"]) for r in result["results"]]


def test_apply_runs_stages_and_checks_then_a_rerun_changes_nothing(root, tmp_path):
    src = demo(tmp_path)
    result = run(root, src)
    assert result["changed"]
    assert stages_run(result) == [("demo", "apply", ["apply", "config"])]
    assert [(s["stage"], s["ok"]) for s in result["results"][0]["steps"]] == [
        ("apply", True), ("apply-check", True), ("config", True), ("config-check", True)]
    step = result["results"][0]["steps"][0]
    assert step["exit_code"] == 0 and step["stdout_tail"] == "apply of demo 1.0.0" and step["duration_s"] >= 0
    assert step["log"].startswith(os.path.join(root, "var/log/nodewright/test/demo/1.0.0/apply.apply.sh."))
    assert "apply of demo 1.0.0" in read(root, step["log"][len(root):])
    entry = result["state"]["packages"]["demo"]
    checks = {stage: {k: v for k, v in c.items() if k != "at"} for stage, c in entry["checks"].items()}
    assert result["state"] == {"status": "complete", "packages": {"demo": {
        "name": "demo", "version": "1.0.0", "stage": "config", "state": "complete",
        "configHashes": entry["configHashes"], "bootId": hostroot.boot_id(root), "checks": entry["checks"],
        "updated": entry["updated"]}}}
    assert checks == {"apply-check": {"result": "passed", "exitCode": 0, "step": "check.sh"},
                      "config-check": {"result": "passed", "exitCode": 0, "step": "config-check.sh"}}
    assert result["results"][0]["checks"] == entry["checks"], "the run report says the same"
    assert result["interrupt"] == {"type": "noop", "services": []}
    assert read(root, "/etc/demo/level") == "1"
    assert exists(root, "/var/lib/nodewright/packages/test/demo/1.0.0/steps/apply.sh")
    assert read(root, "/var/lib/nodewright/packages/test/demo/1.0.0/configmaps/level") == "1"
    history = json.loads(read(root, "/var/lib/nodewright/history/test/demo.json"))
    assert history["version"] == "1.0.0" and history["history"][-1]["result"] == "ok"
    assert json.loads(read(root, "/var/lib/nodewright/state/test.json")) == result["state"]

    logs = sorted(os.listdir(os.path.join(root, "var/log/nodewright/test/demo/1.0.0")))
    again = run(root, src)
    assert not again["changed"] and again["results"][0]["action"] == "none"
    assert again["state"] == result["state"]
    assert sorted(os.listdir(os.path.join(root, "var/log/nodewright/test/demo/1.0.0"))) == logs
    assert read(root, "/var/lib/demo-count") == "1\n"


def test_check_mode_touches_nothing(root, tmp_path):
    before = sorted(os.listdir(os.path.join(root, "var/lib")))
    result = run(root, demo(tmp_path), check_mode=True)
    assert result["changed"] and result["results"] == []
    assert result["plan"]["packages"][0]["action"] == "apply"
    assert sorted(os.listdir(os.path.join(root, "var/lib"))) == before
    assert not exists(root, "/var/lib/nodewright")


def test_failing_step_reports_its_log_tail_and_a_rerun_skips_finished_steps(root, tmp_path):
    scripts = dict(COUNTING, **{"flaky.sh": 'echo "preparing"\necho "disk /dev/nvme9 not found" >&2\n'
                                            'test -e /etc/demo-ready'})
    stages = dict(FULL_STAGES, apply=["apply.sh", "flaky.sh"])
    src = make_package(tmp_path, scripts=scripts, stages=stages)
    with pytest.raises(StepFailed) as caught:
        run(root, src)
    message = str(caught.value)
    assert "package demo 1.0.0: step 'flaky.sh' of stage apply exited 1 (accepted: 0)" in message
    assert "disk /dev/nvme9 not found" in message and "preparing" in message
    assert caught.value.log.startswith(os.path.join(root, "var/log/nodewright/test/demo/1.0.0/apply.flaky.sh."))
    assert "finished steps are not repeated" in caught.value.hint
    failed = caught.value.results[-1]
    assert (failed["step"], failed["ok"], failed["exit_code"]) == ("flaky.sh", False, 1)
    assert failed["stderr_tail"] == "disk /dev/nvme9 not found"
    assert caught.value.state["packages"]["demo"]["state"] == "erroring"
    assert caught.value.state["packages"]["demo"]["stage"] == "apply"
    assert caught.value.state["status"] == "erroring"
    assert json.loads(read(root, "/var/lib/nodewright/history/test/demo.json"))["history"][-1]["result"] == "failed"

    hostroot.run(root, "touch /etc/demo-ready")
    result = run(root, src)
    assert stages_run(result) == [("demo", "resume", ["apply", "config"])]
    skipped = [s["step"] for s in result["results"][0]["steps"] if s["skipped"]]
    assert skipped == ["apply.sh"], "the finished non-idempotent step is not run again"
    assert read(root, "/var/lib/demo-count") == "1\n"
    assert result["state"]["status"] == "complete"


def test_failing_check_is_a_failure(root, tmp_path):
    scripts = dict(COUNTING, **{"check.sh": 'echo "expected /etc/demo/ready" >&2; exit 4'})
    with pytest.raises(StepFailed) as caught:
        run(root, make_package(tmp_path, scripts=scripts, stages=FULL_STAGES))
    assert "check 'check.sh' of stage apply-check exited 4" in str(caught.value)
    assert "expected /etc/demo/ready" in str(caught.value)
    assert "its check says" in caught.value.hint
    assert caught.value.state["packages"]["demo"]["state"] == "erroring"


def test_accepted_returncodes_and_env_arguments(root, tmp_path):
    scripts = {"apply.sh": 'echo "$1 $2 $STEP_VAR" > /etc/args; exit 3', "check.sh": "test -f /etc/args"}
    stages = {"apply": [{"path": "apply.sh", "arguments": ["env:TOKEN", "env:NODEWRIGHT_VERSION"],
                         "returncodes": [0, 3], "env": {"STEP_VAR": "s"}}], "apply-check": ["check.sh"]}
    src = make_package(tmp_path, scripts=scripts, stages=stages)
    run(root, src, env={"TOKEN": "t0k"})
    assert read(root, "/etc/args") == "t0k 1.0.0 s\n"


def test_unset_env_argument_fails_the_step(root, tmp_path):
    stages = {"apply": [{"path": "apply.sh", "arguments": ["env:NOT_SET"]}], "apply-check": ["check.sh"]}
    with pytest.raises(StepFailed) as caught:
        run(root, make_package(tmp_path, scripts={"apply.sh": "true", "check.sh": "true"}, stages=stages))
    assert "argument env:NOT_SET names an unset variable" in str(caught.value)


def test_step_timeout_kills_the_step(root, tmp_path):
    stages = {"apply": [{"path": "slow.sh", "timeout": 1}], "apply-check": ["check.sh"]}
    with pytest.raises(StepFailed) as caught:
        run(root, make_package(tmp_path, scripts={"slow.sh": "sleep 60", "check.sh": "true"}, stages=stages))
    assert "did not finish within 1s and was killed" in str(caught.value)


def test_logs_keep_the_last_five_runs(root, tmp_path):
    src = demo(tmp_path)
    for level in range(7):
        run(root, src, config={"level": str(level)})
    logs = os.listdir(os.path.join(root, "var/log/nodewright/test/demo/1.0.0"))
    assert len([f for f in logs if f.startswith("config.config.sh.")]) == 5
    assert len([f for f in logs if f.startswith("apply.apply.sh.")]) == 1


def test_config_change_reruns_config_only(root, tmp_path):
    src = demo(tmp_path)
    run(root, src)
    result = run(root, src, config={"level": "2"})
    assert stages_run(result) == [("demo", "config", ["config"])]
    assert result["results"][0]["steps"][0]["stdout_tail"] == "changed: level"
    assert read(root, "/etc/demo/level") == "2" and read(root, "/var/lib/demo-count") == "1\n"


def test_config_interrupt_then_post_interrupt_after_a_reboot(root, tmp_path):
    src = demo(tmp_path, configInterrupts={"lev*": {"type": "reboot"}})
    run(root, src)
    result = run(root, src, config={"level": "2"})
    assert result["interrupt"] == {"type": "reboot", "services": []}
    entry = result["state"]["packages"]["demo"]
    assert (entry["stage"], entry["state"], entry["bootId"]) == ("interrupt", "in_progress", hostroot.boot_id(root))
    assert result["state"]["status"] == "in_progress"
    assert not exists(root, "/var/lib/demo-post"), "post-interrupt waits for the interrupt"

    pending = run(root, src, config={"level": "2"})
    assert stages_run(pending) == [("demo", "interrupt", [])] and not pending["changed"]
    assert pending["interrupt"]["type"] == "reboot"

    with pytest.raises(StepFailed) as caught:
        run_packages([], host_root=root, resource="test", phase="post-interrupt")
    assert "has not rebooted" in str(caught.value)
    assert caught.value.state["packages"]["demo"]["stage"] == "interrupt", "still waiting for the reboot"

    hostroot.boot(root)
    done = run_packages([], host_root=root, resource="test", phase="post-interrupt")
    assert stages_run(done) == [("demo", "post-interrupt", ["post-interrupt"])]
    assert read(root, "/var/lib/demo-post") == "post-interrupt 1.0.0\n"
    assert done["state"]["packages"]["demo"]["stage"] == "post-interrupt"
    assert done["state"]["status"] == "complete" and done["interrupt"]["type"] == "noop"


def test_a_step_can_ask_for_an_interrupt(root, tmp_path):
    scripts = dict(COUNTING, **{"config.sh": COUNTING["config.sh"] +
                                '\necho "service kubelet.service" > "$NODEWRIGHT_INTERRUPT_FILE"'})
    result = run(root, make_package(tmp_path, scripts=scripts, stages=FULL_STAGES))
    assert result["results"][0]["requested_interrupt"] == {"type": "service", "services": ["kubelet.service"]}
    assert result["interrupt"] == {"type": "service", "services": ["kubelet.service"]}
    assert result["state"]["packages"]["demo"]["stage"] == "interrupt"


def test_upgrade_then_downgrade(root, tmp_path):
    v1 = demo(tmp_path, "1.0.0", files={"/etc/demo.d/v1.conf": "one", "/etc/demo.d/common.conf": "c1"})
    v2 = demo(tmp_path, "1.1.0", files={"/etc/demo.d/common.conf": "c2"})
    run(root, v1)
    assert read(root, "/etc/demo.d/v1.conf") == "one"

    up = run(root, v2)
    assert stages_run(up) == [("demo", "upgrade", ["upgrade", "config"])]
    assert read(root, "/var/lib/demo-upgraded") == "1.0.0 -> 1.1.0\n"
    assert read(root, "/etc/demo.d/common.conf") == "c2" and not exists(root, "/etc/demo.d/v1.conf")
    assert os.listdir(os.path.join(root, "var/lib/nodewright/packages/test/demo")) == ["1.1.0"]
    assert up["state"]["packages"]["demo"]["version"] == "1.1.0"

    # Make 1.1.0's own uninstall observable: it is the copy on the host that runs.
    with open(os.path.join(root, "var/lib/nodewright/packages/test/demo/1.1.0/steps/uninstall.sh"), "a") as fh:
        fh.write("\necho 1.1.0 > /var/lib/uninstalled-by\n")
    down = run(root, v1)
    assert stages_run(down) == [("demo", "downgrade", ["uninstall", "apply", "config"])]
    assert [s["stage"] for s in down["results"][0]["steps"]][:2] == ["uninstall", "uninstall-check"]
    assert read(root, "/var/lib/uninstalled-by") == "1.1.0\n"
    assert read(root, "/var/lib/demo-count") == "1\n", "apply of 1.0.0 ran anew after the uninstall"
    assert read(root, "/etc/demo.d/v1.conf") == "one" and read(root, "/etc/demo.d/common.conf") == "c1"
    assert down["state"]["packages"]["demo"]["version"] == "1.0.0"
    assert os.listdir(os.path.join(root, "var/lib/nodewright/packages/test/demo")) == ["1.0.0"]


def test_files_replace_and_restore_host_files(root, tmp_path):
    hostroot.run(root, "echo original > /etc/motd")
    src = demo(tmp_path, files={"/etc/motd": "managed\n", "/etc/demo-extra/x.conf": "x"})
    run(root, src)
    assert read(root, "/etc/motd") == "managed\n"
    result = run(root, src, state="absent")
    assert stages_run(result) == [("demo", "uninstall", ["uninstall"])]
    assert read(root, "/etc/motd") == "original\n"
    assert not exists(root, "/etc/demo-extra/x.conf")
    assert result["state"] == {"packages": {}, "status": "complete"}
    for gone in ("/var/lib/nodewright/packages/test/demo", "/var/lib/nodewright/flags/test/demo", "/etc/demo"):
        assert not exists(root, gone)


def test_uninstall_and_prune_use_the_copy_on_the_host(root, tmp_path):
    run(root, demo(tmp_path))
    kept = run_packages([], host_root=root, resource="test")
    assert stages_run(kept) == [("demo", "none", [])]
    pruned = run_packages([], host_root=root, resource="test", prune=True)
    assert stages_run(pruned) == [("demo", "uninstall", ["uninstall"])]
    assert not exists(root, "/etc/demo") and pruned["state"]["packages"] == {}


def test_uninstall_without_copy_or_source_says_what_to_do(root):
    state = {"packages": {"demo": {"name": "demo", "version": "1.0.0", "stage": "config", "state": "complete"}}}
    with pytest.raises(StepFailed) as caught:
        run_packages([{"name": "demo", "state": "absent"}], host_root=root, resource="test", recorded_state=state)
    assert "its copy is not on the host" in str(caught.value)
    assert "give the package's source" in caught.value.hint


def test_depends_on_order_on_the_node(root, tmp_path):
    base = make_package(tmp_path, name="base", scripts={"a.sh": "echo base >> /var/lib/order", "c.sh": "true"},
                        stages={"apply": ["a.sh"], "apply-check": ["c.sh"]})
    app = make_package(tmp_path, name="app", scripts={"a.sh": "echo app >> /var/lib/order", "c.sh": "true"},
                       stages={"apply": ["a.sh"], "apply-check": ["c.sh"]}, dependsOn={"base": "1.0.0"})
    run_packages([{"src": app}, {"src": base}], host_root=root, resource="test")
    assert read(root, "/var/lib/order") == "base\napp\n"


def test_validation_fails_before_the_node_is_touched(root, tmp_path):
    src = demo(tmp_path)
    with pytest.raises(ValidationError) as caught:
        run(root, src, config={})
    assert "expected config key 'level'" in str(caught.value)
    assert not exists(root, "/var/lib/nodewright")


def test_recorded_state_from_the_annotation_wins_over_the_host(root, tmp_path):
    src = demo(tmp_path)
    first = run(root, src)
    annotation = json.dumps(first["state"])
    runner_state = PackageRunner(root, resource="test").read_state()
    assert runner_state["packages"]["demo"]["version"] == "1.0.0"
    again = run(root, src, recorded_state=annotation)
    assert not again["changed"]
    fresh = run(root, src, recorded_state={}, check_mode=True)
    assert fresh["plan"]["packages"][0]["action"] == "apply"


# --------------------------------------------------------------------------- Skyhook packages

def skyhook_copy(tmp_path, name, version=None):
    dest = str(tmp_path / ("%s-%s" % (name, version or "orig")))
    shutil.copytree(os.path.join(SKYHOOK_FIXTURES, name), dest)
    if version:
        path = os.path.join(dest, "config.json")
        with open(path) as fh:
            data = json.load(fh)
        data["package_version"] = version
        with open(path, "w") as fh:
            json.dump(data, fh, indent=4)
    return dest


def env_file(root, mode):
    return dict(line.split("=", 1) for line in read(root, "/var/lib/skyhook-fixture/env-" + mode).splitlines())


def test_skyhook_shellscript_package_runs_unmodified(root, tmp_path):
    config = {"apply.sh": "echo applied > /etc/skyhook-applied", "config.sh": "exit 3"}
    result = run_packages([{"src": os.path.join(SKYHOOK_FIXTURES, "shellscript"), "config": config,
                            "env": {"GREETING": "hello"}}], host_root=root, resource="gpu-base")
    assert stages_run(result) == [("shellscript", "apply", ["apply", "config"])]
    pkg_dir = "/var/lib/nodewright/packages/gpu-base/shellscript/1.0.0"
    env = env_file(root, "apply")
    assert env["args"] == "apply hello", "env:GREETING was expanded"
    assert env["pwd"] == pkg_dir
    assert env["SKYHOOK_DIR"] == pkg_dir and env["STEP_ROOT"] == pkg_dir + "/skyhook_dir"
    assert env["SKYHOOK_RESOURCE_ID"] == "gpu-base_shellscript_1.0.0"
    assert env["SKYHOOK_ROOT_DIR"] == "/var/lib/nodewright/resources/gpu-base"
    assert exists(root, env["SKYHOOK_LOG_DIR"] + "/shellscript.log")
    assert env_file(root, "config")["EXTRA"] == "from-step"
    assert read(root, "/etc/skyhook-applied") == "applied\n"
    assert read(root, pkg_dir + "/configmaps/apply.sh").startswith("echo applied")
    assert read(root, "/etc/skyhook-shellscript/motd").startswith("Laid onto the host")

    up = run_packages([{"src": skyhook_copy(tmp_path, "shellscript", "1.1.0"), "config": config,
                        "env": {"GREETING": "hello"}}], host_root=root, resource="gpu-base")
    assert stages_run(up) == [("shellscript", "upgrade", ["upgrade", "config"])]
    assert read(root, "/var/lib/skyhook-fixture/upgraded") == "from=1.0.0 to=1.1.0 env_from=1.0.0 env_to=1.1.0\n"

    gone = run_packages([{"name": "shellscript", "state": "absent"}], host_root=root, resource="gpu-base")
    assert stages_run(gone) == [("shellscript", "uninstall", ["uninstall"])]
    assert env_file(root, "uninstall_check")["mode"] == "uninstall_check"
    assert not exists(root, "/etc/skyhook-shellscript/motd")


def test_skyhook_sysctl_package_runs_unmodified(root, tmp_path):
    src = os.path.join(SKYHOOK_FIXTURES, "sysctl")
    conf = {"sysctl.conf": "vm.swappiness = 15\nnet.core.somaxconn = 2048\n"}
    result = run_packages([{"src": src, "config": conf}], host_root=root, resource="tuning")
    assert stages_run(result) == [("tuning", "apply", ["apply", "config"])]
    assert hostroot.run(root, "sysctl -n vm.swappiness").stdout.strip() == "15"
    assert read(root, "/etc/sysctl.d/99-skyhook-tuning.conf") == conf["sysctl.conf"]

    changed = run_packages([{"src": src, "config": {"sysctl.conf": "vm.swappiness = 25\n"}}], host_root=root,
                           resource="tuning")
    assert stages_run(changed) == [("tuning", "config", ["config"])]
    assert hostroot.run(root, "sysctl -n vm.swappiness").stdout.strip() == "25"

    renamed = run_packages([{"src": src, "name": "node-tuning", "config": conf}], host_root=root,
                           resource="other", check_mode=True)
    assert renamed["plan"]["packages"][0]["name"] == "node-tuning"

    run_packages([{"src": src, "state": "absent", "config": conf}], host_root=root, resource="tuning")
    assert not exists(root, "/etc/sysctl.d/99-skyhook-tuning.conf")


def test_skyhook_package_name_must_suit_the_node(root, tmp_path):
    src = skyhook_copy(tmp_path, "sysctl")
    path = os.path.join(src, "config.json")
    with open(path) as fh:
        data = json.load(fh)
    data["package_name"] = "nvidia_tuned"
    with open(path, "w") as fh:
        json.dump(data, fh)
    with pytest.raises(ValidationError) as caught:
        run_packages([{"src": src, "config": {"sysctl.conf": ""}}], host_root=root, check_mode=True)
    assert "invalid package name 'nvidia_tuned'" in str(caught.value)
    result = run_packages([{"src": src, "name": "nvidia-tuned", "config": {"sysctl.conf": ""}}], host_root=root,
                          check_mode=True)
    assert result["plan"]["packages"][0]["name"] == "nvidia-tuned"


def test_one_package_run_at_a_time_per_host(root, tmp_path):

    os.makedirs(os.path.join(root, "var/lib/nodewright"), exist_ok=True)
    with open(os.path.join(root, "var/lib/nodewright/lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StepFailed) as caught:
            run(root, demo(tmp_path))
        assert "another NodeWright package run holds" in str(caught.value)
    assert run(root, demo(tmp_path))["changed"]
