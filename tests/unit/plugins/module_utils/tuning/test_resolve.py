# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Resolution over a small, made-up set of layers: options validated, layers merged
setting by setting in their order, removals, conditions, platform constraints, the
floor rule and kernel parameter conflicts. The shipped profiles are covered by
test_tuning*.py."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import (
    _check_cmdline_conflicts,
    matches,
    normalize_options,
    resolve_profile,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import OPTION_SPECS

pytestmark = pytest.mark.unit

DEFAULTS = {name: spec["default"] for name, spec in OPTION_SPECS.items()}

PROFILES = {
    "base": {"settings": {
        "sysctl": {"vm.swappiness": {"value": 10, "why": "the base value"}},
        "cmdline": {"init_on_alloc": "init_on_alloc=0", "console": "console=tty0"},
    }},
    "platforms/x86-hgx": {"settings": {"cmdline": {"iommu": "iommu=pt"}}},
    "platforms/grace": {"settings": {"cmdline": {"iommu": "iommu.passthrough=1"}}},
    "platforms/grace-blackwell": {"inherits": ["platforms/grace"], "settings": {"cmdline": {
        "hugepages_2M": "hugepagesz=2M hugepages=512", "hugepages_1G": "hugepagesz=1G hugepages=2"}}},
    "accelerators/h100": {"inherits": ["platforms/x86-hgx"],
                          "meta": {"family": "hopper", "arch": "amd64", "form_factor": "sxm"},
                          "settings": {"gpu": {"persistence": "enabled"}}},
    "accelerators/gb200": {"inherits": ["platforms/grace-blackwell"],
                           "meta": {"family": "blackwell", "arch": "arm64", "form_factor": "superchip"},
                           "settings": {"sysctl": {"kernel.watchdog": {"value": 0,
                                                                       "only": {"arch": "arm64"}}}}},
    "intents/performance": {"settings": {
        "governor": {"cpu": "performance"},
        "sysctl": {"kernel.numa_balancing": {"value": 0, "only": {"arch": "amd64"}}}}},
    "intents/inference": {"inherits": ["intents/performance"], "settings": {"sysctl": {"vm.swappiness": 1}},
                          "remove": {"cmdline:hugepages_*": "inference allocates its own pinned memory"}},
    "intents/multiNodeTraining": {"inherits": ["intents/performance"], "settings": {
        "sysctl": {"vm.max_map_count": 262144, "net.ipv4.tcp_congestion_control": "bbr"},
        "module": {"tcp_bbr": True},
        "dropin": {"containerd.service": {"LimitMEMLOCK": "infinity"}}}},
    "os/ubuntu-24.04": {"meta": {
        "bootloader": {"method": "grub-dropin"},
        "initramfs": {"method": "initramfs-tools", "update_command": ["update-initramfs", "-u"]},
        "sysctl_defaults": {"vm.max_map_count": {"value": 1048576, "source": "Ubuntu's 10-map-count.conf"}}}},
    "os/rhel-9": {"meta": {"bootloader": {"method": "grubby"}}},
    "os/cos": {"meta": {"requires_cloud": "gke", "reapply_every_boot": True},
               "constraints": {"mechanisms": ["sysctl"],
                               "reasons": {"cmdline": "the COS kernel command line cannot be changed"},
                               "sysctl_allow": ["vm.*", "net.*"], "sysctl_reason": "not among GKE's sysctls",
                               "hint": "COS takes sysctls only"}},
    "clouds/eks": {"remove": {"gpu:*": "the EKS AMI runs the GPU services"}},
    "clouds/gke": {"constraints": {"forbid": {"sysctl:net.ipv4.tcp_congestion_control": "GKE rejects it"},
                                   "never_reboot": True}},
    "options/acs-override": {"activate": {"acs_override": True},
                             "requires": {"platform": "x86-hgx", "reason": "x86-64 HGX nodes only"},
                             "settings": {"cmdline": {"acs_redirect": "pci=disable_acs_redir=pci:0:0"}}},
    "options/page-size-64k": {"activate": {"page_size": "64k"}, "requires": {"arch": "arm64"},
                              "remove": {"cmdline:hugepages_1G": "64K kernels have no 1G huge pages"}},
    "options/relaxed-ordering": {"activate": {"relaxed_ordering": True}, "settings": {
        "modprobe": {"nvidia": {"NVreg_EnablePCIERelaxedOrderingMode": 1}}}},
}


