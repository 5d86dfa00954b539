# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Interrupts: what a node must undergo after a package changed it - one validator
and one merger for every place an interrupt is written (a package manifest, a
NodeWright resource, the package module's options, a step asking for one at run
time through ``$NODEWRIGHT_INTERRUPT_FILE``, the recorded node state).

An interrupt is ``{type, services}``: ``reboot``, ``restartAllServices``,
``service`` (restart the listed systemd units) or ``noop``. The merge of several is
the most severe: reboot > restartAllServices > service (the union of the services)
> noop. Stdlib only: this module also runs on the node.
"""

from __future__ import annotations

import fnmatch
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import did_you_mean, field_path

# Ascending severity: merging interrupts keeps the most severe.
INTERRUPT_TYPES = ("noop", "service", "restartAllServices", "reboot")
INTERRUPT_FIELDS = ("type", "services")
SERVICE_PATTERN = r"^[-a-zA-Z0-9:_.@\\]+$"
SERVICE_MAX = 256
SERVICES_MAX = 32
_SERVICE_RE = re.compile(SERVICE_PATTERN)


def _error(message, where, sub=(), hint=None):
    """A ValidationError at ``where`` extended by ``sub``; ``subpath`` keeps ``sub`` so a
    caller that knows lines (a manifest) can point at the exact field."""
    field = where
    for part in sub:
        field = field_path(field, part)
    exc = ValidationError(message, field=field, hint=hint)
    exc.subpath = tuple(sub)
    return exc


def noop():
    return {"type": "noop", "services": []}


def _types_hint(value=None):
    hint = "type is one of %s" % ", ".join(reversed(INTERRUPT_TYPES))
    near = did_you_mean(value, INTERRUPT_TYPES) if isinstance(value, str) else None
    return "%s %s" % (near, hint) if near else hint


def parse_interrupt(value, where="interrupt", allow_empty=False):
    """``{type, services}`` checked and normalised to ``{"type": t, "services": [sorted]}``.

    Raises ``ValidationError`` naming the field (``where.type``, ``where.services[1]``).
    With ``allow_empty``, ``None`` and ``{}`` mean noop (the package module's options)."""
    if allow_empty and (value is None or value == {}):
        return noop()
    if not isinstance(value, dict):
        raise _error("an interrupt must be a mapping with type (and services), got %r" % (value,), where,
                     hint="e.g. {type: reboot} or {type: service, services: [containerd]}")
    for key in value:
        if key not in INTERRUPT_FIELDS:
            near = did_you_mean(key, INTERRUPT_FIELDS)
            raise _error("unknown interrupt field %r" % (key,), where, (key,),
                         hint="%sallowed: type, services" % ((near + " ") if near else ""))
    kind = value.get("type")
    if kind not in INTERRUPT_TYPES:
        raise _error("unknown interrupt type %r" % (kind,), where, ("type",), hint=_types_hint(kind))
    services = value.get("services")
    services = [] if services is None else services
    here = ("services",)
    if not isinstance(services, list):
        raise _error("services must be a list of systemd unit names", where, here,
                     hint="e.g. services: [containerd.service]")
    if len(services) > SERVICES_MAX:
        raise _error("%d services; at most %d" % (len(services), SERVICES_MAX), where, here,
                     hint="use type restartAllServices to restart every service")
    for n, unit in enumerate(services):
        if not isinstance(unit, str) or not unit or len(unit) > SERVICE_MAX or not _SERVICE_RE.match(unit):
            raise _error("%r is not a systemd unit name" % (unit,), where, here + (n,),
                         hint="a unit such as containerd or nvidia-persistenced.service")
    if kind == "service" and not services:
        raise _error("interrupt type service needs the services to restart", where, here,
                     hint="list the systemd units, e.g. services: [containerd.service]")
    if kind != "service" and services:
        raise _error("services are only used by interrupt type service, not %s" % kind, where, here,
                     hint="remove services, or use type: service to restart named units")
    return {"type": kind, "services": sorted(set(services))}


def from_words(words, where="interrupt request"):
    """An interrupt a step asked for at run time: ``reboot``, ``restartAllServices`` or
    ``service <unit>...`` (what it wrote to $NODEWRIGHT_INTERRUPT_FILE); None for nothing."""
    if not words:
        return None
    return parse_interrupt({"type": words[0], "services": list(words[1:])}, where)


def compact(interrupt):
    """The resource form: ``{type}``, with ``services`` only when there are some."""
    out = {"type": interrupt["type"]}
    if interrupt.get("services"):
        out["services"] = list(interrupt["services"])
    return out


def is_noop(interrupt):
    return not interrupt or interrupt.get("type", "noop") == "noop"


def merge_interrupts(interrupts):
    """One interrupt for a node: reboot > restartAllServices > services (union) > noop.
    Entries that are None or empty are skipped; a bare type (``"reboot"``) is
    accepted; the others must be valid."""
    rank = 0
    services = set()
    for item in interrupts:
        if not item:
            continue
        item = parse_interrupt({"type": item} if isinstance(item, str) else item)
        rank = max(rank, INTERRUPT_TYPES.index(item["type"]))
        services.update(item["services"])
    kind = INTERRUPT_TYPES[rank]
    return {"type": kind, "services": sorted(services) if kind == "service" else []}


def config_key_matches(pattern, key):
    """configInterrupts keys are shell globs over config keys (``*.conf``, ``kernel.*``)."""
    return fnmatch.fnmatchcase(key, pattern)


def interrupts_for_keys(config_interrupts, keys, where="configInterrupts"):
    """The interrupts that the changed ``keys`` ask for through configInterrupts globs."""
    found = []
    for pattern, interrupt in sorted((config_interrupts or {}).items()):
        if any(config_key_matches(pattern, key) for key in keys):
            found.append(parse_interrupt(interrupt, field_path(where, pattern)))
    return found
