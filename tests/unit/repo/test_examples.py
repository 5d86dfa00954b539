# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The shipped examples (deploy/examples) on every fleet the simulator makes: each
resource is valid and plans its nodes, and a node that two of them target never gets
two values for one kernel parameter."""

from __future__ import annotations

import glob
import os

import pytest
import yaml
from nodewright_sim import fleet

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PACKAGES = [os.path.join(REPO, "packages")]


def examples():
    docs = []
    for path in sorted(glob.glob(os.path.join(REPO, "deploy", "examples", "*.yaml"))):
        with open(path) as fh:
            docs.extend(d for d in yaml.safe_load_all(fh) if d)
    return ([d for d in docs if d["kind"] == "NodeWright"],
            {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeploymentPolicy"})


def profile_nodes(profile):
    spec = fleet.PROFILES[profile]
    nodes = []
    for pool, count in sorted(fleet.split_counts(spec["pools"], spec["nodes"]).items()):
        for index in range(count):
            node = fleet.node_manifest("%s-%04d" % (pool, index), pool, index, "boot", "v1.36.3")
            node["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
            nodes.append(node)
    return nodes


def kernel_parameters(described, node):
    """The sysctl values a resource's packages write on a node."""
    values = {}
    for spec in described.packages:
        if spec.name == "sysctl":
            values.update({k: str(v) for k, v in spec.config.items()})
    for setting in (described.nodes[node].resolved.get("nvidia_tuning") or {}).get("settings", []):
        if setting["id"].startswith("sysctl:"):
            values[setting["id"][len("sysctl:"):]] = str(setting["value"])
    return values


@pytest.mark.parametrize("profile", sorted(fleet.PROFILES))
def test_no_node_gets_two_values_for_one_parameter(profile):
    resources, policies = examples()
    nodes = profile_nodes(profile)
    described = [desired_state.describe(r, nodes, policies, PACKAGES) for r in resources]
    assert all(d.targets for d in described if profile != "bare" or d.name != "nvidia-tuning-gb200")
    for node in (n["metadata"]["name"] for n in nodes):
        seen = {}
        for d in described:
            if node not in d.targets:
                continue
            for key, value in kernel_parameters(d, node).items():
                other = seen.setdefault(key, (d.name, value))
                assert other[1] == value, "%s: %s wants %s = %s, %s wants %s" % (
                    node, other[0], key, other[1], d.name, value)


def test_the_mixed_fleet_is_split_between_the_two_resources():
    resources, policies = examples()
    nodes = profile_nodes("mixed")
    targets = {r["metadata"]["name"]: desired_state.describe(r, nodes, policies, PACKAGES).targets
               for r in resources}
    assert sorted(targets) == ["gpu-host-tuning", "nvidia-tuning-gb200"]
    assert len(targets["nvidia-tuning-gb200"]) == 6 and all(n.startswith("gb200") for n in targets["nvidia-tuning-gb200"])
    assert len(targets["gpu-host-tuning"]) == 18 and not set(targets["gpu-host-tuning"]) & set(
        targets["nvidia-tuning-gb200"])
