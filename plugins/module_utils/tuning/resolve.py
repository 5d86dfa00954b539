# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Resolution: the layers for one node merged setting by setting, platform constraints
applied, conflicts refused. See ``tuning/__init__.py`` for the layer format."""

from __future__ import annotations

import fnmatch

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.decide import decide
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.floors import floor_violation
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import render_plan
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import apply_interrupt
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import (
    kind_of,
    layer_settings,
    linearize,
    pick,
    removals,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import EXPLICIT_KINDS, OPTION_SPECS

# Kernel parameters that may legitimately appear more than once on a command line.
_REPEATABLE_PARAMS = ("console", "pci", "hugepagesz", "hugepages")


def normalize_options(options):
    """Validate ``options`` and fill the defaults; unknown options list the valid ones."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_SPECS))
    if unknown:
        raise ValidationError(
            "unknown option(s) %s" % ", ".join(unknown), field="options",
            hint="valid: %s" % "; ".join("%s (%s)" % (k, v["help"]) for k, v in sorted(OPTION_SPECS.items())))
    out = {}
    for key, spec in OPTION_SPECS.items():
        value = options.get(key, spec["default"])
        if value is None:
            value = spec["default"]
        if spec.get("type") in (bool, "auto_bool"):
            if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
                value = value.lower() in ("true", "yes", "on", "1")
            auto = spec["type"] == "auto_bool" and value == "auto"
            if not isinstance(value, bool) and not auto:
                raise ValidationError("option %s must be true or false%s, got %r"
                                      % (key, " or auto" if spec["type"] == "auto_bool" else "", value),
                                      field="options." + key)
        elif isinstance(value, bool) and "on" in spec["choices"]:
            value = "on" if value else "off"  # YAML reads on/off as booleans
        if "choices" in spec and value not in spec["choices"]:
            raise ValidationError("option %s must be one of %s, got %r"
                                  % (key, ", ".join(spec["choices"]), value), field="options." + key)
        out[key] = value
    return out


def matches(condition, context):
    """``condition`` maps a context key to a value or a list of accepted values."""
    for key, want in (condition or {}).items():
        if key in ("reason",):
            continue
        have = context.get(key)
        wanted = want if isinstance(want, (list, tuple)) else [want]
        have_list = have if isinstance(have, (list, tuple)) else [have]
        if not any(h in wanted for h in have_list):
            return False
    return True


def _context(accel_layer, accelerator, intent, os_name, cloud, platforms, options):
    meta = accel_layer.get("meta") or {}
    form_factor = options["form_factor"]
    if form_factor == "auto":
        form_factor = meta.get("form_factor", "sxm")
    return {
        "accelerator": accelerator, "family": meta.get("family"), "arch": meta.get("arch"),
        "platform": platforms, "intent": intent, "os": os_name, "cloud": cloud,
        "form_factor": form_factor, "page_size": options["page_size"],
    }


