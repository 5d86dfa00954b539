# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What changed between the host's record and the resolved settings, the interrupt
the change needs, what lingers, and the record the role keeps."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.diff import (
    applied_sysctls,
    diff_settings,
    state_record,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import layer_settings

pytestmark = pytest.mark.unit

REBOOT = {"type": "reboot", "services": []}


def settings(layer="intents/test", **groups):
    return {s["id"]: s for s in layer_settings(layer, {"settings": groups})}


BASE = settings(sysctl={"vm.swappiness": 1}, module={"tcp_bbr": True},
                cmdline={"init_on_alloc": "init_on_alloc=0"},
                dropin={"containerd.service": {"LimitMEMLOCK": "infinity"}})


def with_(base, **groups):
    out = copy.deepcopy(base)
    out.update(settings(**groups))
    return out


def without(base, *ids):
    return {sid: s for sid, s in base.items() if sid not in ids}


# ------------------------------------------------------------------ diff_settings

def test_the_same_settings_need_nothing():
    diff = diff_settings(BASE, {"settings": copy.deepcopy(BASE)})
    assert diff == {"changed": False, "added": [], "removed": [], "modified": [], "changes": [],
                    "interrupt": NOOP, "reboot": False, "lingering": [],
                    "cmdline": {"add": [], "remove": [], "desired": ["init_on_alloc=0"]}}


def test_nothing_recorded_means_everything_is_added():
    diff = diff_settings({}, BASE)
    assert diff["added"] == list(BASE) and diff["changed"]
    assert diff["interrupt"] == REBOOT and diff["reboot"] is True
    assert diff["cmdline"]["add"] == ["init_on_alloc=0"]
    assert [c["change"] for c in diff["changes"]] == ["added"] * len(BASE)
    assert all(c["old"] is None for c in diff["changes"])
    assert diff_settings(None, {}) == diff_settings({}, None)


@pytest.mark.parametrize("new,interrupt", [
    (with_(BASE, sysctl={"vm.swappiness": 10}), {"type": "service", "services": ["systemd-sysctl"]}),
    (with_(BASE, sysctl={"vm.overcommit_memory": 1}), {"type": "service", "services": ["systemd-sysctl"]}),
    (with_(BASE, module={"ib_umad": True}), {"type": "service", "services": ["systemd-modules-load"]}),
    (with_(BASE, dropin={"containerd.service": {"LimitMEMLOCK": "1G"}}),
     {"type": "service", "services": ["containerd"]}),
    (with_(BASE, sysctl={"vm.swappiness": 10}, module={"ib_umad": True}),
     {"type": "service", "services": ["systemd-modules-load", "systemd-sysctl"]}),
    (with_(BASE, cmdline={"iommu": "iommu=pt"}), REBOOT),
    (with_(BASE, gpu={"persistence": "enabled"}), {"type": "service", "services": ["nvidia-persistenced"]}),
    # Removals: a restart drops a service's drop-in; the rest lingers and needs nothing now.
    (without(BASE, "dropin:containerd.service/LimitMEMLOCK"),
     {"type": "service", "services": ["containerd"]}),
    (without(BASE, "sysctl:vm.swappiness"), NOOP),
    (without(BASE, "module:tcp_bbr"), NOOP),
    (without(BASE, "cmdline:init_on_alloc"), REBOOT),
])
def test_the_interrupt_a_change_needs(new, interrupt):
    diff = diff_settings(BASE, new)
    assert diff["changed"] is True
    assert diff["interrupt"] == interrupt
    assert diff["reboot"] is (interrupt == REBOOT)


def test_a_changed_value_is_reported_with_both_values():
    diff = diff_settings(BASE, with_(BASE, sysctl={"vm.swappiness": 10}))
    assert diff["modified"] == ["sysctl:vm.swappiness"] and diff["added"] == [] and diff["removed"] == []
    assert diff["changes"] == [{"id": "sysctl:vm.swappiness", "change": "modified", "old": "1", "new": "10",
                                "interrupt": {"type": "service", "services": ["systemd-sysctl"]}}]


def test_whitespace_and_the_layer_are_no_change():
    old = copy.deepcopy(BASE)
    old["sysctl:vm.swappiness"]["value"] = " 1 "
    new = settings(layer="os/other", sysctl={"vm.swappiness": 1}, module={"tcp_bbr": True},
                   cmdline={"init_on_alloc": "init_on_alloc=0"},
                   dropin={"containerd.service": {"LimitMEMLOCK": "infinity"}})
    assert not diff_settings(old, new)["changed"]


def test_a_change_of_the_reboot_flag_is_a_change():
    new = settings(modprobe={"nvidia": {"NVreg_X": {"value": 1, "reboot": False}}})
    old = settings(modprobe={"nvidia": {"NVreg_X": 1}})
    diff = diff_settings(old, new)
    assert diff["modified"] == ["modprobe:nvidia/NVreg_X"]
    # The new setting no longer needs a reboot, and says so.
    assert diff["interrupt"] == NOOP
    assert diff_settings(new, old)["interrupt"] == REBOOT


