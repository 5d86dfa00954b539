# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Interrupts in the package vocabulary (``{type: reboot|restartAllServices|service|
noop, services: [...]}``) and what adding or removing a setting needs."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import GOVERNOR_UNIT, GPU_UNITS

INTERRUPT_TYPES = ("noop", "service", "restartAllServices", "reboot")
_INTERRUPT_RANK = {t: i for i, t in enumerate(INTERRUPT_TYPES)}
NOOP = {"type": "noop", "services": []}


def interrupt(kind, services=()):
    """An interrupt dict; ``service`` needs at least one service."""
    if kind not in INTERRUPT_TYPES:
        raise ValidationError("unknown interrupt type %r" % (kind,), field="interrupt.type",
                              hint="one of: %s" % ", ".join(INTERRUPT_TYPES))
    services = sorted(set(services)) if kind == "service" else []
    if kind == "service" and not services:
        raise ValidationError("a service interrupt names at least one service",
                              field="interrupt.services")
    return {"type": kind, "services": services}


def merge_interrupts(*interrupts):
    """Merge interrupts: reboot > restartAllServices > service (union of services) > noop."""
    flat = []
    for item in interrupts:
        if isinstance(item, (list, tuple)):
            flat.extend(i for i in item if i)
        elif item:
            flat.append(item)
    best, services = "noop", set()
    for item in flat:
        kind = item.get("type") or "noop"
        if kind not in _INTERRUPT_RANK:
            raise ValidationError("unknown interrupt type %r" % (kind,), field="interrupt.type",
                                  hint="one of: %s" % ", ".join(INTERRUPT_TYPES))
        if kind == "service":
            services.update(item.get("services") or [])
        if _INTERRUPT_RANK[kind] > _INTERRUPT_RANK[best]:
            best = kind
    if best == "service":
        # A service interrupt that names no service asks for nothing (``interrupt()`` refuses one).
        return {"type": "service", "services": sorted(services)} if services else {"type": "noop", "services": []}
    return {"type": best, "services": []}


def apply_interrupt(setting):
    """What makes an added or changed setting take effect."""
    mech = setting["mechanism"]
    if setting.get("reboot"):
        return interrupt("reboot")
    if mech == "sysctl":
        if setting.get("applied_on_write"):
            return dict(NOOP)
        return interrupt("service", ["systemd-sysctl"])
    if mech == "module":
        return interrupt("service", ["systemd-modules-load"])
    if mech == "dropin":
        unit = setting["unit"]
        if unit.endswith(".service"):
            return interrupt("service", [unit[:-len(".service")]])
        return dict(NOOP)
    if mech == "governor":
        return interrupt("service", [GOVERNOR_UNIT[:-len(".service")]])
    if mech == "gpu":
        return interrupt("service", [GPU_UNITS[setting["key"]][:-len(".service")]])
    return dict(NOOP)


def removal_interrupt(setting):
    """What a removed setting needs, and whether its effect lingers until a reboot."""
    mech = setting.get("mechanism")
    if setting.get("reboot"):
        return interrupt("reboot"), None
    if mech == "dropin" and str(setting.get("unit", "")).endswith(".service"):
        return interrupt("service", [setting["unit"][:-len(".service")]]), None
    notes = {
        "sysctl": "the kernel keeps the value until the next reboot",
        "module": "the module stays loaded until the next reboot",
        "governor": "the CPUs keep the governor until the next reboot",
        "gpu": "the GPU keeps this state until the next reboot or driver reload",
        "dropin": "existing links keep the setting until the next reboot",
    }
    return dict(NOOP), notes.get(mech, "takes effect at the next reboot")
