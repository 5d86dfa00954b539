# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Recovery of one package's record (``nodewright node update-state``, ``reset
--package``): the state changes as tables, on a host root the next run goes on from,
and the guards that need no cluster (a live reservation, the confirmation)."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import sys

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import Holder
from ansible_collections.nodewright.fleet.plugins.module_utils.package import triage as host_triage
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import run_packages

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHELLSCRIPT = os.path.join(REPO, "packages", "shellscript")
sys.path.insert(0, os.path.join(REPO, "cli"))
from nodewright_cli import recovery, triage  # noqa: E402

STATE = {"status": "erroring", "packages": {
    "setup": {"name": "setup", "version": "1.0.0", "stage": "apply", "state": "erroring", "rerun": "apply"},
    "kdump": {"name": "kdump", "version": "2.0.0", "stage": "interrupt", "state": "in_progress",
              "interrupt": {"type": "reboot", "services": []}},
    "tuned": {"name": "tuned", "version": "1.1.0", "stage": "upgrade", "state": "erroring", "fromVersion": "1.0.0"}}}


@pytest.mark.parametrize("name, stage, state, version, expected", [
    ("setup", None, "complete", None, ("apply", "complete", "erroring")),
    ("setup", "config", "complete", "1.0.0", ("config", "complete", "erroring")),
    ("setup", "apply", "in_progress", None, ("apply", "in_progress", "erroring")),
    ("tuned", None, "in_progress", None, ("upgrade", "in_progress", "erroring")),
    ("kdump", "post-interrupt", "complete", None, ("post-interrupt", "complete", "erroring")),
])
def test_update_state_sets_stage_and_state_and_the_status_follows(name, stage, state, version, expected):
    after = host_triage.set_package_state(STATE, name, stage, state, version)
    entry = after["packages"][name]
    assert (entry["stage"], entry["state"], after["status"]) == expected
    assert "rerun" not in entry, "a rerun asked before is dropped"
    assert {k: v for k, v in after["packages"].items() if k != name} == {
        k: dict(v) for k, v in STATE["packages"].items() if k != name}, "the other packages are untouched"


@pytest.mark.parametrize("name, stage, state, version, words", [
    ("nope", None, "complete", None, "not recorded on the node"),
    ("setup", None, "complete", "9.9.9", "recorded at version 1.0.0 on the node, not 9.9.9"),
    ("setup", None, "done", None, "state 'done' cannot be set"),
    ("setup", "interrupt", "complete", None, "cannot be set by hand"),
    ("kdump", None, "complete", None, "at stage 'interrupt', which cannot be set by hand"),
    ("setup", "upgrade", "in_progress", None, "no unfinished upgrade"),
    ("../x", None, "complete", None, "is not a package name"),
])
def test_update_state_refuses(name, stage, state, version, words):
    with pytest.raises(NodeWrightError) as err:
        host_triage.set_package_state(STATE, name, stage, state, version)
    assert words in str(err.value)


def test_reset_forgets_one_package_and_refuses_another_version():
    after = host_triage.forget_package(STATE, "setup")
    assert set(after["packages"]) == {"kdump", "tuned"} and after["status"] == "erroring"
    with pytest.raises(NodeWrightError, match="not 1.2.0"):
        host_triage.forget_package(STATE, "setup", "1.2.0")
    with pytest.raises(NodeWrightError, match="not recorded"):
        host_triage.forget_package(STATE, "other")


def apply(root):
    return run_packages([{"src": SHELLSCRIPT, "name": "shellscript", "config": {
        "apply.sh": "echo run >> /var/lib/runs", "apply_check.sh": "test -s /var/lib/runs"}}],
        host_root=root, resource="r")


