# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The words every part of NVIDIA tuning shares: mechanisms, options, GPU settings,
the paths written on the host, and helpers over resolved settings. Stdlib only."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

MECHANISMS = ("cmdline", "sysctl", "module", "modprobe", "dropin", "governor", "gpu")
GROUPED = ("modprobe", "dropin")
LAYER_KINDS = {
    "base": "base", "platforms": "platform", "accelerators": "accelerator",
    "intents": "intent", "os": "os", "clouds": "cloud", "options": "option",
}
EXPLICIT_KINDS = ("option", "extra")

# Options. "auto" ones are decided per node from what is known about it (tuning/decide.py).
OPTION_SPECS = {
    "acs_override": {"type": "auto_bool", "default": "auto",
                     "help": "turn PCIe ACS redirection off; auto: on bare-metal x86-64 HGX nodes with a "
                             "multi-node intent (weakens isolation between PCIe devices)"},
    "driver_source": {"choices": ("auto", "host", "gpu-operator"), "default": "auto",
                      "help": "who loads the NVIDIA driver; auto: gpu-operator where its driver DaemonSet runs "
                              "on the node, else host"},
    "gpudirect": {"choices": ("auto", "peermem", "dmabuf"), "default": "auto",
                  "help": "GPUDirect RDMA for multi-node intents; auto: nvidia_peermem where the host has a "
                          "peer-memory provider (MLNX_OFED/DOCA-OFED), else DMA-BUF"},
    "page_size": {"choices": ("4k", "64k"), "default": "4k",
                  "help": "kernel page size (arm64 64K kernels have no 1G huge pages)"},
    "form_factor": {"choices": ("auto", "sxm", "pcie"), "default": "auto",
                    "help": "GPU board form factor; auto takes it from the accelerator"},
    "power_profile": {"type": bool, "default": True,
                      "help": "request the intent's Blackwell workload power profile"},
    "inference_hugepages": {"type": bool, "default": False,
                            "help": "reserve huge pages at boot for the inference intents"},
    "cdmm": {"choices": ("auto", "on", "off"), "default": "auto",
             "help": "coherent driver-based memory management on Grace; auto: on for GB200/GB300, off for GH200"},
    "gdrcopy": {"choices": ("auto", "on", "off"), "default": "auto",
                "help": "load GDRCopy's gdrdrv; auto: where CDMM is on and the host has GDRCopy installed"},
    "ibgda": {"type": bool, "default": False,
              "help": "NVIDIA driver options for InfiniBand GPUDirect Async (DeepEP, NVSHMEM)"},
    "relaxed_ordering": {"type": bool, "default": False,
                         "help": "PCIe relaxed ordering on the GPUs' writes (measure before rolling out)"},
}

# NVreg_RegistryDwords is one parameter holding "KEY=VALUE;" pairs; layers set one key
# each (NVreg_RegistryDwords.PeerMappingOverride) and the modprobe file merges them.
REGISTRY_DWORDS = "NVreg_RegistryDwords"

GPU_KEYS = ("persistence", "fabricmanager", "workload_power_profile")
# What the power-profile unit runs ({profile_id}: NVML's number, {profile}: its name);
# the syntax depends on the driver release, so the role and the package take another.
DEFAULT_POWER_PROFILE_COMMAND = "/usr/bin/nvidia-smi workload-power-profile --set --profile-id {profile_id}"

# NVML nvmlPowerProfileType_t (Blackwell and newer).
POWER_PROFILES = {
    "MAX_P": 0, "MAX_Q": 1, "COMPUTE": 2, "MEMORY_BOUND": 3, "NETWORK": 4, "BALANCED": 5,
    "LLM_INFERENCE": 6, "LLM_TRAINING": 7, "RBM": 8, "DCPCIE": 9, "HMMA_SPARSE": 10,
    "HMMA_DENSE": 11, "SYNC_BALANCED": 12, "HPC": 13, "MIG": 14,
}

# Keys that look like sysctls in old tuning guides but are not sysctls on the
# kernels NodeWright supports (all >= 5.14): since 5.13 the CFS tunables live in
# debugfs (/sys/kernel/debug/sched/), and since 6.6 (EEVDF) most are gone.
KNOWN_NON_SYSCTLS = {
    "kernel.sched_latency_ns": "moved to debugfs (sched/latency_ns) in 5.13, removed by EEVDF in 6.6",
    "kernel.sched_min_granularity_ns": "moved to debugfs (sched/min_granularity_ns) in 5.13, "
                                       "replaced by sched/base_slice_ns in 6.6",
    "kernel.sched_wakeup_granularity_ns": "moved to debugfs in 5.13, removed by EEVDF in 6.6",
    "kernel.sched_migration_cost_ns": "moved to debugfs (sched/migration_cost_ns) in 5.13",
    "kernel.sched_nr_migrate": "moved to debugfs (sched/nr_migrate) in 5.13",
    "kernel.sched_tunable_scaling": "moved to debugfs (sched/tunable_scaling) in 5.13",
}

# Files written on the host, relative to the host root (one home for every path).
FILE_PREFIX = "90-nodewright-nvidia"
SYSCTL_FILE = "etc/sysctl.d/%s.conf" % FILE_PREFIX
GRUB_FILE = "etc/default/grub.d/%s.cfg" % FILE_PREFIX
MODPROBE_FILE = "etc/modprobe.d/%s.conf" % FILE_PREFIX
MODULES_FILE = "etc/modules-load.d/%s.conf" % FILE_PREFIX
WANTS_FILE = "etc/systemd/system/multi-user.target.d/%s.conf" % FILE_PREFIX
GOVERNOR_UNIT = "nodewright-cpu-governor.service"
POWER_PROFILE_UNIT = "nodewright-gpu-power-profile.service"
STATE_FILE = "etc/nodewright/nvidia-tuning.json"
SYSTEMD_UNIT_DIR = "etc/systemd/system"
SYSTEMD_NETWORK_DIR = "etc/systemd/network"

GPU_UNITS = {
    "persistence": "nvidia-persistenced.service",
    "fabricmanager": "nvidia-fabricmanager.service",
    "workload_power_profile": POWER_PROFILE_UNIT,
}


def field_path(layer, mechanism, key=None):
    return "%s: settings.%s%s" % (layer, mechanism, "." + key if key else "")


def settings_of(value):
    if not value:
        return {}
    if isinstance(value, dict) and isinstance(value.get("settings"), dict):
        return value["settings"]
    if isinstance(value, dict):
        return value
    raise ValidationError("expected a resolved profile or a settings mapping, got %s"
                          % type(value).__name__, field="settings")


def norm(value):
    return " ".join(str(value).split())
