# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Profile layers: kinds and names, inheritance order, every mechanism's settings
normalised to one shape, the malformed ones refused with their field, and removals."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import (
    catalog,
    kind_of,
    layer_settings,
    linearize,
    pick,
    removals,
)

pytestmark = pytest.mark.unit

LAYER = "intents/test"


def settings(**groups):
    """The normalised settings of one layer holding ``groups``, by id."""
    return {s["id"]: s for s in layer_settings(LAYER, {"settings": groups})}


def one(mechanism, key, raw):
    got = layer_settings(LAYER, {"settings": {mechanism: {key: raw}}})
    assert len(got) == 1
    return got[0]


def refused(groups):
    with pytest.raises(ValidationError) as err:
        layer_settings(LAYER, {"settings": groups})
    return err.value


# ------------------------------------------------------------------ kinds and names

@pytest.mark.parametrize("name,kind", [
    ("base", "base"), ("extra", "extra"), ("platforms/grace", "platform"),
    ("accelerators/h100", "accelerator"),
    ("intents/inference", "intent"), ("os/cos", "os"), ("clouds/eks", "cloud"), ("options/cdmm-on", "option"),
    ("sites/lab", None), ("intents", "intent"), ("", None),
])
def test_kind_of(name, kind):
    assert kind_of(name) == kind


PROFILES = {
    "base": {},
    "platforms/x86-hgx": {},
    "accelerators/h100": {"inherits": ["platforms/x86-hgx"]},
    "accelerators/b200": {"inherits": "platforms/x86-hgx"},
    "intents/performance": {},
    "intents/inference": {"inherits": ["intents/performance"]},
    "os/ubuntu-24.04": {},
    "clouds/eks": {},
    "options/cdmm-on": {},
    "sites/lab": {},
}


def test_catalog_lists_the_names_of_each_kind_sorted():
    assert catalog(PROFILES) == {
        "accelerator": ["b200", "h100"], "intent": ["inference", "performance"], "os": ["ubuntu-24.04"],
        "cloud": ["eks"], "platform": ["x86-hgx"], "option": ["cdmm-on"],
    }
    assert catalog(None) == {"accelerator": [], "intent": [], "os": [], "cloud": [], "platform": [],
                             "option": []}


@pytest.mark.parametrize("kind,value,name", [
    ("accelerator", "h100", "accelerators/h100"), ("intent", "inference", "intents/inference"),
    ("os", "ubuntu-24.04", "os/ubuntu-24.04"), ("cloud", "eks", "clouds/eks"),
])
def test_pick_finds_the_layer(kind, value, name):
    assert pick(PROFILES, kind, value, kind) == name


@pytest.mark.parametrize("kind,value,hint", [
    ("accelerator", "a100", "valid: b200, h100"),
    ("intent", "training", "valid: inference, performance"),
    ("cloud", "aks", "valid: eks"),
    # A platform is not an accelerator, even though its layer exists.
    ("accelerator", "x86-hgx", "valid: b200, h100"),
])
def test_pick_refuses_an_unknown_name_listing_the_valid_ones(kind, value, hint):
    with pytest.raises(ValidationError) as err:
        pick(PROFILES, kind, value, "spec." + kind)
    assert err.value.field == "spec." + kind
    assert err.value.reason == "unknown %s %r" % (kind, value)
    assert err.value.hint == hint


# ------------------------------------------------------------------ inheritance

def test_parents_come_first_and_each_layer_once():
    profiles = {
        "a": {"inherits": ["b", "c"]}, "b": {"inherits": ["d"]}, "c": {"inherits": ["d"]}, "d": {},
    }
    out = []
    linearize(profiles, "a", out)
    assert out == ["d", "b", "c", "a"]
    # Already in the chain: nothing added again.
    linearize(profiles, "c", out)
    assert out == ["d", "b", "c", "a"]


