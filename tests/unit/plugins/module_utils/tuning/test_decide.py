# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The ``auto`` options decided for one node, each with its reason; explicit choices
refused where the node cannot honour them; the host facts the decisions read."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.decide import (
    GPU_OPERATOR,
    HOST_PROBES,
    decide,
    host_facts,
    host_probes,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import OPTION_SPECS

pytestmark = pytest.mark.unit

DEFAULTS = {name: spec["default"] for name, spec in OPTION_SPECS.items()}
HGX = {"platform": ["x86-hgx"], "form_factor": "sxm", "cloud": None, "multi_node": True}
GB200 = {"platform": ["grace", "grace-blackwell"], "form_factor": "superchip", "cloud": None,
         "multi_node": False}
GH200 = {"platform": ["grace"], "form_factor": "superchip", "cloud": None, "multi_node": False}
MOFED = "MLNX_OFED_LINUX-24.10-1.1.4.0"
NO_OPERATOR = ("no GPU Operator driver DaemonSet on this node "
               "(label nvidia.com/gpu.deploy.driver is not 'true')")


def run(context, host=None, **options):
    opts = dict(DEFAULTS)
    opts.update(options)
    return decide(opts, context, host)


def ctx(base, **changes):
    out = dict(base)
    out.update(changes)
    return out


def decision(value, reason, explicit=False):
    return {"value": value, "reason": reason, "explicit": explicit}


def test_decide_leaves_its_input_alone():
    opts = dict(DEFAULTS)
    decide(opts, HGX, {"peer_memory": MOFED})
    assert opts == DEFAULTS


# ------------------------------------------------------------------ who loads the driver

@pytest.mark.parametrize("context,host,option,value,expected", [
    (HGX, None, "auto", "host", decision("host", NO_OPERATOR)),
    (HGX, {"driver_source": GPU_OPERATOR, "driver_reason": "its DaemonSet runs here"}, "auto", GPU_OPERATOR,
     decision(GPU_OPERATOR, "its DaemonSet runs here")),
    (HGX, {"driver_source": "host"}, "auto", "host", decision("host", NO_OPERATOR)),
    # GKE's installer loads the driver: the host's settings leave it alone.
    (ctx(HGX, cloud="gke"), {"driver_source": GPU_OPERATOR}, "auto", "host",
     decision("gke", "GKE's driver installer loads the driver; its settings are left to GKE")),
    (HGX, {"driver_source": GPU_OPERATOR}, "host", "host", decision("host", "options.driver_source", True)),
    (ctx(HGX, cloud="gke"), None, GPU_OPERATOR, GPU_OPERATOR,
     decision(GPU_OPERATOR, "options.driver_source", True)),
])
def test_driver_source(context, host, option, value, expected):
    opts, out = run(context, host, driver_source=option)
    assert opts["driver_source"] == value
    assert out["driver_source"] == expected


# ------------------------------------------------------------------ GPUDirect RDMA

@pytest.mark.parametrize("context,host,value,reason", [
    (HGX, {"peer_memory": MOFED}, "peermem", "the host has a peer-memory provider (%s)" % MOFED),
    (HGX, {"peer_memory": ""}, "dmabuf", "no peer-memory provider on the host (no MLNX_OFED or DOCA-OFED)"),
    (HGX, None, "dmabuf", "no peer-memory provider known for this node; set gpudirect peermem for hosts with "
                          "MLNX_OFED or DOCA-OFED (the package's preflight checks it)"),
    (ctx(HGX, cloud="eks"), {"peer_memory": MOFED}, "dmabuf",
     "EFA does GPUDirect RDMA through DMA-BUF; no peer-memory module"),
    (ctx(HGX, cloud="gke"), {"peer_memory": MOFED}, "dmabuf",
     "GKE's GPUDirect stacks use DMA-BUF; GKE nodes have no MLNX_OFED"),
])
def test_gpudirect_auto(context, host, value, reason):
    opts, out = run(context, host)
    assert opts["gpudirect"] == value
    assert out["gpudirect"] == decision(value, reason)


def test_gpudirect_under_the_gpu_operator_is_left_to_it():
    opts, out = run(HGX, {"driver_source": GPU_OPERATOR, "peer_memory": MOFED})
    assert out["gpudirect"] == decision(GPU_OPERATOR, (
        "the GPU Operator's driver container loads nvidia-peermem (driver.rdma.enabled) "
        "or GPUDirect uses DMA-BUF"))
    # No option layer of NodeWright's applies: the option stays undecided.
    assert opts["gpudirect"] == "auto"


@pytest.mark.parametrize("wanted,host", [
    ("peermem", {"peer_memory": MOFED}), ("peermem", None), ("dmabuf", {"peer_memory": ""}),
    ("dmabuf", {"peer_memory": MOFED}),
])
def test_an_explicit_gpudirect_choice_is_kept(wanted, host):
    opts, out = run(HGX, host, gpudirect=wanted)
    assert opts["gpudirect"] == wanted
    assert out["gpudirect"] == decision(wanted, "options.gpudirect", True)