def resolve(accelerator="h100", intent="performance", os_name="ubuntu-24.04", profiles=None, **kwargs):
    return resolve_profile(accelerator, intent, os_name, profiles=profiles or PROFILES, **kwargs)


def values(resolved):
    return {sid: s["value"] for sid, s in resolved["settings"].items()}


def refused(**kwargs):
    with pytest.raises(ValidationError) as err:
        resolve(**kwargs)
    return err.value


# ------------------------------------------------------------------ options

def test_no_options_are_the_defaults():
    assert normalize_options(None) == DEFAULTS
    assert normalize_options({"gpudirect": None}) == DEFAULTS


@pytest.mark.parametrize("options,key,value", [
    ({"acs_override": "yes"}, "acs_override", True),
    ({"acs_override": "Off"}, "acs_override", False),
    ({"acs_override": "0"}, "acs_override", False),
    ({"acs_override": "auto"}, "acs_override", "auto"),
    ({"power_profile": "false"}, "power_profile", False),
    ({"ibgda": "ON"}, "ibgda", True),
    # YAML reads on/off as booleans: an on/off option takes them back.
    ({"cdmm": True}, "cdmm", "on"),
    ({"gdrcopy": False}, "gdrcopy", "off"),
    ({"form_factor": "pcie"}, "form_factor", "pcie"),
])
def test_options_are_normalised(options, key, value):
    assert normalize_options(options)[key] == value


@pytest.mark.parametrize("options,field,message", [
    ({"acs_override": "maybe"}, "options.acs_override", "option acs_override must be true or false or auto, "
                                                         "got 'maybe'"),
    ({"power_profile": "auto"}, "options.power_profile",
     "option power_profile must be true or false, got 'auto'"),
    ({"ibgda": 1}, "options.ibgda", "option ibgda must be true or false, got 1"),
    ({"driver_source": "container"}, "options.driver_source",
     "option driver_source must be one of auto, host, gpu-operator, got 'container'"),
    # A boolean is no answer to a question that is not on/off.
    ({"driver_source": True}, "options.driver_source",
     "option driver_source must be one of auto, host, gpu-operator, got True"),
    ({"page_size": "2M"}, "options.page_size", "option page_size must be one of 4k, 64k, got '2M'"),
])
def test_bad_option_values_are_refused(options, field, message):
    with pytest.raises(ValidationError) as err:
        normalize_options(options)
    assert (err.value.field, err.value.reason) == (field, message)


def test_unknown_options_list_every_valid_one_with_its_help():
    with pytest.raises(ValidationError) as err:
        normalize_options({"zeta": 1, "acs": True})
    assert err.value.reason == "unknown option(s) acs, zeta"
    assert err.value.field == "options"
    assert err.value.hint.startswith("valid: acs_override (turn PCIe ACS redirection off;")
    for name in OPTION_SPECS:
        assert name + " (" in err.value.hint


# ------------------------------------------------------------------ conditions

@pytest.mark.parametrize("condition,context,result", [
    (None, {}, True),
    ({}, {"arch": "amd64"}, True),
    ({"arch": "arm64"}, {"arch": "arm64"}, True),
    ({"arch": "arm64"}, {"arch": "amd64"}, False),
    ({"arch": ["arm64", "amd64"]}, {"arch": "amd64"}, True),
    ({"platform": "grace"}, {"platform": ["grace", "grace-blackwell"]}, True),
    ({"platform": ["x86-hgx"]}, {"platform": ["grace"]}, False),
    ({"arch": "arm64", "cloud": None}, {"arch": "arm64", "cloud": None}, True),
    ({"arch": "arm64", "cloud": None}, {"arch": "arm64", "cloud": "eks"}, False),
    ({"cloud": "eks"}, {}, False),
    # A requirement's reason is no condition.
    ({"arch": "arm64", "reason": "arm64 only"}, {"arch": "arm64"}, True),
])
def test_matches(condition, context, result):
    assert matches(condition, context) is result


# ------------------------------------------------------------------ merging

