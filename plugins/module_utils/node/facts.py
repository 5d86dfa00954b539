# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What a Node object says about a host, as plain data: the host variables, the GPU
facts taken from GPU Feature Discovery labels, the NodeWright state per resource,
the default inventory groups and the pod counts per node.

Everything here works on the raw JSON of the API (``dict``/``list``/``str``), not on
the kubernetes client's models, so that the inventory of a fleet of thousands of
nodes costs one ``json.loads`` and one pass over the data. Nothing here talks to the
API or needs Ansible; the inventory plugin ``nodewright.fleet.k8s_nodes`` is the
shell around it.
"""

from __future__ import annotations

import fnmatch
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    LABEL_STATUS,
    STATUSES,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import is_ignored
from ansible_collections.nodewright.fleet.plugins.module_utils.node.state import states_by_resource
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import (
    LABEL_ARCH,
    LABEL_FAMILY,
    LABEL_GKE_ACCELERATOR,
    LABEL_MAJOR,
    LABEL_MINOR,
    LABEL_PRODUCT,
    detect_accelerator,
    normalize_arch,
)

# GPU Feature Discovery labels beyond those the accelerator detection (node/gpu.py) reads.
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_CLIQUE = "nvidia.com/gpu.clique"
RESOURCE_GPU = "nvidia.com/gpu"

# The local simulator gives each fake node a host root directory and names it here.
SIM_HOST_ROOT_ANNOTATION = "sim.nodewright.io/host-root"

DEFAULT_ADDRESS_PREFERENCE = ("InternalIP", "ExternalIP", "Hostname")
DEFAULT_ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
DEFAULT_POOL_LABELS = ("nodepool", "karpenter.sh/nodepool", "eks.amazonaws.com/nodegroup",
                       "cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool", "agentpool")
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")

# Default groups, each can be switched off by name (option default_groups).
GROUP_KINDS = ("gpu", "gpu_family", "gpu_model", "gpu_product", "zone", "pool", "readiness",
               "cordoned", "nodewright")

# The keys of a node's facts (node_facts, and pods with pod_counts), which the inventory's
# option node_facts chooses from.
FACT_KEYS = ("name", "creation_timestamp", "labels", "annotations", "taints", "unschedulable", "ready",
             "ready_reason", "conditions", "node_info", "capacity", "allocatable", "addresses", "provider_id",
             "zone", "pool", "gpu", "nodewright", "ignored", "pods")

_UNSAFE_GROUP_CHARS = re.compile(r"[^A-Za-z0-9_]")


def safe_group_part(text):
    """Lower-case ``text`` and replace what Ansible does not allow in a group name."""
    return _UNSAFE_GROUP_CHARS.sub("_", str(text)).lower()


def _int(value):
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _first_label(labels, keys):
    for key in keys:
        value = labels.get(key)
        if value:
            return value
    return None


# --------------------------------------------------------------------------------------
# GPU facts

_ACCEL_CACHE = {}


def _accelerator(labels):
    """The accelerator detection of node/gpu.py, memoised on the labels it reads."""
    key = tuple(labels.get(k) for k in (LABEL_PRODUCT, LABEL_GKE_ACCELERATOR, LABEL_MAJOR, LABEL_MINOR,
                                        LABEL_ARCH))
    if key not in _ACCEL_CACHE:
        try:
            _ACCEL_CACHE[key] = detect_accelerator(labels)
        except ValidationError:
            _ACCEL_CACHE[key] = None
    return _ACCEL_CACHE[key]


def gpu_facts(labels, capacity=None, allocatable=None, arch=None):
    """GPU facts of a node from GPU Feature Discovery labels and its extended resources.

    ``model`` is NodeWright's short accelerator name (``h100``, ``gb200`` ...; None when
    unknown), ``grace`` is true for a GPU node on arm64 (Grace Hopper, Grace
    Blackwell), ``memory_mib`` is the memory of one GPU.
    """
    labels = labels or {}
    capacity = capacity or {}
    allocatable = allocatable or {}
    count = _int(labels.get(LABEL_GPU_COUNT))
    if count is None:
        count = _int(capacity.get(RESOURCE_GPU))
    product = labels.get(LABEL_PRODUCT) or labels.get(LABEL_GKE_ACCELERATOR)
    present = (labels.get(LABEL_GPU_PRESENT) == "true" or bool(product) or bool(count))
    arch = normalize_arch(labels.get(LABEL_ARCH) or arch)
    if not present:
        return {"present": False, "count": 0, "allocatable": 0, "product": None, "model": None,
                "family": None, "grace": False, "compute_capability": None, "memory_mib": None,
                "clique": None}
    accel = _accelerator(labels)
    major, minor = labels.get(LABEL_MAJOR), labels.get(LABEL_MINOR)
    compute = None
    if major is not None:
        compute = "%s.%s" % (major, minor if minor is not None else "0")
    elif accel:
        compute = accel["compute_capability"]
    family = labels.get(LABEL_FAMILY) or (accel["family"] if accel else None)
    alloc = _int(allocatable.get(RESOURCE_GPU))
    return {
        "present": True,
        "count": count or 0,
        "allocatable": alloc if alloc is not None else (count or 0),
        "product": product,
        "model": accel["accelerator"] if accel else None,
        "family": family.lower() if family else None,
        "grace": arch == "arm64",
        "compute_capability": compute,
        "memory_mib": _int(labels.get(LABEL_GPU_MEMORY)),
        "clique": labels.get(LABEL_GPU_CLIQUE),
    }


# --------------------------------------------------------------------------------------
# NodeWright state

_STATUS_LABEL_PREFIX = LABEL_STATUS + "-"


def nodewright_state(labels, annotations):
    """Per NodeWright resource: ``{status, state}`` from its status label and state annotation.

    A state annotation that is not a JSON object (a hand edit gone wrong) does not
    stop anything: the resource gets ``error`` saying what is wrong instead of
    ``state``. The status comes from the label, else from the state's ``status``,
    else ``unknown``.
    """
    out = {}
    for key, value in (labels or {}).items():
        if key.startswith(_STATUS_LABEL_PREFIX):
            out.setdefault(key[len(_STATUS_LABEL_PREFIX):], {})["status"] = value
    for resource, read in states_by_resource(annotations).items():
        entry = out.setdefault(resource, {})
        if "error" in read:
            entry["error"] = read["error"]
            continue
        state = read["state"]
        entry["state"] = state
        if "status" not in entry and state.get("status") in STATUSES:
            entry["status"] = state["status"]
    for entry in out.values():
        entry.setdefault("status", "unknown")
    return out


# --------------------------------------------------------------------------------------
# Host variables


def choose_address(addresses, preference=DEFAULT_ADDRESS_PREFERENCE):
    """The first address of the first preferred type; None when the node has none of them."""
    for kind in preference:
        value = (addresses or {}).get(kind)
        if value:
            return value
    return None


def node_facts(node, zone_labels=DEFAULT_ZONE_LABELS, pool_labels=DEFAULT_POOL_LABELS):
    """The host variables of one node (raw Node JSON) as one dictionary.

    ``conditions`` maps each condition type to its status (``"True"``, ``"False"``,
    ``"Unknown"``); ``ready_reason`` is the reason of the Ready condition (what
    ``kubectl describe node`` shows first when a node is NotReady). Addresses are keyed
    by type, the first of each type, as ``kubectl get nodes -o wide`` shows them.
    The facts are kept lean on purpose: ``ansible-inventory --list`` prints every
    value of every node, and at thousands of nodes the printing is most of the run.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or {}
    info = status.get("nodeInfo") or {}

    conditions = {}
    ready_reason = None
    for cond in status.get("conditions") or ():
        conditions[cond.get("type")] = cond.get("status")
        if cond.get("type") == "Ready":
            ready_reason = cond.get("reason")
    addresses = {}
    for addr in status.get("addresses") or ():
        kind = addr.get("type")
        if kind and kind not in addresses:
            addresses[kind] = addr.get("address")
    taints = [{"key": t.get("key"), "value": t.get("value"), "effect": t.get("effect")}
              for t in spec.get("taints") or ()]
    arch = info.get("architecture")
    return {
        "name": meta.get("name"),
        "creation_timestamp": meta.get("creationTimestamp"),
        "labels": labels,
        "annotations": annotations,
        "taints": taints,
        "unschedulable": bool(spec.get("unschedulable")),
        "ready": conditions.get("Ready") == "True",
        "ready_reason": ready_reason,
        "conditions": conditions,
        "node_info": {
            "kernel_version": info.get("kernelVersion"),
            "os_image": info.get("osImage"),
            "architecture": arch,
            "kubelet_version": info.get("kubeletVersion"),
            "container_runtime_version": info.get("containerRuntimeVersion"),
            "boot_id": info.get("bootID"),
        },
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": addresses,
        "provider_id": spec.get("providerID"),
        "zone": _first_label(labels, zone_labels),
        "pool": _first_label(labels, pool_labels),
        "gpu": gpu_facts(labels, capacity, allocatable, arch),
        "nodewright": nodewright_state(labels, annotations),
        "ignored": is_ignored(labels),
    }


