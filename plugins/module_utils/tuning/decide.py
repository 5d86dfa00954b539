# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The ``auto`` options, decided for one node from what is known about it, each with
the reason the plan shows.

``host`` is what is known about the node beyond its accelerator, OS and cloud (all
optional; None means unknown):

- ``driver_source``/``driver_reason``: ``gpu-operator`` where the GPU Operator's driver
  DaemonSet runs on the node (``detect.driver_source``), else ``host``;
- ``peer_memory``: the host's peer-memory provider (``ofed_info -s`` of MLNX_OFED or
  DOCA-OFED, or ``ib_core`` exporting the peer-memory symbols), ``""`` for none;
- ``gdrdrv``: whether GDRCopy's kernel module is installed;
- ``memory_kib``, ``sysctl``, ``applied``: for the floor rule (``floors.py``).

The role reads these on the host; on the controller (the package) only the labels and
the node's memory are known, so the provider checks move to the host's preflight.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import MISSING
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.detect import driver_source

GPU_OPERATOR = "gpu-operator"


def _decision(value, reason, explicit=False):
    return {"value": value, "reason": reason, "explicit": explicit}


def decide(options, context, host=None):
    """The options with every ``auto`` one decided, and ``{option: {value, reason,
    explicit}}`` for the plan. ``context`` is the resolver's (accelerator, platform,
    intent chain facts, cloud, os, form factor). Raises ``ValidationError`` when an
    explicit choice cannot work on this node as far as is known."""
    host = host or {}
    opts = dict(options)
    out = {}
    cloud, platforms = context.get("cloud"), context.get("platform") or []
    multi_node = context.get("multi_node")

    # Who loads the driver.
    if opts["driver_source"] == "auto":
        if cloud == "gke":
            opts["driver_source"] = "host"
            out["driver_source"] = _decision("gke", "GKE's driver installer loads the driver; its settings are left "
                                                    "to GKE")
        else:
            source = host.get("driver_source") or "host"
            opts["driver_source"] = source
            out["driver_source"] = _decision(source, host.get("driver_reason") or (
                "no GPU Operator driver DaemonSet on this node (label nvidia.com/gpu.deploy.driver is not 'true')"))
    else:
        out["driver_source"] = _decision(opts["driver_source"], "options.driver_source", True)
    operator = opts["driver_source"] == GPU_OPERATOR

    # GPUDirect RDMA: nvidia_peermem only where a peer-memory provider exists.
    provider = host.get("peer_memory")
    if multi_node:
        wanted = opts["gpudirect"]
        if wanted != "auto":
            if wanted == "peermem" and provider == "":
                raise ValidationError(
                    "gpudirect peermem: nvidia_peermem cannot load on this host, which has no peer-memory provider "
                    "(no MLNX_OFED or DOCA-OFED: no ofed_info, and ib_core exports no ib_register_peer_memory_client)",
                    field="options.gpudirect",
                    hint="use gpudirect dmabuf (NCCL uses DMA-BUF with the open kernel modules), or install DOCA-OFED")
            out["gpudirect"] = _decision(wanted, "options.gpudirect", True)
        elif operator:
            out["gpudirect"] = _decision(GPU_OPERATOR, "the GPU Operator's driver container loads nvidia-peermem "
                                                       "(driver.rdma.enabled) or GPUDirect uses DMA-BUF")
        elif cloud == "eks":
            opts["gpudirect"] = "dmabuf"
            out["gpudirect"] = _decision("dmabuf", "EFA does GPUDirect RDMA through DMA-BUF; no peer-memory module")
        elif cloud == "gke":
            opts["gpudirect"] = "dmabuf"
            out["gpudirect"] = _decision("dmabuf", "GKE's GPUDirect stacks use DMA-BUF; GKE nodes have no MLNX_OFED")
        elif provider:
            opts["gpudirect"] = "peermem"
            out["gpudirect"] = _decision("peermem", "the host has a peer-memory provider (%s)" % provider)
        else:
            opts["gpudirect"] = "dmabuf"
            out["gpudirect"] = _decision("dmabuf", (
                "no peer-memory provider on the host (no MLNX_OFED or DOCA-OFED)" if provider == "" else
                "no peer-memory provider known for this node; set gpudirect peermem for hosts with MLNX_OFED or "
                "DOCA-OFED (the package's preflight checks it)"))

    # ACS redirection: off by default on bare-metal HGX nodes with a multi-node intent.
    if opts["acs_override"] == "auto":
        why = None
        if "x86-hgx" not in platforms:
            why = "not an x86-64 HGX node"
        elif context.get("form_factor") != "sxm":
            why = "PCIe boards: no HGX PCIe switch tree"
        elif not multi_node:
            why = "single-node intent: GPU-NIC traffic does not dominate"
        elif cloud:
            why = "a %s instance: the hypervisor owns the PCIe topology" % cloud.upper()
        opts["acs_override"] = why is None
        out["acs_override"] = _decision(why is None, why or (
            "bare-metal HGX with a multi-node intent, as NVIDIA's profiles and DGX OS; opt out with "
            "acs_override false"))
    else:
        out["acs_override"] = _decision(opts["acs_override"], "options.acs_override", True)

    # Coherent driver-based memory management (Grace).
    grace = "grace" in platforms and cloud != "gke"  # GKE's installer loads the driver with its own options
    if grace:
        if opts["cdmm"] == "auto":
            on = "grace-blackwell" in platforms
            out["cdmm"] = _decision("on" if on else "off", (
                "NVIDIA's recommendation for Grace Blackwell under Kubernetes" if on else
                "GH200 software uses the GPU's NUMA node; CDMM is the default only from driver R615 "
                "(set cdmm on to use it)"))
        else:
            out["cdmm"] = _decision(opts["cdmm"], "options.cdmm", True)
    cdmm = grace and not operator and out.get("cdmm", {}).get("value") == "on"

    # GDRCopy where CDMM leaves host code no other way to GPU memory.
    gdrdrv = host.get("gdrdrv")
    if opts["gdrcopy"] == "auto":
        if cdmm and gdrdrv:
            opts["gdrcopy"] = "on"
            out["gdrcopy"] = _decision("on", "CDMM is on and GDRCopy is installed on the host")
        elif cdmm:
            out["gdrcopy"] = _decision("off", "CDMM is on, but GDRCopy is %s; set gdrcopy on where it is installed"
                                       % ("not installed on the host" if gdrdrv is False else "not known to be "
                                          "installed on this node"))
    else:
        if opts["gdrcopy"] == "on" and gdrdrv is False:
            raise ValidationError("gdrcopy on: GDRCopy's gdrdrv module is not installed on this host",
                                  field="options.gdrcopy",
                                  hint="install GDRCopy (its kernel module package), or set gdrcopy off")
        out["gdrcopy"] = _decision(opts["gdrcopy"], "options.gdrcopy", True)
    return opts, out


