# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""No lost config: whatever the recorded stage and state of a package, a change of
its config is applied (its config stage and the interrupts of its changed keys)
before the package can be complete, and the digests the node records are those of
the config whose config stage ran. And no reboot twice: a pending reboot whose boot
id changed has happened."""

from __future__ import annotations

import itertools
import json
import os
import shutil

import pytest
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import config_hashes
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import plan
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import StepFailed, run_packages

pytestmark = pytest.mark.unit

OLD = {"a": "1", "kernel.x": "0"}
NEW = {"a": "2", "kernel.x": "0"}
REBOOT = {"type": "reboot", "services": []}
SVC = {"type": "service", "services": ["x.service"]}
STAGES = ("apply", "config", "upgrade", "uninstall", "interrupt", "post-interrupt", "uninstall-interrupt")
STATES = ("complete", "in_progress", "erroring")
CHANGES = ("newer version", "older version", "config change", "none")


def desired(change):
    version = {"newer version": "1.1.0", "older version": "0.9.0"}.get(change, "1.0.0")
    return {"name": "pkg", "version": version, "config": NEW if change == "config change" else OLD,
            "interrupt": REBOOT, "configInterrupts": {"a": SVC}, "dependsOn": {}, "state": "present"}


def recorded(stage, state):
    entry = {"name": "pkg", "version": "1.0.0", "stage": stage, "state": state, "configHashes": config_hashes(OLD)}
    if stage in ("interrupt", "uninstall-interrupt"):
        entry.update(interrupt=REBOOT, bootId="boot-1")
    return entry


CASES = list(itertools.product(STAGES, STATES, CHANGES))


@pytest.mark.parametrize("stage,state,change", CASES, ids=["%s-%s-%s" % c for c in CASES])
def test_every_recorded_stage_and_state_applies_a_config_change(stage, state, change):
    for boot in ("boot-1", "boot-2"):  # the pending reboot not yet happened / happened
        result = plan([desired(change)], {"packages": {"pkg": recorded(stage, state)}}, boot_id=boot)
        (entry,) = result["packages"]
        if change != "none":
            assert "config" in entry["stages"], (boot, entry)
            if change == "config change":
                assert entry["changed_keys"] == ["a"] or entry["action"] in ("apply", "reinstall", "downgrade",
                                                                            "upgrade"), entry
                # The key's interrupt is asked for unless a stronger one is (the reboot).
                assert entry["interrupt"]["type"] in ("service", "reboot"), entry
        else:
            assert entry["action"] != "config", entry
        if state == "complete" and change == "none" and stage not in ("interrupt", "uninstall-interrupt"):
            assert entry["action"] == "none", entry
        json.dumps(result)


@pytest.mark.parametrize("state", ["erroring", "in_progress"])
def test_config_change_at_a_failed_post_interrupt_runs_config_then_post_interrupt(state):
    want = dict(desired("config change"), configInterrupts={})
    (entry,) = plan([want], {"packages": {"pkg": recorded("post-interrupt", state)}})["packages"]
    assert (entry["action"], entry["stages"], entry["changed_keys"]) == ("config", ["config", "post-interrupt"], ["a"])
    assert entry["interrupt"]["type"] == "noop"
    (entry,) = plan([desired("config change")], {"packages": {"pkg": recorded("post-interrupt", state)}})["packages"]
    assert (entry["stages"], entry["interrupt"]) == (["config"], SVC), "post-interrupt follows the key's interrupt"


def test_a_reboot_that_happened_is_not_asked_for_again():
    pending = recorded("interrupt", "in_progress")
    (waiting,) = plan([desired("none")], {"packages": {"pkg": pending}}, boot_id="boot-1")["packages"]
    assert (waiting["action"], waiting["interrupt"]) == ("interrupt", REBOOT)
    result = plan([desired("none")], {"packages": {"pkg": pending}}, boot_id="boot-2")
    (done,) = result["packages"]
    assert (done["action"], done["stages"], done["interrupt"]["type"]) == ("post-interrupt", ["post-interrupt"], "noop")
    assert result["interrupt"]["type"] == "noop", "the node is not rebooted a second time"
    unknown = plan([desired("none")], {"packages": {"pkg": pending}}, boot_id=None)["packages"][0]
    assert unknown["action"] == "interrupt", "without the boot id nothing is assumed"


# --------------------------------------------------------------------------- on a host root

def make_package(where, version="1.0.0"):
    root = os.path.join(str(where), "pkg-%s" % version)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "steps"))
    scripts = {
        "apply.sh": "true",
        "config.sh": 'echo "$(cat "$NODEWRIGHT_CONFIG_DIR/a")" >> /var/lib/pkg-configs; [ ! -e /etc/pkg-config-fails ]',
        "config-check.sh": "true",
        "post.sh": "[ ! -e /etc/pkg-post-fails ]; echo post >> /var/lib/pkg-posts",
        "check.sh": "true",
    }
    for name, body in scripts.items():
        with open(os.path.join(root, "steps", name), "w") as fh:
            fh.write("#!/bin/sh\nset -e\n%s\n" % body)
        os.chmod(os.path.join(root, "steps", name), 0o755)
    manifest = {"name": "pkg", "version": version, "interrupt": {"type": "reboot"},
                "stages": {"apply": [{"path": "apply.sh"}], "apply-check": [{"path": "check.sh"}],
                           "config": [{"path": "config.sh", "idempotent": True}],
                           "config-check": [{"path": "config-check.sh"}],
                           "post-interrupt": [{"path": "post.sh", "idempotent": True}],
                           "post-interrupt-check": [{"path": "check.sh"}]}}
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump(manifest, fh)
    return root


def run(root, src, config, **kw):
    return run_packages([{"src": src, "config": config}], host_root=root, resource="r", **kw)


def post_interrupt(root):
    return run_packages([], host_root=root, resource="r", phase="post-interrupt")


def lines(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read().split()


def test_config_changed_while_post_interrupt_fails_is_applied_before_complete(root, tmp_path):
    src = make_package(tmp_path)
    run(root, src, {"a": "1"})
    hostroot.boot(root)
    hostroot.run(root, "touch /etc/pkg-post-fails")
    with pytest.raises(StepFailed):
        post_interrupt(root)
    hostroot.run(root, "rm /etc/pkg-post-fails")

    result = run(root, src, {"a": "2"})
    assert [(r["action"], r["stages"]) for r in result["results"]] == [("config", ["config", "post-interrupt"])]
    assert lines(root, "/var/lib/pkg-configs") == ["1", "2"], "the new config ran"
    entry = result["state"]["packages"]["pkg"]
    assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete")
    assert entry["configHashes"] == config_hashes({"a": "2"})


def test_digests_are_recorded_only_for_config_that_ran(root, tmp_path):
    src = make_package(tmp_path)
    run(root, src, {"a": "1"})
    hostroot.boot(root)
    post_interrupt(root)
    hostroot.run(root, "touch /etc/pkg-config-fails")
    with pytest.raises(StepFailed) as caught:
        run(root, src, {"a": "2"})
    entry = caught.value.state["packages"]["pkg"]
    assert (entry["stage"], entry["state"]) == ("config", "erroring")
    assert entry["configHashes"] == config_hashes({"a": "1"}), "the failed config is not recorded as applied"
    hostroot.run(root, "rm /etc/pkg-config-fails")
    again = run(root, src, {"a": "2"})
    assert again["results"][0]["stages"] == ["config"]
    assert again["state"]["packages"]["pkg"]["configHashes"] == config_hashes({"a": "2"})


def test_a_crash_after_the_reboot_resumes_without_rebooting_again(root, tmp_path):
    src = make_package(tmp_path)
    first = run(root, src, {"a": "1"})
    assert first["interrupt"] == REBOOT
    hostroot.boot(root)  # the safe sequence rebooted the node, then the run was lost
    resumed = run(root, src, {"a": "1"})
    assert resumed["interrupt"]["type"] == "noop", "no second reboot"
    assert [(r["action"], r["stages"]) for r in resumed["results"]] == [("post-interrupt", ["post-interrupt"])]
    assert lines(root, "/var/lib/pkg-posts") == ["post"]
    assert resumed["state"]["status"] == "complete"