def test_peermem_without_a_provider_is_refused():
    with pytest.raises(ValidationError) as err:
        run(HGX, {"peer_memory": ""}, gpudirect="peermem")
    assert err.value.field == "options.gpudirect"
    assert err.value.reason == (
        "gpudirect peermem: nvidia_peermem cannot load on this host, which has no peer-memory provider "
        "(no MLNX_OFED or DOCA-OFED: no ofed_info, and ib_core exports no ib_register_peer_memory_client)")
    assert err.value.hint == ("use gpudirect dmabuf (NCCL uses DMA-BUF with the open kernel modules), "
                              "or install DOCA-OFED")


@pytest.mark.parametrize("gpudirect", ["auto", "peermem"])
def test_gpudirect_is_only_decided_for_multi_node_intents(gpudirect):
    opts, out = run(ctx(HGX, multi_node=False), {"peer_memory": ""}, gpudirect=gpudirect)
    assert "gpudirect" not in out and opts["gpudirect"] == gpudirect


# ------------------------------------------------------------------ ACS redirection

ACS_ON = ("bare-metal HGX with a multi-node intent, as NVIDIA's profiles and DGX OS; opt out with "
          "acs_override false")


@pytest.mark.parametrize("context,value,reason", [
    (HGX, True, ACS_ON),
    (ctx(HGX, platform=["x86-hgx", "other"]), True, ACS_ON),
    (ctx(HGX, platform=["grace"]), False, "not an x86-64 HGX node"),
    (ctx(HGX, platform=None), False, "not an x86-64 HGX node"),
    (ctx(HGX, form_factor="pcie"), False, "PCIe boards: no HGX PCIe switch tree"),
    (ctx(HGX, multi_node=False), False, "single-node intent: GPU-NIC traffic does not dominate"),
    (ctx(HGX, cloud="eks"), False, "a EKS instance: the hypervisor owns the PCIe topology"),
    (ctx(HGX, cloud="gke"), False, "a GKE instance: the hypervisor owns the PCIe topology"),
    # The first reason that applies is the one given.
    (ctx(HGX, form_factor="pcie", multi_node=False, cloud="eks"), False,
     "PCIe boards: no HGX PCIe switch tree"),
])
def test_acs_override_auto(context, value, reason):
    opts, out = run(context)
    assert opts["acs_override"] is value
    assert out["acs_override"] == decision(value, reason)


@pytest.mark.parametrize("value", [True, False])
def test_an_explicit_acs_override_is_kept(value):
    opts, out = run(ctx(HGX, platform=["grace"]), acs_override=value)
    assert opts["acs_override"] is value
    assert out["acs_override"] == decision(value, "options.acs_override", True)


# ------------------------------------------------------------------ CDMM and GDRCopy on Grace

@pytest.mark.parametrize("context,value,reason", [
    (GB200, "on", "NVIDIA's recommendation for Grace Blackwell under Kubernetes"),
    (GH200, "off", "GH200 software uses the GPU's NUMA node; CDMM is the default only from driver R615 "
                   "(set cdmm on to use it)"),
])
def test_cdmm_auto(context, value, reason):
    opts, out = run(context)
    assert out["cdmm"] == decision(value, reason)
    # The platform's own layer carries the default: the option itself stays auto.
    assert opts["cdmm"] == "auto"


@pytest.mark.parametrize("context", [HGX, ctx(GB200, cloud="gke")])
def test_cdmm_is_not_decided_off_grace_or_on_gke(context):
    assert "cdmm" not in run(context)[1]
    assert "cdmm" not in run(context, cdmm="on")[1]


def test_an_explicit_cdmm_choice_is_kept():
    assert run(GH200, cdmm="on")[1]["cdmm"] == decision("on", "options.cdmm", True)
    assert run(GB200, cdmm="off")[1]["cdmm"] == decision("off", "options.cdmm", True)


@pytest.mark.parametrize("context,host,options,value,reason", [
    (GB200, {"gdrdrv": True}, {}, "on", "CDMM is on and GDRCopy is installed on the host"),
    (GB200, {"gdrdrv": False}, {}, "off",
     "CDMM is on, but GDRCopy is not installed on the host; set gdrcopy on where it is installed"),
    (GB200, None, {}, "off",
     "CDMM is on, but GDRCopy is not known to be installed on this node; "
     "set gdrcopy on where it is installed"),
    (GH200, {"gdrdrv": True}, {"cdmm": "on"}, "on", "CDMM is on and GDRCopy is installed on the host"),
])
def test_gdrcopy_auto_follows_cdmm_and_the_host(context, host, options, value, reason):
    opts, out = run(context, host, **options)
    assert out["gdrcopy"] == decision(value, reason)
    assert opts["gdrcopy"] == ("on" if value == "on" else "auto")


