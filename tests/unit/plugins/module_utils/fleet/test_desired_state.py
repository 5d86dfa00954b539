# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""desired_state.describe, the per-resource data the rollout driver reads: field
paths of package errors, a node whose state cannot be read, uninstall.apply, stage
timeouts, drainConfig as node_drain options, sequencing: all, stable node order."""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
PACKAGES = [os.path.join(REPO, "packages")]
SCRIPTS = {"apply.sh": "true", "apply_check.sh": "true"}


def node(name, created="2026-01-01T00:00:00Z", labels=None, annotations=None, boot="b1"):
    return {"metadata": {"name": name, "creationTimestamp": created, "labels": dict(labels or {}, pool="gpu"),
                         "annotations": annotations or {}},
            "status": {"nodeInfo": {"bootID": boot}}}


def nodewright(name="tuning", packages=None, status=None, deleting=False, **spec):
    obj = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": name},
           "spec": dict({"nodeSelectors": {"matchLabels": {"pool": "gpu"}},
                         "packages": packages if packages is not None else
                         {"shellscript": {"version": "1.0.0", "configMap": dict(SCRIPTS)}}}, **spec)}
    if status:
        obj["status"] = status
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    return obj


def complete_state(version="1.0.0"):
    return json.dumps({"status": "complete", "packages": {"shellscript": {
        "version": version, "stage": "config", "state": "complete",
        "configHashes": __import__("ansible_collections.nodewright.fleet.plugins.module_utils.package.model",
                                   fromlist=["config_hashes"]).config_hashes(SCRIPTS)}}})


def describe(resource, nodes):
    return desired_state.describe(resource, nodes, {}, PACKAGES)


def test_a_missing_check_names_the_resource_field():
    resource = nodewright(packages={"shellscript": {"version": "1.0.0", "configMap": {"apply.sh": "true"}}})
    with pytest.raises(ValidationError) as caught:
        describe(resource, [node("n1")])
    assert caught.value.field == "spec.packages.shellscript.configMap.apply_check.sh"
    assert "add apply_check.sh" in caught.value.hint


def test_a_missing_expected_key_names_the_resource_field():
    # A Skyhook package (AICR's recipes name theirs nvidia-setup) whose config.json
    # expects apply.sh.
    skyhook = os.path.join(REPO, "tests", "fixtures", "skyhook", "shellscript")
    resource = nodewright(packages={"nvidia-setup": {"version": "1.0.0", "source": skyhook}})
    with pytest.raises(ValidationError) as caught:
        describe(resource, [node("n1")])
    assert caught.value.field == "spec.packages.nvidia-setup.configMap.apply.sh"
    assert "expected config key 'apply.sh' is not supplied" in str(caught.value)
    assert "packages[0]" not in str(caught.value)


def test_a_node_whose_state_cannot_be_read_is_left_out_and_named():
    nodes = [node("n1"), node("n2", annotations={markers.state_annotation("tuning"): "{hand edited"})]
    described = describe(nodewright(), nodes)
    assert described.work == ["n1"]
    (bad,) = described.malformed
    assert (bad["node"], bad["resource"]) == ("n2", "tuning")
    assert "is malformed" in bad["message"] and "nodewright reset n2 --resource tuning" in bad["message"]
    assert described.nodes["n2"].actions == {}


def test_uninstall_apply_plans_the_uninstall_everywhere():
    packages = {"shellscript": {"version": "1.0.0", "configMap": dict(SCRIPTS),
                                "uninstall": {"enabled": True, "apply": True}}}
    nodes = [node("n1", annotations={markers.state_annotation("tuning"): complete_state()}), node("n2")]
    described = describe(nodewright(packages=packages), nodes)
    assert described.packages[0].state == "absent"
    assert described.nodes["n1"].actions == {"shellscript": "uninstall"}
    assert described.nodes["n2"].actions == {"shellscript": "none"}
    assert described.work == ["n1"] and described.uninstalling == ["n1"]


def test_the_driver_gets_stage_timeouts_drain_options_and_the_parity_settings():
    packages = {"shellscript": {"version": "1.0.0", "configMap": dict(SCRIPTS), "stageTimeout": "10m"},
                "sysctl": {"version": "1.0.0", "configMap": {"vm.swappiness": "10"}}}
    resource = nodewright(packages=packages, stageTimeout="1h", sequencing="all", reapplyOnReboot=True,
                          drainConfig={"timeout": "20m", "gracePeriod": "30s", "force": True})
    described = describe(resource, [node("n1")])
    timeouts = {p.name: p.stage_timeout for p in described.packages}
    assert timeouts == {"shellscript": 600, "sysctl": 3600}
    assert described.stage_timeout == 3600
    assert described.drain == {"timeout": 1200, "grace_period": 30, "force": True}
    assert (described.sequencing, described.reapply_on_reboot) == ("all", True)
    assert described.deleting is False and described.recorded == []


def test_a_deleted_resource_has_no_rollout_work():
    nodes = [node("n1"), node("n2", annotations={markers.state_annotation("tuning"): complete_state()})]
    described = describe(nodewright(deleting=True), nodes)
    assert described.deleting and described.work == []
    assert described.recorded == ["n2"]


def test_sequencing_all_holds_later_priorities_until_complete_everywhere():
    nodes = [node("n1", annotations={markers.state_annotation("first"): complete_state()}), node("n2")]
    first = describe(nodewright("first", priority=10, sequencing="all"), nodes)
    same = describe(nodewright("same", priority=10), nodes)
    later = describe(nodewright("later", priority=20), nodes)
    desired_state.apply_sequencing([first, same, later])
    assert first.work == ["n2"] and same.work == ["n1", "n2"], "the same priority is not held"
    assert later.work == [] and later.held_by == "first"
    assert "waiting for first (priority 10, sequencing: all) to complete on every node" in later.held
    assert "1 of 2 still to do" in later.held

    done = [node(n, annotations={markers.state_annotation("first"): complete_state()}) for n in ("n1", "n2")]
    first = describe(nodewright("first", priority=10, sequencing="all"), done)
    later = describe(nodewright("later", priority=20), done)
    desired_state.apply_sequencing([first, later])
    assert later.work == ["n1", "n2"] and later.held is None

    node_sequencing = describe(nodewright("first", priority=10), nodes)
    later = describe(nodewright("later", priority=20), nodes)
    desired_state.apply_sequencing([node_sequencing, later])
    assert later.work == ["n1", "n2"], "sequencing: node holds nothing"


def test_node_order_is_sticky_across_runs():
    nodes = [node("old", "2026-01-01T00:00:00Z"), node("mid", "2026-01-02T00:00:00Z"),
             node("new", "2026-01-03T00:00:00Z")]
    assert describe(nodewright(), nodes).targets == ["old", "mid", "new"]
    status = {"nodePriority": {"new": "2026-01-05T00:00:00Z", "mid": "2026-01-04T00:00:00Z"}}
    described = describe(nodewright(status=status), nodes)
    assert described.targets == ["mid", "new", "old"], "the nodes under way keep their place"
    # The waves a run makes (describe_all's dry run) keep that order too.
    planned = desired_state.describe_all([nodewright(status=status)], nodes, {}, PACKAGES)
    first_wave = planned.rollouts[0].waves["waves"][0]["nodes"]
    assert first_wave[0] == "mid"


def test_the_status_records_node_priority_ready_and_non_interrupt_pods():
    nodes = [node("n1", labels={markers.status_label("tuning"): "blocked"},
                  annotations={markers.state_annotation("tuning"): json.dumps(
                      {"status": "blocked", "blockedBy": ["train/job-0", "train/job-1"]})}),
             node("n2", labels={markers.status_label("tuning"): "complete"})]
    status = compute_status("tuning", nodes, ["n1", "n2"], [], now=None,
                            current={"nodePriority": {"n2": "2026-01-01T00:00:00Z", "gone": "2025-01-01T00:00:00Z"}})
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["NonInterruptPodsRunning"]["status"] == "True"
    assert "n1 waits for train/job-0, train/job-1" in conditions["NonInterruptPodsRunning"]["message"]
    assert (conditions["Blocked"]["status"], conditions["Blocked"]["reason"]) == ("True", "NonInterruptPodsRunning")
    assert conditions["Ready"]["status"] == "False"
    assert status["nodePriority"]["n2"] == "2026-01-01T00:00:00Z" and "n1" in status["nodePriority"]
    assert status["nodePriority"]["gone"] is None, "a node no longer targeted leaves the order"
    ready = compute_status("tuning", [copy.deepcopy(nodes[1])], ["n2"], [])
    conditions = {c["type"]: c for c in ready["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["NonInterruptPodsRunning"]["status"] == "False"


def test_has_work_judges_a_node_from_its_markers_as_they_are_now():
    # What a job slice asks of a node another slice rolls out: new, finished, mid-sequence.
    specs = [spec.to_dict() for spec in describe(nodewright(), [node("n1")]).packages]  # the planner's input
    done = {markers.status_label("tuning"): markers.STATUS_COMPLETE}
    fresh = node("n1")
    finished = node("n1", labels=done, annotations={markers.state_annotation("tuning"): complete_state()})
    older = node("n1", labels=done, annotations={markers.state_annotation("tuning"): complete_state("0.9.0")})
    midway = node("n1", labels={markers.status_label("tuning"): markers.STATUS_IN_PROGRESS},
                  annotations={markers.state_annotation("tuning"): complete_state()})
    unreadable = node("n1", annotations={markers.state_annotation("tuning"): "{hand edited"})
    assert [desired_state.has_work(specs, n, "tuning") for n in (fresh, finished, older, midway, unreadable)] == [
        True, False, True, True, True]


def test_additional_tolerations_reach_the_validation_job_of_each_node():
    taint = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute",
             "tolerationSeconds": 60}
    described = describe(nodewright(additionalTolerations=[taint]), [node("n1")])
    assert described.tolerations == [taint]
    assert describe(nodewright(), [node("n1")]).tolerations == []
    job = node_waits.validation_job_manifest("n1", {"template": {"spec": {"containers": []}}}, 0,
                                             described.tolerations)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "n1" and taint in pod["tolerations"]
    # the cordon and the runtime-required taint are tolerated with or without it
    assert {t["key"] for t in pod["tolerations"]} >= {"node.kubernetes.io/unschedulable", "dedicated"}


class _Lookup(object):
    def __init__(self, objects):
        self.objects, self.calls = objects, []

    def __call__(self, kind, name, key):
        self.calls.append((kind, name, key))
        return self.objects.get((kind, name), {}).get(key)


def test_env_value_from_is_a_reference_in_the_spec_and_read_when_the_package_runs():
    env = [{"name": "PLAIN", "value": "x"},
           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
           {"name": "ZONE", "valueFrom": {"configMapKeyRef": {"name": "site", "key": "zone", "optional": True}}}]
    packages = {"shellscript": {"version": "1.0.0", "configMap": dict(SCRIPTS), "env": env}}
    lookup = _Lookup({("Secret", "creds"): {"token": "t0k"}})
    specs = desired_state.package_specs(nodewright(packages=packages), PACKAGES, env_lookup=lookup)
    assert specs[0]["env"] == {"PLAIN": "x"}
    assert specs[0]["env_from"] == {
        "TOKEN": {"kind": "Secret", "name": "creds", "key": "token", "optional": False},
        "ZONE": {"kind": "ConfigMap", "name": "site", "key": "zone", "optional": True}}
    assert "t0k" not in json.dumps(specs)
    # the missing optional key is left unset; the present one is read
    assert desired_state.resolve_env_from(specs[0]["env_from"], lookup) == {"TOKEN": "t0k"}


def test_a_required_env_value_from_that_is_missing_refuses_the_resource():
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    packages = {"shellscript": {"version": "1.0.0", "configMap": dict(SCRIPTS), "env": env}}
    with pytest.raises(ValidationError) as exc:
        desired_state.package_specs(nodewright(packages=packages), PACKAGES, env_lookup=_Lookup({}))
    assert "Secret nodewright/creds has no key 'token'" in str(exc.value)
    assert "spec.packages.shellscript.env.TOKEN.valueFrom" in str(exc.value)
    with pytest.raises(ValidationError):
        desired_state.resolve_env_from({"TOKEN": {"kind": "Secret", "name": "creds", "key": "token",
                                                  "optional": False}}, _Lookup({}))
