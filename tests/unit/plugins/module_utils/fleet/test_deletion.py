# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Deleting a NodeWright resource: the finalizer, which nodes still need an uninstall,
the reconciler's decision table and the conditions it writes."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import deletion
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import CONDITION_UNINSTALL_IN_PROGRESS
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.unit

FIN = deletion.FINALIZER


def resource(packages=None, deleting=False, finalizers=(), annotations=None, name="tuning", rv=None):
    meta = {"name": name, "finalizers": list(finalizers), "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    if rv:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"packages": packages if packages is not None else {}}}


def node(name, packages=None, resource_name="tuning", raw=None):
    annotations = {}
    if raw is not None:
        annotations[markers.state_annotation(resource_name)] = raw
    elif packages is not None:
        annotations[markers.state_annotation(resource_name)] = json.dumps(
            {"status": "complete", "packages": {p: {"version": "1.0.0", "stage": "config", "state": "complete"}
                                                for p in packages}})
    return {"metadata": {"name": name, "annotations": annotations}}


UNINSTALLABLE = {"a": {"version": "1.0.0", "uninstall": {"enabled": True}},
                 "b": {"version": "1.0.0"},
                 "c": {"version": "1.0.0", "uninstall": {"enabled": "true"}}}  # a string is not true


def test_package_partition_by_uninstall_enabled():
    res = resource(UNINSTALLABLE)
    assert deletion.uninstall_enabled(res) == ["a"]
    assert deletion.kept_packages(res) == ["b", "c"]


@pytest.mark.parametrize("res", [None, {}, {"spec": {}}, {"spec": {"packages": None}}])
def test_package_partition_of_an_empty_resource(res):
    assert deletion.uninstall_enabled(res) == []
    assert deletion.kept_packages(res) == []


@pytest.mark.parametrize("meta, deleting, finalized, skips", [
    ({}, False, False, False),
    ({"deletionTimestamp": "2026-01-01T00:00:00Z"}, True, False, False),
    ({"finalizers": ["other/x", FIN]}, False, True, False),
    ({"annotations": {deletion.ANNOTATION_SKIP_UNINSTALL: "true"}}, False, False, True),
    ({"annotations": {deletion.ANNOTATION_SKIP_UNINSTALL: "yes"}}, False, False, False),
])
def test_metadata_predicates(meta, deleting, finalized, skips):
    res = {"metadata": meta}
    assert deletion.is_deleting(res) is deleting
    assert deletion.has_finalizer(res) is finalized
    assert deletion.skips_uninstall(res) is skips


def test_names_of_the_marks():
    assert FIN == "nodewright.io/uninstall"
    assert deletion.ANNOTATION_SKIP_UNINSTALL == "nodewright.io/skip-uninstall"


@pytest.mark.parametrize("finalizers, present, expected", [
    ([], True, ["nodewright.io/uninstall"]),
    (["other/x"], True, ["other/x", "nodewright.io/uninstall"]),
    (["other/x", "nodewright.io/uninstall"], False, ["other/x"]),
    (["nodewright.io/uninstall"], False, []),
])
def test_finalizer_patch_carries_the_whole_list_and_resource_version(finalizers, present, expected):
    patch = deletion.finalizer_patch(resource(finalizers=finalizers, rv="42"), present)
    assert patch == {"metadata": {"finalizers": expected, "resourceVersion": "42"}}


@pytest.mark.parametrize("finalizers, present", [([FIN], True), ([], False), (["other/x"], False)])
def test_finalizer_patch_is_none_when_nothing_changes(finalizers, present):
    assert deletion.finalizer_patch(resource(finalizers=finalizers), present) is None


def test_finalizer_patch_without_resource_version():
    assert deletion.finalizer_patch(resource(), True) == {"metadata": {"finalizers": [FIN]}}


def test_nodes_to_uninstall_lists_recording_and_unreadable_nodes_in_name_order():
    res = resource(UNINSTALLABLE)
    nodes = [node("n3", ["a"]), node("n1", ["b"]), node("n2", raw="{not json"), node("n0"),
             node("n4", ["a"], resource_name="other")]
    assert deletion.nodes_to_uninstall(res, nodes, ["a"]) == ["n2", "n3"]
    assert deletion.nodes_to_uninstall(res, nodes, ["a", "b"]) == ["n1", "n2", "n3"]
    assert deletion.nodes_to_uninstall(res, [], ["a"]) == []


PKGS = {"a": {"version": "1.0.0", "uninstall": {"enabled": True}}}
PAUSE = {markers.ANNOTATION_PAUSE: "true"}
DISABLE = {markers.ANNOTATION_DISABLE: "true"}
SKIP = {deletion.ANNOTATION_SKIP_UNINSTALL: "true"}


@pytest.mark.parametrize("res, nodes, described, action, nodes_out", [
    # not being deleted
    (resource(PKGS), [], {}, deletion.ADD_FINALIZER, []),
    (resource(PKGS, finalizers=[FIN]), [], {}, deletion.NONE, []),
    (resource({"b": {}}), [], {}, deletion.NONE, []),
    # being deleted
    (resource(PKGS, deleting=True), [node("n1", ["a"])], {}, deletion.NONE, []),
    (resource(PKGS, deleting=True, finalizers=[FIN], annotations=SKIP), [node("n1", ["a"])], {},
     deletion.REMOVE_FINALIZER, []),
    (resource({"b": {}}, deleting=True, finalizers=[FIN]), [node("n1", ["b"])], {}, deletion.REMOVE_FINALIZER, []),
    (resource(PKGS, deleting=True, finalizers=[FIN]), [node("n1", ["b"])], {}, deletion.REMOVE_FINALIZER, []),
    (resource(PKGS, deleting=True, finalizers=[FIN]), [node("n2", ["a"]), node("n1", ["a"])], {},
     deletion.UNINSTALL, ["n1", "n2"]),
    (resource(PKGS, deleting=True, finalizers=[FIN]), [node("n1", ["a"])], None, deletion.BLOCKED, ["n1"]),
    (resource(PKGS, deleting=True, finalizers=[FIN], annotations=PAUSE), [node("n1", ["a"])], {},
     deletion.DELETION_BLOCKED, ["n1"]),
    (resource(PKGS, deleting=True, finalizers=[FIN], annotations=DISABLE), [node("n1", ["a"])], None,
     deletion.DELETION_BLOCKED, ["n1"]),
    # paused but nothing left to uninstall: it may go
    (resource(PKGS, deleting=True, finalizers=[FIN], annotations=PAUSE), [], {}, deletion.REMOVE_FINALIZER, []),
    # skip-uninstall wins over paused
    (resource(PKGS, deleting=True, finalizers=[FIN], annotations=dict(PAUSE, **SKIP)), [node("n1", ["a"])], {},
     deletion.REMOVE_FINALIZER, []),
])
def test_decide(res, nodes, described, action, nodes_out):
    decision = deletion.decide(res, nodes, described)
    assert decision["action"] == action
    assert decision["nodes"] == nodes_out
    assert decision["packages"] == deletion.uninstall_enabled(res)


def test_decide_reasons_say_what_happens_and_how_out():
    res = resource(PKGS)
    assert deletion.decide(res, [])["reason"] == (
        "packages a have uninstall.enabled: deleting the resource will uninstall them from its nodes")
    gone = resource(PKGS, deleting=True, finalizers=[FIN])
    assert deletion.decide(gone, [])["reason"] == "a uninstalled from every node"
    assert deletion.decide(resource({}, deleting=True, finalizers=[FIN]), [])["reason"] == \
        "no package has uninstall.enabled"
    skip = deletion.decide(resource(PKGS, deleting=True, finalizers=[FIN], annotations=SKIP), [])
    assert skip["reason"] == "annotation nodewright.io/skip-uninstall=true: the packages stay on the nodes"
    nodes = [node("n1", ["a"]), node("n2", ["a"])]
    assert deletion.decide(gone, nodes, {})["reason"] == "uninstalling a from 2 node(s) before the resource goes"


def test_decide_blocked_names_the_reason_and_the_way_out():
    gone = resource(PKGS, deleting=True, finalizers=[FIN])
    decision = deletion.decide(gone, [node("n1", ["a"])], None, blocked_reason="spec.policy is invalid")
    assert decision["reason"] == ("cannot uninstall a from n1: spec.policy is invalid; fix the resource, or let "
                                  "it go without uninstalling (annotate it nodewright.io/skip-uninstall=true)")
    default = deletion.decide(gone, [node("n1", ["a"])], None)
    assert "cannot uninstall a from n1: it cannot be described;" in default["reason"]


@pytest.mark.parametrize("annotations, held", [
    (PAUSE, "paused (annotation nodewright.io/pause=true)"),
    (DISABLE, "disabled (annotation nodewright.io/disable=true)"),
])
def test_decide_paused_or_disabled_keeps_the_resource(annotations, held):
    res = resource(PKGS, deleting=True, finalizers=[FIN], annotations=annotations)
    decision = deletion.decide(res, [node("n1", ["a"])], {})
    assert decision["reason"] == (
        "the resource is %s: the uninstall of a from n1 waits, and the resource stays; remove the annotation to "
        "let the uninstall run, or annotate it nodewright.io/skip-uninstall=true to let it go without "
        "uninstalling" % held)


@pytest.mark.parametrize("action, reason", [
    (deletion.UNINSTALL, "Uninstalling"),
    (deletion.BLOCKED, "UninstallBlocked"),
    (deletion.DELETION_BLOCKED, "DeletionBlocked"),
    (deletion.REMOVE_FINALIZER, "Finishing"),
    (deletion.NONE, "Finishing"),
])
def test_deleting_condition(action, reason):
    cond = deletion.deleting_condition({"action": action, "reason": "why"})
    assert cond == {"type": "Deleting", "status": "True", "reason": reason, "message": "why"}


def test_deleting_condition_after_a_failure():
    cond = deletion.deleting_condition({"action": deletion.UNINSTALL, "reason": "x"}, failure="n1 failed")
    assert cond["reason"] == "UninstallFailed"
    assert cond["message"] == ("n1 failed; the uninstall is tried again, or annotate the resource "
                               "nodewright.io/skip-uninstall=true to let it go without it")


def test_uninstall_conditions():
    conds = deletion.uninstall_conditions({"action": deletion.UNINSTALL, "reason": "why"})
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in conds] == [
        (CONDITION_UNINSTALL_IN_PROGRESS, "True", "UninstallInProgress", "why"),
        ("Ready", "False", "Uninstalling", "why")]


@pytest.mark.parametrize("action, status, reason", [
    (deletion.DELETION_BLOCKED, "True", "PausedOrDisabled"),
    (deletion.UNINSTALL, "False", "NotBlocked"),
    (deletion.NONE, "False", "NotBlocked"),
])
def test_deletion_blocked_condition(action, status, reason):
    cond = deletion.deletion_blocked_condition({"action": action, "reason": "why"})
    assert (cond["type"], cond["status"], cond["reason"]) == ("DeletionBlocked", status, reason)
    assert cond["message"] == ("why" if status == "True" else "nothing holds the deletion back")
