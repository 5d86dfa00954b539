# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The floor rule: a limit sysctl is never written below what the node has, what its
distribution or systemd sets, or what the kernel computes for its memory."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.floors import (
    KERNEL_DEFAULTS,
    LIMIT_SYSCTLS,
    NODE_DEPENDENT,
    SYSTEMD_DEFAULTS,
    baseline,
    floor_violation,
    kernel_default,
    lowers,
    numbers,
)

pytestmark = pytest.mark.unit

GIB = 1048576  # KiB


def sysctl(key, value, **extra):
    return dict({"mechanism": "sysctl", "key": key, "value": value, "id": "sysctl:" + key}, **extra)


# ------------------------------------------------------------------ comparing values

@pytest.mark.parametrize("value,expected", [
    ("65530", (65530,)), ("4096 131072 6291456", (4096, 131072, 6291456)), ("4096\t87380", (4096, 87380)),
    (1, (1,)), ("-1", (-1,)), ("", ()), ("bbr", None), ("1 x", None), ("1.5", None), (None, None),
])
def test_numbers(value, expected):
    assert numbers(value) == expected


@pytest.mark.parametrize("new,base,lower", [
    ("262144", "1048576", True), ("1048576", "1048576", False),
    ("4096 131072 268435456", "4096 131072 6291456", False),
    ("4096 87380 268435456", "4096 131072 6291456", True), ("bbr", "cubic", False), ("1", "", False),
])
def test_lowering_is_number_by_number(new, base, lower):
    assert lowers(new, base) is lower


@pytest.mark.parametrize("new,base,lower", [
    ("2097152", "1048576", False),
    ("100", "bbr", False),
    # Only the numbers present at the same place count.
    ("4096 131072", "4096 131072 6291456", False),
    ("4096", "8192 1 1", True),
    (65530, "65530", False),
])
def test_lowers_edge_cases(new, base, lower):
    assert lowers(new, base) is lower


# ------------------------------------------------------------------ the kernel's memory-based defaults

@pytest.mark.parametrize("key,memory_kib,value", [
    ("vm.min_free_kbytes", 960 * GIB, "126909"),
    ("vm.min_free_kbytes", 16 * GIB, "16384"),
    # sqrt(16 KiB * 16) is 16: clamped to the kernel's minimum of 128...
    ("vm.min_free_kbytes", 16, "128"),
    # ...and to at most 256 MiB on huge machines.
    ("vm.min_free_kbytes", 8192 * 1024 * GIB, "262144"),
    ("fs.inotify.max_user_watches", 960 * GIB, "1048576"),
    ("fs.inotify.max_user_watches", 16 * GIB, "134217"),
    ("fs.inotify.max_user_watches", 1 * GIB, "8388"),
    ("fs.inotify.max_user_watches", 512 * 1024, "8192"),
    ("kernel.threads-max", 960 * GIB, "7864320"),
    ("kernel.threads-max", 16 * GIB, "131072"),
    ("kernel.threads-max", 1, "20"),
])
def test_kernel_default_scales_with_memory(key, memory_kib, value):
    got, source = kernel_default(key, memory_kib)
    assert got == value
    assert source == "the kernel's default for %.0f GiB of memory" % (memory_kib / GIB)


@pytest.mark.parametrize("key,memory_kib", [
    ("vm.min_free_kbytes", None), ("vm.min_free_kbytes", 0), ("vm.max_map_count", 960 * GIB),
    ("net.ipv4.tcp_max_syn_backlog", 960 * GIB),
])
def test_no_kernel_default_without_memory_or_for_other_keys(key, memory_kib):
    assert kernel_default(key, memory_kib) is None


# ------------------------------------------------------------------ the baseline

def test_the_limits_are_every_known_default_and_the_node_dependent_ones():
    assert set(LIMIT_SYSCTLS) == set(KERNEL_DEFAULTS) | set(SYSTEMD_DEFAULTS) | set(NODE_DEPENDENT)
    assert list(LIMIT_SYSCTLS) == sorted(LIMIT_SYSCTLS)
    assert "vm.swappiness" not in LIMIT_SYSCTLS


