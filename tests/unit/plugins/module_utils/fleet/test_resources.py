# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Validation of NodeWright and DeploymentPolicy resources (the rules of the CRDs)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    is_disabled,
    is_paused,
    validate_deployment_policy,
    validate_nodewright,
)

pytestmark = pytest.mark.unit

SHA = "sha256:" + "0123456789abcdef" * 4
IMAGE = "ghcr.io/nvidia/skyhook-packages/tuning"


def nodewright(spec=None, name="gpu-tuning", **metadata):
    meta = {"name": name}
    meta.update(metadata)
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": meta, "spec": spec or {}}


def with_package(**fields):
    package = {"version": "1.2.3", "image": IMAGE}
    package.update(fields)
    return nodewright({"packages": {"tuning": package}})


FULL = nodewright({
    "nodeSelectors": {"matchLabels": {"nvidia.com/gpu.present": "true"},
                      "matchExpressions": [{"key": "node-role.kubernetes.io/control-plane",
                                            "operator": "DoesNotExist"}]},
    "podNonInterruptLabels": {"matchLabels": {"workload": "training"}},
    "deploymentPolicy": "gpu-rollout",
    "deploymentPolicyOptions": {"resetBatchStateOnCompletion": False},
    "priority": 10,
    "runtimeRequired": True,
    "autoTaintNewNodes": True,
    "additionalTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "packages": {
        "tuning": {"version": "1.2.3", "image": IMAGE, "containerSHA": SHA,
                   "interrupt": {"type": "reboot"},
                   "configMap": {"sysctl.conf": "vm.swappiness=1\n", "nic.properties": "mtu=9000\n"},
                   "configInterrupts": {"sysctl.conf": {"type": "restartAllServices"},
                                        "*.properties": {"type": "service", "services": ["containerd"]}},
                   "env": [{"name": "PROFILE", "value": "throughput"},
                           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "agent", "key": "token"}}}]},
        "crash-dump": {"version": "0.4.0", "source": "packages/crash-dump", "dependsOn": {"tuning": "1.2.3"}},
        "cve-fixes": {"version": "2024.11.0-1", "dependsOn": {"tuning": "1.2.3", "crash-dump": "0.4.0"}},
    },
}, annotations={"nodewright.io/pause": "true"})


def test_full_resource_is_accepted_unchanged():
    result = validate_nodewright(copy.deepcopy(FULL))
    assert result["spec"]["packages"] == FULL["spec"]["packages"]
    assert result["spec"]["priority"] == 10
    assert result["metadata"] == FULL["metadata"]


def test_defaults_are_filled_in():
    result = validate_nodewright(nodewright())
    assert result["spec"] == {"nodeSelectors": {}, "podNonInterruptLabels": {}, "packages": {},
                              "priority": 200, "runtimeRequired": False, "autoTaintNewNodes": False,
                              "additionalTolerations": [], "sequencing": "node", "reapplyOnReboot": False,
                              "runtimeRequiredCordonAfter": False}


def test_interrupt_without_services_loses_the_empty_list():
    result = validate_nodewright(with_package(interrupt={"type": "reboot", "services": []}))
    assert result["spec"]["packages"]["tuning"]["interrupt"] == {"type": "reboot"}


def test_input_is_not_modified():
    original = copy.deepcopy(FULL)
    validate_nodewright(FULL)
    assert FULL == original


def test_pause_and_disable_annotations():
    assert is_paused(FULL) is True
    assert is_disabled(FULL) is False
    assert is_paused(nodewright(annotations={"nodewright.io/pause": "True"})) is False
    assert is_disabled(nodewright(annotations={"nodewright.io/disable": "true"})) is True
    assert is_paused({}) is False