def test_a_single_parent_may_be_a_string():
    out = ["base"]
    linearize(PROFILES, "accelerators/b200", out)
    assert out == ["base", "platforms/x86-hgx", "accelerators/b200"]


def test_an_inheritance_cycle_is_named_in_full():
    profiles = {"a": {"inherits": ["b"]}, "b": {"inherits": ["c"]}, "c": {"inherits": ["a"]}}
    with pytest.raises(ValidationError) as err:
        linearize(profiles, "a", [])
    assert err.value.reason == "profile layers inherit in a cycle: a -> b -> c -> a"
    assert err.value.field == "a"


def test_a_layer_inheriting_itself_is_a_cycle():
    with pytest.raises(ValidationError, match="cycle: a -> a"):
        linearize({"a": {"inherits": "a"}}, "a", [])


def test_a_missing_parent_names_the_layer_that_needs_it():
    profiles = {"intents/x": {"inherits": ["intents/nothere"]}, "base": {}}
    with pytest.raises(ValidationError) as err:
        linearize(profiles, "intents/x", [])
    assert err.value.reason == "profile layer 'intents/nothere' does not exist"
    assert err.value.field == "intents/x"
    assert err.value.hint == "layers: base, intents/x"


def test_a_missing_top_layer_is_charged_to_the_profiles():
    with pytest.raises(ValidationError) as err:
        linearize({"base": {}}, "intents/x", [])
    assert err.value.field == "profiles"


def test_a_layer_that_is_no_mapping_is_refused():
    with pytest.raises(ValidationError) as err:
        linearize({"a": ["settings"]}, "a", [])
    assert str(err.value) == "a: profile layer 'a' is not a mapping"


# ------------------------------------------------------------------ settings by mechanism

def test_sysctl_values_become_text_with_single_spaces():
    got = settings(sysctl={"net.ipv4.tcp_rmem": {"value": [4096, 131072, "268435456"], "why": "buffers"},
                           "vm.swappiness": 1, "net.ipv4.tcp_congestion_control": " bbr "})
    assert got["sysctl:net.ipv4.tcp_rmem"] == {
        "id": "sysctl:net.ipv4.tcp_rmem", "mechanism": "sysctl", "key": "net.ipv4.tcp_rmem",
        "value": "4096 131072 268435456", "reboot": False, "layer": LAYER, "why": "buffers"}
    assert got["sysctl:vm.swappiness"]["value"] == "1" and got["sysctl:vm.swappiness"]["why"] == ""
    assert got["sysctl:net.ipv4.tcp_congestion_control"]["value"] == "bbr"


def test_sysctl_force_and_only_are_kept():
    s = one("sysctl", "vm.max_map_count", {"value": 65530, "force": True, "only": {"arch": "arm64"}})
    assert s["force"] is True and s["only"] == {"arch": "arm64"}
    assert "force" not in one("sysctl", "vm.max_map_count", 65530)


@pytest.mark.parametrize("key", ["vm.swappiness", "net.ipv4.conf.all.arp_announce", "fs.aio-max-nr",
                                 "net.ipv4.conf.eth0.rp_filter", "kernel.threads-max"])
def test_valid_sysctl_keys(key):
    assert one("sysctl", key, 1)["key"] == key


@pytest.mark.parametrize("key", ["swappiness", "VM.swappiness", "vm..swappiness", "vm.swap piness", "-vm.x"])
def test_invalid_sysctl_keys(key):
    err = refused({"sysctl": {key: 1}})
    assert err.reason == "%r is not a sysctl key" % key
    assert err.field == "%s: settings.sysctl.%s" % (LAYER, key)


def test_a_scheduler_tunable_is_refused_with_where_it_went():
    err = refused({"sysctl": {"kernel.sched_latency_ns": 100000}})
    assert err.reason.startswith(
        "kernel.sched_latency_ns is not a sysctl on the kernels NodeWright supports: moved to debugfs")
    assert err.hint == "leave it out; 'sysctl --system' fails on unknown keys"


