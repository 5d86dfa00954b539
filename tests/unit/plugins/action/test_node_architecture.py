# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which architecture's variant of a package image a node gets: the node's own, from
the Node object or the k8s_nodes inventory's facts, never the controller's by default."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.action.maintain import node_packages
from ansible_collections.nodewright.fleet.plugins.action.package import node_arch
from ansible_collections.nodewright.fleet.plugins.module_utils.node import facts as nf
from ansible_collections.nodewright.fleet.plugins.module_utils.package.sources import node_architecture

pytestmark = pytest.mark.unit

GB200 = {"metadata": {"name": "gb200-0", "labels": {"kubernetes.io/arch": "arm64"}},
         "status": {"nodeInfo": {"architecture": "arm64", "bootID": "b"}}}


def test_the_node_object_gives_its_architecture():
    assert node_architecture(GB200) == "arm64"
    assert node_architecture({"metadata": {"labels": {"kubernetes.io/arch": "aarch64"}}}) == "arm64"
    assert node_architecture({"status": {"nodeInfo": {"architecture": "x86_64"}}}) == "amd64"
    assert node_architecture({"metadata": {"name": "n"}}) is None
    assert node_architecture(None) is None


def test_the_inventorys_facts_give_the_architecture():
    # The layout the k8s_nodes inventory really sets (node_facts), not a hand-written one.
    facts = nf.node_facts(GB200)
    assert node_arch({"k8s_node": facts}) == "arm64"
    labels_only = nf.node_facts({"metadata": {"name": "g", "labels": {"kubernetes.io/arch": "arm64"}}})
    assert node_arch({"k8s_node": labels_only}) == "arm64"


def test_the_maintain_actions_node_architecture_comes_first():
    facts = nf.node_facts(GB200)
    assert node_arch({"k8s_node": facts, "nodewright_node_architecture": "amd64"}) == "amd64"
    assert node_arch({"ansible_facts": {"architecture": "aarch64"}}) == "aarch64"
    assert node_arch({}) is None and node_arch(None) is None


def test_a_package_from_an_image_index_is_taken_from_the_index_for_each_node():
    packages = [{"name": "kernel", "src": "/cache/sha256-aa-linux-amd64/package", "version": "1.0.0"},
                {"name": "local", "src": "/packages/local", "version": "2.0.0"}]
    images = {"kernel": {"reference": "oci://registry.example/kernel:1.0.0@sha256:" + "a" * 64,
                         "archs": ["amd64", "arm64"]}}
    out = node_packages(packages, images, "arm64")
    assert out[0] == dict(packages[0], src=images["kernel"]["reference"])
    assert out[1] is packages[1]
    assert packages[0]["src"].startswith("/cache/"), "the resource's specs are left as they are"
    assert node_packages(packages, images, None) is packages
    assert node_packages(packages, {}, "arm64") is packages
    assert node_packages(None, images, "arm64") is None
