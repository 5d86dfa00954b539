# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Controller-side resolvers: the manifest decides which package a spec runs, never the
name a resource gives it."""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest
import yaml
from nodewright_sim import fleet

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts, desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package import model, resolvers

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
PACKAGES = os.path.join(REPO, "packages")


def gb200_nodes(count=2):
    nodes = []
    for index in range(count):
        node = fleet.node_manifest("gb200-%04d" % index, "gb200", index, "boot", "v1.36.3")
        node["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        nodes.append(node)
    return nodes


def tuning_example():
    with open(os.path.join(REPO, "deploy", "examples", "nodewright-nvidia-tuning.yaml")) as fh:
        resource = next(d for d in yaml.safe_load_all(fh) if d and d["kind"] == "NodeWright")
    policies = {}
    for path in glob.glob(os.path.join(REPO, "deploy", "examples", "*.yaml")):
        with open(path) as fh:
            policies.update({d["metadata"]["name"]: d for d in yaml.safe_load_all(fh)
                             if d and d["kind"] == "DeploymentPolicy"})
    return resource, policies


def test_the_shipped_packages_declare_what_they_write_and_resolve():
    assert model.load_package(os.path.join(PACKAGES, "nvidia-tuning")).resolver == "nvidia-tuning"
    assert model.load_package(os.path.join(PACKAGES, "sysctl")).host_settings == {"sysctl": "*"}
    assert model.load_package(os.path.join(PACKAGES, "kdump")).host_settings == {
        "cmdline": {"crashkernel": "crashkernel"}}
    for name in ("shellscript", "security-agent", "cve-remediation"):
        package = model.load_package(os.path.join(PACKAGES, name))
        assert package.resolver is None and resolvers.resolver_of(package) is None


@pytest.mark.parametrize("given_name", ["nvidia-tuning", "host-tuning"])
def test_a_tuning_package_is_resolved_whatever_the_resource_calls_it(given_name):
    resource, policies = tuning_example()
    resource = copy.deepcopy(resource)
    package = resource["spec"]["packages"].pop("nvidia-tuning")
    if given_name != "nvidia-tuning":
        package["source"] = "nvidia-tuning"
    resource["spec"]["packages"][given_name] = package
    nodes = gb200_nodes()
    described = desired_state.describe(resource, nodes, policies, [PACKAGES])
    spec = next(s for s in described.packages if s.name == given_name)
    assert any(k.startswith("resolved.") for k in spec.config), sorted(spec.config)
    for node in ("gb200-0000", "gb200-0001"):
        summary = described.nodes[node].resolved["nvidia_tuning"]
        assert summary["settings"], summary
        # The resolved settings are what conflict detection compares per node.
        assert conflicts.node_settings(described.nodes[node].resolved)


def test_a_package_without_a_resolver_passes_unchanged():
    spec = {"name": "sysctl", "src": os.path.join(PACKAGES, "sysctl"), "config": {"vm.swappiness": "1"}}
    package = model.load_package(spec["src"])
    out, per_node = resolvers.resolve_specs([spec], {spec["src"]: package}, gb200_nodes(1))
    assert out == [spec] and per_node == {}


def test_a_resolver_the_collection_lacks_is_refused_with_the_known_ones():
    package = model.Package("custom", "1.0.0", resolver="gpu-magic")
    with pytest.raises(ValidationError) as err:
        resolvers.resolver_of(package)
    assert "gpu-magic" in str(err.value) and "nvidia-tuning" in err.value.hint


def test_plan_keys_name_where_summaries_go():
    assert resolvers.plan_keys() == ("nvidia_tuning",)


def write_manifest(root, manifest):
    os.makedirs(os.path.join(root, "steps"), exist_ok=True)
    with open(os.path.join(root, "steps", "run.sh"), "w") as fh:
        fh.write("#!/bin/sh\nexit 0\n")
    with open(os.path.join(root, "package.json"), "w") as fh:
        json.dump(manifest, fh)
    return root


BASE = {"name": "custom", "version": "1.0.0",
        "stages": {"config": [{"path": "run.sh"}], "config-check": [{"path": "run.sh"}]}}


@pytest.mark.parametrize("field, value, message", [
    ("resolver", "gpu-magic", "unknown resolver 'gpu-magic'"),
    ("hostSettings", {"registry": "*"}, "unknown host setting kind 'registry'"),
    ("hostSettings", {"cmdline": {}}, "non-empty mapping of setting name to config key"),
    ("hostSettings", {"sysctl": ["a"]}, "must be \"*\""),
    ("hostSettings", "sysctl", "must be a mapping"),
])
def test_bad_resolver_or_host_settings_are_refused_naming_the_field(tmp_path, field, value, message):
    root = write_manifest(str(tmp_path / "custom"), dict(BASE, **{field: value}))
    with pytest.raises(model.PackageError) as err:
        model.load_package(root)
    assert message in str(err.value) and field in str(err.value)


def test_host_settings_turn_config_into_settings_conflicts_compare(tmp_path):
    root = write_manifest(str(tmp_path / "custom"), dict(BASE, hostSettings={
        "sysctl": "*", "cmdline": {"hugepages": "pages"}}))
    package = model.load_package(root)
    assert package.settings_from_config({"vm.swappiness": "1", "pages": "64"}) == {
        "sysctl:vm.swappiness": "1", "sysctl:pages": "64", "cmdline:hugepages": "64"}
    assert conflicts.spec_settings({"pages": " 64 "}, package)["cmdline:hugepages"] == "64"
    assert package.to_dict()["hostSettings"] == {"cmdline": {"hugepages": "pages"}, "sysctl": "*"}
    # Without hostSettings a package's config writes no setting conflicts know of.
    plain = model.load_package(write_manifest(str(tmp_path / "plain"), BASE))
    assert plain.settings_from_config({"vm.swappiness": "1"}) == {}


def test_the_manifest_accepts_exactly_the_resolvers_the_collection_has():
    assert set(model.RESOLVERS) == {r.name for r in resolvers._RESOLVERS.values()} == set(resolvers._RESOLVERS)