@pytest.mark.parametrize("obj,field,message", [
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, "apiVersion", "expected nodewright.io"),
    (dict(nodewright(), apiVersion="skyhook.nvidia.com/v1alpha1", kind="NodeWright"), "apiVersion", "expected"),
    (nodewright(name=None), "metadata.name", "non-empty string"),
    (nodewright(name="GPU"), "metadata.name", "'GPU' is not a valid NodeWright name: it has upper-case letters"),
    (nodewright(name="a" * 57), "metadata.name", "57 characters long; a NodeWright name is a DNS-1123 subdomain: at most 56"),
    (nodewright({"bogus": 1}), "spec.bogus", "unknown field"),
    (nodewright({"nodeSelectors": "pool=a"}), "spec.nodeSelectors", "must be a mapping"),
    (nodewright({"nodeSelectors": {"matchLabels": {"bad key": "x"}}}), "spec.nodeSelectors",
     "'bad key' is not a valid label key: it contains white space"),
    (nodewright({"podNonInterruptLabels": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
     "spec.podNonInterruptLabels.matchExpressions[0]", "In needs values"),
    (nodewright({"interruptionBudget": {"percent": 10, "count": 2}}), "spec.interruptionBudget", "both percent and count"),
    (nodewright({"interruptionBudget": {}}), "spec.interruptionBudget", "needs percent"),
    (nodewright({"interruptionBudget": {"percent": 0}}), "spec.interruptionBudget.percent", "from 1 to 100"),
    (nodewright({"interruptionBudget": {"count": 0}}), "spec.interruptionBudget.count", ">= 1"),
    (nodewright({"interruptionBudget": {"percent": 10}, "deploymentPolicy": "p"}), "spec.interruptionBudget",
     "both interruptionBudget and deploymentPolicy"),
    (nodewright({"deploymentPolicy": "Bad_Name"}), "spec.deploymentPolicy", "is not a valid DeploymentPolicy name"),
    (nodewright({"deploymentPolicyOptions": {"resetBatchStateOnCompletion": True}}), "spec.deploymentPolicyOptions",
     "without deploymentPolicy"),
    (nodewright({"deploymentPolicy": "p", "deploymentPolicyOptions": {"reset": True}}),
     "spec.deploymentPolicyOptions.reset", "unknown field"),
    (nodewright({"priority": 0}), "spec.priority", "from 1 to 9223372036854775807"),
    (nodewright({"priority": "high"}), "spec.priority", "from 1 to 9223372036854775807"),
    (nodewright({"priority": 10 ** 30}), "spec.priority", "a 64-bit integer, as the CRD takes it"),
    (nodewright({"priority": 2 ** 63}), "spec.priority", "got 9223372036854775808"),
    (nodewright({"runtimeRequired": "yes"}), "spec.runtimeRequired", "true or false"),
    (nodewright({"additionalTolerations": {}}), "spec.additionalTolerations", "must be a list"),
    (nodewright({"additionalTolerations": [{"operator": "Equal", "value": "x"}]}), "spec.additionalTolerations[0]",
     "without a key must use operator Exists"),
    (nodewright({"additionalTolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}),
     "spec.additionalTolerations[0].value", "takes no value"),
    (nodewright({"additionalTolerations": [{"key": "a", "operator": "In"}]}),
     "spec.additionalTolerations[0].operator", "unknown operator"),
    (nodewright({"additionalTolerations": [{"key": "a", "effect": "NoRun"}]}),
     "spec.additionalTolerations[0].effect", "unknown effect"),
    (nodewright({"additionalTolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
     "spec.additionalTolerations[0].tolerationSeconds", "only applies to effect NoExecute"),
    (nodewright({"packages": []}), "spec.packages", "must be a mapping"),
    (nodewright({"packages": {"a": {"version": "1.0.0"}}}), "spec.packages.a", "'a' is not valid"),
    (nodewright({"packages": {"Tuning": {"version": "1.0.0"}}}), "spec.packages.Tuning", "is not valid"),
    (nodewright({"packages": {"tuning2": {"version": "1.0.0"}}}), "spec.packages.tuning2", "is not valid"),
    (nodewright({"packages": {"a" + "b" * 42 + "c": {"version": "1.0.0"}}}), "spec.packages." + "a" + "b" * 42 + "c",
     "limit is 43"),
    (nodewright({"packages": {"tuning": {"name": "tuning", "version": "1.0.0"}}}), "spec.packages.tuning.name",
     "takes its name from its key"),
    (with_package(version=None), "spec.packages.tuning.version", "non-empty string"),
    (with_package(version="1.2.3.4"), "spec.packages.tuning.version", "1.2 stands for 1.2.0"),
    (with_package(version="1.2-rc.1"), "spec.packages.tuning.version", "not valid"),
    (with_package(version=1.2), "spec.packages.tuning.version", "string"),
    (with_package(version="01.2.3"), "spec.packages.tuning.version", "not valid"),
    (with_package(image=IMAGE + ":1.2.3"), "spec.packages.tuning.image", "the tag is the version"),
    (with_package(image=IMAGE + "@" + SHA), "spec.packages.tuning.image", "the digest goes in containerSHA"),
    (with_package(image="ghcr.io/has space"), "spec.packages.tuning.image", "not valid"),
    (with_package(source="packages/tuning"), "spec.packages.tuning", "both image and source"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "containerSHA": SHA}}}),
     "spec.packages.tuning.containerSHA", "package has none"),
    (with_package(containerSHA="sha256:ABC"), "spec.packages.tuning.containerSHA", "64 lowercase hex"),
    (with_package(interrupt={"type": "restart"}), "spec.packages.tuning.interrupt.type", "unknown interrupt type"),
    (with_package(interrupt={"type": "service"}), "spec.packages.tuning.interrupt.services", "needs the services"),
    (with_package(interrupt={"type": "reboot", "services": ["kubelet"]}), "spec.packages.tuning.interrupt.services",
     "only used by interrupt type service"),
    (with_package(interrupt={"type": "service", "services": ["bad unit"]}),
     "spec.packages.tuning.interrupt.services[0]", "is not a systemd unit name"),
    (with_package(interrupt={"type": "noop", "when": "now"}), "spec.packages.tuning.interrupt.when", "unknown interrupt field"),
    (with_package(configMap={"sysctl.d/99.conf": "x"}), "spec.packages.tuning.configMap.sysctl.d/99.conf", "no '/'"),
    (with_package(configMap={"a.conf": 3}), "spec.packages.tuning.configMap.a.conf", "must be a string"),
    (with_package(configMap={"a.conf": "x"}, configInterrupts={"b.conf": {"type": "reboot"}}),
     "spec.packages.tuning.configInterrupts.b.conf", "matches no key of configMap"),
    (with_package(configMap={"a.conf": "x"}, configInterrupts={"*.properties": {"type": "reboot"}}),
     "spec.packages.tuning.configInterrupts.*.properties", "matches no key"),
    (with_package(configMap={"a.conf": "x"}, configInterrupts={"*.conf": {"type": "service"}}),
     "spec.packages.tuning.configInterrupts.*.conf.services", "needs the services"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "dependsOn": {"other": "1.0.0"}}}}),
     "spec.packages.tuning.dependsOn.other", "does not define"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "dependsOn": {"other": "1.0.0"}},
                              "other": {"version": "0.9.0"}}}),
     "spec.packages.tuning.dependsOn.other", "depends on other 1.0.0 or later, but the resource has other 0.9.0"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "dependsOn": {"other": "1.0.0"}},
                              "other": {"version": "1.0.0", "uninstall": {"enabled": True, "apply": True}}}}),
     "spec.packages.tuning.dependsOn.other", "which uninstall.apply removes"),
    (nodewright({"sequencing": "serial"}), "spec.sequencing", "unknown sequencing 'serial'"),
    (nodewright({"stageTimeout": "-5m"}), "spec.stageTimeout", "must not be negative"),
    (nodewright({"stageTimeout": 300}), "spec.stageTimeout", "must be a duration string"),
    (with_package(stageTimeout="-1s"), "spec.packages.tuning.stageTimeout", "must not be negative"),
    (with_package(stageTimeout="5 minutes"), "spec.packages.tuning.stageTimeout", "is not a duration"),
    (with_package(uninstall={"apply": True}), "spec.packages.tuning.uninstall.apply", "without uninstall.enabled"),
    (with_package(uninstall={"enable": True}), "spec.packages.tuning.uninstall.enable", "did you mean 'enabled'"),
    (nodewright({"drainConfig": {"timeout": "5m", "gracePeriod": "10m"}}), "spec.drainConfig.gracePeriod",
     "gracePeriod 10m is longer than timeout 5m"),
    (nodewright({"drainConfig": {"timeout": "-1m"}}), "spec.drainConfig.timeout", "must not be negative"),
    (nodewright({"drainConfig": {"force": "yes"}}), "spec.drainConfig.force", "true or false"),
    (nodewright({"drainConfig": {"evict": False}}), "spec.drainConfig.evict", "unknown field"),
    (nodewright({"podNonInterruptWait": {"timeout": "2h", "giveUpAfter": "1h"}}),
     "spec.podNonInterruptWait.giveUpAfter", "giveUpAfter 1h is shorter than timeout 2h"),
    (nodewright({"podNonInterruptWait": {"timeout": 60}}), "spec.podNonInterruptWait.timeout",
     "must be a duration string"),
    (nodewright({"podNonInterruptWait": {"timeout": "-1h"}}), "spec.podNonInterruptWait.timeout", "must not be negative"),
    (nodewright({"podNonInterruptWait": {"giveUp": "1h"}}), "spec.podNonInterruptWait.giveUp", "unknown field"),
    (nodewright({"podNonInterruptWait": "1h"}), "spec.podNonInterruptWait", "mapping"),
    (nodewright({"runtimeRequiredCordonAfter": True}), "spec.runtimeRequiredCordonAfter", "needs runtimeRequired"),
    (nodewright({"reapplyOnReboot": "yes"}), "spec.reapplyOnReboot", "true or false"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "dependsOn": {"tuning": "1.0.0"}}}}),
     "spec.packages.tuning.dependsOn.tuning", "depends on itself"),
    (nodewright({"packages": {"tuning": {"version": "1.0.0", "dependsOn": {"other": ""}},
                              "other": {"version": "1.0.0"}}}),
     "spec.packages.tuning.dependsOn.other", "non-empty"),
    (nodewright({"packages": {"aa": {"version": "1.0.0", "dependsOn": {"bb": "1.0.0"}},
                              "bb": {"version": "1.0.0", "dependsOn": {"cc": "1.0.0"}},
                              "cc": {"version": "1.0.0", "dependsOn": {"aa": "1.0.0"}}}}),
     "spec.packages.cc.dependsOn", "cycle: aa -> bb -> cc -> aa"),
    (with_package(env={"A": "1"}), "spec.packages.tuning.env", "must be a list"),
    (with_package(env=[{"name": "1A", "value": "x"}]), "spec.packages.tuning.env[0].name", "not valid"),
    (with_package(env=[{"name": "A", "value": 1}]), "spec.packages.tuning.env[0].value", "must be a string"),
    (with_package(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
     "spec.packages.tuning.env[1].name", "set twice"),
    (with_package(env=[{"name": "A", "value": "1", "valueFrom": {}}]), "spec.packages.tuning.env[0]",
     "both value and valueFrom"),
    (with_package(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
     "spec.packages.tuning.env[0].valueFrom.fieldRef", "unknown field"),
    (with_package(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
     "spec.packages.tuning.env[0].valueFrom.secretKeyRef.key", "non-empty"),
    (with_package(resources={"cpuRequest": "100m"}), "spec.packages.tuning.resources", "unknown field"),
])
def test_nodewright_errors_name_the_field(obj, field, message):
    with pytest.raises(ValidationError) as err:
        validate_nodewright(obj)
    assert err.value.field == field
    assert message in str(err.value)


def test_a_skyhook_object_is_pointed_at_the_converter():
    obj = dict(nodewright(), apiVersion="skyhook.nvidia.com/v1alpha1", kind="Skyhook")
    with pytest.raises(ValidationError) as err:
        validate_nodewright(obj)
    assert "nodewright.fleet.desired_state" in err.value.hint


@pytest.mark.parametrize("version", ["0.0.1", "1.2.3", "10.20.30", "1.0.0-alpha", "1.0.0-rc.1+build.7",
                                     "2024.11.0-1", "1.0.0+sha.5114f85"])
def test_semver_accepted(version):
    validate_nodewright(with_package(version=version))


@pytest.mark.parametrize("image", ["alpine", "ghcr.io/org/pkg", "localhost:5000/org/pkg",
                                   "nvcr.io/nvidia/cloud-native/skyhook-packages/tuning", "registry.example.com/a_b/c-d"])
def test_bare_images_accepted(image):
    validate_nodewright(with_package(image=image))


def policy_resource(spec, name="gpu-rollout"):
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": name},
            "spec": spec}


