# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Skyhook → NodeWright conversion, with Skyhook objects as a cluster returns them."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import validate_nodewright
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import convert

from engine_dry_run import plan_waves

pytestmark = pytest.mark.unit

SHA = "sha256:" + "5" * 64


def skyhook_from_cluster():
    """A Skyhook as ``kubectl get skyhook -o yaml`` shows it, status included."""
    return {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "Skyhook",
        "metadata": {
            "name": "h100-baseline",
            "uid": "0b7c6a4e-8f9d-4a51-9c4e-2f1d3b8a7e10",
            "resourceVersion": "884213",
            "generation": 7,
            "creationTimestamp": "2025-09-12T08:14:03Z",
            "finalizers": ["skyhook.nvidia.com/skyhook"],
            "labels": {"team": "gpu-platform"},
            "annotations": {
                "skyhook.nvidia.com/pause": "true",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                "argocd.argoproj.io/tracking-id": "gpu-platform:skyhook.nvidia.com/Skyhook:h100-baseline",
            },
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {
            "nodeSelectors": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "podNonInterruptLabels": {"matchLabels": {"workload": "training"}},
            "deploymentPolicy": "h100-rollout",
            "interruptionBudget": {},
            "priority": 100,
            "runtimeRequired": True,
            "additionalTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "packages": {
                "tuning": {
                    "name": "tuning",
                    "version": "1.4.0",
                    "image": "ghcr.io/nvidia/skyhook-packages/tuning",
                    "containerSHA": SHA,
                    "interrupt": {"type": "reboot", "services": []},
                    "configMap": {"sysctl.conf": "kernel.numa_balancing=0\n", "grub.conf": "iommu=pt\n"},
                    "configInterrupts": {"sysctl.conf": {"type": "restartAllServices", "services": []},
                                         "grub.conf": {"type": "reboot"}},
                    "env": [{"name": "TUNING_PROFILE", "value": "training"}],
                },
                "nvidia-setup": {
                    "version": "0.2.1",
                    "image": "ghcr.io/nvidia/skyhook-packages/nvidia-setup",
                    "dependsOn": {"tuning": "1.4.0"},
                    "interrupt": {"type": "service", "services": ["containerd", "nvidia-persistenced"]},
                    "env": [{"name": "REGISTRY_TOKEN",
                             "valueFrom": {"secretKeyRef": {"name": "registry", "key": "token"}}}],
                },
            },
        },
        "status": {
            "status": "in_progress",
            "nodesInProgress": 2,
            "completeNodes": "5/8",
            "packageList": "nvidia-setup,tuning",
            "observedGeneration": 7,
        },
    }


