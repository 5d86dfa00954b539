# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The lifecycle planner, table by table: actions, interrupts, ordering, state."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import config_hashes
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    desired_from_spec,
    merge_interrupts,
    node_status,
    normalize_state,
    order_by_dependencies,
    pending_interrupt,
    plan,
    plan_package,
)

pytestmark = pytest.mark.unit

REBOOT = {"type": "reboot", "services": []}
NOOP = {"type": "noop", "services": []}
ALL = {"type": "restartAllServices", "services": []}


def svc(*names):
    return {"type": "service", "services": sorted(names)}


def desired(version="1.0.0", config=None, interrupt=None, config_interrupts=None, depends_on=None, state="present",
            name="pkg"):
    return {"name": name, "version": version, "config": {"a": "1"} if config is None else config,
            "interrupt": interrupt,
            "configInterrupts": config_interrupts or {"kernel.*": REBOOT, "svc-*": svc("x.service")},
            "dependsOn": depends_on or {}, "state": state}


def recorded(version="1.0.0", stage="config", state="complete", config=None, **extra):
    entry = {"name": "pkg", "version": version, "stage": stage, "state": state,
             "configHashes": config_hashes(config if config is not None else {"a": "1"})}
    entry.update(extra)
    return entry


# (id, desired, recorded entry, action, stages, interrupt type/services, from_version, changed keys)
ACTIONS = [
    ("fresh node", desired(interrupt=svc("a.service")), None,
     "apply", ["apply", "config"], svc("a.service"), None, []),
    ("nothing changed", desired(), recorded(), "none", [], NOOP, None, []),
    ("newer version", desired("1.1.0", interrupt=REBOOT), recorded(),
     "upgrade", ["upgrade", "config"], REBOOT, "1.0.0", []),
    ("newer version and changed key", desired("1.1.0", config={"a": "1", "kernel.x": "1"}), recorded(),
     "upgrade", ["upgrade", "config"], REBOOT, "1.0.0", ["kernel.x"]),
    ("older version", desired("0.9.0"), recorded(),
     "downgrade", ["uninstall", "apply", "config"], NOOP, "1.0.0", []),
    ("pre-release is older", desired("1.0.0-rc.1"), recorded(),
     "downgrade", ["uninstall", "apply", "config"], NOOP, "1.0.0", []),
    ("config key without interrupt", desired(config={"a": "2"}, interrupt=REBOOT), recorded(),
     "config", ["config"], NOOP, None, ["a"]),
    ("config key asking reboot", desired(config={"a": "1", "kernel.panic": "1"}), recorded(),
     "config", ["config"], REBOOT, None, ["kernel.panic"]),
    ("config key removed", desired(config={}), recorded(config={"a": "1", "svc-b": "x"}),
     "config", ["config"], svc("x.service"), None, ["a", "svc-b"]),
    ("absent and installed", desired(state="absent"), recorded(),
     "uninstall", ["uninstall"], NOOP, "1.0.0", []),
    ("absent and not installed", desired(state="absent"), None, "none", [], NOOP, None, []),
    ("apply failed", desired(interrupt=REBOOT), recorded(stage="apply", state="erroring"),
     "resume", ["apply", "config"], REBOOT, None, []),
    ("config failed", desired(config={"a": "2"}), recorded(stage="config", state="erroring", interrupt=ALL),
     "resume", ["config"], ALL, None, ["a"]),
    ("upgrade failed", desired("1.1.0"), recorded("1.1.0", stage="upgrade", state="erroring", fromVersion="1.0.0"),
     "resume", ["upgrade", "config"], NOOP, "1.0.0", []),
    ("post-interrupt failed", desired(interrupt=REBOOT), recorded(stage="post-interrupt", state="erroring"),
     "resume", ["post-interrupt"], NOOP, None, []),
    ("interrupt pending", desired(), recorded(stage="interrupt", state="in_progress", interrupt=REBOOT),
     "interrupt", [], REBOOT, None, []),
    ("interrupt pending and config changed", desired(config={"a": "1", "svc-1": "y"}),
     recorded(stage="interrupt", state="in_progress", interrupt=REBOOT),
     "config", ["config"], REBOOT, None, ["svc-1"]),
    ("interrupt pending and upgraded", desired("2.0.0", interrupt=svc("b.service")),
     recorded(stage="interrupt", state="in_progress", interrupt=svc("a.service")),
     "upgrade", ["upgrade", "config"], svc("a.service", "b.service"), "1.0.0", []),
    ("apply of another version failed", desired("1.1.0"), recorded(stage="apply", state="erroring"),
     "reinstall", ["uninstall", "apply", "config"], NOOP, "1.0.0", []),
    ("uninstall failed, same version wanted", desired(), recorded(stage="uninstall", state="erroring"),
     "apply", ["apply", "config"], NOOP, None, []),
]


@pytest.mark.parametrize("want,have,action,stages,interrupt,from_version,keys",
                         [a[1:] for a in ACTIONS], ids=[a[0] for a in ACTIONS])