def test_deployment_policy_is_normalised():
    result = validate_deployment_policy(policy_resource({"default": {"budget": {"percent": 25}}}))
    assert result["spec"] == {"default": {"budget": {"percent": 25}}, "compartments": [],
                              "resetBatchStateOnCompletion": True}


@pytest.mark.parametrize("obj,field", [
    (policy_resource({"default": {"budget": {"count": 1}}}, name="Bad"), "metadata.name"),
    (dict(policy_resource({}), kind="NodeWright"), "apiVersion"),
    (policy_resource(None), "spec"),
    (policy_resource({"default": {"budget": {"count": 0}}}), "spec.default.budget.count"),
])
def test_deployment_policy_errors(obj, field):
    with pytest.raises(ValidationError) as err:
        validate_deployment_policy(obj)
    assert err.value.field == field


# --------------------------------------------------------------------------- every problem at once

def test_every_problem_of_a_resource_is_reported_at_once():
    obj = nodewright({
        "nodeSelectors": {"matchLabels": {"bad key": "x"}},
        "priority": 10 ** 30,
        "runtimeRequired": "yes",
        "bogus": 1,
        "packages": {
            "tuning": {"version": "v1.x", "interrupt": {"type": "restart"}, "env": [{"name": "1A", "value": 1}]},
            "other": {"version": "1.0.0", "dependsOn": {"missing": "1.0.0", "tuning2": "x"}},
        },
        "additionalTolerations": [{"operator": "Equal"}, {"key": "a", "effect": "NoRun"}],
    }, name="Bad_Name")
    with pytest.raises(ValidationError) as err:
        validate_nodewright(obj)
    fields = [e.field for e in err.value.errors]
    assert fields == [
        "metadata.name", "spec.bogus", "spec.nodeSelectors",
        "spec.packages.tuning.version", "spec.packages.tuning.interrupt.type",
        "spec.packages.tuning.env[0].name", "spec.packages.tuning.env[0].value",
        "spec.packages.other.dependsOn.tuning2",
        "spec.packages.other.dependsOn.missing",
        "spec.priority", "spec.runtimeRequired",
        "spec.additionalTolerations[0]", "spec.additionalTolerations[1].effect",
    ]
    text = str(err.value)
    assert text.startswith("13 problems: (1) metadata.name: 'Bad_Name' is not a valid NodeWright name")
    assert "(10) spec.priority: must be a whole number from 1 to 9223372036854775807" in text


