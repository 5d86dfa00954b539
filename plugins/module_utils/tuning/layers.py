# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Profile layers: their names and kinds, inheritance, and their settings normalised
to one shape (``<mechanism>:<key>`` with value, reboot, layer and why)."""

from __future__ import annotations

import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    GPU_KEYS,
    GROUPED,
    KNOWN_NON_SYSCTLS,
    LAYER_KINDS,
    MECHANISMS,
    POWER_PROFILES,
    REGISTRY_DWORDS,
    field_path,
)

_SYSCTL_KEY_RE = re.compile(r"^[a-z0-9_][a-z0-9_\-]*(\.[A-Za-z0-9_\-]+)+$")
_CMDLINE_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.\-]+(=[^\s\"']+)?$")
_MODULE_RE = re.compile(r"^[a-z0-9_\-]+$")
_OPTION_RE = re.compile(r"^[A-Za-z0-9_]+$")
_DWORD_RE = re.compile(r"^[A-Za-z0-9_]+$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9@_.\-]+\.(service|socket|target|mount|timer|link|network|netdev)$")
_DIRECTIVE_RE = re.compile(r"^[A-Z][A-Za-z0-9]+$")


def kind_of(name):
    if name == "base":
        return "base"
    if name == "extra":
        return "extra"
    return LAYER_KINDS.get(name.split("/", 1)[0])


def catalog(profiles):
    """Valid names per kind: ``{'accelerator': [...], 'intent': [...], ...}``."""
    out = {"accelerator": [], "intent": [], "os": [], "cloud": [], "platform": [], "option": []}
    for name in sorted(profiles or {}):
        kind = kind_of(name)
        if kind in out:
            out[kind].append(name.split("/", 1)[1])
    return out


def _layer(profiles, name, needed_by=None):
    if name not in profiles:
        raise ValidationError(
            "profile layer %r does not exist" % name, field=needed_by or "profiles",
            hint="layers: %s" % ", ".join(sorted(profiles)))
    layer = profiles[name]
    if not isinstance(layer, dict):
        raise ValidationError("profile layer %r is not a mapping" % name, field=name)
    return layer


def linearize(profiles, name, out, stack=()):
    if name in stack:
        raise ValidationError("profile layers inherit in a cycle: %s" % " -> ".join(stack + (name,)),
                              field=name)
    if name in out:
        return
    layer = _layer(profiles, name, needed_by=stack[-1] if stack else None)
    parents = layer.get("inherits") or []
    if isinstance(parents, str):
        parents = [parents]
    for parent in parents:
        linearize(profiles, parent, out, stack + (name,))
    if name not in out:
        out.append(name)


def pick(profiles, kind, value, field):
    names = catalog(profiles)[kind]
    if value not in names:
        raise ValidationError(
            "unknown %s %r" % (kind, value), field=field,
            hint="valid: %s" % ", ".join(names))
    return next(n for n in profiles if kind_of(n) == kind and n.split("/", 1)[1] == value)


def _text(value, where):
    if isinstance(value, bool) or value is None:
        raise ValidationError("expected a string or a number, got %r" % (value,), field=where,
                              hint="quote YAML words such as 'off' or 'yes'")
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v, where) for v in value)
    if isinstance(value, float):
        raise ValidationError("expected an integer or a string, got %r" % (value,), field=where)
    return " ".join(str(value).split())


def _entry(mech, raw, where):
    if isinstance(raw, dict):
        entry = dict(raw)
        if "value" not in entry and mech != "module":
            raise ValidationError("setting has no value", field=where)
        return entry
    return {"value": raw}


def _normalize_setting(mech, key, raw, layer, group=None):
    where = field_path(layer, mech, (group + "." if group else "") + key)
    entry = _entry(mech, raw, where)
    setting = {"mechanism": mech, "layer": layer, "why": entry.get("why") or ""}
    if entry.get("only") is not None:
        setting["only"] = entry["only"]
    if mech == "sysctl":
        if not _SYSCTL_KEY_RE.match(key):
            raise ValidationError("%r is not a sysctl key" % key, field=where)
        if key in KNOWN_NON_SYSCTLS:
            raise ValidationError(
                "%s is not a sysctl on the kernels NodeWright supports: %s" % (key, KNOWN_NON_SYSCTLS[key]),
                field=where, hint="leave it out; 'sysctl --system' fails on unknown keys")
        setting.update(key=key, value=_text(entry["value"], where), reboot=False)
        if entry.get("force") is not None:
            if not isinstance(entry["force"], bool):
                raise ValidationError("force must be true or false", field=where)
            setting["force"] = entry["force"]
    elif mech == "cmdline":
        value = _text(entry["value"], where)
        tokens = value.split()
        if not tokens:
            raise ValidationError("empty kernel parameter", field=where)
        for token in tokens:
            if not _CMDLINE_TOKEN_RE.match(token):
                raise ValidationError("%r is not a kernel parameter (name or name=value)" % token,
                                      field=where)
        _check_hugepage_pairs(tokens, where)
        setting.update(key=key, value=value, tokens=tokens, reboot=True)
    elif mech == "module":
        if not _MODULE_RE.match(key):
            raise ValidationError("%r is not a kernel module name" % key, field=where)
        if entry.get("value", True) is not True:
            raise ValidationError("a module entry only loads the module; drop it with 'remove'",
                                  field=where)
        setting.update(key=key, value="loaded", reboot=False)
    elif mech == "modprobe":
        option, dummy, dword = key.partition(".")
        if not _MODULE_RE.match(group) or not _OPTION_RE.match(option) or (
                dword and (option != REGISTRY_DWORDS or not _DWORD_RE.match(dword))):
            raise ValidationError("invalid module option %s %s" % (group, key), field=where,
                                  hint="an option name, or %s.KEY for one key of the registry" % REGISTRY_DWORDS
                                  if "." in key else None)
        if option == REGISTRY_DWORDS and not dword:
            raise ValidationError("%s holds several keys: set each as %s.KEY" % (option, option), field=where,
                                  hint="e.g. %s.PeerMappingOverride: {value: 1}; NodeWright merges them" % option)
        setting.update(key="%s/%s" % (group, key), module=group, option=option,
                       value=_text(entry["value"], where), reboot=bool(entry.get("reboot", True)))
        if dword:
            setting["dword"] = dword
            if not re.match(r"^[A-Za-z0-9_x]+$", setting["value"]):
                raise ValidationError("a registry value is a number, got %r" % setting["value"], field=where)
    elif mech == "dropin":
        if not _UNIT_RE.match(group) or not _DIRECTIVE_RE.match(key):
            raise ValidationError("invalid systemd drop-in %s %s" % (group, key), field=where)
        setting.update(key="%s/%s" % (group, key), unit=group, directive=key,
                       section=_unit_section(group), value=_text(entry["value"], where), reboot=False)
    elif mech == "governor":
        if key != "cpu":
            raise ValidationError("the governor setting is named 'cpu'", field=where)
        setting.update(key=key, value=_text(entry["value"], where), reboot=False)
    elif mech == "gpu":
        if key not in GPU_KEYS:
            raise ValidationError("unknown GPU setting %r" % key, field=where,
                                  hint="valid: %s" % ", ".join(GPU_KEYS))
        value = _text(entry["value"], where)
        if key == "workload_power_profile":
            if value not in POWER_PROFILES:
                raise ValidationError("unknown workload power profile %r" % value, field=where,
                                      hint="valid: %s" % ", ".join(sorted(POWER_PROFILES)))
            setting["profile_id"] = POWER_PROFILES[value]
        elif value != "enabled":
            raise ValidationError("%s can only be 'enabled'; drop it with 'remove'" % key, field=where)
        setting.update(key=key, value=value, reboot=False)
    setting["id"] = "%s:%s" % (mech, setting["key"])
    return setting


def _unit_section(unit):
    suffix = unit.rsplit(".", 1)[-1]
    return {"service": "Service", "socket": "Socket", "target": "Unit", "mount": "Mount",
            "timer": "Timer", "link": "Link", "network": "Network", "netdev": "NetDev"}[suffix]


def _check_hugepage_pairs(tokens, where):
    size = None
    for token in tokens:
        name = token.split("=", 1)[0]
        if name == "hugepagesz":
            if size is not None:
                raise ValidationError("hugepagesz=%s has no hugepages= count" % size, field=where)
            size = token.split("=", 1)[-1]
        elif name == "hugepages":
            if size is None:
                raise ValidationError("hugepages= must follow its hugepagesz=", field=where)
            size = None
    if size is not None:
        raise ValidationError("hugepagesz=%s has no hugepages= count" % size, field=where)


def layer_settings(layer_name, layer):
    settings = layer.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValidationError("settings must be a mapping", field=layer_name + ": settings")
    out = []
    for mech, group in settings.items():
        if mech not in MECHANISMS:
            raise ValidationError("unknown mechanism %r" % (mech,), field=field_path(layer_name, mech),
                                  hint="valid: %s" % ", ".join(MECHANISMS))
        if not isinstance(group, dict):
            raise ValidationError("must be a mapping", field=field_path(layer_name, mech))
        for key, raw in group.items():
            key = str(key)
            if mech in GROUPED:
                if not isinstance(raw, dict):
                    raise ValidationError("must map option names to values",
                                          field=field_path(layer_name, mech, key))
                for sub, sub_raw in raw.items():
                    out.append(_normalize_setting(mech, str(sub), sub_raw, layer_name, group=key))
            else:
                out.append(_normalize_setting(mech, key, raw, layer_name))
    return out


def removals(layer_name, layer):
    remove = layer.get("remove") or {}
    if isinstance(remove, (list, tuple)):
        raise ValidationError("'remove' maps each setting id (or glob) to the reason",
                              field=layer_name + ": remove")
    if not isinstance(remove, dict):
        raise ValidationError("'remove' must be a mapping", field=layer_name + ": remove")
    for pattern, reason in remove.items():
        if not reason:
            raise ValidationError("removing %s needs a reason" % pattern, field=layer_name + ": remove")
    return remove