def test_action_per_package(want, have, action, stages, interrupt, from_version, keys):
    result = plan([want], {"packages": {"pkg": have}} if have else None)
    entry = result["packages"][0]
    assert (entry["action"], entry["stages"], entry["interrupt"], entry["from_version"], entry["changed_keys"]) == (
        action, stages, interrupt, from_version, keys)
    assert entry["reason"]
    assert result["changed"] == (action not in ("none", "interrupt"))
    json.dumps(result)


@pytest.mark.parametrize("interrupts,merged", [
    ([], NOOP),
    ([None, NOOP], NOOP),
    ([NOOP, svc("a")], svc("a")),
    ([svc("b", "a"), svc("c", "a")], svc("a", "b", "c")),
    ([svc("a"), ALL], ALL),
    ([ALL, REBOOT, svc("a")], REBOOT),
    (["reboot", NOOP], REBOOT),
])
def test_merge_interrupts(interrupts, merged):
    assert merge_interrupts(interrupts) == merged


def test_node_interrupt_merges_over_packages():
    result = plan([desired(name="aa", interrupt=svc("x.service")), desired(name="bb", interrupt=svc("y.service")),
                   desired(name="cc")])
    assert result["interrupt"] == svc("x.service", "y.service")
    result = plan([desired(name="aa", interrupt=svc("x.service")), desired(name="bb", interrupt=ALL)])
    assert result["interrupt"] == ALL
    assert [e["post_interrupt"] for e in result["packages"]] == [True, True]


@pytest.mark.parametrize("deps,order", [
    ({"a": {}, "b": {}, "c": {}}, ["a", "b", "c"]),
    ({"a": {"c": "1.0.0"}, "b": {}, "c": {}}, ["b", "c", "a"]),
    ({"app": {"lib": "1.0.0"}, "lib": {"base": "1.0.0"}, "base": {}}, ["base", "lib", "app"]),
    ({"a": {"b": "1.0.0", "c": "1.0.0"}, "b": {"c": "1.0.0"}, "c": {}}, ["c", "b", "a"]),
])
def test_dependency_order(deps, order):
    assert order_by_dependencies(deps) == order


@pytest.mark.parametrize("deps,cycle", [
    ({"a": {"b": "1.0.0"}, "b": {"a": "1.0.0"}}, "a -> b -> a"),
    ({"a": {"b": "1.0.0"}, "b": {"c": "1.0.0"}, "c": {"a": "1.0.0"}, "d": {}}, "a -> b -> c -> a"),
    ({"x": {"y": "1.0.0"}, "y": {"z": "1.0.0"}, "z": {"y": "1.0.0"}}, "y -> z -> y"),
])
def test_dependency_cycle_is_named(deps, cycle):
    with pytest.raises(ValidationError) as caught:
        order_by_dependencies(deps)
    assert "dependency cycle: " + cycle in str(caught.value)


def test_plan_orders_by_depends_on():
    result = plan([desired(name="app", depends_on={"lib": "1.0.0"}), desired(name="lib")])
    assert [e["name"] for e in result["packages"]] == ["lib", "app"]


def test_missing_dependency_and_too_old_dependency():
    with pytest.raises(ValidationError) as caught:
        plan([desired(name="app", depends_on={"lib": "1.0.0"})])
    assert "depends on 'lib' 1.0.0 or later, which is not among the desired packages" in str(caught.value)
    assert "cannot be met" in str(caught.value) and caught.value.field == "packages[0].dependsOn.lib"
    with pytest.raises(ValidationError) as caught:
        plan([desired(name="app", depends_on={"lib": "2.0.0"}), desired(name="lib", version="1.5.0")])
    assert "needs 'lib' at least 2.0.0, but 1.5.0 is desired" in str(caught.value)


def test_prune_uninstalls_what_is_not_desired_dependents_first():
    state = {"packages": {
        "base": recorded(), "lib": recorded(dependsOn={"base": "1.0.0"}),
        "app": recorded(dependsOn={"lib": "1.0.0"}), "keep": recorded()}}
    kept = plan([desired(name="keep")], state)
    assert {e["name"]: e["action"] for e in kept["packages"]} == {"app": "none", "base": "none", "lib": "none",
                                                                   "keep": "none"}
    pruned = plan([desired(name="keep")], state, prune=True)
    assert [(e["name"], e["action"]) for e in pruned["packages"]] == [
        ("app", "uninstall"), ("lib", "uninstall"), ("base", "uninstall"), ("keep", "none")]
    assert pruned["interrupt"] == NOOP


def test_uninstalls_run_before_applies():
    state = {"packages": {"old": recorded()}}
    result = plan([desired(name="new"), desired(name="old", state="absent")], state)
    assert [(e["name"], e["action"]) for e in result["packages"]] == [("old", "uninstall"), ("new", "apply")]