@pytest.mark.parametrize("context,host,options", [
    (GH200, {"gdrdrv": True}, {}),  # CDMM off
    (GB200, {"gdrdrv": True}, {"cdmm": "off"}),
    (GB200, {"gdrdrv": True, "driver_source": GPU_OPERATOR}, {}),  # the GPU Operator's driver
    (ctx(GB200, cloud="gke"), {"gdrdrv": True}, {}),
    (HGX, {"gdrdrv": True}, {}),
])
def test_gdrcopy_is_not_wanted_without_cdmm(context, host, options):
    opts, out = run(context, host, **options)
    assert "gdrcopy" not in out and opts["gdrcopy"] == "auto"


@pytest.mark.parametrize("wanted,host", [("on", {"gdrdrv": True}), ("on", None), ("off", {"gdrdrv": True})])
def test_an_explicit_gdrcopy_choice_is_kept(wanted, host):
    opts, out = run(HGX, host, gdrcopy=wanted)
    assert opts["gdrcopy"] == wanted
    assert out["gdrcopy"] == decision(wanted, "options.gdrcopy", True)


def test_gdrcopy_on_without_gdrdrv_is_refused():
    with pytest.raises(ValidationError) as err:
        run(GB200, {"gdrdrv": False}, gdrcopy="on")
    assert str(err.value) == (
        "options.gdrcopy: gdrcopy on: GDRCopy's gdrdrv module is not installed on this host "
        "(install GDRCopy (its kernel module package), or set gdrcopy off)")


# ------------------------------------------------------------------ host facts

def test_host_probes_add_the_limits_current_values():
    assert host_probes([]) == list(HOST_PROBES)
    assert host_probes(("vm.max_map_count", "fs.nr_open")) == list(HOST_PROBES) + [
        "sysctl:vm.max_map_count", "sysctl:fs.nr_open"]


def test_host_facts_from_what_the_host_printed():
    observed = {"host:peer_memory": MOFED, "host:gdrdrv": "installed", "host:memory": " 1006632960 ",
                "host:driver_container": "absent", "sysctl:vm.max_map_count": "1048576",
                "sysctl:net.ipv4.tcp_rmem": "4096 131072 6291456", "sysctl:kernel.nope": "<missing>",
                "sysctl:fs.nr_open": "", "module:tcp_bbr": "loaded"}
    facts = host_facts(observed, labels={}, applied={"vm.max_map_count": "1048576"})
    assert facts == {
        "peer_memory": MOFED, "gdrdrv": True, "memory_kib": 1006632960,
        "sysctl": {"vm.max_map_count": "1048576", "net.ipv4.tcp_rmem": "4096 131072 6291456"},
        "applied": {"vm.max_map_count": "1048576"},
        "driver_source": "host",
        "driver_reason": ("no GPU Operator driver DaemonSet on this node "
                          "(nvidia.com/gpu.deploy.driver is not 'true')"),
    }


@pytest.mark.parametrize("observed,expected", [
    ({"host:peer_memory": "none"}, {"peer_memory": ""}),
    ({"host:peer_memory": ""}, {"peer_memory": ""}),
    ({"host:gdrdrv": "absent"}, {"gdrdrv": False}),
    # Anything the script could not tell stays unknown.
    ({"host:gdrdrv": "<unavailable>"}, {}),
    ({"host:memory": "lots"}, {}),
    ({"host:memory": "-1"}, {}),
    ({}, {}),
])
def test_host_facts_read_each_probe(observed, expected):
    facts = host_facts(observed)
    assert {k: v for k, v in facts.items() if k not in ("driver_source", "driver_reason")} == expected


@pytest.mark.parametrize("labels,container,source", [
    ({"nvidia.com/gpu.deploy.driver": "true"}, "absent", GPU_OPERATOR),
    ({}, "present", GPU_OPERATOR),
    (None, "absent", "host"),
    ({"nvidia.com/gpu.deploy.driver": "pre-installed"}, None, "host"),
])
def test_host_facts_say_who_loads_the_driver(labels, container, source):
    observed = {"host:driver_container": container} if container else {}
    facts = host_facts(observed, labels=labels)
    assert facts["driver_source"] == source and facts["driver_reason"]


def test_host_facts_from_nothing():
    assert host_facts(None) == {"driver_source": "host", "driver_reason": (
        "no GPU Operator driver DaemonSet on this node (nvidia.com/gpu.deploy.driver is not 'true')")}


def test_the_facts_feed_the_decisions():
    facts = host_facts({"host:peer_memory": "none", "host:gdrdrv": "absent"})
    assert run(HGX, facts)[1]["gpudirect"]["value"] == "dmabuf"
    with pytest.raises(ValidationError, match="gdrdrv module is not installed"):
        run(GB200, facts, gdrcopy="on")