@pytest.mark.parametrize("raw,message,hint", [
    (True, "expected a string or a number, got True", "quote YAML words such as 'off' or 'yes'"),
    (None, "expected a string or a number, got None", "quote YAML words such as 'off' or 'yes'"),
    ({"value": False}, "expected a string or a number, got False", "quote YAML words such as 'off' or 'yes'"),
    ([1, True], "expected a string or a number, got True", "quote YAML words such as 'off' or 'yes'"),
    (0.5, "expected an integer or a string, got 0.5", None),
    ({"why": "no value"}, "setting has no value", None),
])
def test_malformed_values_are_refused(raw, message, hint):
    err = refused({"sysctl": {"vm.swappiness": raw}})
    assert (err.reason, err.hint, err.field) == (message, hint, LAYER + ": settings.sysctl.vm.swappiness")


def test_force_must_be_a_boolean():
    err = refused({"sysctl": {"vm.max_map_count": {"value": 1, "force": "yes"}}})
    assert err.reason == "force must be true or false"


def test_cmdline_keeps_its_tokens_and_always_reboots():
    s = one("cmdline", "hugepages_1G", {"value": "hugepagesz=1G  hugepages=2", "why": "1G pages"})
    assert s["value"] == "hugepagesz=1G hugepages=2"
    assert s["tokens"] == ["hugepagesz=1G", "hugepages=2"]
    assert s["reboot"] is True and s["id"] == "cmdline:hugepages_1G"
    assert one("cmdline", "console", ["console=tty0", "console=ttyS0,115200n8"])["tokens"] == [
        "console=tty0", "console=ttyS0,115200n8"]
    assert one("cmdline", "earlycon", "earlycon")["tokens"] == ["earlycon"]


@pytest.mark.parametrize("value,message", [
    ("", "empty kernel parameter"),
    ("   ", "empty kernel parameter"),
    ('a b="c"', "'b=\"c\"' is not a kernel parameter (name or name=value)"),
    ("x='y'", "\"x='y'\" is not a kernel parameter (name or name=value)"),
    ("=1", "'=1' is not a kernel parameter (name or name=value)"),
    ("hugepagesz=2M", "hugepagesz=2M has no hugepages= count"),
    ("hugepagesz=2M hugepagesz=1G hugepages=2", "hugepagesz=2M has no hugepages= count"),
    ("hugepages=8", "hugepages= must follow its hugepagesz="),
    ("hugepagesz=2M hugepages=8 hugepages=4", "hugepages= must follow its hugepagesz="),
])
def test_malformed_kernel_parameters_are_refused(value, message):
    assert refused({"cmdline": {"k": value}}).reason == message


def test_huge_page_pairs_of_several_sizes_are_accepted():
    s = one("cmdline", "huge", "hugepagesz=2M hugepages=8192 hugepagesz=1G hugepages=2 default_hugepagesz=2M")
    assert len(s["tokens"]) == 5


@pytest.mark.parametrize("raw", [True, {"why": "RDMA"}, {"value": True, "why": "RDMA"}])
def test_a_module_entry_loads_the_module(raw):
    s = one("module", "ib_umad", raw)
    assert (s["id"], s["value"], s["reboot"]) == ("module:ib_umad", "loaded", False)


@pytest.mark.parametrize("key,raw,message", [
    ("tcp_bbr", False, "a module entry only loads the module; drop it with 'remove'"),
    ("tcp_bbr", "yes", "a module entry only loads the module; drop it with 'remove'"),
    ("Bad.Module", True, "'Bad.Module' is not a kernel module name"),
])
def test_malformed_module_entries_are_refused(key, raw, message):
    assert refused({"module": {key: raw}}).reason == message