def host_root(facts):
    """The host root a local (chroot) run uses: the simulator's directory, else ``/``."""
    return (facts.get("annotations") or {}).get(SIM_HOST_ROOT_ANNOTATION) or "/"


# --------------------------------------------------------------------------------------
# Groups


def default_groups(facts, prefix="", kinds=GROUP_KINDS):
    """Names of the default groups of one node (already safe for Ansible)."""
    kinds = set(kinds)
    gpu = facts.get("gpu") or {}
    names = []
    if gpu.get("present"):
        if "gpu" in kinds:
            names.append("gpu")
        if "gpu_family" in kinds and gpu.get("family"):
            names.append("gpu_family_" + safe_group_part(gpu["family"]))
        if "gpu_model" in kinds and gpu.get("model"):
            names.append("gpu_" + gpu["model"])
        if "gpu_product" in kinds and gpu.get("product"):
            names.append("gpu_product_" + safe_group_part(gpu["product"]))
    if "zone" in kinds and facts.get("zone"):
        names.append("zone_" + safe_group_part(facts["zone"]))
    if "pool" in kinds and facts.get("pool"):
        names.append("pool_" + safe_group_part(facts["pool"]))
    if "readiness" in kinds:
        names.append("ready" if facts.get("ready") else "not_ready")
    if "cordoned" in kinds and facts.get("unschedulable"):
        names.append("cordoned")
    if "nodewright" in kinds:
        if facts.get("ignored"):
            names.append("nodewright_ignored")
        for resource, entry in sorted((facts.get("nodewright") or {}).items()):
            names.append("nodewright_%s_%s" % (safe_group_part(resource), safe_group_part(entry["status"])))
    if prefix:
        names = [prefix + n for n in names]
    return names