@pytest.mark.parametrize("key,host,distro,expected", [
    ("vm.max_map_count", None, None, {"value": "65530", "source": "the kernel's default"}),
    ("kernel.pid_max", None, None, {"value": "4194304", "source": "systemd's default"}),
    ("vm.max_map_count", None,
     {"vm.max_map_count": {"value": 1048576, "source": "Ubuntu's 10-map-count.conf"}},
     {"value": "1048576", "source": "Ubuntu's 10-map-count.conf"}),
    ("vm.max_map_count", None, {"vm.max_map_count": "1048576"},
     {"value": "1048576", "source": "the distribution's default"}),
    ("vm.max_map_count", None, {"vm.max_map_count": {"value": 1048576}},
     {"value": "1048576", "source": "the distribution's default"}),
    # The distribution's value only wins when it is higher.
    ("vm.max_map_count", None, {"vm.max_map_count": "1000"},
     {"value": "65530", "source": "the kernel's default"}),
    ("vm.max_map_count", {"sysctl": {"vm.max_map_count": "2097152"}}, None,
     {"value": "2097152", "source": "the node's current value"}),
    # A current value that is lower than a default does not lower the baseline.
    ("vm.max_map_count", {"sysctl": {"vm.max_map_count": "1024"}}, None,
     {"value": "65530", "source": "the kernel's default"}),
    ("net.ipv4.tcp_rmem", {"sysctl": {"net.ipv4.tcp_rmem": "4096\t262144  33554432"}}, None,
     {"value": "4096 262144 33554432", "source": "the node's current value"}),
    # What NodeWright itself wrote there is not the node's own value.
    ("vm.max_map_count",
     {"sysctl": {"vm.max_map_count": "524288"}, "applied": {"vm.max_map_count": "524288"}}, None,
     {"value": "65530", "source": "the kernel's default"}),
    # ...unless the node has changed it since.
    ("vm.max_map_count",
     {"sysctl": {"vm.max_map_count": "524288"}, "applied": {"vm.max_map_count": "262144"}}, None,
     {"value": "524288", "source": "the node's current value"}),
    ("vm.min_free_kbytes", {"memory_kib": 960 * GIB}, None,
     {"value": "126909", "source": "the kernel's default for 960 GiB of memory"}),
    ("vm.min_free_kbytes", {"memory_kib": 960 * GIB, "sysctl": {"vm.min_free_kbytes": "1048576"}}, None,
     {"value": "1048576", "source": "the node's current value"}),
    # Equal values: the first known source is kept.
    ("vm.max_map_count", {"sysctl": {"vm.max_map_count": "65530"}}, None,
     {"value": "65530", "source": "the kernel's default"}),
    # Nothing known, or nothing that is a number.
    ("vm.swappiness", None, None, None),
    ("vm.min_free_kbytes", {}, None, None),
    ("net.core.default_qdisc", {"sysctl": {"net.core.default_qdisc": "fq_codel"}}, None, None),
    ("vm.max_map_count", {"sysctl": {"vm.max_map_count": ""}}, {"vm.max_map_count": "lots"},
     {"value": "65530", "source": "the kernel's default"}),
])
def test_baseline_is_the_highest_known_value(key, host, distro, expected):
    assert baseline(key, host, distro) == expected


# ------------------------------------------------------------------ floor_violation

def test_a_limit_below_the_baseline_is_a_violation_with_the_reason():
    distro = {"vm.max_map_count": {"value": "1048576", "source": "Ubuntu 24.04's file"}}
    base, reason = floor_violation(sysctl("vm.max_map_count", "262144"), None, distro)
    assert base == {"value": "1048576", "source": "Ubuntu 24.04's file"}
    assert reason == "would lower vm.max_map_count from 1048576 (Ubuntu 24.04's file) to 262144"


def test_a_limit_at_or_above_the_baseline_passes_with_the_baseline():
    assert floor_violation(sysctl("vm.max_map_count", "65530")) == (
        {"value": "65530", "source": "the kernel's default"}, None)
    assert floor_violation(sysctl("net.ipv4.tcp_rmem", "4096 131072 268435456")) == (
        {"value": "4096 131072 6291456", "source": "the kernel's default"}, None)


def test_one_lower_number_of_several_is_a_violation():
    base, reason = floor_violation(sysctl("net.ipv4.tcp_rmem", "4096 87380 268435456"))
    assert reason == ("would lower net.ipv4.tcp_rmem from 4096 131072 6291456 (the kernel's default) to "
                      "4096 87380 268435456")


@pytest.mark.parametrize("setting", [
    sysctl("vm.swappiness", "1"),
    sysctl("net.ipv4.tcp_max_syn_backlog", "1"),  # node-dependent, but nothing known about the node
    {"mechanism": "cmdline", "key": "hugepages", "value": "hugepages=1"},
    {"mechanism": "module", "key": "tcp_bbr", "value": "loaded"},
])
def test_no_floor_for_what_is_no_known_limit(setting):
    assert floor_violation(setting, {"memory_kib": 960 * GIB}) == (None, None)


def test_force_is_the_callers_business():
    # The rule reports the violation either way; the resolver decides what force means.
    assert floor_violation(sysctl("vm.max_map_count", "1", force=True))[1].startswith("would lower")


def test_a_multi_number_floor_takes_the_higher_number_of_each_place():
    host = {"sysctl": {"net.ipv4.tcp_rmem": "8192 65536 4194304"}}
    base = baseline("net.ipv4.tcp_rmem", host)
    default = numbers(KERNEL_DEFAULTS["net.ipv4.tcp_rmem"])
    assert numbers(base["value"]) == tuple(max(x, y) for x, y in zip((8192, 65536, 4194304), default))
    assert "the node's current value" in base["source"]
    # Raising the maximum while lowering the node's minimum still lowers a limit.
    setting = {"mechanism": "sysctl", "key": "net.ipv4.tcp_rmem", "value": "4096 131072 268435456"}
    _base, reason = floor_violation(setting, host)
    assert reason and "would lower net.ipv4.tcp_rmem" in reason