def test_on_the_host_a_reset_package_is_applied_again_from_the_start_and_a_set_state_is_gone_on_from(root):
    apply(root)
    runs = os.path.join(root, "var", "lib", "runs")
    before, after = host_triage.update_state_on_host(root, "r", "shellscript", "apply", "erroring")
    assert before["packages"]["shellscript"]["state"] == "complete" and after["status"] == "erroring"
    again = apply(root)
    assert [r["action"] for r in again["results"]] == ["resume"], "the next run resumes at the stage set"
    assert open(runs).read() == "run\n", "the finished apply step stays finished"
    before, after = host_triage.reset_on_host(root, "r", "shellscript")
    assert "shellscript" in before["packages"] and after["packages"] == {}
    again = apply(root)
    assert [r["action"] for r in again["results"]] == ["apply"]
    assert open(runs).read() == "run\nrun\n", "every step ran again"


def test_a_live_reservation_holds_the_node_and_an_expired_one_does_not():
    now = datetime.datetime(2026, 12, 4, 10, 0, tzinfo=datetime.timezone.utc)
    live = Holder(id="h1", renewed=now - datetime.timedelta(seconds=10), ttl=90, run="laptop pid 7",
                  nodes={"n1": "r"})
    gone = Holder(id="h2", renewed=now - datetime.timedelta(seconds=100), ttl=90, nodes={"n2": "r"})
    holders = {"h1": live, "h2": gone}
    assert "run laptop pid 7 (holder h1) reserved it for NodeWright r until 2026-12-04T10:01:20Z" in \
        recovery.holder_of("n1", holders, now)
    assert recovery.holder_of("n2", holders, now) is None
    assert recovery.holder_of("n3", holders, now) is None


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("yes, stdin, refused", [
    (True, io.StringIO(""), None),
    (False, io.StringIO("y\n"), "give --yes"),
    (False, Terminal("y\n"), None),
    (False, Terminal("yes\n"), None),
    (False, Terminal("n\n"), "aborted: nothing was changed"),
    (False, Terminal(""), "aborted: nothing was changed"),
])
def test_a_change_is_made_only_when_confirmed(yes, stdin, refused):
    args = argparse.Namespace(yes=yes, json=False)
    out = io.StringIO()
    if refused:
        with pytest.raises(NodeWrightError) as err:
            recovery.confirm(args, "Go?", stdin=stdin, out=out)
        assert refused in str(err.value)
    else:
        recovery.confirm(args, "Go?", stdin=stdin, out=out)
    assert out.getvalue() == ("Go? [y/N]: " if isinstance(stdin, Terminal) and not yes else "")


def test_the_recovery_notes_keep_the_last_ten():
    state = {"recovery": [{"n": i} for i in range(10)]}
    notes = recovery.notes_with(state, recovery.note("reset", "p", "1.0.0", {"stage": "apply", "state": "complete"},
                                                     None, "why", at="t", by="me@here"))
    assert len(notes) == 10 and notes[0] == {"n": 1}
    assert notes[-1] == {"at": "t", "by": "me@here", "action": "reset", "package": "p", "version": "1.0.0",
                         "from": "apply/complete", "to": "forgotten", "reason": "why"}


def test_node_status_shows_the_changes_made_by_hand():
    note = recovery.note("update-state", "setup", "1.0.0", {"stage": "apply", "state": "erroring"},
                         {"stage": "config", "state": "complete"}, "ticket 42", at="2026-12-04T10:00:00Z",
                         by="ops@bastion")
    state = dict(recovery.host_triage.set_package_state(STATE, "setup", "config", "complete"), recovery=[note])
    node = {"metadata": {"name": "n1", "labels": {"nodewright.io/status-r": "erroring"},
                         "annotations": {"nodewright.io/state-r": json.dumps(state)}}, "spec": {}, "status": {}}
    detail = triage.node_detail(node)
    assert detail["resources"]["r"]["recovery"] == [note]
    assert ("    changed by hand 2026-12-04T10:00:00Z by ops@bastion: update-state setup apply/erroring -> "
            "config/complete (ticket 42)") in triage.render_detail(detail).splitlines()
