# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Recovery from the command line on the simulator: ``nodewright node update-state``
and ``nodewright reset NODE --package``, run as a person runs them, against nodes
whose state real rollouts wrote. Each guard refuses with its reason and changes
nothing (the node's annotation and labels, the host's record, no Event); a change
that goes through is recorded (Event, note in the node state) and the next rollout
goes on from it: a package set complete is not applied again, a reset package is
applied again from the start and the other package is left alone."""

from __future__ import annotations

import json
import pathlib

import pytest
from test_operating import condition, node_events, shellscript
from test_operating import crds, ops  # noqa: F401  (the fixtures: a test's resources, nodes and commands)

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import admission
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import PackageRunner

pytestmark = pytest.mark.integration

SYSCTL = {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}


def two_packages(**scripts):
    return dict(shellscript(**scripts), **SYSCTL)


def marks(nw, node, name):
    """What NodeWright keeps of resource ``name`` on the node and its host."""
    meta = nw.node(node)["metadata"]
    return {"annotation": meta["annotations"].get(markers.state_annotation(name)),
            "label": meta["labels"].get(markers.status_label(name)),
            "host": nw.host_file(node, "/var/lib/nodewright/state/%s.json" % name)}


def recorded(nw, node, name):
    return json.loads(nw.node(node)["metadata"]["annotations"][markers.state_annotation(name)])


def history(nw, node, name, package):
    text = nw.host_file(node, "/var/lib/nodewright/history/%s/%s.json" % (name, package))
    return json.loads(text)["history"] if text else []


def triage_args(nw):
    return ("--inventory", nw.inventory, "--workdir", nw.tmp / "triage")


def refused(result, *words):
    assert result.returncode == 1, result.stdout + result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_update_state_marks_a_package_fixed_by_hand_and_refuses_what_it_must(sim, ops):  # noqa: F811
    (node,) = ops.add_nodes("b300")
    name = ops.resource("b300", two_packages(apply="echo run >> /var/lib/cli-state-runs\n",
                                             apply_check="test -e /etc/cli-state-ok\n"))
    assert ops.once().returncode == 2, "the apply-check fails: the node is erroring"
    before = marks(ops, node, name)
    assert before["label"] == "erroring"
    assert recorded(ops, node, name)["packages"]["shellscript"]["state"] == "erroring"
    assert "sysctl" not in recorded(ops, node, name)["packages"], "the run stopped at the failing package"
    assert condition(ops.node(node), markers.CONDITION_ERRORING)["status"] == "True"

    def update(*extra):
        return ops.nodewright("node", "update-state", node, "--package", "shellscript", *(extra + triage_args(ops)))

    # Each guard refuses and leaves everything as it was.
    refused(update("--state", "complete", "--resource", name, "--package", "nope"),
            "package nope is not in NodeWright %s" % name, "its packages: shellscript, sysctl")
    refused(update("--state", "complete", "--version", "9.9.9", "--yes"),
            "recorded at version 1.0.0 on the node, not 9.9.9")
    refused(update("--state", "complete", "--stage", "upgrade", "--yes"), "no unfinished upgrade")
    bad_state = update("--state", "done", "--yes")
    assert bad_state.returncode == 2 and "invalid choice: 'done'" in bad_state.stderr, bad_state.stderr
    unconfirmed = update("--state", "complete", "--stage", "config")
    refused(unconfirmed, "not confirmed, so nothing was changed", "give --yes")
    assert "stage apply -> config" in unconfirmed.stdout and "state erroring -> complete" in unconfirmed.stdout
    with PackageRunner(sim.host_root(node), resource=name).locked():
        # A package run holds the host (its run lock): the host's record is not touched.
        refused(update("--state", "complete", "--stage", "config", "--yes"),
                "another NodeWright package run holds")
    dry = update("--state", "complete", "--stage", "config", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "status of the node for %s: erroring -> complete" % name in dry.stdout
    assert "dry run: nothing was changed" in dry.stdout
    assert marks(ops, node, name) == before
    assert not node_events(sim, node, markers.EVENT_STATE_UPDATED)

    # The operator fixed the node by hand and says so.
    pathlib.Path(sim.host_root(node), "etc", "cli-state-ok").write_text("")
    done = update("--state", "complete", "--stage", "config", "--yes", "--reason", "fixed by hand, ticket 42")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "package shellscript of %s set to config/complete (was apply/erroring)" % name in done.stdout
    after = marks(ops, node, name)
    assert after["label"] == "complete"
    state = recorded(ops, node, name)
    assert {k: state["packages"]["shellscript"][k] for k in ("stage", "state")} == {"stage": "config",
                                                                                    "state": "complete"}
    host = json.loads(after["host"])
    assert {k: host["packages"]["shellscript"][k] for k in ("stage", "state")} == {"stage": "config",
                                                                                   "state": "complete"}
    (note,) = state["recovery"]
    assert (note["action"], note["package"], note["from"], note["to"], note["reason"]) == (
        "update-state", "shellscript", "apply/erroring", "config/complete", "fixed by hand, ticket 42")
    assert condition(ops.node(node), markers.CONDITION_ERRORING)["status"] == "False"
    (event,) = node_events(sim, node, markers.EVENT_STATE_UPDATED)
    assert "from apply/erroring to config/complete" in event.message and "ticket 42" in event.message
    shown = ops.nodewright("node", "status", node)
    assert "update-state shellscript apply/erroring -> config/complete (fixed by hand, ticket 42)" in shown.stdout
    again = update("--state", "complete", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False, again.stdout + again.stderr

    # The next rollout goes on from there: the apply is not run again, sysctl is applied.
    assert ops.once().returncode == 0
    assert ops.host_file(node, "/var/lib/cli-state-runs") == "run\n", "the apply did not run again"
    state = recorded(ops, node, name)
    assert {p: e["state"] for p, e in state["packages"].items()} == {"shellscript": "complete",
                                                                      "sysctl": "complete"}
    assert state["recovery"][0]["reason"] == "fixed by hand, ticket 42", "the note outlives the run"
    assert marks(ops, node, name)["label"] == "complete"


def test_reset_package_redoes_that_package_only_and_refuses_while_a_rollout_holds_the_node(sim, ops):  # noqa: F811
    (node,) = ops.add_nodes("b300")
    name = ops.resource("b300", two_packages(apply="echo run >> /var/lib/cli-reset-runs\n",
                                             apply_check="test -s /var/lib/cli-reset-runs\n"))
    assert ops.once().returncode == 0
    before = marks(ops, node, name)
    assert before["label"] == "complete"
    sysctl_before = recorded(ops, node, name)["packages"]["sysctl"]
    sysctl_history = history(ops, node, name, "sysctl")
    assert sysctl_history and ops.host_file(node, "/var/lib/cli-reset-runs") == "run\n"

    def reset(*extra):
        return ops.nodewright("reset", node, "--package", "shellscript", *(extra + triage_args(ops)))

    refused(reset("--resource", name, "--package", "nope", "--yes"), "package nope is not in NodeWright %s" % name)
    refused(reset("--version", "2.0.0", "--yes"), "recorded at version 1.0.0 on the node, not 2.0.0")
    refused(reset(), "not confirmed, so nothing was changed")
    refused(ops.nodewright("reset", node, "--json"), "--json goes with --package only")
    record = admission.ReservationRecord(sim.api, ttl=300, run="another rollout")

    def hold(holders, now):
        mine = record.entry(holders, now)
        mine.nodes[node] = name
        holders[record.holder_id] = mine
        return holders
    record.update(hold)
    try:
        refused(reset("--yes"), "node %s is held by a running rollout" % node, "run another rollout",
                "wait for the rollout to release the node")
        refused(ops.nodewright("node", "update-state", node, "--package", "sysctl", "--state", "erroring", "--yes",
                               *triage_args(ops)), "held by a running rollout")
    finally:
        record.release()
    dry = reset("--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "forget package shellscript 1.0.0 (now config/complete)" in dry.stdout
    assert "kept as they are: sysctl config/complete" in dry.stdout
    assert marks(ops, node, name) == before
    assert not node_events(sim, node, markers.EVENT_PACKAGE_RESET)

    done = reset("--yes", "--reason", "redo after a bad image", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert (out["changed"], out["before"], out["after"], out["status"]) == (
        True, {"stage": "config", "state": "complete"}, None, "in_progress")
    state = recorded(ops, node, name)
    assert set(state["packages"]) == {"sysctl"} and state["packages"]["sysctl"] == sysctl_before
    assert state["recovery"][-1]["to"] == "forgotten"
    assert set(json.loads(ops.host_file(node, "/var/lib/nodewright/state/%s.json" % name))["packages"]) == {"sysctl"}
    assert marks(ops, node, name)["label"] == "in_progress"
    (event,) = node_events(sim, node, markers.EVENT_PACKAGE_RESET)
    assert "redo after a bad image" in event.message
    nothing = reset("--yes", "--resource", name)
    assert nothing.returncode == 0 and "nothing to reset" in nothing.stdout, nothing.stdout + nothing.stderr

    # The next rollout applies shellscript again, every step, and leaves sysctl alone.
    assert ops.once().returncode == 0
    assert ops.host_file(node, "/var/lib/cli-reset-runs") == "run\nrun\n"
    assert history(ops, node, name, "sysctl") == sysctl_history, "sysctl did not run"
    state = recorded(ops, node, name)
    assert state["packages"]["sysctl"] == sysctl_before
    assert state["packages"]["shellscript"]["state"] == "complete"
    assert marks(ops, node, name)["label"] == "complete"
