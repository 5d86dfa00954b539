# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Host variables, GPU facts, NodeWright state, default groups and pod counts derived
from raw Node and Pod JSON (no cluster needed)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.node import facts as nf
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import state_annotation, status_label
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import parse_label_selector

pytestmark = pytest.mark.unit

GB200 = {
    "metadata": {
        "name": "gb200-0001", "uid": "u-1", "creationTimestamp": "2026-01-02T03:04:05Z",
        "labels": {
            "kubernetes.io/arch": "arm64", "kubernetes.io/hostname": "gb200-0001",
            "topology.kubernetes.io/zone": "zone-b", "nodepool": "gb200",
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200",
            "nvidia.com/gpu.family": "blackwell", "nvidia.com/gpu.compute.major": "10",
            "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": "4",
            "nvidia.com/gpu.memory": "189471", "nvidia.com/gpu.clique": "gb200-rack-0.1",
        },
        "annotations": {"sim.nodewright.io/host-root": "/sim/nodes/gb200-0001/root"},
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {"providerID": "kwok://gb200-0001",
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {
        "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "InternalIP", "address": "fd00::7"},
                      {"type": "Hostname", "address": "gb200-0001"}],
        "capacity": {"cpu": "144", "memory": "960Gi", "nvidia.com/gpu": "4"},
        "allocatable": {"cpu": "143", "memory": "950Gi", "nvidia.com/gpu": "3"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
        ],
        "nodeInfo": {"architecture": "arm64", "bootID": "b-1", "kernelVersion": "6.8.0-45-generic",
                     "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://1.7.27",
                     "kubeletVersion": "v1.36.3", "operatingSystem": "linux", "machineID": "m"},
    },
}


def node(**changes):
    out = copy.deepcopy(GB200)
    for path, value in changes.items():
        where = out
        keys = path.split("__")
        for key in keys[:-1]:
            where = where.setdefault(key, {})
        if value is None:
            where.pop(keys[-1], None)
        else:
            where[keys[-1]] = value
    return out


def test_node_facts_layout():
    facts = nf.node_facts(GB200)
    assert facts["name"] == "gb200-0001" and facts["creation_timestamp"] == "2026-01-02T03:04:05Z"
    assert facts["labels"]["nodepool"] == "gb200"
    assert facts["annotations"] == GB200["metadata"]["annotations"]
    assert facts["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert facts["unschedulable"] is False
    assert facts["ready"] is True and facts["ready_reason"] == "KubeletReady"
    assert facts["conditions"] == {"MemoryPressure": "False", "Ready": "True"}
    assert facts["node_info"] == {
        "kernel_version": "6.8.0-45-generic", "os_image": "Ubuntu 24.04.1 LTS", "architecture": "arm64",
        "kubelet_version": "v1.36.3", "container_runtime_version": "containerd://1.7.27", "boot_id": "b-1"}
    assert facts["capacity"]["nvidia.com/gpu"] == "4" and facts["allocatable"]["cpu"] == "143"
    # the first address of each type, as kubectl -o wide shows it
    assert facts["addresses"] == {"InternalIP": "10.0.0.7", "Hostname": "gb200-0001"}
    assert facts["provider_id"] == "kwok://gb200-0001"
    assert facts["zone"] == "zone-b" and facts["pool"] == "gb200"
    assert facts["nodewright"] == {} and facts["ignored"] is False
    assert "managedFields" not in str(facts)


def test_node_facts_of_a_bare_node():
    facts = nf.node_facts({"metadata": {"name": "bare"}})
    assert facts["name"] == "bare" and facts["labels"] == {} and facts["ready"] is False
    assert facts["ready_reason"] is None and facts["conditions"] == {} and facts["addresses"] == {}
    assert facts["gpu"]["present"] is False and facts["zone"] is None and facts["pool"] is None


def test_cordoned_not_ready_and_ignored():
    facts = nf.node_facts(node(spec__unschedulable=True,
                               status__conditions=[{"type": "Ready", "status": "Unknown",
                                                    "reason": "NodeStatusUnknown"}]))
    assert facts["unschedulable"] is True and facts["ready"] is False
    assert facts["ready_reason"] == "NodeStatusUnknown"
    labels = dict(GB200["metadata"]["labels"], **{"nodewright.io/ignore": "true"})
    assert nf.node_facts(node(metadata__labels=labels))["ignored"] is True


def test_zone_and_pool_labels_are_configurable():
    labels = {"failure-domain.beta.kubernetes.io/zone": "old-zone", "eks.amazonaws.com/nodegroup": "ng-1"}
    facts = nf.node_facts(node(metadata__labels=labels))
    assert facts["zone"] == "old-zone" and facts["pool"] == "ng-1"
    facts = nf.node_facts(node(metadata__labels=labels), zone_labels=["x"], pool_labels=["y"])
    assert facts["zone"] is None and facts["pool"] is None


# --- GPU facts ------------------------------------------------------------------------

def test_gpu_facts_of_grace_blackwell():
    gpu = nf.node_facts(GB200)["gpu"]
    assert gpu == {"present": True, "count": 4, "allocatable": 3, "product": "NVIDIA-GB200", "model": "gb200",
                   "family": "blackwell", "grace": True, "compute_capability": "10.0", "memory_mib": 189471,
                   "clique": "gb200-rack-0.1"}


@pytest.mark.parametrize("labels,expected", [
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper",
      "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": "8",
      "kubernetes.io/arch": "amd64"},
     {"model": "h100", "family": "hopper", "grace": False, "compute_capability": "9.0", "count": 8}),
    ({"nvidia.com/gpu.product": "NVIDIA-GH200-480GB", "kubernetes.io/arch": "arm64"},
     {"model": "gh200", "family": "hopper", "grace": True, "compute_capability": "9.0", "count": 0}),
    # GKE names the accelerator in its own label; the family comes from the detection
    ({"cloud.google.com/gke-accelerator": "nvidia-h200-141gb", "kubernetes.io/arch": "amd64"},
     {"model": "h200", "family": "hopper", "product": "nvidia-h200-141gb"}),
    # a product NodeWright does not know: the labels still say what they say
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.family": "ampere",
      "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0", "kubernetes.io/arch": "amd64"},
     {"model": None, "family": "ampere", "compute_capability": "8.0", "grace": False}),
])
def test_gpu_facts_from_feature_discovery_labels(labels, expected):
    gpu = nf.gpu_facts(labels)
    assert gpu["present"] is True
    for key, value in expected.items():
        assert gpu[key] == value, key