def resolve_profile(accelerator, intent, os, cloud=None, options=None, *, profiles, extra=None, host=None):
    """Merge the layers for one node and return the settings it should have.

    ``profiles`` maps layer names (``base``, ``accelerators/h100``, ``intents/inference``,
    ``os/cos``, ``clouds/gke``, ``options/acs-override`` ...) to layer dicts.
    ``options`` are validated against ``OPTION_SPECS`` and their ``auto`` values decided
    for the node (``decide.py``) from ``host``, what is known about it (driver source,
    peer-memory provider, GDRCopy, memory, current sysctl values); ``extra`` is a
    caller's layer (``settings`` and ``remove``) applied last. Raises
    ``ValidationError`` for unknown names (listing the valid ones), for an explicit
    request the platform refuses (a kernel command line on COS, a sysctl below the
    node's value without ``force``), and for malformed data.

    Returns a dict with the inputs, ``options`` (decided) and ``decisions`` (with the
    reasons), ``layers`` (in merge order), ``settings`` (id -> setting with
    ``mechanism``, ``key``, ``value``, ``reboot``, ``interrupt``, ``layer``, ``why``; a
    limit sysctl also ``current`` and ``current_source``), ``skipped`` and ``removed``
    (each with the reason), ``bootloader``, ``initramfs``, ``reapply_every_boot``,
    ``reboot`` and ``files`` (what to render).
    """
    if not isinstance(profiles, dict) or not profiles:
        raise ValidationError("no tuning profiles were loaded", field="profiles",
                              hint="pass the layers loaded by nodewright.fleet.tuning_profile")
    accelerator = str(accelerator or "").lower()
    cloud = (str(cloud).lower() if cloud else None) or None
    if cloud == "none":
        cloud = None
    opts = normalize_options(options)
    accel_name = pick(profiles, "accelerator", accelerator, "accelerator")
    intent_name = pick(profiles, "intent", intent, "intent")
    os_name = pick(profiles, "os", os, "os")
    cloud_name = pick(profiles, "cloud", cloud, "cloud") if cloud else None

    chain = ["base"] if "base" in profiles else []
    linearize(profiles, accel_name, chain)
    platforms = [n.split("/", 1)[1] for n in chain if kind_of(n) == "platform"]
    accel_layer = profiles[accel_name]
    context = _context(accel_layer, accelerator, intent, os, cloud, platforms, opts)
    for name in (intent_name, os_name) + ((cloud_name,) if cloud_name else ()):
        linearize(profiles, name, chain)

    os_meta = profiles[os_name].get("meta") or {}
    context["multi_node"] = "intents/multiNodeTraining" in chain
    context["serving"] = "intents/inference" in chain
    required_cloud = os_meta.get("requires_cloud")
    if required_cloud and cloud != required_cloud:
        if cloud is None:
            cloud = required_cloud
            context["cloud"] = cloud
            cloud_name = pick(profiles, "cloud", cloud, "cloud")
            linearize(profiles, cloud_name, chain)
        else:
            raise ValidationError("%s runs only on %s, not %s" % (os, required_cloud, cloud),
                                  field="cloud")

    opts, decisions = decide(opts, context, host)
    context["driver_source"] = opts["driver_source"]
    option_layers = []
    for name in sorted(profiles):
        if kind_of(name) != "option":
            continue
        layer = profiles[name]
        activate = layer.get("activate") or {}
        if not activate:
            raise ValidationError("option layer has no 'activate'", field=name)
        if all(opts.get(k) == v for k, v in activate.items()):
            requires = layer.get("requires")
            if requires and not matches(requires, context):
                raise ValidationError(
                    "%s does not apply to %s on %s" % (
                        ", ".join("%s=%s" % kv for kv in activate.items()), accelerator, os),
                    field="options", hint=requires.get("reason"))
            option_layers.append(name)
    for name in option_layers:
        linearize(profiles, name, chain)

    layers = [(n, profiles[n]) for n in chain]
    if extra:
        if not isinstance(extra, dict):
            raise ValidationError("extra must be a mapping with 'settings' and 'remove'", field="extra")
        unknown = sorted(set(extra) - {"settings", "remove"})
        if unknown:
            raise ValidationError("extra accepts 'settings' and 'remove', not %s" % ", ".join(unknown),
                                  field="extra")
        layers.append(("extra", extra))

    merged, removed = {}, []
    constraints = []
    for name, layer in layers:
        for setting in layer_settings(name, layer):
            if not matches(setting.pop("only", None), context):
                continue
            merged[setting["id"]] = setting
        for pattern, reason in removals(name, layer).items():
            for sid in [s for s in merged if fnmatch.fnmatchcase(s, pattern)]:
                removed.append({"id": sid, "layer": name, "reason": reason,
                                "value": merged[sid]["value"], "from": merged[sid]["layer"]})
                del merged[sid]
        if layer.get("constraints"):
            constraints.append((name, layer["constraints"]))

    skipped = []
    # The most specific layer (cloud after OS) gives the reason first.
    for name, rules in reversed(constraints):
        for sid in list(merged):
            reason = _violation(merged[sid], rules)
            if reason is None:
                continue
            setting = merged[sid]
            if kind_of(setting["layer"]) in EXPLICIT_KINDS:
                raise ValidationError(
                    "%s (asked for by %s) is refused on %s: %s" % (sid, setting["layer"], os, reason),
                    field=setting["layer"], hint=rules.get("hint"))
            skipped.append({"id": sid, "layer": setting["layer"], "by": name, "reason": reason,
                            "value": setting["value"]})
            del merged[sid]

    # The floor rule, for every profile: a limit is never written below the node's value.
    distro = os_meta.get("sysctl_defaults") or {}
    for sid in list(merged):
        setting = merged[sid]
        base, reason = floor_violation(setting, host, distro)
        if base:
            setting.update(current=base["value"], current_source=base["source"])
        if reason is None or setting.get("force"):
            continue
        if kind_of(setting["layer"]) in EXPLICIT_KINDS:
            raise ValidationError("%s (asked for by %s) %s" % (sid, setting["layer"], reason), field=setting["layer"],
                                  hint="leave it out, or add force: true to the setting to lower it on purpose")
        skipped.append({"id": sid, "layer": setting["layer"], "by": "floor", "reason": reason,
                        "value": setting["value"]})
        del merged[sid]

    _check_cmdline_conflicts(merged)
    reapply = any((layer.get("meta") or {}).get("reapply_every_boot") for dummy, layer in layers)
    for setting in merged.values():
        if reapply and setting["mechanism"] == "sysctl":
            # Written and applied by the step itself (sysctl -p), after every boot too:
            # nothing to restart, nothing to drain for.
            setting["applied_on_write"] = True
        setting["interrupt"] = apply_interrupt(setting)

    bootloader = dict(os_meta.get("bootloader") or {"method": "none"})
    initramfs = dict(os_meta.get("initramfs") or {"method": "none"})
    resolved = {
        "accelerator": accelerator, "family": context["family"], "arch": context["arch"],
        "form_factor": context["form_factor"], "platforms": platforms,
        "intent": intent, "os": os, "cloud": cloud, "options": opts, "decisions": decisions,
        "layers": [n for n, dummy in layers],
        "settings": merged, "skipped": skipped, "removed": removed,
        "bootloader": bootloader, "initramfs": initramfs, "reapply_every_boot": bool(reapply),
        "reboot": any(s["reboot"] for s in merged.values()),
        "name": "%s/%s on %s%s" % (accelerator, intent, os, " (%s)" % cloud if cloud else ""),
    }
    resolved["files"] = render_plan(resolved)
    return resolved


