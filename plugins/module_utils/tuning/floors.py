# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The floor rule: a limit sysctl NodeWright writes never lowers the value the node
already has, the value its distribution sets, or the value the kernel computes for
the node's memory.

A *limit* is a sysctl where more is more room (map counts, watches, buffers, queues,
reserves); for the others (swappiness, watchdog, modes, algorithm names) a smaller
value is a choice, not a loss, and the rule does not apply. The baseline of a limit
is the highest of what is known about the node:

- ``host['sysctl']``: the value read on the node before writing (the role reads it;
  a value NodeWright itself wrote before, ``host['applied']``, does not count);
- the kernel's value for the node's memory (``host['memory_kib']``): ``min_free_kbytes``,
  ``inotify.max_user_watches`` and ``threads-max`` scale with RAM;
- the distribution's (the OS layer's ``meta.sysctl_defaults``, e.g. Ubuntu 24.04's
  ``/etc/sysctl.d/10-map-count.conf``) and systemd's;
- the kernel's fixed default.

A setting below its baseline is dropped with the reason (in ``skipped``) unless it
says ``force: true``; asked for explicitly (an option or ``extra``) it is refused.
Values are compared number by number (``tcp_rmem`` has three). Stdlib only.
"""

from __future__ import annotations

import math

# Fixed defaults of the kernels NodeWright's operating systems ship (5.14 to 6.8).
KERNEL_DEFAULTS = {
    "vm.max_map_count": "65530",
    "fs.inotify.max_user_instances": "128",
    "fs.inotify.max_queued_events": "16384",
    "fs.aio-max-nr": "65536",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
    "net.core.rmem_default": "212992",
    "net.core.wmem_default": "212992",
    "net.core.optmem_max": "20480",
    "net.core.netdev_max_backlog": "1000",
    "net.core.somaxconn": "4096",
    "net.ipv4.tcp_rmem": "4096 131072 6291456",
    "net.ipv4.tcp_wmem": "4096 16384 4194304",
}

# What systemd (PID 1 and its sysctl.d) sets at boot on every OS NodeWright supports.
SYSTEMD_DEFAULTS = {
    "fs.nr_open": "1073741816",
    "fs.file-max": "9223372036854775807",
    "kernel.pid_max": "4194304",
}

# Limits whose kernel default depends on the node (memory, hash sizes): the rule
# applies with what the node reports or the memory-based value below.
NODE_DEPENDENT = ("vm.min_free_kbytes", "fs.inotify.max_user_watches", "kernel.threads-max",
                  "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_max_orphans", "net.ipv4.tcp_max_tw_buckets",
                  "net.netfilter.nf_conntrack_max", "kernel.shmmax", "kernel.shmall", "kernel.shmmni")

LIMIT_SYSCTLS = tuple(sorted(set(KERNEL_DEFAULTS) | set(SYSTEMD_DEFAULTS) | set(NODE_DEPENDENT)))

# The kernel's cost of one inotify watch (an inotify_inode_mark and two inodes): about
# 1 KiB on 64-bit kernels; the estimate errs high, so the computed default errs low.
INOTIFY_WATCH_COST = 1280
THREAD_SIZE = 16384  # arm64 and x86-64


def kernel_default(key, memory_kib):
    """``(value, source)`` the kernel computes at boot for ``key`` on a node with
    ``memory_kib`` of memory, or None when it does not depend on memory or the
    memory is unknown."""
    if not memory_kib:
        return None
    gib = memory_kib / 1048576.0
    if key == "vm.min_free_kbytes":
        # init_per_zone_wmark_min: sqrt(lowmem_kbytes * 16), at most 256 MiB.
        value = max(128, min(int(math.isqrt(int(memory_kib) * 16)), 262144))
        return str(value), "the kernel's default for %.0f GiB of memory" % gib
    if key == "fs.inotify.max_user_watches":
        # Since 5.11: 1% of memory in watches, between 8192 and 1048576.
        value = max(8192, min(int(memory_kib * 1024 // 100 // INOTIFY_WATCH_COST), 1048576))
        return str(value), "the kernel's default for %.0f GiB of memory" % gib
    if key == "kernel.threads-max":
        value = max(20, min(int(memory_kib * 1024 // (8 * THREAD_SIZE)), 0x3fffffff))
        return str(value), "the kernel's default for %.0f GiB of memory" % gib
    return None


def numbers(value):
    """The integers of a sysctl value (``"4096 131072 6291456"`` -> (4096, 131072,
    6291456)), or None when it is not all numbers."""
    try:
        return tuple(int(v) for v in str(value).split())
    except ValueError:
        return None


def lowers(new, base):
    """Whether writing ``new`` lowers ``base``: some number of ``new`` is below the one
    at the same place in ``base``. Values that are not numbers never lower."""
    a, b = numbers(new), numbers(base)
    if not a or not b:
        return False
    return any(x < y for x, y in zip(a, b))


def _higher(a, b):
    """The larger of two ``(value, source)``, number by number (None: unknown): where each
    is higher in some place (``8192 65536 4194304`` and ``4096 131072 6291456``) the
    floor takes the higher number of each place and names both sources."""
    if a is None:
        return b
    if b is None:
        return a
    na, nb = numbers(a[0]), numbers(b[0])
    if na and nb and len(na) == len(nb) and lowers(a[0], b[0]) and lowers(b[0], a[0]):
        return (" ".join(str(max(x, y)) for x, y in zip(na, nb)), "%s and %s, place by place" % (a[1], b[1]))
    if lowers(b[0], a[0]) or nb == na:
        return a
    return b


def baseline(key, host=None, distro=None):
    """``{'value', 'source'}``: the highest value ``key`` has or would have on the node
    without NodeWright, from what is known (see the module's docstring), or None."""
    host = host or {}
    best = None
    candidates = []
    if key in KERNEL_DEFAULTS:
        candidates.append((KERNEL_DEFAULTS[key], "the kernel's default"))
    if key in SYSTEMD_DEFAULTS:
        candidates.append((SYSTEMD_DEFAULTS[key], "systemd's default"))
    computed = kernel_default(key, host.get("memory_kib"))
    if computed:
        candidates.append(computed)
    entry = (distro or {}).get(key)
    if entry:
        if isinstance(entry, dict):
            candidates.append((str(entry.get("value")), entry.get("source") or "the distribution's default"))
        else:
            candidates.append((str(entry), "the distribution's default"))
    current = (host.get("sysctl") or {}).get(key)
    applied = (host.get("applied") or {}).get(key)
    if current not in (None, "") and numbers(current) and \
            (applied is None or numbers(applied) != numbers(current)):
        candidates.append((" ".join(str(current).split()), "the node's current value"))
    for value, source in candidates:
        if numbers(value) is None:
            continue
        best = _higher(best, (value, source))
    return {"value": best[0], "source": best[1]} if best else None


def floor_violation(setting, host=None, distro=None):
    """For a sysctl setting: ``(baseline, reason)`` where ``reason`` says why writing
    it would lower the baseline (None when it does not, or the key is no limit)."""
    if setting.get("mechanism") != "sysctl" or setting["key"] not in LIMIT_SYSCTLS:
        return None, None
    base = baseline(setting["key"], host, distro)
    if base and lowers(setting["value"], base["value"]):
        return base, "would lower %s from %s (%s) to %s" % (setting["key"], base["value"], base["source"],
                                                            setting["value"])
    return base, None