def test_gpu_count_falls_back_to_capacity_and_no_gpu_is_absent():
    gpu = nf.gpu_facts({"kubernetes.io/arch": "amd64"}, capacity={"nvidia.com/gpu": "2"})
    assert gpu["present"] is True and gpu["count"] == 2 and gpu["allocatable"] == 2
    none = nf.gpu_facts({"kubernetes.io/arch": "arm64"}, capacity={"cpu": "4"})
    assert none["present"] is False and none["count"] == 0 and none["grace"] is False and none["model"] is None


def test_gpu_facts_tolerate_garbage_labels():
    gpu = nf.gpu_facts({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "eight",
                        "nvidia.com/gpu.memory": "lots"})
    assert gpu["present"] is True and gpu["count"] == 0 and gpu["memory_mib"] is None


# --- NodeWright state -----------------------------------------------------------------

def test_state_from_label_and_annotation():
    labels = {status_label("kernel"): "in_progress", status_label("tuning"): "complete", "other": "x"}
    annotations = {state_annotation("kernel"): '{"status": "in_progress", "packages": {"k|1.0.0": "apply"}}'}
    state = nf.nodewright_state(labels, annotations)
    assert state == {
        "kernel": {"status": "in_progress", "state": {"status": "in_progress", "packages": {"k|1.0.0": "apply"}}},
        "tuning": {"status": "complete"},
    }


def test_status_from_the_state_when_the_label_is_missing():
    state = nf.nodewright_state({}, {state_annotation("r"): '{"status": "erroring"}',
                                     state_annotation("s"): '{"status": "weird"}', state_annotation("t"): "{}"})
    assert state["r"]["status"] == "erroring"
    assert state["s"]["status"] == "unknown" and state["t"]["status"] == "unknown"


@pytest.mark.parametrize("text,message", [
    ("{not json", "is malformed: not valid JSON"),
    ("[1, 2]", "must hold a JSON object, not a list"),
    ('"complete"', "must hold a JSON object, not a string"),
])
def test_malformed_state_annotation_is_reported_not_raised(text, message):
    state = nf.nodewright_state({status_label("r"): "blocked"}, {state_annotation("r"): text})
    assert state["r"]["status"] == "blocked"
    assert "state" not in state["r"]
    assert message in state["r"]["error"] and state_annotation("r") in state["r"]["error"]


