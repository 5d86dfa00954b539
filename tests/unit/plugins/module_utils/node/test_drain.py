# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The drain's pod filters (each verdict with its reason) and the reading of a PDB's
429 refusal, table by table."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.node import drain

pytestmark = pytest.mark.unit


def pod(name="p", ns="ns", owner=("ReplicaSet", "rs"), labels=None, annotations=None, phase="Running",
        deleting=False, volumes=()):
    meta = {"name": name, "namespace": ns, "uid": "uid-" + name, "labels": labels or {},
            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"volumes": [dict(v) for v in volumes]}, "status": {"phase": phase}}


@pytest.mark.parametrize("p, options, verdict, reason", [
    (pod(), {}, drain.EVICT, "evict (ReplicaSet rs)"),
    (pod(deleting=True), {}, drain.WAIT, "already terminating"),
    (pod(phase="Succeeded"), {}, drain.DELETE, "pod has finished (Succeeded)"),
    (pod(labels={"nodewright.io/node-pod": "true"}), {}, drain.SKIP, "NodeWright's own node-access pod"),
    (pod(annotations={"kubernetes.io/config.mirror": "x"}), {}, drain.SKIP, "static (mirror) pod stays"),
    (pod(owner=("DaemonSet", "dcgm")), {}, drain.SKIP, "DaemonSet pod stays (DaemonSet dcgm)"),
    (pod(owner=("DaemonSet", "dcgm")), {"ignore_daemonsets": False}, drain.REFUSE, "set ignore_daemonsets"),
    (pod(ns="kube-system"), {"skip_namespaces": ["kube-system"]}, drain.SKIP, "namespace kube-system is skipped"),
    (pod(labels={"app": "x"}), {"skip_selector": "app=x"}, drain.SKIP, None),
    (pod(labels={"job": "train"}), {"non_interruptible": "job=train"}, drain.REFUSE, "NodeWright never evicts"),
    (pod(volumes=[{"name": "s", "emptyDir": {}}]), {}, drain.REFUSE, "set delete_emptydir_data"),
    (pod(volumes=[{"name": "s", "emptyDir": {}}]), {"delete_emptydir_data": True}, drain.EVICT, None),
    (pod(owner=None), {}, drain.REFUSE, "not managed by a controller"),
    (pod(owner=None), {"force": True}, drain.EVICT, "evict (forced, no controller)"),
])
def test_each_pod_gets_a_verdict_and_a_reason(p, options, verdict, reason):
    got, why = drain.classify(p, drain.DrainOptions(**options))
    assert got == verdict
    if reason:
        assert reason in why


def test_the_first_filter_that_decides_wins():
    # A finished DaemonSet pod is removed, not kept: _terminal comes before _daemonset.
    assert drain.classify(pod(owner=("DaemonSet", "d"), phase="Failed"), drain.DrainOptions())[0] == drain.DELETE


def test_the_plan_groups_pods_with_their_reasons():
    plan = drain.plan_drain([pod("a"), pod("b", owner=("DaemonSet", "d")), pod("c", owner=None)],
                            drain.DrainOptions())
    assert [e["pod"] for e in plan[drain.EVICT]] == ["ns/a"]
    assert plan[drain.SKIP][0]["uid"] == "uid-b" and "DaemonSet" in plan[drain.SKIP][0]["reason"]
    assert plan[drain.REFUSE][0]["pod"] == "ns/c"