def test_layers_merge_in_order_and_setting_by_setting():
    r = resolve(intent="inference")
    assert r["layers"] == ["base", "platforms/x86-hgx", "accelerators/h100", "intents/performance",
                           "intents/inference", "os/ubuntu-24.04"]
    assert values(r) == {
        "sysctl:vm.swappiness": "1", "cmdline:init_on_alloc": "init_on_alloc=0",
        "cmdline:console": "console=tty0",
        "cmdline:iommu": "iommu=pt", "gpu:persistence": "enabled", "governor:cpu": "performance",
        "sysctl:kernel.numa_balancing": "0",
    }
    # The later layer's value, and its reason: the base's why does not stay behind.
    assert r["settings"]["sysctl:vm.swappiness"]["layer"] == "intents/inference"
    assert r["settings"]["sysctl:vm.swappiness"]["why"] == ""


def test_the_resolved_profile_describes_itself():
    r = resolve()
    assert (r["accelerator"], r["family"], r["arch"], r["form_factor"], r["platforms"]) == (
        "h100", "hopper", "amd64", "sxm", ["x86-hgx"])
    assert (r["intent"], r["os"], r["cloud"], r["name"]) == ("performance", "ubuntu-24.04", None,
                                                             "h100/performance on ubuntu-24.04")
    assert r["bootloader"] == {"method": "grub-dropin"}
    assert r["initramfs"] == {"method": "initramfs-tools", "update_command": ["update-initramfs", "-u"]}
    assert r["reboot"] is True and r["reapply_every_boot"] is False
    assert r["options"]["acs_override"] is False and r["decisions"]["acs_override"]["value"] is False
    assert [f["kind"] for f in r["files"]] == ["sysctl", "cmdline", "governor", "wants"]
    assert r["settings"]["cmdline:iommu"]["interrupt"] == {"type": "reboot", "services": []}
    assert r["settings"]["governor:cpu"]["interrupt"] == {"type": "service",
                                                          "services": ["nodewright-cpu-governor"]}


def test_an_os_without_a_bootloader_or_initramfs_says_none():
    r = resolve(os_name="rhel-9")
    assert r["bootloader"] == {"method": "grubby"} and r["initramfs"] == {"method": "none"}
    assert "cmdline" not in [f["kind"] for f in r["files"]]


def test_names_are_case_insensitive_for_the_accelerator_and_cloud():
    r = resolve(accelerator="H100", cloud="EKS")
    assert r["accelerator"] == "h100" and r["cloud"] == "eks"
    assert r["name"] == "h100/performance on ubuntu-24.04 (eks)"
    assert resolve(cloud="none")["cloud"] is None and resolve(cloud="")["cloud"] is None


def test_the_resolver_does_not_change_the_profiles():
    before = copy.deepcopy(PROFILES)
    resolve(intent="inference", extra={"settings": {"sysctl": {"vm.swappiness": 5}}})
    resolve("gb200", "multiNodeTraining", "cos")
    assert PROFILES == before


@pytest.mark.parametrize("accelerator,present,absent", [
    ("h100", "sysctl:kernel.numa_balancing", "sysctl:kernel.watchdog"),
    ("gb200", "sysctl:kernel.watchdog", "sysctl:kernel.numa_balancing"),
])
def test_a_setting_applies_only_where_its_condition_holds(accelerator, present, absent):
    r = resolve(accelerator)
    assert present in r["settings"] and absent not in r["settings"]
    assert "only" not in r["settings"][present]


def test_a_removal_drops_what_its_pattern_matches_with_the_reason():
    r = resolve("gb200", "inference")
    assert not [sid for sid in r["settings"] if sid.startswith("cmdline:hugepages")]
    assert r["removed"] == [
        {"id": "cmdline:hugepages_2M", "layer": "intents/inference", "value": "hugepagesz=2M hugepages=512",
         "from": "platforms/grace-blackwell", "reason": "inference allocates its own pinned memory"},
        {"id": "cmdline:hugepages_1G", "layer": "intents/inference", "value": "hugepagesz=1G hugepages=2",
         "from": "platforms/grace-blackwell", "reason": "inference allocates its own pinned memory"},
    ]


def test_a_later_layer_may_set_a_removed_setting_again():
    extra = {"settings": {"cmdline": {"hugepages_1G": "hugepagesz=1G hugepages=4"}}}
    r = resolve("gb200", "inference", extra=extra)
    assert values(r)["cmdline:hugepages_1G"] == "hugepagesz=1G hugepages=4"
    assert "cmdline:hugepages_2M" not in r["settings"]


