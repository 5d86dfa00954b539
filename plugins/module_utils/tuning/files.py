# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What a resolved profile writes on the host: one entry per file with its path,
template and the data the template renders."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    FILE_PREFIX,
    GOVERNOR_UNIT,
    GPU_KEYS,
    GPU_UNITS,
    GRUB_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    POWER_PROFILE_UNIT,
    REGISTRY_DWORDS,
    STATE_FILE,
    SYSCTL_FILE,
    SYSTEMD_NETWORK_DIR,
    SYSTEMD_UNIT_DIR,
    WANTS_FILE,
    settings_of,
)


def _by_mech(settings, mech):
    return [s for s in settings.values() if s["mechanism"] == mech]


def dropin_path(unit):
    """Where NodeWright's drop-in for ``unit`` lives, relative to the host root."""
    base = SYSTEMD_NETWORK_DIR if unit.endswith((".link", ".network", ".netdev")) else SYSTEMD_UNIT_DIR
    return "%s/%s.d/%s.conf" % (base, unit, FILE_PREFIX)


def render_plan(resolved):
    """The files a resolved profile writes: path, template, mechanism data, setting ids."""
    settings = resolved["settings"]
    files = []

    def entries(items):
        return [{"id": s["id"], "key": s["key"], "value": s["value"], "layer": s["layer"],
                 "why": s["why"]} for s in items]

    sysctls = _by_mech(settings, "sysctl")
    if sysctls:
        files.append({"path": SYSCTL_FILE, "template": "sysctl.conf.j2", "kind": "sysctl",
                      "entries": entries(sysctls), "settings": [s["id"] for s in sysctls],
                      # Applied by the step with sysctl -p as soon as it is written.
                      "apply": any(s.get("applied_on_write") for s in sysctls)})
    cmdline = _by_mech(settings, "cmdline")
    if cmdline and resolved["bootloader"].get("method") == "grub-dropin":
        files.append({"path": GRUB_FILE, "template": "grub.cfg.j2", "kind": "cmdline",
                      "tokens": cmdline_tokens(resolved), "entries": entries(cmdline),
                      "settings": [s["id"] for s in cmdline]})
    modprobe = _by_mech(settings, "modprobe")
    initramfs = (resolved.get("initramfs") or {}).get("method", "none") != "none"
    if modprobe:
        modules = {}
        for s in modprobe:
            modules.setdefault(s["module"], []).append(s)
        files.append({"path": MODPROBE_FILE, "template": "modprobe.conf.j2", "kind": "modprobe",
                      "modules": [{"name": m, "tokens": modprobe_tokens(items),
                                   "options": [{"option": s["key"].split("/", 1)[1], "value": s["value"],
                                                "layer": s["layer"], "why": s["why"]} for s in items]}
                                  for m, items in modules.items()],
                      "settings": [s["id"] for s in modprobe],
                      # The initramfs carries a copy of modprobe.d: rebuilt when this changes.
                      "initramfs": initramfs})
    modules = _by_mech(settings, "module")
    if modules:
        files.append({"path": MODULES_FILE, "template": "modules-load.conf.j2", "kind": "module",
                      "entries": entries(modules), "settings": [s["id"] for s in modules]})
    units = {}
    for s in _by_mech(settings, "dropin"):
        units.setdefault(s["unit"], []).append(s)
    for unit, items in units.items():
        files.append({"path": dropin_path(unit), "template": "dropin.conf.j2", "kind": "dropin",
                      "unit": unit, "section": items[0]["section"],
                      "entries": [dict(e, directive=s["directive"]) for e, s in zip(entries(items), items)],
                      "settings": [s["id"] for s in items]})
    wants = []
    governor = settings.get("governor:cpu")
    if governor:
        files.append({"path": "%s/%s" % (SYSTEMD_UNIT_DIR, GOVERNOR_UNIT), "template": "cpu-governor.service.j2",
                      "kind": "governor", "governor": governor["value"], "settings": [governor["id"]]})
        wants.append((GOVERNOR_UNIT, governor["id"]))
    power = settings.get("gpu:workload_power_profile")
    if power:
        files.append({"path": "%s/%s" % (SYSTEMD_UNIT_DIR, POWER_PROFILE_UNIT),
                      "template": "gpu-power-profile.service.j2", "kind": "gpu",
                      "profile": power["value"], "profile_id": power["profile_id"],
                      "settings": [power["id"]]})
    for key in GPU_KEYS:
        if "gpu:" + key in settings:
            wants.append((GPU_UNITS[key], "gpu:" + key))
    if wants:
        files.append({"path": WANTS_FILE, "template": "wants.conf.j2", "kind": "wants",
                      "units": [u for u, dummy in wants], "settings": [sid for dummy, sid in wants]})
    return files


def modprobe_tokens(items):
    """``OPTION=VALUE`` words of one module's options line, in merge order; the keys of
    NVreg_RegistryDwords merged into its one parameter (``"KEY=VALUE;KEY=VALUE;"``)."""
    tokens, dwords, at = [], [], None
    for s in items:
        if s.get("dword"):
            if at is None:
                at = len(tokens)
                tokens.append(None)
            dwords.append("%s=%s;" % (s["dword"], s["value"]))
        else:
            tokens.append("%s=%s" % (s["option"], s["value"]))
    if at is not None:
        tokens[at] = '%s="%s"' % (REGISTRY_DWORDS, "".join(dwords))
    return tokens


def cmdline_tokens(resolved_or_settings):
    """Kernel parameters in merge order."""
    settings = settings_of(resolved_or_settings)
    tokens = []
    for setting in settings.values():
        if setting.get("mechanism") == "cmdline":
            tokens.extend(setting.get("tokens") or str(setting.get("value", "")).split())
    return tokens


def managed_paths():
    """Every fixed path the role may write (drop-ins are found by name at uninstall)."""
    return [SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE, WANTS_FILE,
            "%s/%s" % (SYSTEMD_UNIT_DIR, GOVERNOR_UNIT), "%s/%s" % (SYSTEMD_UNIT_DIR, POWER_PROFILE_UNIT),
            STATE_FILE]
