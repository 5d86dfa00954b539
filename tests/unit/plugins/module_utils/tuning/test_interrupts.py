# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Interrupts: building one, merging several, and what adding, changing or removing
each kind of setting needs."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import (
    INTERRUPT_TYPES,
    NOOP,
    apply_interrupt,
    interrupt,
    merge_interrupts,
    removal_interrupt,
)

pytestmark = pytest.mark.unit

REBOOT = {"type": "reboot", "services": []}


def service(*names):
    return {"type": "service", "services": sorted(names)}


# ------------------------------------------------------------------ interrupt()

@pytest.mark.parametrize("kind,services,expected", [
    ("noop", (), NOOP),
    ("reboot", (), REBOOT),
    ("restartAllServices", (), {"type": "restartAllServices", "services": []}),
    # Only a service interrupt keeps its services; they come back sorted and once each.
    ("service", ["b", "a", "b"], {"type": "service", "services": ["a", "b"]}),
    ("reboot", ["containerd"], REBOOT),
    ("noop", ["containerd"], NOOP),
])
def test_interrupt_builds_the_package_vocabulary(kind, services, expected):
    assert interrupt(kind, services) == expected


def test_interrupt_refuses_an_unknown_type_and_lists_the_valid_ones():
    with pytest.raises(ValidationError) as err:
        interrupt("kexec")
    assert err.value.field == "interrupt.type"
    assert err.value.hint == "one of: noop, service, restartAllServices, reboot"
    assert str(err.value) == ("interrupt.type: unknown interrupt type 'kexec' "
                              "(one of: noop, service, restartAllServices, reboot)")


def test_a_service_interrupt_names_a_service():
    with pytest.raises(ValidationError) as err:
        interrupt("service")
    assert err.value.field == "interrupt.services"
    assert "a service interrupt names at least one service" in str(err.value)


def test_the_noop_constant_is_not_shared_by_what_is_built_from_it():
    built = apply_interrupt({"mechanism": "cmdline", "reboot": False})
    assert built == NOOP and built is not NOOP
    built["services"] = ["changed"]
    assert NOOP == {"type": "noop", "services": []}


# ------------------------------------------------------------------ merge_interrupts()

@pytest.mark.parametrize("interrupts,expected", [
    ([], NOOP),
    ([NOOP, NOOP], NOOP),
    ([{"type": "service", "services": ["b"]}, {"type": "service", "services": ["a", "b"]}],
     {"type": "service", "services": ["a", "b"]}),
    ([{"type": "service", "services": ["a"]}, {"type": "restartAllServices"}],
     {"type": "restartAllServices", "services": []}),
    ([{"type": "reboot"}, {"type": "service", "services": ["a"]}], {"type": "reboot", "services": []}),
])
def test_merge_interrupts(interrupts, expected):
    assert merge_interrupts(interrupts) == expected


@pytest.mark.parametrize("args,expected", [
    # Arguments and lists of interrupts mix; empty ones and None are nothing.
    ((service("a"), [service("b")], {}), service("a", "b")),
    ((None,), NOOP),
    (({"type": None},), NOOP),
    (({},), NOOP),
    ((NOOP, (REBOOT,)), REBOOT),
    ((REBOOT, {"type": "restartAllServices"}), REBOOT),
    ((service("x"), NOOP), service("x")),
])
def test_merge_interrupts_flattens_and_ranks(args, expected):
    assert merge_interrupts(*args) == expected


@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_the_strongest_interrupt_wins_whatever_the_order(order):
    items = [NOOP, service("a"), {"type": "restartAllServices", "services": []}, REBOOT]
    rotated = items[order:] + items[:order]
    assert merge_interrupts(rotated) == REBOOT
    assert merge_interrupts([i for i in rotated if i is not REBOOT])["type"] == "restartAllServices"


def test_the_ranking_follows_the_declared_order():
    assert INTERRUPT_TYPES == ("noop", "service", "restartAllServices", "reboot")
    for weaker, stronger in zip(INTERRUPT_TYPES, INTERRUPT_TYPES[1:]):
        merged = merge_interrupts({"type": weaker, "services": ["s"]}, {"type": stronger, "services": ["s"]})
        assert merged["type"] == stronger


