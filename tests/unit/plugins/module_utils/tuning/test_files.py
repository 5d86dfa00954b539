# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What a resolved profile writes on the host: one file per mechanism (one drop-in per
unit), in a fixed order, with the data its template renders."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import (
    cmdline_tokens,
    dropin_path,
    managed_paths,
    modprobe_tokens,
    render_plan,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import layer_settings
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    GRUB_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    STATE_FILE,
    SYSCTL_FILE,
    WANTS_FILE,
)

pytestmark = pytest.mark.unit

GOVERNOR_FILE = "etc/systemd/system/nodewright-cpu-governor.service"
POWER_FILE = "etc/systemd/system/nodewright-gpu-power-profile.service"


def resolved(groups, bootloader="grub-dropin", initramfs="none", layer="intents/test"):
    settings = {s["id"]: s for s in layer_settings(layer, {"settings": groups})}
    return {"settings": settings, "bootloader": {"method": bootloader}, "initramfs": {"method": initramfs}}


EVERYTHING = {
    "sysctl": {"vm.swappiness": {"value": 1, "why": "serving"}, "vm.max_map_count": 262144},
    "cmdline": {"init_on_alloc": "init_on_alloc=0", "hugepages_2M": "hugepagesz=2M hugepages=8"},
    "modprobe": {"nvidia": {"NVreg_CoherentGPUMemoryMode": "driver",
                            "NVreg_RegistryDwords.PeerMappingOverride": 1},
                 "nvidia_uvm": {"uvm_perf_prefetch_enable": 0}},
    "module": {"ib_umad": True, "tcp_bbr": True},
    "dropin": {"containerd.service": {"LimitMEMLOCK": "infinity", "LimitSTACK": 67108864},
               "99-default.link": {"MACAddressPolicy": "none"}},
    "governor": {"cpu": "performance"},
    "gpu": {"workload_power_profile": "LLM_TRAINING", "persistence": "enabled", "fabricmanager": "enabled"},
}


def by_path(plan):
    return {f["path"]: f for f in plan}


# ------------------------------------------------------------------ paths

@pytest.mark.parametrize("unit,path", [
    ("containerd.service", "etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf"),
    ("kubelet.service", "etc/systemd/system/kubelet.service.d/90-nodewright-nvidia.conf"),
    ("multi-user.target", "etc/systemd/system/multi-user.target.d/90-nodewright-nvidia.conf"),
    ("99-default.link", "etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf"),
    ("10-eth0.network", "etc/systemd/network/10-eth0.network.d/90-nodewright-nvidia.conf"),
    ("bond0.netdev", "etc/systemd/network/bond0.netdev.d/90-nodewright-nvidia.conf"),
])
def test_dropin_path(unit, path):
    assert dropin_path(unit) == path


def test_managed_paths_are_the_fixed_files():
    paths = managed_paths()
    assert paths == [SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE, WANTS_FILE, GOVERNOR_FILE,
                     POWER_FILE, STATE_FILE]
    assert len(set(paths)) == len(paths)


# ------------------------------------------------------------------ the plan

def test_nothing_to_write_for_no_settings():
    assert render_plan(resolved({})) == []


def test_one_file_per_mechanism_in_a_fixed_order():
    plan = render_plan(resolved(EVERYTHING, initramfs="dracut"))
    assert [(f["kind"], f["path"]) for f in plan] == [
        ("sysctl", SYSCTL_FILE),
        ("cmdline", GRUB_FILE),
        ("modprobe", MODPROBE_FILE),
        ("module", MODULES_FILE),
        ("dropin", "etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf"),
        ("dropin", "etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf"),
        ("governor", GOVERNOR_FILE),
        ("gpu", POWER_FILE),
        ("wants", WANTS_FILE),
    ]
    assert [f["template"] for f in plan] == [
        "sysctl.conf.j2", "grub.cfg.j2", "modprobe.conf.j2", "modules-load.conf.j2", "dropin.conf.j2",
        "dropin.conf.j2", "cpu-governor.service.j2", "gpu-power-profile.service.j2", "wants.conf.j2"]
    # Every setting is written by exactly one file (the wants file also names the GPU units').
    written = [sid for f in plan if f["kind"] != "wants" for sid in f["settings"]]
    assert sorted(written) == sorted(set(written))
    assert set(written) | {"gpu:persistence", "gpu:fabricmanager"} == set(resolved(EVERYTHING)["settings"])


def test_the_sysctl_file_lists_its_entries_with_their_reasons():
    sysctl = by_path(render_plan(resolved(EVERYTHING)))[SYSCTL_FILE]
    assert sysctl["entries"] == [
        {"id": "sysctl:vm.swappiness", "key": "vm.swappiness", "value": "1", "layer": "intents/test",
         "why": "serving"},
        {"id": "sysctl:vm.max_map_count", "key": "vm.max_map_count", "value": "262144",
         "layer": "intents/test", "why": ""},
    ]
    assert sysctl["settings"] == ["sysctl:vm.swappiness", "sysctl:vm.max_map_count"]
    assert sysctl["apply"] is False


def test_sysctls_applied_on_write_are_applied_by_the_step():
    r = resolved({"sysctl": {"vm.swappiness": 1}})
    r["settings"]["sysctl:vm.swappiness"]["applied_on_write"] = True
    assert render_plan(r)[0]["apply"] is True