def test_every_dependency_problem_is_reported():
    obj = nodewright({"packages": {
        "aa": {"version": "1.0.0", "dependsOn": {"bb": "1.0.0", "zz": "1.0.0"}},
        "bb": {"version": "1.0.0", "dependsOn": {"aa": "1.0.0", "cc": "2.0.0"}},
        "cc": {"version": "1.0.0", "dependsOn": {"cc": "1.0.0"}},
    }})
    with pytest.raises(ValidationError) as err:
        validate_nodewright(obj)
    messages = [str(e) for e in err.value.errors]
    assert messages == [
        "spec.packages.aa.dependsOn.zz: depends on package 'zz', which this resource does not define "
        "(add zz to packages or remove the dependency)",
        "spec.packages.bb.dependsOn.cc: depends on cc 2.0.0 or later, but the resource has cc 1.0.0: the dependency "
        "cannot be met (raise cc to 2.0.0 or later, or lower the dependsOn version (it is the lowest version that will "
        "do))",
        "spec.packages.cc.dependsOn.cc: package cc depends on itself",
        "spec.packages.bb.dependsOn: dependsOn forms a cycle: aa -> bb -> aa "
        "(packages must form a DAG; remove one of these dependencies)",
    ]


def test_unknown_fields_are_all_named_with_the_nearest_known_one():
    with pytest.raises(ValidationError) as err:
        validate_nodewright(nodewright({"priorty": 1, "nodeSelector": {}}))
    assert [e.field for e in err.value.errors] == ["spec.priorty", "spec.nodeSelector"]
    assert "did you mean 'priority'?" in err.value.errors[0].hint
    assert "did you mean 'nodeSelectors'?" in err.value.errors[1].hint