def test_a_cloud_removes_its_settings():
    r = resolve(cloud="eks")
    assert "gpu:persistence" not in r["settings"]
    assert r["removed"][0]["reason"] == "the EKS AMI runs the GPU services"


# ------------------------------------------------------------------ options and their layers

def test_an_option_layer_applies_where_its_option_is_chosen():
    r = resolve(options={"relaxed_ordering": True})
    assert r["layers"][-1] == "options/relaxed-ordering"
    setting = r["settings"]["modprobe:nvidia/NVreg_EnablePCIERelaxedOrderingMode"]
    assert setting["layer"] == "options/relaxed-ordering"
    assert "options/relaxed-ordering" not in resolve()["layers"]


def test_an_auto_option_applies_its_layer_when_decided_so():
    r = resolve(intent="multiNodeTraining")
    assert r["decisions"]["acs_override"]["value"] is True
    assert values(r)["cmdline:acs_redirect"] == "pci=disable_acs_redir=pci:0:0"
    assert r["decisions"]["gpudirect"]["value"] == "dmabuf"


def test_an_option_the_node_cannot_take_is_refused_with_the_reason():
    err = refused(accelerator="gb200", options={"acs_override": True})
    assert (err.reason, err.field, err.hint) == (
        "acs_override=True does not apply to gb200 on ubuntu-24.04", "options", "x86-64 HGX nodes only")
    assert refused(options={"page_size": "64k"}).hint is None


def test_64k_pages_remove_the_1g_huge_pages_through_their_layer():
    r = resolve("gb200", options={"page_size": "64k"})
    assert "cmdline:hugepages_1G" not in r["settings"] and "cmdline:hugepages_2M" in r["settings"]
    assert r["removed"][0]["layer"] == "options/page-size-64k"


def test_an_option_layer_without_activate_is_refused():
    profiles = dict(PROFILES, **{"options/broken": {"settings": {}}})
    err = refused(profiles=profiles)
    assert str(err) == "options/broken: option layer has no 'activate'"


# ------------------------------------------------------------------ the caller's extra layer

def test_extra_is_applied_last():
    r = resolve(extra={"settings": {"sysctl": {"vm.swappiness": 5}},
                       "remove": {"governor:cpu": "site policy"}})
    assert r["layers"][-1] == "extra"
    assert r["settings"]["sysctl:vm.swappiness"]["layer"] == "extra"
    assert r["removed"] == [{"id": "governor:cpu", "layer": "extra", "reason": "site policy",
                             "value": "performance", "from": "intents/performance"}]


@pytest.mark.parametrize("extra,message", [
    (["settings"], "extra must be a mapping with 'settings' and 'remove'"),
    ({"sysctl": {}, "inherits": ["base"]}, "extra accepts 'settings' and 'remove', not inherits, sysctl"),
])
def test_a_malformed_extra_is_refused(extra, message):
    err = refused(extra=extra)
    assert (err.reason, err.field) == (message, "extra")


def test_an_empty_extra_adds_no_layer():
    assert "extra" not in resolve(extra={})["layers"]


# ------------------------------------------------------------------ names

def test_no_profiles_no_resolution():
    for profiles in ({}, None, ["base"]):
        with pytest.raises(ValidationError) as err:
            resolve_profile("h100", "performance", "ubuntu-24.04", profiles=profiles)
        assert err.value.hint == "pass the layers loaded by nodewright.fleet.tuning_profile"


@pytest.mark.parametrize("kwargs,field,hint", [
    ({"accelerator": "a100"}, "accelerator", "valid: gb200, h100"),
    ({"intent": "training"}, "intent", "valid: inference, multiNodeTraining, performance"),
    ({"os_name": "ubuntu-20.04"}, "os", "valid: cos, rhel-9, ubuntu-24.04"),
    ({"cloud": "aks"}, "cloud", "valid: eks, gke"),
])
def test_unknown_names_list_the_valid_ones(kwargs, field, hint):
    err = refused(**kwargs)
    assert (err.field, err.hint) == (field, hint)


def test_a_profile_set_without_base_still_resolves():
    profiles = {k: v for k, v in PROFILES.items() if k != "base"}
    assert resolve(profiles=profiles)["layers"][0] == "platforms/x86-hgx"


