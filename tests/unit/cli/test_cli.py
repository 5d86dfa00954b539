# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pure parts of the ``nodewright`` command: durations, the patches of the
actions, the status view and its rendering, and the reconciler's decisions (what
counts as a change, what is work, when a pass is due, when the same work waits)."""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
try:
    import nodewright_cli  # noqa: F401
except ImportError:  # not installed into the virtualenv yet (make venv does it)
    sys.path.insert(0, os.path.join(REPO, "cli"))

from nodewright_cli import actions, cli, reconcile_work, reconciler, runner, status  # noqa: E402

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy  # noqa: E402

pytestmark = pytest.mark.unit
PACKAGES = [os.path.join(REPO, "packages")]


def node(name, labels=None, annotations=None, created="2026-01-01T00:00:00Z", taints=None, unschedulable=False,
         ready=True):
    return {"metadata": {"name": name, "labels": dict({"pool": "gpu"}, **(labels or {})),
                         "annotations": annotations or {}, "creationTimestamp": created},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def nodewright(name, priority=200, annotations=None, policy=None, generation=1, runtime=False):
    spec = {"nodeSelectors": {"matchLabels": {"pool": "gpu"}}, "priority": priority, "runtimeRequired": runtime,
            "packages": {"shellscript": {"version": "1.0.0"}}}
    if policy:
        spec["deploymentPolicy"] = policy
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": name, "annotations": annotations or {}, "generation": generation}, "spec": spec}


def complete_state(resource):
    return {markers.state_annotation(resource): json.dumps({"status": "complete", "packages": {}})}


@pytest.mark.parametrize("text,seconds", [("90", 90), ("30s", 30), ("10m", 600), ("1h", 3600), ("1.5h", 5400),
                                          ("250ms", 0.25), ("2d", 172800)])
def test_duration(text, seconds):
    assert cli.duration(text) == seconds


def test_bad_duration():
    with pytest.raises(argparse.ArgumentTypeError):
        cli.duration("soon")


# --------------------------------------------------------------------------- actions

@pytest.mark.parametrize("action,before,patch", [
    ("pause", {}, {"metadata": {"annotations": {markers.ANNOTATION_PAUSE: "true"}}}),
    ("pause", {markers.ANNOTATION_PAUSE: "true"}, None),
    ("resume", {markers.ANNOTATION_PAUSE: "true"}, {"metadata": {"annotations": {markers.ANNOTATION_PAUSE: None}}}),
    ("resume", {}, None),
    ("disable", {}, {"metadata": {"annotations": {markers.ANNOTATION_DISABLE: "true"}}}),
    ("enable", {markers.ANNOTATION_DISABLE: "true"},
     {"metadata": {"annotations": {markers.ANNOTATION_DISABLE: None}}}),
])
def test_resource_actions_only_touch_their_annotation(action, before, patch):
    assert actions.resource_patch(nodewright("r", annotations=before), action) == patch


def test_ignore_patch():
    assert actions.ignore_patch(node("n")) == {"metadata": {"labels": {markers.LABEL_IGNORE: "true"}}}
    ignored = node("n", labels={markers.LABEL_IGNORE: "true"})
    assert actions.ignore_patch(ignored) is None
    assert actions.ignore_patch(ignored, undo=True) == {"metadata": {"labels": {markers.LABEL_IGNORE: None}}}
    assert actions.ignore_patch(node("n"), undo=True) is None


def test_reset_patch_forgets_records_but_keeps_the_cordon_record():
    annotations = dict(complete_state("a"), **complete_state("b"))
    annotations[markers.ANNOTATION_CORDONED_BY] = '{"owner": "nodewright"}'
    annotations[markers.ANNOTATION_BLOCKED_BY] = "ns/pod"
    labels = {markers.status_label("a"): "complete", markers.status_label("b"): "erroring",
              markers.LABEL_STATUS: "erroring"}
    n = node("n", labels=labels, annotations=annotations)
    one = actions.reset_patch(n, "b")
    assert one["metadata"]["labels"] == {markers.status_label("b"): None, markers.LABEL_STATUS: "complete"}
    assert one["metadata"]["annotations"] == {markers.state_annotation("b"): None}
    every = actions.reset_patch(n)
    assert every["metadata"]["labels"] == {markers.status_label("a"): None, markers.status_label("b"): None,
                                           markers.LABEL_STATUS: None}
    assert every["metadata"]["annotations"] == {markers.state_annotation("a"): None,
                                                markers.state_annotation("b"): None,
                                                markers.ANNOTATION_BLOCKED_BY: None}
    assert markers.ANNOTATION_CORDONED_BY not in every["metadata"]["annotations"]
    assert actions.reset_patch(node("clean")) is None


# --------------------------------------------------------------------------- status

def test_status_shows_packages_notes_next_wave_and_blocked_resources():
    nodes = [node("n1", created="2026-01-01T00:00:01Z",
                  labels={markers.status_label("tuning"): "complete"},
                  annotations={markers.state_annotation("tuning"): json.dumps(
                      {"status": "complete", "packages": {"shellscript": {
                          "version": "1.0.0", "stage": "config", "state": "complete", "configHashes": {}}}})}),
             node("n2", created="2026-01-01T00:00:02Z", taints=[{"key": markers.TAINT_RUNTIME_REQUIRED,
                                                                 "value": "true", "effect": "NoSchedule"}]),
             node("n3", created="2026-01-01T00:00:03Z", annotations={markers.state_annotation("tuning"): "{oops"}),
             node("n4", labels={markers.LABEL_IGNORE: "true"})]
    resources = [nodewright("tuning", priority=100, runtime=True), nodewright("lost", policy="nope")]
    data = status.build(resources, nodes, {}, PACKAGES)
    (tuning,) = data["resources"]
    assert tuning["complete"] == 1 and tuning["targets"] == 3 and tuning["runtime_required"]
    assert tuning["next_wave"] == ["n2"]
    rows = {r["node"]: r for r in tuning["nodes"]}
    assert rows["n1"]["packages"] == [{"name": "shellscript", "version": "1.0.0", "stage": "config",
                                       "state": "complete"}]
    assert rows["n2"]["work"] == {"shellscript": "apply"} and rows["n2"]["next_wave"]
    assert "tainted %s" % markers.TAINT_RUNTIME_REQUIRED in rows["n2"]["notes"]
    assert any("malformed" in note for note in rows["n3"]["notes"])
    assert data["blocked"] == [{"name": "lost", "reason": "spec.deploymentPolicy: DeploymentPolicy 'nope' does not "
                                                          "exist (create it, or fix the name; the resource stays "
                                                          "blocked until then)"}]
    assert data["ignored"] == ["n4"]
    text = status.render(data)
    assert "NodeWright tuning  priority 100" in text and "runtimeRequired" in text
    assert "next wave: n2" in text
    assert "shellscript 1.0.0 config/complete" in text
    assert "NodeWright lost  status blocked: spec.deploymentPolicy" in text
    assert "ignored nodes (nodewright.io/ignore=true): n4" in text


def test_status_of_a_paused_resource_says_how_to_resume():
    data = status.build([nodewright("t", annotations={markers.ANNOTATION_PAUSE: "true"})], [node("n1")], {},
                        PACKAGES)
    assert data["resources"][0]["status"] == "paused"
    assert "nodewright resume t" in status.render(data)


# --------------------------------------------------------------------------- reconciler decisions

def test_kubelet_heartbeats_are_not_changes():
    old = node("n", annotations={"node.alpha.kubernetes.io/ttl": "0"})
    beat = json.loads(json.dumps(old))
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "later"
    beat["metadata"]["annotations"]["other.io/x"] = "y"
    assert not reconcile_work.relevant_change("nodes", old, beat)
    for change in ({"labels": {"pool": "cpu"}}, {"annotations": complete_state("r")}):
        new = json.loads(json.dumps(old))
        for key, value in change.items():
            new["metadata"][key].update(value)
        assert reconcile_work.relevant_change("nodes", old, new)
    tainted = json.loads(json.dumps(old))
    tainted["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert reconcile_work.relevant_change("nodes", old, tainted)
    assert reconcile_work.relevant_change("nodes", old, node("n", ready=False))


def test_status_writes_are_not_changes_of_a_resource():
    old = nodewright("r")
    written = dict(old, status={"status": "complete"})
    assert not reconcile_work.relevant_change("nodewrights", old, written)
    assert reconcile_work.relevant_change("nodewrights", old, nodewright("r", generation=2))
    assert reconcile_work.relevant_change("nodewrights", old,
                                          nodewright("r", annotations={markers.ANNOTATION_PAUSE: "true"}))


def _described(name, work, generation=1, paused=False, disabled=False):
    return ResourcePlan(name, parse_policy({"default": {"budget": {"count": 1}}}), work=work, generation=generation,
                        paused=paused, disabled=disabled)


def test_work_leaves_out_paused_disabled_and_malformed():
    view = {"rollouts": [(None, _described("a", ["n1", "n2"], generation=3)),
                         (None, _described("b", ["n1"], paused=True)),
                         (None, _described("c", ["n1"], disabled=True)),
                         (None, _described("d", ["n2"]))],
            "blocked": [], "malformed": {"n2": {"a": "malformed"}}}
    work = reconcile_work.work_of(view)
    assert work == {"a": ["n1"]}
    assert reconcile_work.work_fingerprint(view, work) == (("a", 3, ("n1",)),)
    assert reconcile_work.rollout_limit(view["malformed"]) == "localhost:all:!n2"
    assert reconcile_work.rollout_limit({}) is None


def test_passes_wait_for_every_list_and_are_debounced(tmp_path):
    rec = reconciler.Reconciler(None, reconciler.Options(debounce=5, max_debounce=30, inventory="inv.yml",
                                                         workdir=str(tmp_path)))
    rec.permission_ok = True
    rec.handle(("sync", "nodes", [node("n1")]))
    assert not rec.due()  # the resources are not listed yet
    rec.handle(("sync", "nodewrights", []))
    rec.handle(("sync", "deploymentpolicies", []))
    start = rec.last_change
    assert not rec.due(start + 1) and rec.due(start + 5)
    rec.dirty_since = start - 31
    assert rec.due(start + 1)  # a busy cluster still gets its pass


def test_events_update_the_cache(tmp_path):
    rec = reconciler.Reconciler(None, reconciler.Options(inventory="inv.yml", workdir=str(tmp_path)))
    for kind in reconciler.KINDS:
        rec.handle(("sync", kind, []))
    rec.dirty_since = None
    rec.handle(("event", "nodes", "ADDED", node("n1")))
    assert "n1" in rec.caches["nodes"] and rec.dirty_since is not None
    rec.dirty_since = None
    rec.handle(("event", "nodes", "MODIFIED", node("n1")))
    assert rec.dirty_since is None
    rec.handle(("event", "nodes", "DELETED", node("n1")))
    assert rec.caches["nodes"] == {} and rec.dirty_since is not None


def test_the_same_work_waits_for_the_retry_interval(tmp_path):
    rec = reconciler.Reconciler(None, reconciler.Options(retry_interval=600, inventory="inv.yml",
                                                         workdir=str(tmp_path)))
    started = []
    rec.run_playbook = lambda *a, **kw: started.append(kw) or runner.RunResult(
        "rollout", "failed", 2, 0, 1, {"n1": "failed"}, {"n1": "boom"}, None, [], "")
    view = {"rollouts": [(None, _described("a", ["n1"]))], "blocked": [], "malformed": {}}
    work = reconcile_work.work_of(view)
    rec._maybe_run(view, work, [], run_inline=True)
    assert len(started) == 1 and rec.last_rollout["status"] == "failed"
    assert started[0]["extravars"]["nodewright_taint_key"] == markers.TAINT_RUNTIME_REQUIRED
    rec._maybe_run(view, work, [], run_inline=True)
    assert len(started) == 1 and rec.retry_at is not None
    view["rollouts"][0][1].generation = 2  # an edited resource is new work
    rec._maybe_run(view, reconcile_work.work_of(view), [], run_inline=True)
    assert len(started) == 2


def test_host_outcomes_prefer_the_report():
    stats = {"processed": {"a": 1, "b": 1, "c": 1}, "failures": {"b": 1}, "dark": {"c": 1}}
    report = {"hosts": {"a": {"outcome": "failed", "failed_task": "Drain", "msg": "PDB"}}}
    hosts, messages = runner.host_outcomes(stats, report)
    assert hosts == {"a": "failed", "b": "failed", "c": "unreachable"}
    assert messages == {"a": "Drain: PDB"}


def test_drift_results_from_events():
    events = [{"event": "runner_on_ok", "event_data": {"host": "n1", "task": runner.DRIFT_TASK, "res": {
        "results": [{"item": "a", "drifted": [{"name": "p", "stage": "config-check"}]},
                    {"item": "b", "drifted": []}]}}},
              {"event": "runner_on_failed", "event_data": {"host": "n2", "task": runner.DRIFT_TASK, "res": {
                  "results": [{"item": "a", "failed": True, "msg": "lock held"}]}}}]
    found, errors = runner.drift_results(events)
    assert found == {"n1": {"a": [{"name": "p", "stage": "config-check"}], "b": []}}
    assert errors == {"n2": "a: lock held"}


def test_batch_reset_patch():
    assert actions.batch_reset_patch({"status": {"status": "complete"}}) is None
    assert actions.batch_reset_patch({}) is None
    recorded = {"status": {"rolloutState": {"version": "v"}, "compartmentStatuses": {"a": {}}}}
    assert actions.batch_reset_patch(recorded) == {"rolloutState": None, "compartmentStatuses": None}
    parsed = cli.build_parser().parse_args(["reset-batches", "tune", "--dry-run"])
    assert parsed.name == "tune" and parsed.dry_run


def test_the_collection_is_found_where_it_is():
    """The playbooks, packages and collection root handed to ansible-runner exist."""
    from nodewright_cli import collection
    assert os.path.isfile(collection.playbook("rollout.yml"))
    assert os.path.isdir(os.path.join(collection.shipped_package_dirs()[0], "sysctl"))
    assert os.path.isdir(os.path.join(collection.COLLECTION_ROOT, "ansible_collections", "nodewright", "fleet"))


# ------------------------------------------------------------------ nodewright report

def _run_report(hosts, rollout=None, duration=185.4):
    data = {"playbook": "/x/playbooks/rollout.yml", "duration": duration, "hosts": hosts}
    if rollout is not None:
        data["rollout"] = rollout
    return data


RESOURCES = {"resources": [{"name": "gpu-host-tuning", "status": "complete", "complete": 18, "targets": 18},
                           {"name": "nvidia-tuning-gb200", "status": "complete", "complete": 6, "targets": 6}],
             "blocked": []}


def test_report_of_a_rollout_names_outcomes_waves_and_the_resources():
    from nodewright_cli import report
    assignment = {"h100-0000": {"wave": 1, "compartment": "__default__"},
                  "gb200-0000": {"wave": 1, "compartment": "grace-blackwell"},
                  "h100-0001": {"wave": 2, "compartment": "__default__"}}
    hosts = {"localhost": {"outcome": "ok"}, "h100-0000": {"outcome": "ok"}, "h100-0001": {"outcome": "ok"},
             "gb200-0000": {"outcome": "failed", "failed_task": "Fail with the reason", "msg": "check failed\nlog: x"}}
    lines = report.summarize(_run_report(hosts, [{"assignment": assignment}]), "/tmp/r.json", RESOURCES)
    assert lines == [
        "NodeWright run report: /tmp/r.json",
        "  rollout.yml: 3 node(s) maintained in 2 wave(s), 3m 05s",
        "  nodes per outcome: failed 1, ok 2",
        "  waves: 1: 2 (__default__ 1, grace-blackwell 1); 2: 1 (__default__ 1)",
        "    gb200-0000 failed at 'Fail with the reason': check failed",
        "  NodeWright gpu-host-tuning: complete, 18/18 node(s) complete",
        "  NodeWright nvidia-tuning-gb200: complete, 6/6 node(s) complete",
    ]


def test_report_of_a_run_with_nothing_to_do_says_so():
    from nodewright_cli import report
    lines = report.summarize(_run_report({"localhost": {"outcome": "ok"}}, duration=7.2), "/tmp/r.json",
                             cluster_error="connection refused")
    assert lines == ["NodeWright run report: /tmp/r.json",
                     "  rollout.yml: nothing to do - no targeted node had work (every one is up to date); 7s",
                     "  (resource status not read: connection refused)"]
    failed = report.summarize(_run_report({"localhost": {"outcome": "failed", "failed_task": "Read the desired state",
                                                         "msg": "bad resource"}}), "/tmp/r.json")
    assert failed[1] == "  rollout.yml failed before any node was touched, at 'Read the desired state': bad resource"


def test_the_collection_is_found_with_its_playbooks_and_packages():
    from nodewright_cli import collection

    assert os.path.isfile(os.path.join(collection.FLEET_DIR, "galaxy.yml"))
    assert os.path.isfile(collection.playbook("rollout.yml"))
    assert all(os.path.isdir(d) for d in collection.shipped_package_dirs())


# --------------------------------------------------------------------------- reconcile --notify

def reconcile_args(*argv):
    return cli.build_parser().parse_args(["reconcile"] + list(argv))


def test_reconcile_notify_becomes_every_rollouts_notify_variable(monkeypatch):
    monkeypatch.delenv("NODEWRIGHT_NOTIFY", raising=False)
    args = reconcile_args("--notify", "json://hooks.example/a", "--notify", "slack://T/B/C",
                          "--notify-events", "halted, complete", "--notify-batch-interval", "30m", "-e", "x=1")
    assert cli._reconcile_extravars(args) == {"x": "1", "nodewright_rollout_notify": {
        "urls": ["json://hooks.example/a", "slack://T/B/C"], "events": ["halted", "complete"],
        "batchInterval": "30m"}}


def test_reconcile_notify_from_the_environment_unless_a_flag_says_otherwise(monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_NOTIFY", "json://hooks.example/a  msteams://t/o/k")
    assert cli._reconcile_extravars(reconcile_args())["nodewright_rollout_notify"] == {
        "urls": ["json://hooks.example/a", "msteams://t/o/k"]}
    assert cli._reconcile_extravars(reconcile_args("--notify", "json://other/b"))["nodewright_rollout_notify"] == {
        "urls": ["json://other/b"]}


@pytest.mark.parametrize("argv, message", [
    (["--notify-events", "halted"], "--notify-events without --notify"),
    (["--notify-batch-interval", "5m"], "--notify-batch-interval without --notify"),
    (["--notify", "json://h/a", "--notify-batch-interval", "soon"], "batchInterval"),
    (["--notify", "json://h/a", "--notify-events", "finished"], "unknown event(s) finished"),
    (["--notify", "hooks.example"], "is not a notification URL"),
    (["--notify", "json://h/a", "-e", '{"nodewright_rollout_notify": "json://h/b"}'], "both say where events go"),
    (["-e", '{"nodewright_rollout_notify": {"urls": []}}'], "needs at least one URL"),
])
def test_reconcile_refuses_a_bad_notify_setting_before_it_starts(monkeypatch, argv, message):
    monkeypatch.delenv("NODEWRIGHT_NOTIFY", raising=False)
    with pytest.raises(cli.NodeWrightError) as err:
        cli._reconcile_extravars(reconcile_args(*argv))
    assert message in str(err.value)