# --- addresses, host root -------------------------------------------------------------

def test_choose_address():
    addresses = {"InternalIP": "10.0.0.1", "ExternalIP": "1.2.3.4", "Hostname": "n1"}
    assert nf.choose_address(addresses) == "10.0.0.1"
    assert nf.choose_address(addresses, ["ExternalIP", "InternalIP"]) == "1.2.3.4"
    assert nf.choose_address({"Hostname": "n1"}) == "n1"
    assert nf.choose_address({}) is None and nf.choose_address(None, ["InternalIP"]) is None


def test_host_root():
    assert nf.host_root(nf.node_facts(GB200)) == "/sim/nodes/gb200-0001/root"
    assert nf.host_root(nf.node_facts(node(metadata__annotations={}))) == "/"


# --- groups ---------------------------------------------------------------------------

def test_default_groups():
    facts = nf.node_facts(GB200)
    facts["nodewright"] = {"kernel-cve.2025": {"status": "in_progress"}}
    assert nf.default_groups(facts) == [
        "gpu", "gpu_family_blackwell", "gpu_gb200", "gpu_product_nvidia_gb200", "zone_zone_b", "pool_gb200",
        "ready", "nodewright_kernel_cve_2025_in_progress"]


def test_default_groups_prefix_kinds_and_states():
    facts = nf.node_facts(node(spec__unschedulable=True, status__conditions=[]))
    facts["ignored"] = True
    groups = nf.default_groups(facts, prefix="k8s_", kinds=("readiness", "cordoned", "nodewright"))
    assert groups == ["k8s_not_ready", "k8s_cordoned", "k8s_nodewright_ignored"]
    assert nf.default_groups(facts, kinds=()) == []
    cpu_only = nf.node_facts({"metadata": {"name": "cpu", "labels": {"nodepool": "System-Pool"}}})
    assert nf.default_groups(cpu_only) == ["pool_system_pool", "not_ready"]


def test_safe_group_part():
    assert nf.safe_group_part("NVIDIA-H100-80GB-HBM3") == "nvidia_h100_80gb_hbm3"
    assert nf.safe_group_part("us-east-1a") == "us_east_1a"


# --- pod counts -----------------------------------------------------------------------

def pod(node_name, phase="Running", labels=None, requests=None, init_requests=None, limits=None):
    container = {"name": "c", "resources": {}}
    if requests:
        container["resources"]["requests"] = requests
    if limits:
        container["resources"]["limits"] = limits
    spec = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if init_requests:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init_requests}}]
    return {"metadata": {"labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


def test_pod_counter():
    counter = nf.PodCounter(non_interruptible=parse_label_selector("app.kubernetes.io/component=training"))
    counter.add([
        pod("n1"),
        pod("n1", labels={"app.kubernetes.io/component": "training"}, limits={"nvidia.com/gpu": "4"}),
        pod("n1", requests={"nvidia.com/mig-1g.10gb": "1"}),
        pod("n1", init_requests={"nvidia.com/gpu": "1"}),
        pod("n1", requests={"nvidia.com/gpu": "0"}),
        pod("n1", phase="Succeeded", requests={"nvidia.com/gpu": "1"}),
        pod("n1", phase="Failed"),
        pod(None, requests={"nvidia.com/gpu": "1"}),
        pod("n2", phase="Pending", labels={"app.kubernetes.io/component": "training"}),
    ])
    assert counter.for_node("n1") == {"total": 5, "gpu": 3, "non_interruptible": 1}
    assert counter.for_node("n2") == {"total": 1, "gpu": 0, "non_interruptible": 1}
    assert counter.for_node("n3") == {"total": 0, "gpu": 0, "non_interruptible": 0}


def test_pod_counter_without_selector_and_custom_resources():
    counter = nf.PodCounter(gpu_resources=["example.com/accel"])
    counter.add([pod("n1", requests={"example.com/accel": "1"}), pod("n1", requests={"nvidia.com/gpu": "1"})])
    assert counter.for_node("n1") == {"total": 2, "gpu": 1, "non_interruptible": None}