@pytest.mark.parametrize("priority", [1, 200, 2 ** 63 - 1])
def test_priority_in_the_crds_range_is_accepted(priority):
    assert validate_nodewright(nodewright({"priority": priority}))["spec"]["priority"] == priority


@pytest.mark.parametrize("priority", [0, -1, 2 ** 63, 10 ** 30, 1.5, "10", True])
def test_priority_outside_the_crds_range_is_refused(priority):
    with pytest.raises(ValidationError) as err:
        validate_nodewright(nodewright({"priority": priority}))
    assert err.value.field == "spec.priority"


def test_a_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ValidationError):
        validate_nodewright(nodewright(name="gpu-tuning\n"))
    with pytest.raises(ValidationError):
        validate_nodewright(with_package(version="1.2.3\n"))


def test_depends_on_is_a_minimum_version():
    obj = nodewright({"packages": {"app": {"version": "1.0.0", "dependsOn": {"lib": "1.0.0"}},
                                   "lib": {"version": "1.4.0"}}})
    assert validate_nodewright(obj)["spec"]["packages"]["app"]["dependsOn"] == {"lib": "1.0.0"}


def test_upstream_parity_fields_are_accepted_and_drain_config_maps_onto_node_drain():
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import drain_options
    obj = nodewright({"drainConfig": {"timeout": "15m", "gracePeriod": "90s", "deleteEmptyDirData": True,
                                      "force": False, "ignoreDaemonSets": True, "disableEviction": False},
                      "stageTimeout": "30m", "sequencing": "all", "reapplyOnReboot": True, "runtimeRequired": True,
                      "runtimeRequiredCordonAfter": True,
                      "packages": {"tuning": {"version": "1.0.0", "stageTimeout": "1h30m",
                                              "uninstall": {"enabled": True, "apply": False}}}})
    spec = validate_nodewright(obj)["spec"]
    assert spec["drainConfig"]["gracePeriod"] == "90s" and spec["sequencing"] == "all"
    assert spec["packages"]["tuning"]["uninstall"] == {"enabled": True, "apply": False}
    assert spec["packages"]["tuning"]["stageTimeout"] == "1h30m"
    assert drain_options(spec["drainConfig"]) == {"timeout": 900, "grace_period": 90, "delete_emptydir_data": True,
                                                  "force": False, "ignore_daemonsets": True, "disable_eviction": False}
    assert drain_options({"timeout": "0"}) == {}, "NodeWright always bounds a drain: 0 leaves the rollout's timeout"


def test_the_wait_for_protected_pods_is_read_in_seconds():
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import non_interrupt_wait_options
    spec = validate_nodewright(nodewright({"podNonInterruptWait": {"timeout": "90m", "giveUpAfter": "72h"}}))["spec"]
    assert spec["podNonInterruptWait"] == {"timeout": "90m", "giveUpAfter": "72h"}
    assert non_interrupt_wait_options(spec["podNonInterruptWait"]) == {"timeout": 5400, "give_up_after": 259200}
    # 0 leaves the rollout's own wait and never gives up; unset is the same.
    assert non_interrupt_wait_options({"timeout": "0", "giveUpAfter": "0"}) == {}
    assert non_interrupt_wait_options(None) == {}
    assert non_interrupt_wait_options({"timeout": "1.5s"}) == {"timeout": 2}


def test_auto_taint_without_runtime_required_is_accepted_and_does_nothing():
    # Skyhook ignores autoTaintNewNodes without runtimeRequired, and manifests written for it
    # (AICR's tuning-gke) rely on that.
    out = validate_nodewright(nodewright({"autoTaintNewNodes": True}))
    assert out["spec"]["autoTaintNewNodes"] is True and out["spec"]["runtimeRequired"] is False
