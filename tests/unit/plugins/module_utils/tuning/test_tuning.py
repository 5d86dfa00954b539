# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Intent-based NVIDIA tuning over the shipped profiles: resolution over every
accelerator x intent x OS, diffs, interrupts and read-back checks."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.filter.tuning import load_profiles
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import (
    CMDLINE_PROBE,
    UNAVAILABLE,
    parse_observations,
    probes,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.diff import diff_settings, state_record
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import (
    cmdline_tokens,
    managed_paths,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    GRUB_FILE,
    KNOWN_NON_SYSCTLS,
    MODPROBE_FILE,
    MODULES_FILE,
    STATE_FILE,
    SYSCTL_FILE,
    WANTS_FILE,
)
from ansible_collections.nodewright.fleet.plugins.plugin_utils.tuning_files import check_settings

pytestmark = pytest.mark.unit

PROFILES = load_profiles()

# accelerator -> (arch, family, Grace Blackwell tray)
ACCELS = {
    "h100": ("amd64", "hopper", False),
    "h200": ("amd64", "hopper", False),
    "gh200": ("arm64", "hopper", False),
    "b200": ("amd64", "blackwell", False),
    "gb200": ("arm64", "blackwell", True),
    "b300": ("amd64", "blackwell", False),
    "gb300": ("arm64", "blackwell", True),
}
INTENTS = ("performance", "inference", "multiNodeTraining", "multiNodeInference")
OSES = ("ubuntu-22.04", "ubuntu-24.04", "rhel-9", "debian-12", "cos")
POWER = {"performance": "MAX_P", "inference": "LLM_INFERENCE", "multiNodeTraining": "LLM_TRAINING",
         "multiNodeInference": "LLM_INFERENCE"}
BOOTLOADER = {"ubuntu-22.04": "grub-dropin", "ubuntu-24.04": "grub-dropin", "debian-12": "grub-dropin",
              "rhel-9": "grubby", "cos": "none"}
BUFFERS = {
    "net.core.rmem_max": "536870912", "net.core.wmem_max": "536870912",
    "net.core.rmem_default": "134217728", "net.core.wmem_default": "134217728",
    "net.ipv4.tcp_rmem": "4096 131072 268435456", "net.ipv4.tcp_wmem": "4096 65536 268435456",
    "net.core.netdev_max_backlog": "10000", "net.ipv4.tcp_max_syn_backlog": "8192",
}
GB_LIMITS = {
    "fs.inotify.max_user_instances": "65535", "kernel.threads-max": "16512444",
    "vm.max_map_count": "262144", "vm.overcommit_memory": "1",
}
# Ubuntu 24.04 allows 1048576 map areas (/etc/sysctl.d/10-map-count.conf): never lowered.
DISTRO_HIGHER = {"ubuntu-24.04": {"vm.max_map_count"}}
COS_ALLOWED = set(PROFILES["os/cos"]["constraints"]["sysctl_allow"])


def resolve(accelerator, intent="performance", os_name="ubuntu-24.04", **kwargs):
    return resolve_profile(accelerator, intent, os_name, profiles=PROFILES, **kwargs)


def values(resolved):
    return {sid: s["value"] for sid, s in resolved["settings"].items()}


# ------------------------------------------------------------------ every combination

@pytest.mark.parametrize("accelerator,intent,os_name",
                         [(a, i, o) for a in ACCELS for i in INTENTS for o in OSES])
def test_every_accelerator_intent_os(accelerator, intent, os_name):
    arch, family, gb_tray = ACCELS[accelerator]
    cos = os_name == "cos"
    r = resolve(accelerator, intent, os_name)
    got = values(r)
    tokens = cmdline_tokens(r)
    serving = intent in ("inference", "multiNodeInference")
    training_net = intent in ("multiNodeTraining", "multiNodeInference")
    hgx = arch == "amd64"

    assert r["arch"] == arch and r["family"] == family
    assert r["bootloader"]["method"] == BOOTLOADER[os_name]
    # Skyhook's scheduler "sysctls" never appear; ACS redirection is off by default on
    # bare-metal HGX with a multi-node intent only.
    assert not [sid for sid in got if sid.startswith("sysctl:kernel.sched_")]
    assert ("cmdline:acs_redirect" in got) is (hgx and training_net and not cos)
    assert r["decisions"]["acs_override"]["value"] is (hgx and training_net and not cos)
    # Reboot flags follow the mechanism.
    for setting in r["settings"].values():
        assert setting["reboot"] is (setting["mechanism"] in ("cmdline", "modprobe")), setting["id"]
        assert setting["layer"] in r["layers"]
    for sid, value in BUFFERS.items():
        assert (got.get("sysctl:" + sid) == value) is (training_net and not (cos and sid not in COS_ALLOWED)), sid
    assert (got.get("sysctl:vm.swappiness") == "1") is serving
    for sid, value in GB_LIMITS.items():
        expected = gb_tray and not (cos and sid not in COS_ALLOWED) and sid not in DISTRO_HIGHER.get(os_name, ())
        assert (got.get("sysctl:" + sid) == value) is expected, sid
    # Without a known peer-memory provider GPUDirect RDMA is DMA-BUF: no nvidia_peermem.
    assert "module:nvidia_peermem" not in got
    if training_net:
        assert r["decisions"]["gpudirect"]["value"] == "dmabuf"

    if cos:
        assert r["cloud"] == "gke" and r["reapply_every_boot"] and not r["reboot"]
        assert {s["mechanism"] for s in r["settings"].values()} <= {"sysctl"}
        assert {sid.split(":", 1)[1] for sid in got} <= COS_ALLOWED
        assert tokens == []
        assert "sysctl:net.ipv4.tcp_congestion_control" not in got
        skipped = {s["id"]: s["reason"] for s in r["skipped"]}
        assert "command line" in skipped["cmdline:init_on_alloc"]
        if training_net:
            assert "GKE rejects" in skipped["sysctl:net.ipv4.tcp_congestion_control"]
        if accelerator == "gb200" and not serving:
            assert "hugepageConfig" in skipped["cmdline:hugepages_2M"]
        # Written and applied at once, and again after every boot: no interrupt, no drain.
        assert diff_settings({}, r)["interrupt"] == NOOP
        assert [f["kind"] for f in r["files"]] == (["sysctl"] if got else [])
        assert all(f["apply"] for f in r["files"])
        assert r["initramfs"]["method"] == "none"
        return

    assert r["cloud"] is None and r["reboot"] and not r["reapply_every_boot"]
    assert diff_settings({}, r)["interrupt"] == {"type": "reboot", "services": []}
    assert "init_on_alloc=0" in tokens
    assert tokens[tokens.index("console=tty0") + 1] == "console=ttyS0,115200n8"
    assert ("iommu=pt" in tokens) is (arch == "amd64")
    assert ("iommu.passthrough=1" in tokens) is (arch == "arm64")
    assert ("numa_balancing=disable" in tokens) is (arch == "arm64")
    assert ("acpi_power_meter.force_cap_on=y" in tokens) is (arch == "arm64")
    assert (got.get("sysctl:kernel.watchdog") == "0") is (arch == "arm64")
    assert r["initramfs"]["method"] == ("dracut" if os_name == "rhel-9" else "initramfs-tools")
    assert [f["initramfs"] for f in r["files"] if f["kind"] == "modprobe"] in ([], [True])
    assert got["governor:cpu"] == "performance"
    assert got["sysctl:net.ipv4.conf.all.arp_announce"] == "2"
    assert got["sysctl:net.ipv4.conf.default.arp_ignore"] == "1"
    assert got["module:ib_umad"] == "loaded"
    assert got["gpu:persistence"] == "enabled"
    assert ("gpu:fabricmanager" in got) is (arch == "amd64")
    # CDMM: Grace Blackwell by default; GH200 only when asked for (R615 makes it the default).
    assert (got.get("modprobe:nvidia/NVreg_CoherentGPUMemoryMode") == "driver") is gb_tray
    assert ("modprobe:nvidia/NVreg_GrdmaPciTopoCheckOverride" in got) is (accelerator == "gb200")
    assert (got.get("dropin:containerd.service/LimitSTACK") == "67108864") is gb_tray
    assert (got.get("dropin:containerd.service/LimitMEMLOCK") == "infinity") is training_net
    assert (got.get("sysctl:net.ipv4.tcp_congestion_control") == "bbr") is training_net
    assert (got.get("sysctl:net.core.default_qdisc") == "fq") is training_net
    assert ("module:tcp_bbr" in got) is training_net
    assert got.get("gpu:workload_power_profile") == (POWER[intent] if family == "blackwell" else None)
    # Huge pages: none for inference by default (an option); GB200's own 2M + 1G pages
    # for the other intents.
    huge = {tokens[i]: tokens[i + 1] for i, tok in enumerate(tokens) if tok.startswith("hugepagesz=")}
    if accelerator == "gb200" and not serving:
        assert huge == {"hugepagesz=2M": "hugepages=5128", "hugepagesz=1G": "hugepages=2"}
    else:
        assert huge == {}
    assert ("earlycon" in tokens) is (accelerator == "gb200")
    cmdline_files = [f for f in r["files"] if f["kind"] == "cmdline"]
    assert len(cmdline_files) == (1 if BOOTLOADER[os_name] == "grub-dropin" else 0)


@pytest.mark.parametrize("accelerator,intent,cloud",
                         [(a, i, c) for a in ACCELS for i in INTENTS for c in ("eks", "gke")])
def test_every_accelerator_intent_cloud(accelerator, intent, cloud):
    r = resolve(accelerator, intent, "ubuntu-22.04", cloud=cloud)
    got = values(r)
    assert [n for n in r["layers"] if not n.startswith("options/")][-1] == "clouds/" + cloud
    training_net = intent in ("multiNodeTraining", "multiNodeInference")
    # Cloud networking does GPUDirect RDMA through DMA-BUF: never nvidia_peermem; the
    # hypervisor owns the PCIe topology: no ACS override.
    assert "module:nvidia_peermem" not in got and "cmdline:acs_redirect" not in got
    if training_net:
        assert r["decisions"]["gpudirect"]["value"] == "dmabuf"
    with pytest.raises(ValidationError, match="nvidia_peermem"):
        resolve(accelerator, "multiNodeTraining", "ubuntu-22.04", cloud=cloud, options={"gpudirect": "peermem"})
    if cloud == "eks":
        assert "module:ib_umad" not in got
        assert {"id": "module:ib_umad", "layer": "clouds/eks"}.items() <= next(
            item for item in r["removed"] if item["id"] == "module:ib_umad").items()
        assert got["dropin:99-default.link/MACAddressPolicy"] == "none"
        assert (got.get("sysctl:net.ipv4.tcp_congestion_control") == "bbr") is training_net
    else:
        assert "sysctl:net.ipv4.tcp_congestion_control" not in got
        assert "module:tcp_bbr" not in got
        assert not [sid for sid in got if sid.startswith(("gpu:", "modprobe:nvidia/"))]
        assert (got.get("sysctl:net.core.rmem_max") == "536870912") is training_net
        assert "init_on_alloc=0" in cmdline_tokens(r)


# ------------------------------------------------------------------ Skyhook's mistakes

def test_gb200_inference_huge_pages_keep_both_sizes():
    r = resolve("gb200", "inference", options={"inference_hugepages": True})
    assert r["settings"]["cmdline:hugepages_1G"]["layer"] == "options/inference-hugepages"
    assert r["settings"]["cmdline:hugepages_2M"]["layer"] == "options/inference-hugepages"
    assert " ".join(cmdline_tokens(r)).endswith("hugepagesz=2M hugepages=8192 hugepagesz=1G hugepages=2")
    assert "hugepagesz=1G" not in cmdline_tokens(resolve("h100", "inference", options={"inference_hugepages": True}))
    # Without the option, inference reserves none, with the reason.
    plain = resolve("gb200", "inference")
    assert not [sid for sid in plain["settings"] if sid.startswith("cmdline:hugepages")]
    assert "cudaHostAlloc" in {r["id"]: r["reason"] for r in plain["removed"]}["cmdline:hugepages_2M"]
    with pytest.raises(ValidationError, match="inference intents"):
        resolve("gb200", "performance", options={"inference_hugepages": True})


def test_redefining_huge_pages_under_a_new_name_is_refused():
    extra = {"settings": {"cmdline": {"hugepages": "hugepagesz=2M hugepages=8192"}}}
    with pytest.raises(ValidationError, match="huge pages of size 2M are set by both"):
        resolve("gb200", "performance", extra=extra)


def test_overriding_one_huge_page_size_keeps_the_other():
    extra = {"settings": {"cmdline": {"hugepages_2M": "hugepagesz=2M hugepages=1024"}}}
    tokens = cmdline_tokens(resolve("gb200", "performance", extra=extra))
    assert "hugepages=1024" in tokens and "hugepagesz=1G" in tokens


def test_only_an_explicit_removal_drops_a_setting():
    r = resolve("gb200", "performance", extra={"remove": {"cmdline:hugepages_1G": "testing"}})
    assert "cmdline:hugepages_1G" not in r["settings"]
    assert r["removed"] == [{"id": "cmdline:hugepages_1G", "layer": "extra", "reason": "testing",
                             "value": "hugepagesz=1G hugepages=2", "from": "accelerators/gb200"}]
    with pytest.raises(ValidationError, match="needs a reason"):
        resolve("gb200", "performance", extra={"remove": {"cmdline:hugepages_1G": ""}})


@pytest.mark.parametrize("key", sorted(KNOWN_NON_SYSCTLS))
def test_scheduler_tunables_are_not_sysctls(key):
    with pytest.raises(ValidationError, match="not a sysctl on the kernels NodeWright supports"):
        resolve("h100", "inference", extra={"settings": {"sysctl": {key: 100000}}})


def test_gke_refuses_congestion_control_asked_for_explicitly():
    extra = {"settings": {"sysctl": {"net.ipv4.tcp_congestion_control": "bbr"}}}
    with pytest.raises(ValidationError, match="GKE rejects net.ipv4.tcp_congestion_control"):
        resolve("h100", "multiNodeTraining", "ubuntu-24.04", cloud="gke", extra=extra)
    with pytest.raises(ValidationError, match="refused on cos"):
        resolve("h100", "multiNodeTraining", "cos", extra=extra)


# ------------------------------------------------------------------ COS

def test_cos_refuses_a_kernel_parameter_with_the_reason():
    extra = {"settings": {"cmdline": {"mitigations": "mitigations=off"}}}
    with pytest.raises(ValidationError) as err:
        resolve("h100", "performance", "cos", extra=extra)
    assert "cmdline:mitigations" in str(err.value)
    assert "kernel command line cannot be changed" in str(err.value)


def test_cos_refuses_the_acs_override_and_sysctls_gke_does_not_allow():
    with pytest.raises(ValidationError, match="command line"):
        resolve("h100", "performance", "cos", options={"acs_override": True})
    with pytest.raises(ValidationError, match="not among the sysctls GKE's node system config accepts"):
        resolve("h100", "performance", "cos", extra={"settings": {"sysctl": {"kernel.pid_max": 4194304}}})


def test_cos_needs_gke_and_accepts_allowed_sysctls():
    with pytest.raises(ValidationError, match="cos runs only on gke"):
        resolve("h100", "performance", "cos", cloud="eks")
    r = resolve("gb200", "multiNodeTraining", "cos", extra={"settings": {"sysctl": {"net.core.somaxconn": 4096}}})
    assert r["settings"]["sysctl:net.core.somaxconn"]["layer"] == "extra"
    assert [f["path"] for f in r["files"]] == [SYSCTL_FILE]


# ------------------------------------------------------------------ options

def test_acs_redirection_is_off_on_bare_metal_hgx_for_multi_node_with_an_opt_out():
    r = resolve("h100", "multiNodeTraining")
    assert r["settings"]["cmdline:acs_redirect"]["value"] == "pci=disable_acs_redir=pci:0:0"
    assert r["settings"]["cmdline:acs_redirect"]["reboot"] is True
    assert "DGX OS" in r["decisions"]["acs_override"]["reason"]
    opted_out = resolve("h100", "multiNodeTraining", options={"acs_override": False})
    assert "cmdline:acs_redirect" not in opted_out["settings"]
    assert opted_out["decisions"]["acs_override"] == {"value": False, "reason": "options.acs_override",
                                                      "explicit": True}
    for why, args in (("single-node", ("h100", "inference")), ("PCIe boards", ("h100", "multiNodeTraining")),
                      ("EKS instance", ("b200", "multiNodeTraining"))):
        kwargs = {"options": {"form_factor": "pcie"}} if why == "PCIe boards" else {}
        if why == "EKS instance":
            kwargs["cloud"] = "eks"
        got = resolve(*args, **kwargs)
        assert "cmdline:acs_redirect" not in got["settings"] and why in got["decisions"]["acs_override"]["reason"]
    assert "cmdline:acs_redirect" in resolve("h100", "performance", options={"acs_override": True})["settings"]
    for accelerator in ("gh200", "gb200", "gb300"):
        assert "cmdline:acs_redirect" not in resolve(accelerator, "multiNodeTraining")["settings"]
        with pytest.raises(ValidationError, match="x86-64 HGX"):
            resolve(accelerator, options={"acs_override": True})


def test_gpu_operator_driver_leaves_driver_settings_alone():
    got = values(resolve("gb200", "multiNodeTraining", options={"driver_source": "gpu-operator"}))
    assert not [sid for sid in got if sid.startswith(("gpu:", "modprobe:nvidia/"))]
    assert "module:nvidia_peermem" not in got
    assert "module:tcp_bbr" in got
    # auto: the GPU Operator's driver DaemonSet on the node decides it, and the plan says so.
    auto = resolve("gb200", "multiNodeTraining", host={"driver_source": "gpu-operator", "driver_reason": "DaemonSet",
                                                      "peer_memory": "MLNX_OFED_LINUX-24.10"})
    assert values(auto) == got
    assert auto["decisions"]["driver_source"] == {"value": "gpu-operator", "reason": "DaemonSet", "explicit": False}
    assert auto["decisions"]["gpudirect"]["value"] == "gpu-operator"
    host = resolve("gb200", "multiNodeTraining")
    assert host["decisions"]["driver_source"]["value"] == "host"
    assert "modprobe:nvidia/NVreg_CoherentGPUMemoryMode" in host["settings"]


def test_64k_pages_drop_1g_huge_pages_on_arm64_only():
    r = resolve("gb200", "performance", options={"page_size": "64k"})
    assert "cmdline:hugepages_1G" not in r["settings"] and "cmdline:hugepages_2M" in r["settings"]
    assert "no 1G" in r["removed"][0]["reason"]
    with pytest.raises(ValidationError, match="arm64"):
        resolve("h100", options={"page_size": "64k"})


def test_pcie_boards_have_no_fabric_manager():
    assert "gpu:fabricmanager" not in resolve("h100", options={"form_factor": "pcie"})["settings"]
    with pytest.raises(ValidationError, match="H100 and H200"):
        resolve("b200", options={"form_factor": "pcie"})


def test_power_profile_can_be_left_to_the_site():
    assert "gpu:workload_power_profile" not in resolve("b200", options={"power_profile": False})["settings"]
    assert resolve("b200", options={"power_profile": "false"})["options"]["power_profile"] is False


@pytest.mark.parametrize("options,match", [
    ({"acs": True}, "unknown option"),
    ({"acs_override": "maybe"}, "true or false"),
    ({"driver_source": "container"}, "host, gpu-operator"),
])
def test_bad_options_are_refused(options, match):
    with pytest.raises(ValidationError, match=match):
        resolve("h100", options=options)


@pytest.mark.parametrize("args,field,valid", [
    (("a100", "performance", "ubuntu-24.04"), "accelerator", "b200, b300, gb200, gb300, gh200, h100, h200"),
    (("h100", "training", "ubuntu-24.04"), "intent", "inference, multiNodeInference, multiNodeTraining, performance"),
    (("h100", "performance", "ubuntu-20.04"), "os", "cos, debian-12, rhel-9, ubuntu-22.04, ubuntu-24.04"),
])
def test_unknown_names_list_the_valid_ones(args, field, valid):
    with pytest.raises(ValidationError) as err:
        resolve_profile(*args, profiles=PROFILES)
    assert err.value.field == field
    assert err.value.hint == "valid: " + valid


def test_unknown_cloud_lists_the_valid_ones():
    with pytest.raises(ValidationError, match="valid: eks, gke"):
        resolve("h100", cloud="aks")
    assert resolve("h100", cloud="none")["cloud"] is None


@pytest.mark.parametrize("extra,match", [
    ({"settings": {"cmdline": {"iommu_off": "iommu=off"}}}, "kernel parameter iommu conflicts"),
    ({"settings": {"cmdline": {"console2": "console=tty0"}}}, "set by both"),
    ({"settings": {"cmdline": {"bad": "a b=\"c\""}}}, "is not a kernel parameter"),
    ({"settings": {"cmdline": {"huge": "hugepagesz=2M"}}}, "has no hugepages= count"),
    ({"settings": {"sysctl": {"vm.swappiness": True}}}, "quote YAML words"),
    ({"settings": {"gpu": {"workload_power_profile": "TURBO"}}}, "unknown workload power profile"),
    ({"settings": {"tuned": {"x": 1}}}, "unknown mechanism"),
    ({"settings": {"module": {"tcp_bbr": False}}}, "drop it with 'remove'"),
    ({"settings": {"dropin": {"containerd": {"LimitNOFILE": 1}}}}, "invalid systemd drop-in"),
    ({"remove": ["cmdline:iommu"]}, "maps each setting id"),
    ({"sysctl": {}}, "extra accepts 'settings' and 'remove'"),
])
def test_malformed_extra_layers_are_refused(extra, match):
    with pytest.raises(ValidationError, match=match):
        resolve("h100", "performance", extra=extra)


def test_profiles_must_be_passed_in():
    with pytest.raises(ValidationError, match="no tuning profiles were loaded"):
        resolve_profile("h100", "performance", "ubuntu-24.04", profiles={})


def test_inheritance_cycles_are_reported():
    profiles = dict(PROFILES)
    profiles["platforms/x86-hgx"] = dict(profiles["platforms/x86-hgx"], inherits=["accelerators/h100"])
    with pytest.raises(ValidationError, match="cycle"):
        resolve_profile("h100", "performance", "ubuntu-24.04", profiles=profiles)


def test_multi_node_inference_inherits_both_parents_in_order():
    r = resolve("gb200", "multiNodeInference")
    layers = r["layers"]
    assert layers.index("intents/performance") < layers.index("intents/inference") < layers.index(
        "intents/multiNodeTraining") < layers.index("intents/multiNodeInference")
    assert r["settings"]["gpu:workload_power_profile"]["value"] == "LLM_INFERENCE"


# ------------------------------------------------------------------ diffs

def test_same_profile_needs_nothing():
    r = resolve("gb200", "inference")
    diff = diff_settings(r, r)
    assert not diff["changed"] and diff["interrupt"] == NOOP and diff["changes"] == []


@pytest.mark.parametrize("old,new,expected", [
    # COS: sysctls written and applied at once, never a restart or a reboot
    (("h100", "performance", "cos"), ("h100", "multiNodeTraining", "cos"), NOOP),
    (("gb200", "multiNodeTraining", "cos"), ("gb200", "inference", "cos"), NOOP),
    # a sysctl only: restart systemd-sysctl
    (("h100", "performance", "ubuntu-24.04"), ("h100", "inference", "ubuntu-24.04"),
     {"type": "service", "services": ["systemd-sysctl"]}),
    # new kernel parameters (huge pages): reboot
    (("h100", "performance", "ubuntu-24.04", {}), ("h100", "inference", "ubuntu-24.04", {"inference_hugepages": True}),
     {"type": "reboot", "services": []}),
    # sysctls, modules and a containerd drop-in, no kernel parameter: services only
    (("h100", "performance", "ubuntu-24.04", {"acs_override": False}),
     ("h100", "multiNodeTraining", "ubuntu-24.04", {"acs_override": False}),
     {"type": "service", "services": ["containerd", "systemd-modules-load", "systemd-sysctl"]}),
    # Blackwell adds the power-profile unit
    (("b200", "performance", "rhel-9", {"acs_override": False}),
     ("b200", "multiNodeTraining", "rhel-9", {"acs_override": False}),
     {"type": "service", "services": ["containerd", "nodewright-gpu-power-profile",
                                      "systemd-modules-load", "systemd-sysctl"]}),
    # ACS redirection off for multi-node on bare-metal HGX: a kernel parameter, reboot
    (("h100", "performance", "ubuntu-24.04"), ("h100", "multiNodeTraining", "ubuntu-24.04"),
     {"type": "reboot", "services": []}),
    # removing huge pages from the command line: reboot
    (("h100", "inference", "debian-12", {"inference_hugepages": True}), ("h100", "performance", "debian-12"),
     {"type": "reboot", "services": []}),
])
def test_diff_interrupts(old, new, expected):
    def profile(accelerator, intent, os_name, options=None):
        return resolve(accelerator, intent, os_name, options=options)

    diff = diff_settings(profile(*old), profile(*new))
    assert diff["interrupt"] == expected
    assert diff["reboot"] is (expected["type"] == "reboot")


def test_removed_settings_that_linger_are_listed():
    diff = diff_settings(resolve("h100", "multiNodeTraining", options={"acs_override": False}),
                         resolve("h100", "performance"))
    lingering = {item["id"]: item["note"] for item in diff["lingering"]}
    assert "until the next reboot" in lingering["sysctl:net.core.rmem_max"]
    assert "stays loaded" in lingering["module:tcp_bbr"]
    assert "dropin:containerd.service/LimitMEMLOCK" not in lingering  # a restart drops it
    assert diff["interrupt"] == {"type": "service", "services": ["containerd"]}


def test_cmdline_add_and_remove_tokens():
    diff = diff_settings(resolve("h100", "inference", options={"inference_hugepages": True}),
                         resolve("h100", "performance", options={"acs_override": True}))
    assert diff["cmdline"]["add"] == ["pci=disable_acs_redir=pci:0:0"]
    assert diff["cmdline"]["remove"] == ["hugepagesz=2M", "hugepages=8192"]
    assert diff["modified"] == [] and "cmdline:hugepages_2M" in diff["removed"]


def test_uninstall_diff():
    diff = diff_settings(resolve("gb200", "inference"), {})
    assert diff["interrupt"]["type"] == "reboot"
    assert diff["cmdline"]["desired"] == [] and "earlycon" in diff["cmdline"]["remove"]
    cos = diff_settings(resolve("gb200", "inference", "cos"), {})
    assert cos["interrupt"] == NOOP and cos["lingering"]


def test_drift_reapplies_without_rebooting():
    r = resolve("h100", "inference")
    diff = diff_settings(r, r, reapply=["sysctl:vm.swappiness", "cmdline:init_on_alloc"])
    assert diff["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    assert not diff["changed"]


def test_modified_value_is_reported_with_both_values():
    old = resolve("h100", "inference")
    new = resolve("h100", "inference", extra={"settings": {"sysctl": {"vm.swappiness": 10}}})
    diff = diff_settings(old, new)
    assert diff["modified"] == ["sysctl:vm.swappiness"]
    assert diff["changes"][0]["old"] == "1" and diff["changes"][0]["new"] == "10"


# ------------------------------------------------------------------ read-back checks

def _observed_ok(resolved):
    observed = {}
    for sid, setting in resolved["settings"].items():
        mech = setting["mechanism"]
        if mech == "module":
            observed[sid] = "loaded"
        elif mech == "gpu":
            observed[sid] = "Enabled Enabled" if setting["key"] == "persistence" else "active"
        elif mech != "cmdline":
            observed[sid] = setting["value"].replace(" ", "\t")
    observed[CMDLINE_PROBE] = "BOOT_IMAGE=/vmlinuz ro " + " ".join(cmdline_tokens(resolved))
    return observed


def test_check_passes_when_everything_took_effect():
    r = resolve("gb200", "multiNodeTraining")
    result = check_settings(r, _observed_ok(r))
    assert result["ok"] and result["failed"] == []
    assert sorted(result["verified"]) == sorted(r["settings"])


def test_check_names_each_setting_that_did_not_take_effect():
    r = resolve("gb200", "multiNodeTraining")
    observed = _observed_ok(r)
    observed["sysctl:vm.overcommit_memory"] = "0"
    observed["module:tcp_bbr"] = "absent"
    observed[CMDLINE_PROBE] = observed[CMDLINE_PROBE].replace(" numa_balancing=disable", "")
    del observed["dropin:containerd.service/LimitMEMLOCK"]
    result = check_settings(r, observed)
    assert not result["ok"]
    assert sorted(f["id"] for f in result["failed"]) == [
        "cmdline:numa_balancing", "dropin:containerd.service/LimitMEMLOCK",
        "module:tcp_bbr", "sysctl:vm.overcommit_memory"]
    assert "sysctl:vm.overcommit_memory: expected 1, observed 0 (from platforms/grace-blackwell)" \
        in result["summary"]
    assert "<not observed>" in result["summary"]


def test_live_phase_reports_reboot_settings_as_pending():
    r = resolve("gb200", "inference")
    observed = _observed_ok(r)
    observed[CMDLINE_PROBE] = "BOOT_IMAGE=/vmlinuz ro"
    observed["modprobe:nvidia/NVreg_CoherentGPUMemoryMode"] = "<module not loaded>"
    live = check_settings(r, observed, phase="live")
    assert live["ok"]
    assert "cmdline:earlycon" in live["pending_reboot"]
    assert "modprobe:nvidia/NVreg_CoherentGPUMemoryMode" in live["pending_reboot"]
    assert not check_settings(r, observed)["ok"]
    with pytest.raises(ValidationError, match="unknown check phase"):
        check_settings(r, observed, phase="later")


def test_governor_the_host_cannot_report_is_unverified():
    r = resolve("h100", "performance", "ubuntu-24.04", cloud="eks")
    observed = _observed_ok(r)
    observed["governor:cpu"] = UNAVAILABLE
    result = check_settings(r, observed)
    assert result["ok"] and result["unverified"][0]["id"] == "governor:cpu"
    observed["governor:cpu"] = "performance powersave"
    assert not check_settings(r, observed)["ok"]


def test_persistence_must_be_enabled_on_every_gpu():
    r = resolve("h100", "performance")
    observed = _observed_ok(r)
    observed["gpu:persistence"] = "Disabled Enabled"
    assert [f["id"] for f in check_settings(r, observed)["failed"]] == ["gpu:persistence"]


def test_probes_and_observation_parsing():
    r = resolve("h100", "multiNodeTraining")
    wanted = probes(r)
    assert CMDLINE_PROBE in wanted and "sysctl:net.ipv4.tcp_rmem" in wanted
    assert not [p for p in wanted if p.startswith("cmdline:")]
    assert probes(resolve("h100", "performance", "cos")) == []
    text = "sysctl:net.ipv4.tcp_rmem\t4096 87380 268435456\nproc:cmdline\tro quiet\nnoise\n"
    assert parse_observations(text) == {"sysctl:net.ipv4.tcp_rmem": "4096 87380 268435456",
                                          "proc:cmdline": "ro quiet"}


def test_state_record_round_trips_through_diff():
    r = resolve("gb200", "inference")
    state = state_record(r, {"type": "reboot"})
    assert state["pending_interrupt"] == {"type": "reboot", "services": []}
    assert state["files"] == [f["path"] for f in r["files"]]
    assert state["bootloader"]["method"] == "grub-dropin"
    assert not diff_settings(state["settings"], r)["changed"]


def test_files_rendered_per_mechanism():
    r = resolve("gb200", "multiNodeTraining", "ubuntu-24.04", cloud="eks")
    paths = {f["path"]: f for f in r["files"]}
    assert set(paths) == {
        SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE, WANTS_FILE,
        "etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf",
        "etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf",
        "etc/systemd/system/nodewright-cpu-governor.service",
        "etc/systemd/system/nodewright-gpu-power-profile.service",
    }
    assert paths[WANTS_FILE]["units"] == [
        "nodewright-cpu-governor.service", "nvidia-persistenced.service", "nodewright-gpu-power-profile.service"]
    assert paths["etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf"]["section"] == "Link"
    assert paths["etc/systemd/system/nodewright-gpu-power-profile.service"]["profile_id"] == 7
    rhel = resolve("gb200", "inference", "rhel-9")
    assert GRUB_FILE not in [f["path"] for f in rhel["files"]]
    assert GRUB_FILE in managed_paths() and STATE_FILE in managed_paths()