def test_merge_interrupts_refuses_unknown_types():
    with pytest.raises(ValidationError, match="unknown interrupt type"):
        merge_interrupts([{"type": "kexec"}])
    with pytest.raises(ValidationError, match="at least one service"):
        interrupt("service")


def test_merge_names_the_unknown_type_and_the_valid_ones():
    with pytest.raises(ValidationError) as err:
        merge_interrupts(NOOP, {"type": "restart"})
    assert err.value.field == "interrupt.type"
    assert "unknown interrupt type 'restart'" in str(err.value)
    assert err.value.hint == "one of: noop, service, restartAllServices, reboot"


# ------------------------------------------------------------------ apply_interrupt()

@pytest.mark.parametrize("setting,expected", [
    ({"mechanism": "cmdline", "reboot": True}, REBOOT),
    ({"mechanism": "modprobe", "reboot": True}, REBOOT),
    # A driver option that does not load at boot needs nothing of its own.
    ({"mechanism": "modprobe", "reboot": False}, NOOP),
    ({"mechanism": "sysctl", "reboot": False}, service("systemd-sysctl")),
    ({"mechanism": "sysctl", "reboot": False, "applied_on_write": True}, NOOP),
    ({"mechanism": "module", "reboot": False}, service("systemd-modules-load")),
    ({"mechanism": "dropin", "reboot": False, "unit": "containerd.service"}, service("containerd")),
    ({"mechanism": "dropin", "reboot": False, "unit": "kubelet.service"}, service("kubelet")),
    # A .link or .network drop-in takes effect when the link comes up again: nothing to restart.
    ({"mechanism": "dropin", "reboot": False, "unit": "99-default.link"}, NOOP),
    ({"mechanism": "dropin", "reboot": False, "unit": "eth0.network"}, NOOP),
    ({"mechanism": "governor", "reboot": False}, service("nodewright-cpu-governor")),
    ({"mechanism": "gpu", "key": "persistence", "reboot": False}, service("nvidia-persistenced")),
    ({"mechanism": "gpu", "key": "fabricmanager", "reboot": False}, service("nvidia-fabricmanager")),
    ({"mechanism": "gpu", "key": "workload_power_profile", "reboot": False},
     service("nodewright-gpu-power-profile")),
    # reboot wins over the mechanism's own interrupt.
    ({"mechanism": "sysctl", "reboot": True}, REBOOT),
    ({"mechanism": "dropin", "reboot": True, "unit": "containerd.service"}, REBOOT),
])
def test_what_a_changed_setting_needs(setting, expected):
    assert apply_interrupt(setting) == expected


def test_an_unknown_gpu_key_is_a_key_error_not_a_guess():
    with pytest.raises(KeyError):
        apply_interrupt({"mechanism": "gpu", "key": "clocks"})


# ------------------------------------------------------------------ removal_interrupt()

@pytest.mark.parametrize("setting,expected,note", [
    ({"mechanism": "cmdline", "reboot": True}, REBOOT, None),
    ({"mechanism": "modprobe", "reboot": True}, REBOOT, None),
    ({"mechanism": "dropin", "unit": "containerd.service"}, service("containerd"), None),
    ({"mechanism": "sysctl"}, NOOP, "the kernel keeps the value until the next reboot"),
    ({"mechanism": "module"}, NOOP, "the module stays loaded until the next reboot"),
    ({"mechanism": "governor"}, NOOP, "the CPUs keep the governor until the next reboot"),
    ({"mechanism": "gpu", "key": "persistence"}, NOOP,
     "the GPU keeps this state until the next reboot or driver reload"),
    ({"mechanism": "dropin", "unit": "99-default.link"}, NOOP,
     "existing links keep the setting until the next reboot"),
    ({"mechanism": "modprobe", "reboot": False}, NOOP, "takes effect at the next reboot"),
    ({}, NOOP, "takes effect at the next reboot"),
])
def test_what_a_removed_setting_needs_and_what_lingers(setting, expected, note):
    assert removal_interrupt(setting) == (expected, note)


def test_merge_skips_nothing_inside_a_list_and_a_service_interrupt_without_services_asks_for_nothing():
    assert merge_interrupts([None, {"type": "service", "services": ["a"]}], None) == {
        "type": "service", "services": ["a"]}
    assert merge_interrupts([{"type": "service"}], {"type": "noop"}) == {"type": "noop", "services": []}