@pytest.mark.parametrize("bootloader,grub", [("grub-dropin", True), ("grubby", False), ("none", False)])
def test_only_a_grub_dropin_bootloader_gets_a_grub_file(bootloader, grub):
    plan = by_path(render_plan(resolved(EVERYTHING, bootloader=bootloader)))
    assert (GRUB_FILE in plan) is grub
    if grub:
        assert plan[GRUB_FILE]["tokens"] == ["init_on_alloc=0", "hugepagesz=2M", "hugepages=8"]
        assert plan[GRUB_FILE]["settings"] == ["cmdline:init_on_alloc", "cmdline:hugepages_2M"]


def test_the_modprobe_file_groups_options_per_module():
    modprobe = by_path(render_plan(resolved(EVERYTHING, initramfs="initramfs-tools")))[MODPROBE_FILE]
    assert modprobe["initramfs"] is True
    assert [m["name"] for m in modprobe["modules"]] == ["nvidia", "nvidia_uvm"]
    nvidia = modprobe["modules"][0]
    assert nvidia["tokens"] == ["NVreg_CoherentGPUMemoryMode=driver",
                                'NVreg_RegistryDwords="PeerMappingOverride=1;"']
    assert [o["option"] for o in nvidia["options"]] == ["NVreg_CoherentGPUMemoryMode",
                                                        "NVreg_RegistryDwords.PeerMappingOverride"]
    assert modprobe["modules"][1]["tokens"] == ["uvm_perf_prefetch_enable=0"]
    assert by_path(render_plan(resolved(EVERYTHING)))[MODPROBE_FILE]["initramfs"] is False


def test_a_plan_without_an_initramfs_entry_has_none():
    r = resolved({"modprobe": {"nvidia": {"NVreg_X": 1}}})
    del r["initramfs"]
    assert render_plan(r)[0]["initramfs"] is False


def test_a_dropin_per_unit_with_its_section_and_directives():
    plan = by_path(render_plan(resolved(EVERYTHING)))
    containerd = plan["etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf"]
    assert (containerd["unit"], containerd["section"]) == ("containerd.service", "Service")
    assert [(e["directive"], e["value"]) for e in containerd["entries"]] == [
        ("LimitMEMLOCK", "infinity"), ("LimitSTACK", "67108864")]
    link = plan["etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf"]
    assert (link["section"], link["settings"]) == ("Link", ["dropin:99-default.link/MACAddressPolicy"])


def test_units_the_node_needs_are_wanted():
    plan = by_path(render_plan(resolved(EVERYTHING)))
    assert plan[GOVERNOR_FILE]["governor"] == "performance"
    assert (plan[POWER_FILE]["profile"], plan[POWER_FILE]["profile_id"]) == ("LLM_TRAINING", 7)
    assert plan[WANTS_FILE]["units"] == [
        "nodewright-cpu-governor.service", "nvidia-persistenced.service", "nvidia-fabricmanager.service",
        "nodewright-gpu-power-profile.service"]
    assert plan[WANTS_FILE]["settings"] == ["governor:cpu", "gpu:persistence", "gpu:fabricmanager",
                                            "gpu:workload_power_profile"]


def test_persistence_alone_is_only_wanted():
    plan = render_plan(resolved({"gpu": {"persistence": "enabled"}}))
    assert [(f["kind"], f["units"]) for f in plan] == [("wants", ["nvidia-persistenced.service"])]


# ------------------------------------------------------------------ tokens

@pytest.mark.parametrize("items,tokens", [
    ([], []),
    ([{"option": "NVreg_A", "value": "1"}, {"option": "NVreg_B", "value": "0"}], ["NVreg_A=1", "NVreg_B=0"]),
    # Registry keys merge into one parameter, where the first of them stood.
    ([{"option": "NVreg_A", "value": "1"},
      {"option": "NVreg_RegistryDwords", "dword": "K1", "value": "1"},
      {"option": "NVreg_B", "value": "2"},
      {"option": "NVreg_RegistryDwords", "dword": "K2", "value": "0x10"}],
     ["NVreg_A=1", 'NVreg_RegistryDwords="K1=1;K2=0x10;"', "NVreg_B=2"]),
    ([{"option": "NVreg_RegistryDwords", "dword": "K", "value": "3"}], ['NVreg_RegistryDwords="K=3;"']),
])
def test_modprobe_tokens(items, tokens):
    assert modprobe_tokens(items) == tokens


def test_cmdline_tokens_in_merge_order_from_settings_or_a_profile():
    settings = {
        "cmdline:a": {"mechanism": "cmdline", "tokens": ["console=tty0", "console=ttyS0"]},
        "sysctl:vm.swappiness": {"mechanism": "sysctl", "value": "1"},
        # A recorded setting without tokens is split from its value.
        "cmdline:b": {"mechanism": "cmdline", "value": "iommu=pt  earlycon"},
        "cmdline:c": {"mechanism": "cmdline"},
    }
    assert cmdline_tokens(settings) == ["console=tty0", "console=ttyS0", "iommu=pt", "earlycon"]
    assert cmdline_tokens({"settings": settings}) == cmdline_tokens(settings)
    assert cmdline_tokens({}) == [] and cmdline_tokens(None) == []


def test_cmdline_tokens_refuse_what_is_no_settings_mapping():
    with pytest.raises(ValidationError, match="expected a resolved profile or a settings mapping, got list"):
        cmdline_tokens(["init_on_alloc=0"])