def test_realistic_skyhook_converts_field_for_field():
    result = convert(skyhook_from_cluster())
    nw = result.resource
    assert nw["apiVersion"] == "nodewright.io/v1alpha1"
    assert nw["kind"] == "NodeWright"
    assert nw["metadata"] == {
        "name": "h100-baseline",
        "labels": {"team": "gpu-platform"},
        "annotations": {"nodewright.io/pause": "true",
                        "argocd.argoproj.io/tracking-id": "gpu-platform:skyhook.nvidia.com/Skyhook:h100-baseline"},
    }
    spec = nw["spec"]
    assert "interruptionBudget" not in spec          # Skyhook's empty {} placeholder
    assert spec["deploymentPolicy"] == "h100-rollout"
    assert spec["priority"] == 100
    assert spec["nodeSelectors"] == {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    tuning = spec["packages"]["tuning"]
    assert "name" not in tuning
    assert tuning["interrupt"] == {"type": "reboot"}
    assert tuning["configInterrupts"]["sysctl.conf"] == {"type": "restartAllServices"}
    assert tuning["containerSHA"] == SHA
    assert spec["packages"]["nvidia-setup"]["env"][0]["valueFrom"]["secretKeyRef"]["key"] == "token"
    assert "status" not in nw
    assert "dropped status: NodeWright writes its own" in result.notes
    assert any("last-applied-configuration" in note for note in result.notes)
    validate_nodewright(nw)


def test_input_is_not_modified():
    original = skyhook_from_cluster()
    kept = copy.deepcopy(original)
    convert(original)
    assert original == kept


def test_disable_annotation_and_nodewright_nvidia_group():
    obj = skyhook_from_cluster()
    obj["apiVersion"] = "nodewright.nvidia.com/v1alpha1"
    obj["kind"] = "NodeWright"
    obj["metadata"]["annotations"] = {"nodewright.nvidia.com/disable": "true",
                                      "nodewright.nvidia.com/nodeOrderOffset": "4"}
    result = convert(obj)
    assert result.resource["metadata"]["annotations"] == {"nodewright.io/disable": "true"}
    assert any("nodeOrderOffset" in note for note in result.notes)


def legacy_skyhook():
    """An older Skyhook: spec.pause, serial, tags in image, interruptionBudget."""
    return {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "Skyhook",
        "metadata": {"name": "cve-2025-1", "namespace": "default"},
        "spec": {
            "pause": True,
            "serial": True,
            "interruptionBudget": {"percent": 25, "count": None},
            "packages": {
                "kernel-fix": {"version": "2.0.0", "image": "nvcr.io/acme/kernel-fix:2.0.0",
                               "interrupt": {"type": "reboot"}},
                "audit": {"version": "1.1.0", "image": "nvcr.io/acme/audit@" + SHA},
            },
        },
    }


def test_legacy_fields():
    result = convert(legacy_skyhook())
    nw = result.resource
    assert nw["metadata"] == {"name": "cve-2025-1", "annotations": {"nodewright.io/pause": "true"}}
    assert nw["spec"]["interruptionBudget"] == {"percent": 25}
    assert nw["spec"]["packages"]["kernel-fix"]["image"] == "nvcr.io/acme/kernel-fix"
    assert nw["spec"]["packages"]["audit"] == {"version": "1.1.0", "image": "nvcr.io/acme/audit",
                                               "containerSHA": SHA}
    assert "serial" not in nw["spec"] and "pause" not in nw["spec"]
    joined = "\n".join(result.notes)
    for expected in ("metadata.namespace", "spec.serial", "removed tag '2.0.0'", "moved digest to containerSHA",
                     "spec.pause: true became annotation nodewright.io/pause"):
        assert expected in joined


@pytest.mark.parametrize("budget,converted", [
    ({"percent": 0}, {"count": 1}),
    ({"count": 3, "percent": None}, {"count": 3}),
    ({"percent": None, "count": None}, None),
])
def test_interruption_budget(budget, converted):
    obj = legacy_skyhook()
    obj["spec"]["interruptionBudget"] = budget
    assert convert(obj).resource["spec"].get("interruptionBudget") == converted


def with_package_field(key, value):
    obj = skyhook_from_cluster()
    obj["spec"]["packages"]["tuning"][key] = value
    return obj


def with_spec_field(key, value):
    obj = skyhook_from_cluster()
    obj["spec"][key] = value
    return obj


@pytest.mark.parametrize("obj,field,message", [
    (with_package_field("bogus", 1), "spec.packages.tuning.bogus", "not an upstream package field"),
    (with_package_field("name", "other"), "spec.packages.tuning.name", "differs from its key"),
    (with_package_field("image", "ghcr.io/nvidia/skyhook-packages/tuning@sha256:" + "6" * 64),
     "spec.packages.tuning.image", "differs from containerSHA"),
    (with_package_field("env", [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
     "spec.packages.tuning.env[0].valueFrom.fieldRef", "only secretKeyRef and configMapKeyRef"),
    (with_spec_field("unknownField", True), "spec.unknownField", "not an upstream field"),
    (with_spec_field("interruptionBudget", {"count": 0}), "spec.interruptionBudget.count", "never let a node start"),
    (with_spec_field("interruptionBudget", "25%"), "spec.interruptionBudget", "must be a mapping"),
])
def test_fields_without_an_equivalent_are_named(obj, field, message):
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == field
    assert message in str(err.value)


def test_the_hint_says_how_to_convert_anyway():
    with pytest.raises(ValidationError) as err:
        convert(with_package_field("bogus", "5m"))
    assert err.value.hint == ("remove it from the source resource, or convert with "
                              "drop=['spec.packages.tuning.bogus'] to leave it out")


@pytest.mark.parametrize("key,value,words", [
    ("resources", {"cpuRequest": "100m", "cpuLimit": "500m", "memoryRequest": "64Mi", "memoryLimit": "256Mi"},
     "no pod resources"),
    ("gracefulShutdown", "5m", "no pod grace period"),
    ("agentImageOverride", "ghcr.io/nvidia/skyhook/agent:6.4.2", "without upstream's agent image"),
])
def test_fields_of_upstreams_package_pods_are_ignored_with_one_warning_each(key, value, words):
    result = convert(with_package_field(key, value))
    assert key not in result.resource["spec"]["packages"]["tuning"]
    (warning,) = result.warnings
    assert warning.startswith("spec.packages.tuning.%s is ignored: NodeWright runs " % key) and words in warning
    assert not any(key in note for note in result.notes)


def test_an_image_tag_other_than_the_version_is_replaced_with_a_warning():
    # Upstream pulls image:version whatever the tag says (its simple-skyhook test gives "bogus").
    result = convert(with_package_field("image", "ghcr.io/nvidia/skyhook-packages/tuning:bogus"))
    assert result.resource["spec"]["packages"]["tuning"]["image"] == "ghcr.io/nvidia/skyhook-packages/tuning"
    assert result.resource["spec"]["packages"]["tuning"]["version"] == "1.4.0"
    assert result.warnings == ["spec.packages.tuning.image: tag 'bogus' is replaced by the version "
                               "(ghcr.io/nvidia/skyhook-packages/tuning:1.4.0 is pulled, as upstream does)"]
    same = convert(with_package_field("image", "ghcr.io/nvidia/skyhook-packages/tuning:1.4.0"))
    assert same.warnings == [] and any("removed tag '1.4.0'" in n for n in same.notes)


@pytest.mark.parametrize("version,dependency", [("1.2", "1.2"), ("3.3", "3"), ("v1.4.0", "1.4")])
def test_versions_are_taken_as_upstream_takes_them_and_kept_as_written(version, dependency):
    obj = skyhook_from_cluster()
    obj["spec"]["packages"]["tuning"]["version"] = version
    obj["spec"]["packages"]["nvidia-setup"]["dependsOn"] = {"tuning": dependency}
    result = convert(obj)
    packages = result.resource["spec"]["packages"]
    assert packages["tuning"]["version"] == version   # the image tag and node-state key, as upstream's
    assert packages["nvidia-setup"]["dependsOn"] == {"tuning": dependency}
    assert validate_nodewright(result.resource)["spec"]["packages"]["tuning"]["version"] == version


def test_drop_leaves_named_fields_out_and_says_so():
    obj = with_package_field("resources", {"cpuRequest": "100m"})
    obj["spec"]["packages"]["nvidia-setup"]["gracefulShutdown"] = "2m"
    obj["spec"]["packages"]["tuning"]["agentImageOverride"] = "ghcr.io/nvidia/skyhook/agent:6.4.2"
    result = convert(obj, drop=["spec.packages.*.resources", "spec.packages.*.gracefulShutdown",
                                "spec.packages.*.agentImageOverride"])
    assert "resources" not in result.resource["spec"]["packages"]["tuning"]
    assert "agentImageOverride" not in result.resource["spec"]["packages"]["tuning"]
    assert sum(1 for note in result.notes if note.startswith("dropped spec.")) == 3
    assert result.warnings == []   # named in drop: left out knowingly, no warning


def test_drop_does_not_cover_other_fields():
    obj = with_package_field("bogus", 1)
    with pytest.raises(ValidationError) as err:
        convert(obj, drop="spec.packages.*.gracefulShutdown")
    assert err.value.field == "spec.packages.tuning.bogus"
    result = convert(with_package_field("resources", {}), drop="spec.packages.*.gracefulShutdown")
    assert result.warnings and result.warnings[0].startswith("spec.packages.tuning.resources is ignored")


def upstream_nodewright():
    """An upstream NodeWright (v0.15) object with its later fields, as the API returns
    it: the fields it marks nullable come back as null when unset."""
    obj = skyhook_from_cluster()
    obj["apiVersion"] = "nodewright.nvidia.com/v1alpha1"
    obj["kind"] = "NodeWright"
    obj["spec"].update({
        "drainConfig": {"timeout": "20m", "gracePeriod": "60s", "deleteEmptyDirData": True, "force": None,
                        "ignoreDaemonSets": True, "disableEviction": False},
        "sequencing": "all", "runtimeRequired": True, "runtimeRequiredCordonAfter": True})
    obj["spec"]["packages"]["tuning"].update({"stageTimeout": "45m", "uninstall": {"enabled": True, "apply": False}})
    return obj


def test_upstream_parity_fields_carry_over():
    result = convert(upstream_nodewright())
    spec = result.resource["spec"]
    assert spec["drainConfig"] == {"timeout": "20m", "gracePeriod": "60s", "deleteEmptyDirData": True,
                                   "ignoreDaemonSets": True, "disableEviction": False}
    assert (spec["sequencing"], spec["runtimeRequiredCordonAfter"]) == ("all", True)
    assert spec["packages"]["tuning"]["stageTimeout"] == "45m"
    assert spec["packages"]["tuning"]["uninstall"] == {"enabled": True, "apply": False}
    assert not any("drainConfig" in n or "uninstall" in n or "sequencing" in n for n in result.notes)


def test_upstream_uninstall_apply_and_node_sequencing():
    obj = skyhook_from_cluster()
    obj["spec"]["sequencing"] = "node"
    obj["spec"]["packages"]["nvidia-setup"]["uninstall"] = {"enabled": True, "apply": True}
    spec = convert(obj).resource["spec"]
    assert spec["sequencing"] == "node"
    assert spec["packages"]["nvidia-setup"]["uninstall"] == {"enabled": True, "apply": True}


@pytest.mark.parametrize("change,field,words", [
    (lambda o: o["spec"]["drainConfig"].update(timeout="5m", gracePeriod="10m"), "spec.drainConfig.gracePeriod",
     "longer than timeout"),
    (lambda o: o["spec"].update(sequencing="serial"), "spec.sequencing", "unknown sequencing"),
    (lambda o: o["spec"]["packages"]["tuning"].update(stageTimeout="-10m"), "spec.packages.tuning.stageTimeout",
     "must not be negative"),
    (lambda o: o["spec"]["packages"]["tuning"].update(uninstall={"enabled": False, "apply": True}),
     "spec.packages.tuning.uninstall.apply", "without uninstall.enabled"),
])
def test_upstream_parity_fields_are_validated_on_the_way(change, field, words):
    obj = upstream_nodewright()
    change(obj)
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == field and words in str(err.value)


def test_converted_resource_is_validated():
    obj = skyhook_from_cluster()
    obj["spec"]["interruptionBudget"] = {"percent": 10}   # with deploymentPolicy: not allowed
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == "spec.interruptionBudget"
    obj = skyhook_from_cluster()
    obj["spec"]["packages"]["tuning"]["version"] = "1.4.0.1"
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == "spec.packages.tuning.version"


def skyhook_policy():
    """A Skyhook DeploymentPolicy with critical / production / test compartments."""
    return {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "h100-rollout", "namespace": "skyhook", "resourceVersion": "1234"},
        "spec": {
            "resetBatchStateOnCompletion": True,
            "default": {"budget": {"percent": 100},
                        "strategy": {"fixed": {"initialBatch": 1, "batchThreshold": 100, "failureThreshold": 3,
                                               "safetyLimit": 50}}},
            "compartments": [
                {"name": "critical", "selector": {"matchLabels": {"priority": "critical"}},
                 "budget": {"count": 1},
                 "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 30}}},
                {"name": "production", "selector": {"matchLabels": {"env": "production"}},
                 "budget": {"count": 3},
                 "strategy": {"linear": {"initialBatch": 1, "delta": 1, "failureThreshold": 2}}},
                {"name": "test", "selector": {"matchLabels": {"env": "test"}},
                 "budget": {"percent": 50},
                 "strategy": {"exponential": {"initialBatch": 2, "growthFactor": 2, "batchThreshold": 90}}},
            ],
        },
    }


def test_deployment_policy_converts_and_plans():
    result = convert(skyhook_policy())
    dp = result.resource
    assert dp["apiVersion"] == "nodewright.io/v1alpha1" and dp["kind"] == "DeploymentPolicy"
    assert dp["metadata"] == {"name": "h100-rollout"}
    assert dp["spec"] == skyhook_policy()["spec"]
    assert any("cluster scoped" in note for note in result.notes)
    nodes = [{"name": "prod-%d" % i, "labels": {"env": "production"}} for i in range(6)]
    assert plan_waves(parse_policy(dp["spec"]), nodes).sizes == [1, 2, 3]


@pytest.mark.parametrize("change,field", [
    (lambda spec: spec.update(bogus=1), "spec.bogus"),
    (lambda spec: spec["compartments"][1]["strategy"]["linear"].update(delta=0),
     "spec.compartments[1].strategy.linear.delta"),
    (lambda spec: spec["compartments"].append(dict(spec["compartments"][0], name="again")),
     "spec.compartments[3].selector"),
])
def test_deployment_policy_errors(change, field):
    obj = skyhook_policy()
    change(obj["spec"])
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == field


@pytest.mark.parametrize("obj,field", [
    ({"apiVersion": "apps/v1", "kind": "Deployment"}, "apiVersion"),
    ({"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Package"}, "kind"),
    ({"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "NodeWright"}, "kind"),
])
def test_unsupported_objects(obj, field):
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert err.value.field == field


def test_an_object_must_be_a_mapping():
    with pytest.raises(ValidationError):
        convert("not an object")


def test_every_problem_of_a_skyhook_object_is_reported_at_once():
    obj = with_package_field("bogus", {"cpuRequest": "100m"})
    obj["spec"]["packages"]["tuning"]["name"] = "other"
    obj["spec"]["packages"]["tuning"]["gracefulShutdown"] = "30s"   # a warning, not a problem
    obj["spec"]["packages"]["tuning"]["other"] = "30s"
    obj["spec"]["sequencing"] = "sometimes"
    obj["spec"]["priority"] = 0
    with pytest.raises(ValidationError) as err:
        convert(obj)
    assert [e.field for e in err.value.errors] == [
        "spec.packages.tuning.name", "spec.packages.tuning.bogus", "spec.packages.tuning.other",
        "spec.priority", "spec.sequencing"]
    assert str(err.value).startswith("5 problems: (1) spec.packages.tuning.name: package name 'other' differs")
    assert "(2) spec.packages.tuning.bogus: has no NodeWright equivalent" in str(err.value)


def test_the_drop_hint_can_name_the_callers_own_option():
    with pytest.raises(ValidationError) as err:
        convert(with_package_field("bogus", "30s"), drop_hint="list %r in skyhook_drop")
    assert err.value.hint == ("remove it from the source resource, or list 'spec.packages.tuning.bogus' "
                              "in skyhook_drop")


def test_auto_taint_without_runtime_required_converts_with_a_note():
    obj = skyhook_from_cluster()
    obj["spec"].update(runtimeRequired=False, autoTaintNewNodes=True)
    result = convert(obj)
    assert result.resource["spec"]["autoTaintNewNodes"] is True
    assert any("autoTaintNewNodes has no effect without spec.runtimeRequired" in n for n in result.notes)
    obj["spec"]["runtimeRequired"] = True
    assert not any("autoTaintNewNodes" in n for n in convert(obj).notes)
