# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright adopt``'s plan, without a cluster: what it writes on a node that
upstream NodeWright worked on (NodeWright's own state, status label, cordon record),
what it leaves to the next rollout, what it refuses, and that a second run changes
nothing. The simulator test (tests/integration/test_adopt.py) runs it for real."""

from __future__ import annotations

import json

from nodewright_cli import adopt, collection

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.package import planner

DIRS = collection.shipped_package_dirs()
KEY = "nodewright.nvidia.com/nodeState_demo"
TAINT = {"key": "nodewright.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}


def annotation(*entries):
    """The operator's nodeState annotation: json.Marshal of {"name|version": PackageStatus}."""
    return json.dumps({"%s|%s" % (n, v): {"name": n, "version": v, "image": "ghcr.io/example/" + n, "stage": stage,
                                          "state": state} for n, v, stage, state in entries}, separators=(",", ":"))


def resource(name="demo", runtime_required=True):
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"pool": "a"}}, "runtimeRequired": runtime_required,
                     "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}},
                                  "agentless": {"version": "1.0.0"},
                                  "shellscript": {"version": "1.0.0",
                                                  "configMap": {"apply.sh": "true\n", "apply_check.sh": "true\n"}}}}}


def node(state, cordoned=True, tainted=True, extra=None):
    annotations = {KEY: state, "nodewright.nvidia.com/version_demo": "v0.20.0",
                   "nodewright.nvidia.com/status_demo": "in_progress"}
    if cordoned:
        annotations["nodewright.nvidia.com/cordon_demo"] = "true"
    annotations.update(extra or {})
    return {"metadata": {"name": "n1", "labels": {"pool": "a", "nodewright.nvidia.com/status_demo": "in_progress"},
                         "annotations": annotations},
            "spec": {"unschedulable": cordoned, "taints": [TAINT] if tainted else []},
            "status": {"nodeInfo": {"bootID": "boot-1"}}}


def written_state(planned):
    return json.loads(planned["nodes"][0]["patch"]["metadata"]["annotations"][markers.state_annotation("demo")])


def test_complete_packages_are_recorded_the_rest_is_left_to_the_rollout_and_the_cordon_taken_over():
    n = node(annotation(("sysctl", "1.0", "config", "complete"), ("agentless", "1.0.0", "post-interrupt", "complete"),
                        ("shellscript", "1.0.0", "apply", "erroring"), ("retired", "2.0.0", "config", "complete")))
    planned = adopt.plan([n], [resource()], DIRS)
    state = written_state(planned)
    assert sorted(state["packages"]) == ["agentless", "sysctl"]
    entry = state["packages"]["sysctl"]
    assert (entry["version"], entry["stage"], entry["state"], entry["adoptedFrom"], entry["bootId"]) == (
        "1.0.0", "config", "complete", KEY, "boot-1")
    assert state["adopted"]["from"] == KEY and state["adopted"]["operatorVersion"] == "v0.20.0"
    assert "status" not in state  # shellscript is still to come
    patch = planned["nodes"][0]["patch"]
    assert markers.status_label("demo") not in patch["metadata"].get("labels", {})
    record = json.loads(patch["metadata"]["annotations"][markers.ANNOTATION_CORDONED_BY])
    assert record["owner"] == "nodewright" and record["resource"] == "demo"
    # The next rollout applies only shellscript: the adopted config is the resource's own.
    after = node_ops.merged(n, patch)
    desired = [w["desired"] for w in adopt.desired_of([resource()], DIRS)["demo"]["packages"].values()]
    actions = {p["name"]: p["action"] for p in planner.plan(desired, state, boot_id="boot-1")["packages"]}
    assert actions == {"agentless": "none", "sysctl": "none", "shellscript": "apply"}
    assert planned["nodes"][0]["taint"]["action"] == "keep"
    text = adopt.render(planned, dry_run=False)
    assert "adopted as complete: agentless 1.0.0, sysctl 1.0.0" in text
    assert ("not adopted, to be applied again by the next rollout: shellscript 1.0.0 (upstream left it erroring at "
            "stage apply; NodeWright applies it from the start)") in text
    assert "ignored: retired 2.0.0 (not a package of NodeWright resource demo)" in text
    assert planned["summary"]["problems"] == 0

    # A second run finds everything recorded and changes nothing.
    again = adopt.plan([after], [resource()], DIRS)
    assert again["nodes"][0]["patch"] is None and not again["nodes"][0]["changed"]
    assert "nothing to adopt: everything upstream completed is already recorded" in adopt.render(again, False)


def test_a_node_upstream_finished_is_complete_uncordoned_and_its_gate_opens():
    n = node(annotation(("sysctl", "1.0", "config", "complete"), ("agentless", "1.0.0", "post-interrupt", "complete"),
                        ("shellscript", "1.0.0", "config", "complete")))
    planned = adopt.plan([n], [resource()], DIRS)
    patch = planned["nodes"][0]["patch"]
    assert written_state(planned)["status"] == "complete"
    assert patch["metadata"]["labels"] == {markers.status_label("demo"): "complete", markers.LABEL_STATUS: "complete"}
    assert patch["spec"] == {"unschedulable": None}
    assert planned["nodes"][0]["taint"]["action"] == "open"
    assert "released: its work on the node is complete" in adopt.render(planned, dry_run=True)


def test_what_cannot_be_adopted_is_reported():
    missing = node(annotation(("sysctl", "1.0.0", "config", "complete")), cordoned=False, tainted=False,
                   extra={"skyhook.nvidia.com/nodeState_legacy": "{oops"})
    planned = adopt.plan([missing], [resource()], DIRS)
    by_resource = {d["resource"]: d for d in planned["nodes"][0]["resources"]}
    assert "no NodeWright resource legacy" in by_resource["legacy"]["missing"]
    assert "not valid JSON" in by_resource["legacy"]["error"]
    assert planned["summary"]["problems"] == 2
    # NodeWright's own malformed state for the resource is never overwritten.
    mine = node(annotation(("sysctl", "1.0.0", "config", "complete")), cordoned=False, tainted=False,
                extra={markers.state_annotation("demo"): "[broken"})
    planned = adopt.plan([mine], [resource()], DIRS)
    assert planned["nodes"][0]["patch"] is None
    assert "NodeWright's own state for demo cannot be read" in adopt.render(planned, True)


def test_nodes_without_upstream_marks_are_not_listed():
    plain = {"metadata": {"name": "plain", "labels": {}, "annotations": {}}, "spec": {}}
    planned = adopt.plan([plain], [resource()], DIRS)
    assert planned["nodes"] == []
    assert "no node carries upstream NodeWright state" in adopt.render(planned, False)