@pytest.mark.parametrize("options, message", [
    ({"grace_period": -1}, "grace_period must be 0 or more"),
    ({"timeout": 0}, "timeout must be between"),
    ({"max_parallel": 0}, "max_parallel must be between"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValidationError) as info:
        drain.DrainOptions(**options)
    assert message in str(info.value)


def test_a_429_names_the_budget_that_refused():
    body = json.dumps({"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption "
                                                    "budget.",
                       "details": {"causes": [{"reason": "DisruptionBudget",
                                               "message": "The disruption budget strict needs 2 healthy pods and "
                                                          "has 2 currently"}]}})
    name, message = drain.pdb_from_429(body)
    assert name == "strict" and "needs 2 healthy pods" in message
    assert drain.pdb_from_429(body.encode()) == (name, message)


@pytest.mark.parametrize("body, expected", [
    ('{"message": "too many requests"}', (None, "too many requests")),
    ("not json at all", (None, "not json at all")),
    (None, (None, "")),
])
def test_a_429_without_a_budget_keeps_the_servers_message(body, expected):
    assert drain.pdb_from_429(body) == expected


def test_a_failed_drain_says_what_kept_each_pod():
    text = drain.describe_failure("n1", {"blocking_pdbs": [{"pdb": "ns/strict", "message": "needs 2",
                                                            "pods": ["ns/a"]}],
                                         "errors": {"ns/b": "forbidden"}, "still_present": ["ns/a", "ns/b", "ns/c"],
                                         "timed_out": True}, 30)
    assert text.startswith("drain of node n1 timed out after 30s")
    assert "PodDisruptionBudget ns/strict allowed no disruption (needs 2) for ns/a" in text
    assert "ns/b: forbidden" in text and "ns/c is still on the node" in text and "stays cordoned" in text


# --------------------------------------------------------------------------- DrainBlocked

T1, T2, T3 = "2026-12-01T00:00:01Z", "2026-12-01T00:00:05Z", "2026-12-01T00:01:00Z"


def test_the_refusals_name_each_budget_its_pods_and_since_when():
    refused = {"ns/a": {"pdb": "ns/strict", "since": T2}, "ns/b": {"pdb": "ns/strict", "since": T1},
               "ns/c": {"pdb": "ns/other", "since": T2}, "ns/d": {"pdb": None, "since": None}}
    assert drain.drain_refusals(refused) == (
        "PodDisruptionBudget ns/other refuses to evict ns/c since %s; "
        "PodDisruptionBudget ns/strict refuses to evict ns/a, ns/b since %s; "
        "the API server (HTTP 429 without a budget named) refuses to evict ns/d since an unknown time" % (T2, T1))
    assert drain.drain_blocked_since(refused) == T1


def signal(showing=False):
    written = []
    sig = drain.DrainBlockedSignal("n1", lambda patch: written.append(patch["status"]["conditions"][0]),
                                   now=lambda: T3, showing=showing)
    return sig, written


def test_drain_blocked_is_written_when_what_holds_the_drain_changes_and_cleared_when_it_goes_through():
    sig, written = signal()
    sig.update({})
    assert written == []                                  # nothing refused, nothing said
    one = {"ns/a": {"pdb": "ns/strict", "since": T1}}
    sig.update(one)
    sig.update(one)
    assert [(c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in written] == [
        ("nodewright.io/DrainBlocked", "True", "EvictionRefused", T1)]
    assert written[0]["message"] == "drain of node n1 is waiting: PodDisruptionBudget ns/strict refuses to " \
                                    "evict ns/a since %s" % T1
    sig.update(dict(one, **{"ns/b": {"pdb": "ns/strict", "since": T2}}))
    assert written[-1]["status"] == "True" and "ns/a, ns/b" in written[-1]["message"]
    assert written[-1]["lastTransitionTime"] == T1        # still the same wait
    sig.update({})
    assert (written[-1]["status"], written[-1]["reason"], written[-1]["lastTransitionTime"]) == (
        "False", "EvictionsAccepted", T3)
    sig.finish({})
    assert len(written) == 3                              # already clear


def test_a_drain_that_ends_refused_clears_drain_blocked_saying_so():
    sig, written = signal()
    sig.update({"ns/a": {"pdb": "ns/strict", "since": T1}})
    sig.finish({"ns/a": {"pdb": "ns/strict", "since": T1}})
    assert (written[-1]["status"], written[-1]["reason"]) == ("False", "DrainEnded")
    assert written[-1]["message"] == "drain of node n1 ended at its deadline: PodDisruptionBudget ns/strict " \
                                     "still refused to evict ns/a since %s" % T1


def test_a_drain_never_blocked_writes_nothing_but_clears_what_a_dead_run_left():
    sig, written = signal()
    sig.finish({})
    assert written == []
    sig, written = signal(showing=True)
    sig.finish({})
    assert [(c["status"], c["reason"]) for c in written] == [("False", "EvictionsAccepted")]


def test_a_condition_that_cannot_be_written_never_stops_the_drain():
    def refuse(patch):
        raise RuntimeError("forbidden")
    sig = drain.DrainBlockedSignal("n1", refuse, now=lambda: T3)
    sig.update({"ns/a": {"pdb": "ns/strict", "since": T1}})
    sig.finish({})
    assert sig.errors and "could not write nodewright.io/DrainBlocked on node n1: forbidden" in sig.errors[0]
    assert drain.drain_blocked_showing({"status": {"conditions": [
        {"type": "nodewright.io/DrainBlocked", "status": "True"}]}})
    assert not drain.drain_blocked_showing({"status": {"conditions": [
        {"type": "nodewright.io/DrainBlocked", "status": "False"}]}})
    assert not drain.drain_blocked_showing(None)


def test_the_resource_gets_a_line_for_the_node_while_its_drain_is_held_and_loses_it_after():
    lines = []
    sig = drain.DrainBlockedSignal("n1", lambda patch: None, now=lambda: T3, resource_line=lines.append)
    sig.update({})
    assert lines == []                                    # never held: the resource is not written
    held = {"ns/a": {"pdb": "ns/strict", "since": T1}}
    sig.update(held)
    sig.update(held)
    assert lines == ["PodDisruptionBudget ns/strict refuses to evict ns/a since %s" % T1]
    sig.update({})
    assert lines[-1] is None and len(lines) == 2
    sig.update(held)
    sig.finish(held)                                      # the drain ends held: the line goes too
    assert lines[-2:] == [lines[0], None]


def test_node_lines_keep_one_line_per_node_sorted():
    from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops
    message = ops.node_lines("", "n2", "PodDisruptionBudget ns/a refuses to evict ns/p since %s" % T1)
    message = ops.node_lines(message, "n1", "PodDisruptionBudget ns/b refuses\nto evict ns/q since %s" % T2)
    assert message == ("n1: PodDisruptionBudget ns/b refuses to evict ns/q since %s\n"
                       "n2: PodDisruptionBudget ns/a refuses to evict ns/p since %s" % (T2, T1))
    message = ops.node_lines(message, "n1", "something else")
    assert message.splitlines()[0] == "n1: something else"
    assert ops.node_lines(ops.node_lines(message, "n1", None), "n2", None) == ""
    assert ops.node_lines("a sentence: with no node in front", "n1", None) == ""


def test_what_holds_a_drain_is_read_from_the_node_condition_without_its_name():
    def node(status, message):
        return {"metadata": {"name": "n1"}, "status": {"conditions": [
            {"type": "nodewright.io/DrainBlocked", "status": status, "message": message}]}}
    assert drain.drain_blocked_text(node("True", "drain of node n1 is waiting: PodDisruptionBudget ns/a refuses "
                                                 "to evict ns/p since %s" % T1)) == \
        "PodDisruptionBudget ns/a refuses to evict ns/p since %s" % T1
    assert drain.drain_blocked_text(node("False", "drain of node n1: the refused evictions went through")) == ""
    assert drain.drain_blocked_text({"metadata": {"name": "n1"}}) == ""