def test_modprobe_options_are_grouped_by_module_and_reboot_by_default():
    got = settings(modprobe={"nvidia": {"NVreg_CoherentGPUMemoryMode": "driver",
                                        "NVreg_EnableStreamMemOPs": {"value": 1, "reboot": False}}})
    mode = got["modprobe:nvidia/NVreg_CoherentGPUMemoryMode"]
    assert (mode["module"], mode["option"], mode["key"], mode["value"], mode["reboot"]) == (
        "nvidia", "NVreg_CoherentGPUMemoryMode", "nvidia/NVreg_CoherentGPUMemoryMode", "driver", True)
    assert "dword" not in mode
    assert got["modprobe:nvidia/NVreg_EnableStreamMemOPs"]["reboot"] is False


def test_a_registry_key_is_one_dword_of_its_parameter():
    s = one("modprobe", "nvidia", {"NVreg_RegistryDwords.PeerMappingOverride": {"value": 1}})
    assert s["id"] == "modprobe:nvidia/NVreg_RegistryDwords.PeerMappingOverride"
    assert (s["option"], s["dword"], s["value"]) == ("NVreg_RegistryDwords", "PeerMappingOverride", "1")
    assert one("modprobe", "nvidia", {"NVreg_RegistryDwords.RmMask": "0x1F"})["value"] == "0x1F"


@pytest.mark.parametrize("module,option,message,hint", [
    ("nvidia", "NVreg_RegistryDwords",
     "NVreg_RegistryDwords holds several keys: set each as NVreg_RegistryDwords.KEY",
     "e.g. NVreg_RegistryDwords.PeerMappingOverride: {value: 1}; NodeWright merges them"),
    ("nvidia", "NVreg_Other.Key", "invalid module option nvidia NVreg_Other.Key",
     "an option name, or NVreg_RegistryDwords.KEY for one key of the registry"),
    ("nvidia", "NVreg_RegistryDwords.Bad-Key", "invalid module option nvidia NVreg_RegistryDwords.Bad-Key",
     "an option name, or NVreg_RegistryDwords.KEY for one key of the registry"),
    ("nvidia", "bad-option", "invalid module option nvidia bad-option", None),
    ("Nvidia", "NVreg_X", "invalid module option Nvidia NVreg_X", None),
])
def test_malformed_module_options_are_refused(module, option, message, hint):
    err = refused({"modprobe": {module: {option: 1}}})
    assert (err.reason, err.hint) == (message, hint)
    assert err.field == "%s: settings.modprobe.%s.%s" % (LAYER, module, option)


def test_a_registry_value_is_a_number():
    err = refused({"modprobe": {"nvidia": {"NVreg_RegistryDwords.Key": "1;Other=2"}}})
    assert err.reason == "a registry value is a number, got '1;Other=2'"


@pytest.mark.parametrize("unit,section", [
    ("containerd.service", "Service"), ("docker.socket", "Socket"), ("multi-user.target", "Unit"),
    ("data.mount", "Mount"), ("fstrim.timer", "Timer"), ("99-default.link", "Link"),
    ("10-eth0.network", "Network"), ("bond0.netdev", "NetDev"), ("getty@tty1.service", "Service"),
])
def test_dropins_know_their_units_section(unit, section):
    s = one("dropin", unit, {"LimitMEMLOCK": "infinity"})
    assert (s["id"], s["unit"], s["directive"], s["section"], s["reboot"]) == (
        "dropin:%s/LimitMEMLOCK" % unit, unit, "LimitMEMLOCK", section, False)


@pytest.mark.parametrize("unit,directive", [
    ("containerd", "LimitNOFILE"), ("containerd.slice", "LimitNOFILE"), ("containerd.service", "limitNOFILE"),
    ("containerd.service", "L"), ("a b.service", "LimitNOFILE"),
])
def test_invalid_dropins_are_refused(unit, directive):
    err = refused({"dropin": {unit: {directive: 1}}})
    assert err.reason == "invalid systemd drop-in %s %s" % (unit, directive)


def test_grouped_mechanisms_need_a_mapping_per_group():
    err = refused({"dropin": {"containerd.service": "LimitNOFILE=1"}})
    assert str(err) == "%s: settings.dropin.containerd.service: must map option names to values" % LAYER