def test_removed_settings_say_what_lingers():
    diff = diff_settings(BASE, {})
    assert diff["removed"] == list(BASE) and diff["interrupt"] == REBOOT
    assert diff["lingering"] == [
        {"id": "sysctl:vm.swappiness", "value": "1",
         "note": "the kernel keeps the value until the next reboot"},
        {"id": "module:tcp_bbr", "value": "loaded", "note": "the module stays loaded until the next reboot"},
    ]
    assert diff["cmdline"] == {"add": [], "remove": ["init_on_alloc=0"], "desired": []}
    removed = next(c for c in diff["changes"] if c["id"] == "sysctl:vm.swappiness")
    assert removed == {"id": "sysctl:vm.swappiness", "change": "removed", "old": "1", "new": None,
                       "interrupt": NOOP}


def test_kernel_parameters_to_add_and_remove():
    old = settings(cmdline={"huge": "hugepagesz=2M hugepages=8192", "init": "init_on_alloc=0"})
    new = settings(cmdline={"huge": "hugepagesz=2M hugepages=1024", "init": "init_on_alloc=0"})
    diff = diff_settings(old, new)
    assert diff["cmdline"] == {"add": ["hugepages=1024"], "remove": ["hugepages=8192"],
                               "desired": ["hugepagesz=2M", "hugepages=1024", "init_on_alloc=0"]}


def test_drift_reapplies_without_rebooting():
    diff = diff_settings(BASE, BASE, reapply=["sysctl:vm.swappiness", "cmdline:init_on_alloc",
                                              "module:gone", "dropin:containerd.service/LimitMEMLOCK"])
    assert not diff["changed"]
    assert diff["interrupt"] == {"type": "service", "services": ["containerd", "systemd-sysctl"]}
    assert [(c["id"], c["change"]) for c in diff["changes"]] == [
        ("sysctl:vm.swappiness", "reapplied"), ("dropin:containerd.service/LimitMEMLOCK", "reapplied")]
    assert diff["changes"][0]["old"] == diff["changes"][0]["new"] == "1"


def test_a_reapplied_setting_that_also_changed_is_counted_once():
    new = with_(BASE, sysctl={"vm.swappiness": 10})
    diff = diff_settings(BASE, new, reapply=["sysctl:vm.swappiness"])
    assert [c["change"] for c in diff["changes"]] == ["modified"]


def test_diff_refuses_what_is_no_settings():
    with pytest.raises(ValidationError, match="expected a resolved profile or a settings mapping"):
        diff_settings(["sysctl:vm.swappiness"], BASE)


# ------------------------------------------------------------------ the record

def resolved(**extra):
    out = {"accelerator": "h100", "intent": "inference", "os": "ubuntu-24.04", "cloud": None,
           "options": {"page_size": "4k"}, "settings": copy.deepcopy(BASE),
           "files": [{"path": "etc/sysctl.d/90-nodewright-nvidia.conf"},
                     {"path": "etc/modules-load.d/x.conf"}],
           "bootloader": {"method": "grub-dropin"},
           "initramfs": {"method": "initramfs-tools", "update_command": ["update-initramfs", "-u"]}}
    out.update(extra)
    return out


def test_the_record_keeps_what_was_written():
    r = resolved()
    r["settings"]["sysctl:vm.swappiness"].update(current="60", current_source="the node's current value")
    record = state_record(r)
    assert record["version"] == 1
    assert record["profile"] == {"accelerator": "h100", "intent": "inference", "os": "ubuntu-24.04",
                                 "cloud": None, "options": {"page_size": "4k"}}
    assert record["files"] == ["etc/sysctl.d/90-nodewright-nvidia.conf", "etc/modules-load.d/x.conf"]
    assert record["bootloader"] == {"method": "grub-dropin"}
    assert record["pending_interrupt"] == NOOP
    assert "current" not in record["settings"]["sysctl:vm.swappiness"]
    assert "current_source" not in record["settings"]["sysctl:vm.swappiness"]
    # The resolved profile itself is left as it was.
    assert r["settings"]["sysctl:vm.swappiness"]["current"] == "60"
    assert "initramfs" not in record
    assert not diff_settings(record["settings"], r)["changed"]


@pytest.mark.parametrize("pending,expected", [
    (None, NOOP),
    ({"type": "reboot"}, REBOOT),
    ([{"type": "service", "services": ["b"]}, {"type": "service", "services": ["a"]}],
     {"type": "service", "services": ["a", "b"]}),
])
def test_the_record_keeps_the_pending_interrupt(pending, expected):
    assert state_record(resolved(), pending)["pending_interrupt"] == expected


def test_the_initramfs_checksum_is_kept_where_the_os_has_one():
    record = state_record(resolved(), initramfs="sha256:abc")
    assert record["initramfs"] == "sha256:abc"
    assert record["initramfs_command"] == ["update-initramfs", "-u"]
    assert "initramfs" not in state_record(resolved(initramfs={"method": "none"}), initramfs="sha256:abc")
    assert "initramfs" not in state_record(resolved(initramfs=None), initramfs="sha256:abc")


def test_a_minimal_profile_records_defaults():
    record = state_record({"settings": {}})
    assert record["files"] == [] and record["bootloader"] == {"method": "none"}
    assert record["profile"] == {"accelerator": None, "intent": None, "os": None, "cloud": None,
                                 "options": None}


# ------------------------------------------------------------------ applied sysctls

def test_applied_sysctls_from_a_record():
    record = state_record(resolved())
    assert applied_sysctls(record) == {"vm.swappiness": "1"}


@pytest.mark.parametrize("record", [None, {}, {"settings": None}, {"settings": {}}])
def test_no_record_no_applied_sysctls(record):
    assert applied_sysctls(record) == {}
