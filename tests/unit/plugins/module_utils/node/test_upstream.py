# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Reading upstream NodeWright's per-node state (node/upstream.py): the annotation as
the operator's controller writes it (Go's json.Marshal of its NodeState: keys
``name|version`` in order, fields in declaration order, empty ones omitted), which
packages it completed, and what cannot be read."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating, upstream


def package_status(name, version, stage, state, restarts=0, image=None):
    """One PackageStatus as the operator marshals it."""
    out = {"name": name, "version": version, "image": image or "ghcr.io/nvidia/skyhook-packages/" + name}
    out["stage"] = stage
    if state:
        out["state"] = state
    if restarts:
        out["restarts"] = restarts
    return out


def node_state(*entries):
    """The nodeState annotation's value, as json.Marshal writes it (sorted keys, compact)."""
    return json.dumps({"%s|%s" % (e["name"], e["version"]): e for e in entries}, separators=(",", ":"))


def node(annotations=None, labels=None, taints=None, unschedulable=False):
    return {"metadata": {"name": "n1", "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []}}


@pytest.mark.parametrize("a,b,same", [
    ("1.2", "1.2.0", True), ("3.3", "3.3.0", True), ("v1.2.0", "1.2", True), ("1.2.3", "1.2.3", True),
    ("1.2", "1.2.1", False), ("1.2", "latest", False), (None, "1.0.0", False), ("01.2", "1.2.0", False),
])
def test_versions_compare_as_upstream_compares_them(a, b, same):
    assert upstream.same_version(a, b) is same


@pytest.mark.parametrize("stage,state,has_interrupt,complete", [
    ("config", "complete", False, True),
    ("config", "complete", True, False),          # its interrupt is still to come
    ("post-interrupt", "complete", True, True),
    ("post-interrupt", "complete", False, True),
    ("interrupt", "complete", True, False),        # post-interrupt still to run
    ("apply", "complete", False, False),
    ("config", "in_progress", False, False),
    ("config", "erroring", False, False),
    ("interrupt", "skipped", True, False),
    ("uninstall", "complete", False, False),
    ("config", "unknown", False, False),
])
def test_a_package_is_complete_by_upstreams_rule(stage, state, has_interrupt, complete):
    assert upstream.is_complete({"stage": stage, "state": state}, has_interrupt) is complete


def test_the_newer_prefix_wins_and_every_mark_is_read():
    n = node(annotations={
        "nodewright.nvidia.com/nodeState_demo": node_state(package_status("tuning", "1.2", "config", "complete")),
        "skyhook.nvidia.com/nodeState_demo": node_state(package_status("tuning", "1.1", "config", "complete")),
        "nodewright.nvidia.com/status_demo": "complete", "nodewright.nvidia.com/version_demo": "v0.20.0",
        "skyhook.nvidia.com/cordon_old": "true", "skyhook.nvidia.com/nodeState_old": "{}",
        "unrelated.example.com/nodeState_x": "{}"},
        labels={"skyhook.nvidia.com/status_third": "erroring"})
    assert upstream.resources_on(n) == ["demo", "old", "third"]
    found = upstream.read(n, "demo")
    assert found["key"] == "nodewright.nvidia.com/nodeState_demo"
    assert (found["status"], found["operator_version"], found["cordon_key"]) == ("complete", "v0.20.0", None)
    assert [(p["name"], p["version"], p["stage"], p["state"]) for p in found["packages"]] == [
        ("tuning", "1.2", "config", "complete")]
    assert upstream.read(n, "old")["cordon_key"] == "skyhook.nvidia.com/cordon_old"
    assert upstream.read(n, "third")["status"] == "erroring" and upstream.read(n, "third")["key"] is None


@pytest.mark.parametrize("raw,error", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object of packages, not list"),
    ('"complete"', "must hold a JSON object of packages, not str"),
])
def test_an_annotation_that_cannot_be_read_is_an_error_not_a_crash(raw, error):
    n = node(annotations={"skyhook.nvidia.com/nodeState_demo": raw})
    decision = upstream.decide(n, "demo", {"p": {"version": "1.0.0", "has_interrupt": False}}, {})
    assert error in decision["error"] and "skyhook.nvidia.com/nodeState_demo" in decision["error"]
    assert decision["adopt"] == [] and decision["redo"] == []


def test_entries_that_cannot_be_read_are_reported_and_the_rest_is_adopted():
    raw = json.dumps({"good|1.0.0": package_status("good", "1.0.0", "config", "complete"),
                      "bad|x": {"name": "bad", "version": "latest", "stage": "config", "state": "complete"},
                      "list|1.0": ["not", "an", "object"], "|1.0": {"version": "1.0", "state": "complete"}})
    decision = upstream.decide(node(annotations={"nodewright.nvidia.com/nodeState_r": raw}), "r",
                               {"good": {"version": "1.0.0", "has_interrupt": False}}, {})
    assert [e["name"] for e in decision["adopt"]] == ["good"]
    assert len(decision["problems"]) == 3
    assert any("'latest' is not a version" in p for p in decision["problems"])
    assert any("is not an object" in p for p in decision["problems"])
    assert any("has no package name" in p for p in decision["problems"])


def test_what_is_adopted_redone_skipped_or_already_recorded():
    annotation = node_state(
        package_status("done", "1.2", "config", "complete"),
        package_status("rebooted", "2.0.0", "post-interrupt", "complete"),
        package_status("waits", "1.0.0", "config", "complete"),
        package_status("failing", "1.0.0", "apply", "erroring", restarts=3),
        package_status("running", "1.0.0", "upgrade", "in_progress"),
        package_status("older", "1.0.0", "config", "complete"),
        package_status("gone", "1.0.0", "config", "complete"),
        package_status("mine", "1.0.0", "config", "complete"))
    desired = {"done": {"version": "1.2.0", "has_interrupt": False},
               "rebooted": {"version": "2.0.0", "has_interrupt": True},
               "waits": {"version": "1.0.0", "has_interrupt": True},
               "failing": {"version": "1.0.0", "has_interrupt": False},
               "running": {"version": "1.0.0", "has_interrupt": False},
               "older": {"version": "1.1.0", "has_interrupt": False},
               "mine": {"version": "1.0.0", "has_interrupt": False}}
    decision = upstream.decide(node(annotations={"nodewright.nvidia.com/nodeState_r": annotation}), "r", desired,
                               {"mine": {"name": "mine", "version": "1.0.0", "state": "complete"}})
    # Recorded at the resource's text of the version ("1.2" is 1.2.0); an older complete one as it is.
    assert [(e["name"], e["version"], e["upstream_version"]) for e in decision["adopt"]] == [
        ("done", "1.2.0", "1.2"), ("older", "1.0.0", "1.0.0"), ("rebooted", "2.0.0", "2.0.0")]
    assert [e["name"] for e in decision["already"]] == ["mine"]
    redo = {r["name"]: r["why"] for r in decision["redo"]}
    assert redo == {
        "failing": "upstream left it erroring at stage apply; NodeWright applies it from the start",
        "running": "upstream left it in_progress at stage upgrade; NodeWright applies it from the start",
        "waits": "upstream applied it but its interrupt had not happened; NodeWright applies it from the start"}
    assert decision["skipped"] == [{"name": "gone", "version": "1.0.0",
                                    "why": "not a package of NodeWright resource r"}]


def test_the_wanted_version_wins_over_another_complete_one():
    annotation = node_state(package_status("p", "1.0.0", "config", "complete"),
                            package_status("p", "1.1", "config", "complete"))
    decision = upstream.decide(node(annotations={"nodewright.nvidia.com/nodeState_r": annotation}), "r",
                               {"p": {"version": "1.1.0", "has_interrupt": False}}, {})
    assert [(e["name"], e["version"]) for e in decision["adopt"]] == [("p", "1.1.0")]
    assert decision["skipped"] == [{"name": "p", "version": "1.0.0", "why": "superseded by p 1.1"}]
    # A resource that writes the shorthand keeps it; upstream's full form is the same version.
    decision = upstream.decide(node(annotations={"nodewright.nvidia.com/nodeState_r": node_state(
        package_status("p", "1.1.0", "config", "complete"))}), "r", {"p": {"version": "1.1", "has_interrupt": False}}, {})
    assert [(e["name"], e["version"]) for e in decision["adopt"]] == [("p", "1.1")]


def test_no_resource_of_that_name_adopts_nothing():
    annotation = node_state(package_status("p", "1.0.0", "config", "complete"))
    decision = upstream.decide(node(annotations={"nodewright.nvidia.com/nodeState_r": annotation}), "r", None, {})
    assert decision["adopt"] == [] and decision["error"] is None


@pytest.mark.parametrize("key", ["nodewright.nvidia.com", "skyhook.nvidia.com"])
def test_upstreams_runtime_required_taint_gates_the_node_and_comes_off_with_ours(key):
    taint = {"key": key, "value": "runtime-required", "effect": "NoSchedule"}
    other = {"key": "example.com/other", "value": "x", "effect": "NoSchedule"}
    n = node(taints=[taint, other])
    n["metadata"]["resourceVersion"] = "7"
    assert gating.has_taint(n) and gating.present_taints(n) == [key]
    assert upstream.runtime_taints(n) == ["%s=runtime-required:NoSchedule" % key]
    # Tainted already: no second taint is added.
    assert gating.taint_patch(n, True) is None
    assert gating.taint_patch(n, False) == {"spec": {"taints": [other]}, "metadata": {"resourceVersion": "7"}}
    resource = {"metadata": {"name": "r"}, "spec": {"runtimeRequired": True, "packages": {}}}
    decision = gating.decide(n, [resource])
    assert decision["action"] == gating.OPEN and key in decision["message"]


def test_every_recognised_taint_comes_off_together():
    n = node(taints=[{"key": "nodewright.io/runtime-required", "value": "true", "effect": "NoSchedule"},
                     {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}])
    assert gating.present_taints(n) == ["nodewright.io/runtime-required", "skyhook.nvidia.com"]
    assert gating.taint_patch(n, False)["spec"]["taints"] == []


def test_the_runner_takes_adopted_entries_and_the_drift_check_skips_them(tmp_path):
    from ansible_collections.nodewright.fleet.plugins.module_utils.package import runner
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))))
    src = os.path.join(repo, "packages", "agentless")
    adopted = {"pkg-one": {"name": "pkg-one", "version": "1.0.0", "stage": "config", "state": "complete",
                           "adoptedFrom": "nodewright.nvidia.com/nodeState_r"}}
    desired = [{"name": "pkg-one", "src": src, "version": "1.0.0"}, {"name": "pkg-two", "src": src, "version": "1.0.0"}]
    # Planned in check mode: the adopted entry stands for the host's record, so only pkg-two would run.
    done = runner.run_packages(desired, host_root=str(tmp_path), resource="r", check_mode=True, adopted=adopted)
    assert [(p["name"], p["action"]) for p in done["plan"]["packages"]] == [("pkg-one", "none"), ("pkg-two", "apply")]
    found = runner.check_packages(host_root=str(tmp_path), resource="r", recorded_state={"packages": adopted})
    assert found["drifted"] == [] and found["skipped"][0]["name"] == "pkg-one"
    assert "adopted from upstream NodeWright" in found["skipped"][0]["reason"]
