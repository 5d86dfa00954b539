# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The decisions behind upstream NodeWright's lifecycle fields, table by table:
uninstall on delete (finalizer), re-apply after a reboot and the re-taint of a
runtimeRequired node, runtimeRequiredCordonAfter, and ``package rerun``."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import deletion
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import NodePlan, ResourcePlan
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import config_hashes
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import mark_rerun, plan

pytestmark = pytest.mark.unit

KEY = markers.TAINT_RUNTIME_REQUIRED


def resource(name="tuning", enabled=("kdump",), deleting=False, finalizers=None, annotations=None, **spec):
    packages = {"kdump": {"version": "1.0.0"}, "sysctl": {"version": "1.0.0"}}
    for p in enabled:
        packages[p]["uninstall"] = {"enabled": True, "apply": False}
    meta = {"name": name, "resourceVersion": "7", "annotations": annotations or {}}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": meta,
            "spec": dict({"packages": packages}, **spec)}


def node(name, packages=(), raw=None, tainted=False, boot="b2"):
    annotations = {}
    if packages:
        annotations[markers.state_annotation("tuning")] = json.dumps({"status": "complete", "packages": {
            p: {"version": "1.0.0", "stage": "config", "state": "complete"} for p in packages}})
    if raw is not None:
        annotations[markers.state_annotation("tuning")] = raw
    return {"metadata": {"name": name, "labels": {"pool": "gpu"}, "annotations": annotations},
            "spec": {"taints": [gating.runtime_taint(KEY)] if tainted else []},
            "status": {"nodeInfo": {"bootID": boot}}}


DESCRIBED = {"name": "tuning"}


@pytest.mark.parametrize("obj,nodes,described,action,pending", [
    (resource(), [], DESCRIBED, deletion.ADD_FINALIZER, []),
    (resource(enabled=()), [], DESCRIBED, deletion.NONE, []),
    (resource(finalizers=[deletion.FINALIZER]), [], DESCRIBED, deletion.NONE, []),
    (resource(deleting=True, finalizers=[deletion.FINALIZER]), [node("a", ["kdump"]), node("b", ["sysctl"]),
                                                                node("c")], DESCRIBED, deletion.UNINSTALL, ["a"]),
    (resource(deleting=True, finalizers=[deletion.FINALIZER]), [node("b", ["sysctl"])], DESCRIBED,
     deletion.REMOVE_FINALIZER, []),
    (resource(deleting=True, finalizers=[deletion.FINALIZER], annotations={deletion.ANNOTATION_SKIP_UNINSTALL: "true"}),
     [node("a", ["kdump"])], DESCRIBED, deletion.REMOVE_FINALIZER, []),
    (resource(deleting=True, finalizers=[deletion.FINALIZER]), [node("a", ["kdump"])], None, deletion.BLOCKED, ["a"]),
    (resource(deleting=True, finalizers=[deletion.FINALIZER]), [node("x", raw="{oops")], DESCRIBED,
     deletion.UNINSTALL, ["x"]),
    (resource(deleting=True, finalizers=["other/finalizer"]), [node("a", ["kdump"])], DESCRIBED, deletion.NONE, []),
])
def test_deletion_decisions(obj, nodes, described, action, pending):
    decision = deletion.decide(obj, nodes, described, blocked_reason="spec.deploymentPolicy: missing")
    assert (decision["action"], decision["nodes"]) == (action, pending)
    assert decision["reason"] or action == deletion.NONE
    if action == deletion.BLOCKED:
        assert "annotate it nodewright.io/skip-uninstall=true" in decision["reason"]
        assert "spec.deploymentPolicy: missing" in decision["reason"]


def test_finalizer_patches_keep_other_finalizers_and_the_resource_version():
    obj = resource(finalizers=["other/x"])
    assert deletion.finalizer_patch(obj, True) == {"metadata": {"finalizers": ["other/x", deletion.FINALIZER],
                                                                "resourceVersion": "7"}}
    assert deletion.finalizer_patch(obj, False) is None
    done = resource(finalizers=["other/x", deletion.FINALIZER])
    assert deletion.finalizer_patch(done, False)["metadata"]["finalizers"] == ["other/x"]


def test_a_failed_uninstall_says_so_and_how_to_let_go():
    decision = deletion.decide(resource(deleting=True, finalizers=[deletion.FINALIZER]), [node("a", ["kdump"])],
                               DESCRIBED)
    cond = deletion.deleting_condition(decision, "its uninstall failed (a: kdump uninstall-check exited 1)")
    assert (cond["type"], cond["status"], cond["reason"]) == ("Deleting", "True", "UninstallFailed")
    assert "kdump uninstall-check exited 1" in cond["message"] and "skip-uninstall=true" in cond["message"]


# --------------------------------------------------------------------------- reboots