def test_post_interrupt_phase():
    state = {"packages": {
        "a": recorded(stage="interrupt", state="in_progress", interrupt=REBOOT),
        "b": recorded(),
        "c": recorded(stage="post-interrupt", state="erroring")}}
    result = plan([], state, phase="post-interrupt")
    assert [(e["name"], e["action"], e["stages"]) for e in result["packages"]] == [
        ("a", "post-interrupt", ["post-interrupt"]), ("b", "none", []), ("c", "post-interrupt", ["post-interrupt"])]
    assert result["packages"][0]["interrupt"] == REBOOT
    assert result["interrupt"] == NOOP, "after the post-interrupt phase the node needs nothing"
    assert result["changed"]


def test_listed_twice_and_unknown_phase():
    with pytest.raises(ValidationError):
        plan([desired(), desired()])
    with pytest.raises(ValidationError):
        plan([], phase="later")


@pytest.mark.parametrize("recorded_value", [
    '{"packages": {"pkg": {"version": "1.0.0", "stage": "config", "state": "complete"}}, "status": "complete"}',
    {"packages": {"pkg": {"version": "1.0.0"}}},
    {"pkg": {"version": "1.0.0", "stage": "config"}},
    {"name": "pkg", "version": "1.0.0", "stage": "config", "state": "complete"},
])
def test_recorded_state_forms(recorded_value):
    state = normalize_state(recorded_value)
    assert state["packages"]["pkg"]["version"] == "1.0.0"
    assert state["packages"]["pkg"]["state"] == "complete"


@pytest.mark.parametrize("bad", ["{not json", ["a"], {"packages": {"pkg": {"version": "latest"}}}])
def test_bad_recorded_state(bad):
    with pytest.raises(ValidationError) as caught:
        normalize_state(bad)
    assert caught.value.field.startswith("recorded_state")


@pytest.mark.parametrize("states,status", [
    ({}, "complete"),
    ({"a": recorded(), "b": recorded()}, "complete"),
    ({"a": recorded(), "b": recorded(stage="interrupt", state="in_progress", interrupt=REBOOT)}, "in_progress"),
    ({"a": recorded(state="erroring"), "b": recorded(state="in_progress")}, "erroring"),
])
def test_node_status(states, status):
    assert node_status({"packages": states}) == status


def test_pending_interrupt_of_a_state():
    state = {"packages": {"a": recorded(stage="interrupt", state="in_progress", interrupt=svc("a")),
                          "b": recorded(stage="interrupt", state="in_progress", interrupt=svc("b")),
                          "c": recorded(state="erroring", interrupt=REBOOT)}}
    assert pending_interrupt(state) == svc("a", "b")


class FakePackage(object):
    """What desired_from_spec reads from a loaded package."""

    format = "nodewright"

    def __init__(self, name="pkg", version="1.0.0"):
        from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import Interrupt
        self.name, self.version = name, version
        self.interrupt = Interrupt("reboot")
        self.config_interrupts = {"k*": Interrupt("service", ["k.service"])}
        self.depends_on = {}

    def validate_config(self, config, field="config"):
        return dict({"default": "d"}, **config)


def test_desired_from_spec_merges_manifest_and_overrides():
    item = desired_from_spec({"src": "/p", "config": {"x": "1"}}, FakePackage())
    assert item["name"] == "pkg" and item["config"] == {"default": "d", "x": "1"}
    assert item["interrupt"] == {"type": "reboot", "services": []}
    assert item["configInterrupts"] == {"k*": svc("k.service")}
    item = desired_from_spec({"src": "/p", "interrupt": {"type": "noop"}, "config_interrupts": {}}, FakePackage())
    assert item["interrupt"] == {"type": "noop"} and item["configInterrupts"] == {}


def test_a_package_is_its_name_and_version_whatever_its_source():
    # One generic package (shellscript) under any name and version: the spec's win.
    item = desired_from_spec({"name": "other", "src": "/p", "version": "2.0.0"}, FakePackage())
    assert (item["name"], item["version"]) == ("other", "2.0.0")
    item = desired_from_spec({"name": "short", "src": "/p", "version": "1.2"}, FakePackage())
    assert item["version"] == "1.2"
    assert desired_from_spec({"src": "/p"}, FakePackage())["version"] == "1.0.0"


@pytest.mark.parametrize("spec,words", [
    ({"src": "/p", "colour": "red"}, "unknown key(s) colour"),
    ({"name": "other", "src": "/p", "version": "1.2.3.4"}, "'1.2.3.4' of package 'other' is not a semantic version"),
])
def test_desired_from_spec_rejects(spec, words):
    with pytest.raises(ValidationError) as caught:
        desired_from_spec(spec, FakePackage())
    assert words in str(caught.value)


def test_absent_without_source_is_fine_present_is_not():
    assert desired_from_spec({"name": "pkg", "state": "absent"}, None)["state"] == "absent"
    with pytest.raises(ValidationError) as caught:
        desired_from_spec({"name": "pkg"}, None)
    assert "has no source" in str(caught.value)


def test_plan_package_is_pure():
    want = plan([desired()])["packages"][0]
    again = plan_package({"name": "pkg", "version": "1.0.0", "state": "present", "configHashes": {},
                          "interrupt": NOOP, "configInterrupts": {}, "dependsOn": {}}, None)
    assert want["action"] == again["action"] == "apply"