# ------------------------------------------------------------------ constraints

def test_an_os_that_needs_a_cloud_brings_it():
    r = resolve("gb200", "multiNodeTraining", "cos")
    assert r["cloud"] == "gke" and r["layers"][-1] == "clouds/gke"
    assert r["name"] == "gb200/multiNodeTraining on cos (gke)"


def test_an_os_refuses_another_cloud():
    err = refused(os_name="cos", cloud="eks")
    assert (str(err)) == "cloud: cos runs only on gke, not eks"


def test_constraints_skip_inherited_settings_with_the_reason_of_the_most_specific_layer():
    r = resolve("gb200", "multiNodeTraining", "cos")
    skipped = {s["id"]: (s["by"], s["reason"]) for s in r["skipped"]}
    assert skipped == {
        # The cloud (after the OS) speaks first: its rule refuses every reboot.
        "cmdline:init_on_alloc": ("clouds/gke", "this platform is never rebooted for tuning"),
        "cmdline:console": ("clouds/gke", "this platform is never rebooted for tuning"),
        "cmdline:iommu": ("clouds/gke", "this platform is never rebooted for tuning"),
        "cmdline:hugepages_2M": ("clouds/gke", "this platform is never rebooted for tuning"),
        "cmdline:hugepages_1G": ("clouds/gke", "this platform is never rebooted for tuning"),
        "sysctl:net.ipv4.tcp_congestion_control": ("clouds/gke", "GKE rejects it"),
        "sysctl:kernel.watchdog": ("os/cos", "not among GKE's sysctls"),
        "module:tcp_bbr": ("os/cos", "module settings are not possible here"),
        "dropin:containerd.service/LimitMEMLOCK": ("os/cos", "dropin settings are not possible here"),
        "governor:cpu": ("os/cos", "governor settings are not possible here"),
    }
    assert values(r) == {"sysctl:vm.swappiness": "10", "sysctl:vm.max_map_count": "262144"}
    # Written and applied by the step, again after every boot: no interrupt.
    assert r["reapply_every_boot"] is True and r["reboot"] is False
    assert all(s["applied_on_write"] and s["interrupt"] == {"type": "noop", "services": []}
               for s in r["settings"].values())
    assert r["files"][0]["apply"] is True


def test_an_explicit_request_a_platform_refuses_is_an_error_with_its_hint():
    err = refused(os_name="cos", extra={"settings": {"cmdline": {"mitigations": "mitigations=off"}}})
    assert str(err) == ("extra: cmdline:mitigations (asked for by extra) is refused on cos: "
                        "this platform is never rebooted for tuning")
    err = refused(os_name="cos", extra={"settings": {"sysctl": {"kernel.pid_max": 4194304}}})
    assert (err.reason, err.hint) == (
        "sysctl:kernel.pid_max (asked for by extra) is refused on cos: not among GKE's sysctls",
        "COS takes sysctls only")


def test_a_mechanism_reason_of_the_os_is_given_without_the_cloud():
    profiles = copy.deepcopy(PROFILES)
    del profiles["clouds/gke"]["constraints"]["never_reboot"]
    r = resolve("h100", "performance", "cos", profiles=profiles)
    assert {s["id"]: s["reason"] for s in r["skipped"]}["cmdline:iommu"] == (
        "the COS kernel command line cannot be changed")


def test_a_forbidden_setting_asked_for_explicitly_is_refused():
    err = refused(cloud="gke", extra={"settings": {"sysctl": {"net.ipv4.tcp_congestion_control": "bbr"}}})
    assert "GKE rejects it" in str(err) and err.field == "extra"


# ------------------------------------------------------------------ the floor rule

def test_a_limit_below_the_distributions_value_is_skipped():
    r = resolve(intent="multiNodeTraining")
    assert "sysctl:vm.max_map_count" not in r["settings"]
    assert {"id": "sysctl:vm.max_map_count", "layer": "intents/multiNodeTraining", "by": "floor",
            "value": "262144",
            "reason": "would lower vm.max_map_count from 1048576 (Ubuntu's 10-map-count.conf) to 262144",
            } in r["skipped"]


def test_a_limit_above_the_baseline_says_what_it_replaces():
    r = resolve(intent="multiNodeTraining", os_name="rhel-9")
    setting = r["settings"]["sysctl:vm.max_map_count"]
    assert (setting["current"], setting["current_source"]) == ("65530", "the kernel's default")