def desired(reapply=True, interrupt=None):
    return {"name": "pkg", "version": "1.0.0", "config": {"a": "1"}, "interrupt": interrupt,
            "configInterrupts": {}, "dependsOn": {}, "state": "present", "reapplyOnReboot": reapply}


def recorded(boot="b1", stage="config", state="complete", **extra):
    return {"packages": {"pkg": dict({"name": "pkg", "version": "1.0.0", "stage": stage, "state": state,
                                      "configHashes": config_hashes({"a": "1"}), "bootId": boot}, **extra)}}


@pytest.mark.parametrize("reapply,rec,boot,action", [
    (True, recorded("b1"), "b2", "rerun"),
    (True, recorded("b1"), "b1", "none"),
    (False, recorded("b1"), "b2", "none"),
    (True, recorded(None), "b2", "none"),
    (True, recorded("b1"), None, "none"),
    (True, recorded("b1", stage="interrupt", state="in_progress", interrupt={"type": "reboot"}), "b2",
     "post-interrupt"),
])
def test_reapply_after_a_reboot_only_when_asked_and_the_boot_changed(reapply, rec, boot, action):
    (entry,) = plan([desired(reapply)], rec, boot_id=boot)["packages"]
    assert entry["action"] == action
    if action == "rerun":
        assert entry["stages"] == ["apply", "config"] and entry["rerun"] and entry["after_reboot"]
        assert "rebooted since 1.0.0 completed (boot id b1 -> b2)" in entry["reason"]


def described_for(node_name, runtime=True, reapply=True, after_reboot=True, work=True):
    return ResourcePlan("tuning", None, runtime_required=runtime, reapply_on_reboot=reapply,
                        work=[node_name] if work else [],
                        nodes={node_name: NodePlan(packages=[{"name": "pkg", "action": "rerun",
                                                              "after_reboot": after_reboot}])})


@pytest.mark.parametrize("described,tainted,retaint", [
    (described_for("n1"), False, True),
    (described_for("n1"), True, False),
    (described_for("n1", runtime=False), False, False),
    (described_for("n1", reapply=False), False, False),
    (described_for("n1", after_reboot=False), False, False),
    (described_for("n1", work=False), False, False),
])
def test_retaint_after_a_reboot(described, tainted, retaint):
    ok, why = gating.retaint_after_reboot("n1", node("n1", tainted=tainted), [described], KEY)
    assert ok is retaint
    if ok:
        assert "n1 rebooted; tuning applies pkg again (reapplyOnReboot)" == why


def test_runtime_required_cordon_after_opens_the_gate_and_cordons():
    obj = resource(enabled=(), runtimeRequired=True, runtimeRequiredCordonAfter=True,
                   nodeSelectors={"matchLabels": {"pool": "gpu"}})
    done = node("n1", ["kdump", "sysctl"], tainted=True)
    done["metadata"]["labels"][markers.status_label("tuning")] = "complete"
    decision = gating.decide(done, [obj], KEY)
    assert decision["action"] == gating.OPEN
    assert decision["cordon"] == "runtimeRequiredCordonAfter of tuning"
    patch = gating.runtime_cordon_patch(done, decision["cordon"])
    assert patch == {"spec": {"unschedulable": True},
                     "metadata": {"annotations": {markers.ANNOTATION_RUNTIME_CORDON: decision["cordon"]}}}
    done["spec"]["unschedulable"] = True
    assert gating.runtime_cordon_patch(done, decision["cordon"]) is None
    plain = resource(enabled=(), runtimeRequired=True, nodeSelectors={"matchLabels": {"pool": "gpu"}})
    assert gating.decide(node("n1", ["kdump", "sysctl"], tainted=True), [plain], KEY)["cordon"] is None


# --------------------------------------------------------------------------- rerun

def test_mark_rerun_and_its_plan():
    state = recorded("b1")
    marked = mark_rerun(state, "pkg", "config")
    assert marked["packages"]["pkg"]["rerun"] == "config" and marked["status"] == "in_progress"
    (entry,) = plan([desired(False)], marked, boot_id="b1")["packages"]
    assert (entry["action"], entry["stages"], entry.get("rerun")) == ("rerun", ["config"], True)
    (entry,) = plan([desired(False)], mark_rerun(state, "pkg", "apply"), boot_id="b1")["packages"]
    assert entry["stages"] == ["apply", "config"]


@pytest.mark.parametrize("state,name,stage,words", [
    (recorded(), "other", "apply", "is not recorded on the node"),
    (recorded(), "pkg", "interrupt", "cannot be run again"),
    (recorded(stage="interrupt", state="in_progress", interrupt={"type": "reboot"}), "pkg", "apply",
     "waits for its reboot interrupt"),
    (recorded(), "pkg", "upgrade", "no unfinished upgrade"),
])
def test_mark_rerun_refuses(state, name, stage, words):
    with pytest.raises(ValidationError) as caught:
        mark_rerun(state, name, stage)
    assert words in str(caught.value)