def _violation(setting, rules):
    for pattern, reason in (rules.get("forbid") or {}).items():
        if fnmatch.fnmatchcase(setting["id"], pattern):
            return reason
    allowed = rules.get("mechanisms")
    if allowed is not None and setting["mechanism"] not in allowed:
        return (rules.get("reasons") or {}).get(setting["mechanism"]) or rules.get("reason") or (
            "%s settings are not possible here" % setting["mechanism"])
    allow = rules.get("sysctl_allow")
    if setting["mechanism"] == "sysctl" and allow is not None and not any(
            fnmatch.fnmatchcase(setting["key"], p) for p in allow):
        return rules.get("sysctl_reason") or "%s is not an allowed sysctl here" % setting["key"]
    if rules.get("never_reboot") and setting["reboot"]:
        return rules.get("never_reboot_reason") or "this platform is never rebooted for tuning"
    return None


def _check_cmdline_conflicts(settings):
    seen = {}
    sizes = {}
    for sid, setting in settings.items():
        if setting["mechanism"] != "cmdline":
            continue
        for token in setting["tokens"]:
            name, dummy, value = token.partition("=")
            if name == "hugepagesz":
                if value in sizes:
                    raise ValidationError(
                        "huge pages of size %s are set by both %s and %s" % (value, sizes[value], sid),
                        field=setting["layer"],
                        hint="override the existing setting id instead of adding a second one")
                sizes[value] = sid
                continue
            # A page count belongs to the hugepagesz before it: two sizes may have the same count.
            if token in seen.get(name, {}) and name != "hugepages":
                raise ValidationError("kernel parameter %s is set by both %s and %s"
                                      % (token, seen[name][token], sid), field=setting["layer"])
            if name in seen and name not in _REPEATABLE_PARAMS:
                other = next(iter(seen[name].values()))
                raise ValidationError(
                    "kernel parameter %s conflicts: %s sets %s, %s sets %s" % (
                        name, other, next(iter(seen[name])), sid, token), field=setting["layer"],
                    hint="override the existing setting id instead of adding a second one")
            seen.setdefault(name, {})[token] = sid