def test_the_nodes_own_value_is_a_floor_but_what_nodewright_wrote_is_not():
    node = {"sysctl": {"vm.max_map_count": "524288"}}
    assert "sysctl:vm.max_map_count" not in resolve(intent="multiNodeTraining", os_name="rhel-9",
                                                    host=node)["settings"]
    again = dict(node, applied={"vm.max_map_count": "524288"})
    assert "sysctl:vm.max_map_count" in resolve(intent="multiNodeTraining", os_name="rhel-9",
                                                host=again)["settings"]


def test_an_explicit_limit_below_the_floor_is_refused_unless_forced():
    extra = {"settings": {"sysctl": {"vm.max_map_count": {"value": 65536}}}}
    err = refused(extra=extra)
    assert err.reason == ("sysctl:vm.max_map_count (asked for by extra) would lower vm.max_map_count "
                          "from 1048576 (Ubuntu's 10-map-count.conf) to 65536")
    assert err.hint == "leave it out, or add force: true to the setting to lower it on purpose"
    extra["settings"]["sysctl"]["vm.max_map_count"]["force"] = True
    forced = resolve(extra=extra)["settings"]["sysctl:vm.max_map_count"]
    assert forced["value"] == "65536" and forced["current"] == "1048576"


# ------------------------------------------------------------------ kernel parameter conflicts

@pytest.mark.parametrize("cmdline,message", [
    ({"iommu_off": "iommu=off"},
     "kernel parameter iommu conflicts: cmdline:iommu sets iommu=pt, cmdline:iommu_off sets iommu=off"),
    ({"iommu2": "iommu=pt"}, "kernel parameter iommu=pt is set by both cmdline:iommu and cmdline:iommu2"),
    ({"console2": "console=tty0"},
     "kernel parameter console=tty0 is set by both cmdline:console and cmdline:console2"),
    ({"huge": "hugepagesz=2M hugepages=64"}, "huge pages of size 2M are set by both cmdline:hugepages_2M and "
                                             "cmdline:huge"),
])
def test_conflicting_kernel_parameters_are_refused(cmdline, message):
    accelerator = "gb200" if "huge" in cmdline else "h100"
    err = refused(accelerator=accelerator, extra={"settings": {"cmdline": cmdline}})
    assert err.reason == message and err.field == "extra"


def test_repeatable_kernel_parameters_may_appear_several_times():
    r = resolve(extra={"settings": {"cmdline": {"serial": "console=ttyS0,115200n8", "pci_a": "pci=noaer",
                                                "pci_b": "pci=realloc"}}})
    tokens = [t for s in r["settings"].values() if s["mechanism"] == "cmdline" for t in s["tokens"]]
    assert tokens.count("console=tty0") == 1 and "console=ttyS0,115200n8" in tokens
    assert "pci=noaer" in tokens and "pci=realloc" in tokens


def test_overriding_a_huge_page_setting_by_its_id_is_no_conflict():
    extra = {"settings": {"cmdline": {"hugepages_2M": "hugepagesz=2M hugepages=1024"}}}
    r = resolve("gb200", extra=extra)
    assert values(r)["cmdline:hugepages_2M"] == "hugepagesz=2M hugepages=1024"


def test_two_huge_page_sizes_may_have_the_same_count_but_not_the_same_size_twice():
    def cmdline(**tokens):
        return {sid: {"mechanism": "cmdline", "tokens": value.split(), "layer": "site"} for sid, value in tokens.items()}
    _check_cmdline_conflicts(cmdline(hp_2m="hugepagesz=2M hugepages=2", hp_1g="hugepagesz=1G hugepages=2"))
    _check_cmdline_conflicts(cmdline(both="hugepagesz=2M hugepages=2 hugepagesz=1G hugepages=2"))
    with pytest.raises(ValidationError, match="huge pages of size 2M are set by both"):
        _check_cmdline_conflicts(cmdline(a="hugepagesz=2M hugepages=2", b="hugepagesz=2M hugepages=4"))
    with pytest.raises(ValidationError, match="kernel parameter iommu=pt is set by both"):
        _check_cmdline_conflicts(cmdline(a="iommu=pt", b="iommu=pt"))