def test_the_governor_is_named_cpu():
    assert one("governor", "cpu", "performance")["value"] == "performance"
    assert refused({"governor": {"cpu0": "performance"}}).reason == "the governor setting is named 'cpu'"


def test_gpu_settings():
    got = settings(gpu={"persistence": "enabled", "workload_power_profile": {"value": "LLM_TRAINING"}})
    assert got["gpu:persistence"]["value"] == "enabled" and "profile_id" not in got["gpu:persistence"]
    assert got["gpu:workload_power_profile"]["profile_id"] == 7


@pytest.mark.parametrize("key,value,message,hint", [
    ("clocks", "max", "unknown GPU setting 'clocks'",
     "valid: persistence, fabricmanager, workload_power_profile"),
    ("persistence", "disabled", "persistence can only be 'enabled'; drop it with 'remove'", None),
    ("fabricmanager", "on", "fabricmanager can only be 'enabled'; drop it with 'remove'", None),
    ("workload_power_profile", "TURBO", "unknown workload power profile 'TURBO'", "valid: BALANCED, COMPUTE, "
     "DCPCIE, HMMA_DENSE, HMMA_SPARSE, HPC, LLM_INFERENCE, LLM_TRAINING, MAX_P, MAX_Q, MEMORY_BOUND, MIG, "
     "NETWORK, RBM, SYNC_BALANCED"),
])
def test_malformed_gpu_settings_are_refused(key, value, message, hint):
    err = refused({"gpu": {key: value}})
    assert (err.reason, err.hint) == (message, hint)


# ------------------------------------------------------------------ the settings block

def test_a_layer_without_settings_has_none():
    assert layer_settings(LAYER, {}) == [] and layer_settings(LAYER, {"settings": None}) == []


def test_keys_are_read_as_text_in_order():
    got = layer_settings(LAYER, {"settings": {"sysctl": {"vm.swappiness": 1, "vm.overcommit_memory": 1},
                                              "module": {"tcp_bbr": True}}})
    assert [s["id"] for s in got] == ["sysctl:vm.swappiness", "sysctl:vm.overcommit_memory", "module:tcp_bbr"]


@pytest.mark.parametrize("block,field,message,hint", [
    (["sysctl"], LAYER + ": settings", "settings must be a mapping", None),
    ({"tuned": {"x": 1}}, LAYER + ": settings.tuned", "unknown mechanism 'tuned'",
     "valid: cmdline, sysctl, module, modprobe, dropin, governor, gpu"),
    ({"sysctl": ["vm.swappiness=1"]}, LAYER + ": settings.sysctl", "must be a mapping", None),
])
def test_a_malformed_settings_block_is_refused(block, field, message, hint):
    with pytest.raises(ValidationError) as err:
        layer_settings(LAYER, {"settings": block})
    assert (err.value.field, err.value.reason, err.value.hint) == (field, message, hint)


# ------------------------------------------------------------------ removals

def test_removals_map_ids_or_globs_to_reasons():
    remove = {"cmdline:hugepages_*": "no huge pages here", "module:ib_umad": "no InfiniBand"}
    assert removals(LAYER, {"remove": remove}) == remove
    assert removals(LAYER, {}) == {} and removals(LAYER, {"remove": None}) == {}


@pytest.mark.parametrize("remove,message", [
    (["cmdline:iommu"], "'remove' maps each setting id (or glob) to the reason"),
    ("cmdline:iommu", "'remove' must be a mapping"),
    ({"cmdline:iommu": ""}, "removing cmdline:iommu needs a reason"),
    ({"cmdline:iommu": None}, "removing cmdline:iommu needs a reason"),
])
def test_malformed_removals_are_refused(remove, message):
    with pytest.raises(ValidationError) as err:
        removals(LAYER, {"remove": remove})
    assert (err.value.reason, err.value.field) == (message, LAYER + ": remove")