# --------------------------------------------------------------------------------------
# Pods per node

_FINISHED = ("Succeeded", "Failed")


class GpuResourceMatcher(object):
    """Tells whether a resource name is a GPU resource (exact names or ``*`` patterns)."""

    def __init__(self, patterns=DEFAULT_GPU_RESOURCES):
        self.patterns = tuple(patterns)
        self._seen = {}

    def __call__(self, name):
        hit = self._seen.get(name)
        if hit is None:
            hit = self._seen[name] = any(fnmatch.fnmatchcase(name, p) for p in self.patterns)
        return hit


def _requests_gpu(pod_spec, is_gpu):
    for key in ("containers", "initContainers"):
        for container in pod_spec.get(key) or ():
            resources = container.get("resources") or {}
            for section in ("limits", "requests"):
                for name, qty in (resources.get(section) or {}).items():
                    if is_gpu(name) and str(qty) not in ("0", ""):
                        return True
    return False


class PodCounter(object):
    """Counts running pods per node from pages of a cluster-wide pod LIST.

    ``non_interruptible`` is a ``Selector`` (or None: not counted) over pod labels.
    """

    def __init__(self, gpu_resources=DEFAULT_GPU_RESOURCES, non_interruptible=None):
        self.is_gpu = GpuResourceMatcher(gpu_resources)
        self.non_interruptible = non_interruptible
        self.counts = {}

    def add(self, pods):
        for pod in pods:
            spec = pod.get("spec") or {}
            node = spec.get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in _FINISHED:
                continue
            entry = self.counts.get(node)
            if entry is None:
                entry = self.counts[node] = {"total": 0, "gpu": 0, "non_interruptible": 0}
            entry["total"] += 1
            if _requests_gpu(spec, self.is_gpu):
                entry["gpu"] += 1
            if self.non_interruptible is not None and self.non_interruptible.matches(
                    (pod.get("metadata") or {}).get("labels") or {}):
                entry["non_interruptible"] += 1

    def for_node(self, name):
        entry = dict(self.counts.get(name) or {"total": 0, "gpu": 0, "non_interruptible": 0})
        if self.non_interruptible is None:
            entry["non_interruptible"] = None
        return entry