# What the role reads on the host before resolving (observe.sh's host:* probes); the
# limit sysctls' current values come with them (``host_probes``).
HOST_PROBES = ("host:peer_memory", "host:gdrdrv", "host:memory", "host:driver_container")


def host_probes(limits):
    """The probes ``host_facts`` reads: the host facts and ``sysctl:KEY`` of ``limits``."""
    return list(HOST_PROBES) + ["sysctl:%s" % key for key in limits]


def host_facts(observed, labels=None, applied=None):
    """``host`` for ``resolve_profile`` from what observe.sh printed on the host
    (probe -> value), the node's labels, and the sysctl values NodeWright recorded
    writing there (``applied``: key -> value, from the role's record)."""
    observed = observed or {}
    facts = {}
    provider = observed.get("host:peer_memory")
    if provider is not None:
        facts["peer_memory"] = "" if provider in ("none", "") else provider
    gdrdrv = observed.get("host:gdrdrv")
    if gdrdrv in ("installed", "absent"):
        facts["gdrdrv"] = gdrdrv == "installed"
    memory = str(observed.get("host:memory") or "").strip()
    if memory.isdigit():
        facts["memory_kib"] = int(memory)
    sysctls = {k[len("sysctl:"):]: v for k, v in observed.items()
               if k.startswith("sysctl:") and v not in (None, "", MISSING)}
    if sysctls:
        facts["sysctl"] = sysctls
    if applied:
        facts["applied"] = dict(applied)
    source, reason = driver_source(labels or {}, observed.get("host:driver_container") == "present")
    facts.update(driver_source=source, driver_reason=reason)
    return facts
