# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Upstream NodeWright's own end-to-end inputs (``k8s-tests/chainsaw/``), as upstream writes
them, convert: warnings only for fields without meaning here, each naming its field."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    validate_deployment_policy,
    validate_nodewright,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import convert

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
INPUTS = os.path.join(REPO, "tests", "fixtures", "upstream-objects", "chainsaw-inputs.yaml")


def upstream_inputs():
    with open(INPUTS) as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def by_name():
    return {obj["metadata"]["name"]: obj for obj in upstream_inputs()}


IMAGE = "ghcr.io/nvidia/skyhook/agentless"
RESOURCES = "NodeWright runs package steps on the host, not in a package pod, so there are no pod resources to set"
# name -> the warnings its conversion gives, exactly (none: the object has nothing without meaning here).
EXPECTED_WARNINGS = {
    "simple-skyhook": [
        "spec.packages.foobar.resources is ignored: " + RESOURCES,
        "spec.packages.dexter.image: tag 'bogus' is replaced by the version (%s:1.2.3 is pulled, as upstream "
        "does)" % IMAGE,
    ],
    "interrupt": ["spec.packages.jason.agentImageOverride is ignored: NodeWright runs the package's steps itself, "
                  "without upstream's agent image"],
    "cleanup-pods": ["spec.packages.aa.image: tag 'bogus' is replaced by the version (%s:1.2.3 is pulled, as "
                     "upstream does)" % IMAGE],
    "skyhook-upgrade": ["spec.packages.foobar.resources is ignored: " + RESOURCES],
}


def test_the_fixture_holds_every_kind_upstream_writes():
    kinds = {(o["apiVersion"], o["kind"]) for o in upstream_inputs()}
    assert kinds == {("skyhook.nvidia.com/v1alpha1", "Skyhook"), ("nodewright.nvidia.com/v1alpha1", "NodeWright"),
                     ("skyhook.nvidia.com/v1alpha1", "DeploymentPolicy")}


@pytest.mark.parametrize("obj", upstream_inputs(), ids=lambda o: o["metadata"]["name"])
def test_every_upstream_input_converts_with_warnings_only_for_fields_without_meaning(obj):
    result = convert(obj)
    assert result.warnings == EXPECTED_WARNINGS.get(obj["metadata"]["name"], [])
    resource = result.resource
    assert resource["apiVersion"] == "nodewright.io/v1alpha1"
    validate = validate_deployment_policy if resource["kind"] == "DeploymentPolicy" else validate_nodewright
    assert validate(resource)["metadata"]["name"] == obj["metadata"]["name"]


def test_versions_stay_as_upstream_writes_them():
    # Upstream's node state says "foobar|1.2" and pulls agentless:1.2: the text is kept.
    packages = convert(by_name()["interrupt"]).resource["spec"]["packages"]
    assert packages["foobar"]["version"] == "1.2" and packages["baxter"]["version"] == "3.3"
    assert packages["foobar"]["dependsOn"] == {"dexter": "1.2.3", "baxter": "3.3"}
    simple = convert(by_name()["simple-skyhook"]).resource["spec"]["packages"]
    assert simple["dexter"]["image"] == IMAGE and simple["dexter"]["version"] == "1.2.3"
    assert "resources" not in simple["foobar"]


def test_what_upstream_means_carries_over():
    converted = {name: convert(obj).resource for name, obj in by_name().items()}
    assert converted["drain-config-timeout"]["spec"]["drainConfig"] == {"force": False, "timeout": "5s"}
    assert "namespace" not in converted["drain-config-timeout"]["metadata"]
    assert converted["test-override-disabled"]["spec"]["deploymentPolicyOptions"] == {
        "resetBatchStateOnCompletion": False}
    assert converted["uninstall-mixed-packages"]["spec"]["packages"]["pkg-remove"]["uninstall"] == {
        "enabled": True, "apply": False}
    assert converted["config-skyhook"]["spec"]["packages"]["dexter"]["configInterrupts"] == {
        "*.properties": {"type": "service", "services": ["rsyslog"]}}
    assert converted["runtime-required"]["spec"]["runtimeRequired"] is True
    assert [c["name"] for c in converted["multi-tier-policy"]["spec"]["compartments"]] == [
        "critical", "standard", "test"]
