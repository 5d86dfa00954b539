# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nvidia-tuning package: the profile is resolved on the controller and handed to
the host as package config, because package steps run in a plain shell on the node.

Config keys the controller adds (user keys come from the package's defaultConfig):
  resolved.profile        tab-separated lines: name, arch (uname -m), os (os-release ID
                          and VERSION_ID), bootloader (method, update command), cmdline
                          (the kernel parameters), initramfs (method, update command),
                          reapply (every-boot: the OS forgets /etc at boot), "requires
                          WHAT MODULE" (peer-memory, gdrdrv: what the host must have for
                          a module to load), "floor KEY VALUE" (a limit sysctl the host's
                          current value must not exceed), and per file "file KEY PATH
                          FLAGS DRIFT REMOVAL" (flags: reload, bootloader, initramfs,
                          apply - sysctl -p once written -; the interrupt words for a
                          file edited on the host and for a removed file)
  resolved.file.<name>    each file's content, as the role writes it
  resolved.checks         per setting: id, probe, rule and expected value (tab separated)
  resolved.reboot, resolved.service.<unit>, resolved.noop
                          the settings' values, grouped by the interrupt a change needs;
                          the package's configInterrupts name these keys, so the planner
                          derives a node's interrupt from the groups whose values changed
"""

from __future__ import annotations

import json
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import detect_accelerator
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import check_expectations, checks_text
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.detect import (
    detect_cloud,
    driver_source,
    os_from_os_image,
    os_release_match,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import cmdline_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.floors import LIMIT_SYSCTLS
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import (
    NOOP,
    apply_interrupt,
    interrupt,
    merge_interrupts,
    removal_interrupt,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import layer_settings
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import MECHANISMS

PACKAGE_NAME = "nvidia-tuning"
RESOLVED_PREFIX = "resolved."
KEY_PROFILE = RESOLVED_PREFIX + "profile"
KEY_CHECKS = RESOLVED_PREFIX + "checks"
KEY_REBOOT = RESOLVED_PREFIX + "reboot"
KEY_NOOP = RESOLVED_PREFIX + "noop"
KEY_FILE_PREFIX = RESOLVED_PREFIX + "file."
KEY_SERVICE_PREFIX = RESOLVED_PREFIX + "service."
_KEY_UNSAFE_RE = re.compile(r"[^-._a-zA-Z0-9]")
# uname -m of a host of each architecture.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def _key_part(text):
    return _KEY_UNSAFE_RE.sub("_", str(text))


def interrupt_words(value):
    """``noop``, ``reboot``, ``restartAllServices`` or ``service <unit>...`` (the words a
    package step writes to $NODEWRIGHT_INTERRUPT_FILE)."""
    value = merge_interrupts(value or NOOP)
    return " ".join([value["type"]] + value["services"])


def group_key(setting):
    """The config key holding ``setting``'s value: named after the interrupt that
    applies a change of it."""
    it = setting.get("interrupt") or apply_interrupt(setting)
    if it["type"] == "reboot":
        return KEY_REBOOT
    if it["type"] == "service":
        return KEY_SERVICE_PREFIX + _key_part("_".join(it["services"]))
    return KEY_NOOP


def file_key(spec):
    """The config key holding one rendered file (``resolved.file.sysctl``,
    ``resolved.file.dropin.containerd.service``)."""
    return KEY_FILE_PREFIX + _key_part(spec["kind"] + ("." + spec["unit"] if spec.get("unit") else ""))


def _file_interrupts(spec, settings):
    """What the host needs when the file is rewritten although its settings did not
    change (edited on the host), and when it is removed; never a reboot: reboots are
    planned before the node is drained, from the settings' groups."""
    items = [settings[sid] for sid in spec["settings"] if sid in settings]
    drift = merge_interrupts([apply_interrupt(s) for s in items if not s.get("reboot")])
    removal = merge_interrupts([removal_interrupt(s)[0] for s in items if not s.get("reboot")])
    return drift, removal


def package_config(resolved, files, skip=None):
    """The controller-rendered config keys for a resolved profile.

    ``files`` are the profile's files with their rendered ``content`` (see
    ``render_files``); ``skip`` maps setting-id globs to the reason a host cannot
    report them (their checks are reported as unverified). Returns key -> text.
    """
    settings = resolved["settings"]
    config = {}
    groups = {}
    for sid in sorted(settings):
        groups.setdefault(group_key(settings[sid]), []).append("%s\t%s" % (sid, settings[sid]["value"]))
    for key, lines in groups.items():
        config[key] = "\n".join(lines) + "\n"
    bootloader = resolved.get("bootloader") or {"method": "none"}
    os_id, os_version = os_release_match(resolved["os"])
    lines = ["# NVIDIA tuning resolved by NodeWright on the controller; the package's steps read it.",
             "name\t%s" % resolved["name"],
             "arch\t%s" % MACHINES[resolved["arch"]],
             "os\t%s\t%s" % (os_id, os_version),
             "bootloader\t%s" % "\t".join([bootloader.get("method", "none")] + list(bootloader.get("update_command") or [])),
             "cmdline\t%s" % " ".join(cmdline_tokens(resolved))]
    initramfs = resolved.get("initramfs") or {"method": "none"}
    if any(spec.get("initramfs") for spec in files) or initramfs.get("method", "none") != "none":
        lines.append("initramfs\t%s" % "\t".join([initramfs.get("method", "none")]
                                                 + list(initramfs.get("update_command") or [])))
    if resolved.get("reapply_every_boot"):
        lines.append("reapply\tevery-boot")
    # What the host must have for the modules to load (checked before anything is written).
    for module, need in (("nvidia_peermem", "peer-memory"), ("gdrdrv", "gdrdrv")):
        if "module:" + module in settings:
            lines.append("requires\t%s\t%s" % (need, module))
    # The floor rule on the host: the value it has now must not be higher.
    for sid in sorted(settings):
        setting = settings[sid]
        if setting["mechanism"] == "sysctl" and setting["key"] in LIMIT_SYSCTLS and not setting.get("force"):
            lines.append("floor\t%s\t%s" % (setting["key"], setting["value"]))
    for spec in files:
        key = file_key(spec)
        if key in config:
            raise ValidationError("two files of profile %s share the config key %s" % (resolved["name"], key),
                                  field="files")
        config[key] = spec["content"]
        flags = [f for f, on in (("reload", spec["path"].startswith("etc/systemd/")),
                                 ("bootloader", spec["kind"] == "cmdline"),
                                 ("initramfs", spec.get("initramfs")),
                                 ("apply", spec.get("apply"))) if on]
        drift, removal = _file_interrupts(spec, settings)
        lines.append("file\t%s\t%s\t%s\t%s\t%s" % (key, spec["path"], ",".join(flags) or "-",
                                                   interrupt_words(drift), interrupt_words(removal)))
    config[KEY_PROFILE] = "\n".join(lines) + "\n"
    config[KEY_CHECKS] = checks_text(check_expectations(resolved, skip)) or "\n"
    return config


def reapplies_every_boot(name, config):
    """Whether package ``name`` with ``config`` (its spec's, with the ``resolved.*`` keys)
    is an nvidia-tuning package for an OS that forgets its settings at every boot (COS):
    the reconciler applies it again when the node's boot ID changes."""
    if name != PACKAGE_NAME:
        return False
    profile = ((config or {}).get(KEY_PROFILE)) or ""
    return any(line.split("\t")[:2] == ["reapply", "every-boot"] for line in str(profile).splitlines())


def _json_mapping(value, key):
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ValidationError("config %s must be a JSON object, got %r (%s)" % (key, value, exc), field=key,
                              hint='e.g. {"acs_override": true}' if key == "options" else None)
    if not isinstance(parsed, dict):
        raise ValidationError("config %s must be a JSON object, got %r" % (key, value), field=key)
    return parsed


_QUANTITY_RE = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_QUANTITY_UNITS = {None: 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "Pi": 1024 ** 5,
                   "k": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "T": 1000 ** 4, "P": 1000 ** 5}


def memory_kib(quantity):
    """KiB in a Kubernetes memory quantity (``960Gi``, ``2113708Ki``), or None."""
    found = _QUANTITY_RE.match(str(quantity or "").strip())
    if not found:
        return None
    return int(found.group(1)) * _QUANTITY_UNITS[found.group(2)] // 1024


def node_facts(node):
    """What resolving a profile needs from a Node as the API returns it: its name,
    labels, OS image and memory (``status.capacity.memory``)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    return {"name": meta.get("name"), "labels": dict(meta.get("labels") or {}), "os_image": info.get("osImage"),
            "memory_kib": memory_kib((status.get("capacity") or {}).get("memory"))}


def host_facts(node):
    """What the controller knows about a node's host (``decide.py``): its memory and
    whether the GPU Operator's driver runs there. The rest is checked on the host."""
    if not node:
        return {}
    source, reason = driver_source(node.get("labels"))
    facts = {"driver_source": source, "driver_reason": reason}
    if node.get("memory_kib"):
        facts["memory_kib"] = node["memory_kib"]
    return facts


def dropin_units(profiles):
    """Every systemd unit that some shipped layer gives a drop-in."""
    units = set()
    for name, layer in (profiles or {}).items():
        for setting in layer_settings(name, layer):
            if setting["mechanism"] == "dropin":
                units.add(setting["unit"])
    return sorted(units)


def _node_inputs(user, node, where):
    """Accelerator, OS, cloud and options for one node (None: no node, all explicit)."""
    def wanted(key):
        value = str(user.get(key) or "auto").strip()
        return None if value == "auto" else value

    labels = node["labels"] if node else {}
    options = _json_mapping(user.get("options"), "options")
    accelerator, os_name, cloud = wanted("accelerator"), wanted("os"), wanted("cloud")
    warnings = []
    try:
        if not accelerator:
            detected = detect_accelerator(labels)
            accelerator, warnings = detected["accelerator"], detected["warnings"]
            if detected["form_factor"] == "pcie":
                options = dict({"form_factor": "pcie"}, **options)
        if not os_name:
            os_name = os_from_os_image(node.get("os_image") if node else None)
        if cloud is None:
            cloud = detect_cloud(labels)
    except ValidationError as exc:
        raise ValidationError("%s%s" % ("node %s: " % node["name"] if node else "", exc.message), field=where,
                              hint=exc.hint)
    return (accelerator, os_name, cloud, options, host_facts(node)), warnings


def plan_summary(resolved):
    """The settings a node would get, for people (``plan.yml``): each with its value (a
    limit sysctl with the node's value it replaces, ``current`` and ``current_source``),
    the decisions taken for the node with their reasons, what was skipped and why, and
    whether the initramfs is rebuilt."""
    settings = []
    for sid, s in sorted(resolved["settings"].items(), key=lambda kv: (MECHANISMS.index(kv[1]["mechanism"]), kv[0])):
        entry = {"id": sid, "mechanism": s["mechanism"], "key": s["key"], "value": s["value"],
                 "reboot": bool(s["reboot"]), "interrupt": s["interrupt"]}
        if s.get("current") is not None:
            entry.update(current=s["current"], current_source=s.get("current_source"))
        if s.get("force"):
            entry["forced"] = True
        settings.append(entry)
    initramfs = resolved.get("initramfs") or {"method": "none"}
    modprobe = any(s["mechanism"] == "modprobe" for s in resolved["settings"].values())
    return {
        "profile": resolved["name"], "accelerator": resolved["accelerator"], "os": resolved["os"],
        "cloud": resolved["cloud"], "reboot": resolved["reboot"],
        "interrupt": merge_interrupts([s["interrupt"] for s in resolved["settings"].values()]),
        "decisions": [dict(d, option=k) for k, d in sorted((resolved.get("decisions") or {}).items())],
        "settings": settings,
        "skipped": [{"id": s["id"], "reason": s["reason"]} for s in resolved.get("skipped", [])],
        "initramfs": " ".join(initramfs.get("update_command") or []) if modprobe and
        initramfs.get("method", "none") != "none" else None,
        "reapply_every_boot": bool(resolved.get("reapply_every_boot")),
    }


def resolve_package_spec(spec, package, nodes, profiles, render, where=None):
    """Render an nvidia-tuning package spec for the nodes it will run on.

    ``spec`` is a package spec (``name``, ``config`` with the user keys ...),
    ``package`` the loaded package (its ``defaultConfig`` names the user keys),
    ``nodes`` node facts (``node_facts``), ``render(resolved, power_profile_command)``
    returns the profile's files with their content. Every node must resolve to the
    same profile (one spec runs on all of them). Returns ``(spec, per_node)``: the spec
    with the ``resolved.*`` config keys, the ``interrupt`` of a first apply and the
    ``config_interrupts`` of the groups, and per node name the ``plan_summary``. With
    an ``auto`` input and no node the spec comes back unchanged.
    """
    where = where or "spec.packages.%s.configMap" % spec.get("name", PACKAGE_NAME)
    given = dict(spec.get("config") or {})
    user = package.effective_config({k: v for k, v in given.items() if not k.startswith(RESOLVED_PREFIX)})
    unknown = sorted(k for k in user if k not in package.default_config)
    if unknown:
        raise ValidationError("unknown config key(s) %s" % ", ".join(unknown), field=where,
                              hint="valid: %s" % ", ".join(sorted(package.default_config)))
    skip = _json_mapping(user.get("skip_checks"), "skip_checks")
    explicit = all(str(user.get(k) or "auto").strip() != "auto" for k in ("accelerator", "os"))
    targets = list(nodes or []) or ([None] if explicit else [])
    if not targets:
        return dict(spec), {}
    extra = _json_mapping(user.get("extra"), "extra") or None
    rendered, per_node, variants, cache = {}, {}, {}, {}
    for node in targets:
        inputs, warnings = _node_inputs(user, node, where)
        key = json.dumps(inputs, sort_keys=True)
        if key not in cache:
            accelerator, os_name, cloud, options, host = inputs
            try:
                resolved = resolve_profile(accelerator, user.get("intent") or "performance", os_name, cloud=cloud,
                                           options=options, profiles=profiles, extra=extra, host=host)
            except ValidationError as exc:
                raise ValidationError("%s%s" % ("node %s: " % node["name"] if node else "", exc.message),
                                      field=where, hint=exc.hint)
            config = package_config(resolved, render(resolved, user.get("power_profile_command")), skip)
            cache[key] = (resolved, config, json.dumps(config, sort_keys=True))
        resolved, config, identity = cache[key]
        rendered[identity] = (resolved, config)
        variants.setdefault(identity, []).append(node["name"] if node else None)
        if node:
            per_node[node["name"]] = dict(plan_summary(resolved), warnings=list(warnings))
    if len(variants) > 1:
        groups = "; ".join("%s (%s)" % (rendered[i][0]["name"], ", ".join(sorted(n for n in names if n)))
                           for i, names in sorted(variants.items(), key=lambda kv: rendered[kv[0]][0]["name"]))
        raise ValidationError(
            "the targeted nodes resolve to different NVIDIA tuning profiles: %s" % groups, field=where,
            hint="give each GPU pool its own NodeWright resource (spec.nodeSelectors), or set accelerator and os")
    resolved, config = next(iter(rendered.values()))
    groups = {}
    for setting in resolved["settings"].values():
        groups.setdefault(group_key(setting), []).append(setting["interrupt"])
    config_interrupts = {k: v.to_dict() for k, v in package.config_interrupts.items()}
    config_interrupts[KEY_REBOOT] = interrupt("reboot")
    for unit in dropin_units(profiles):
        if unit.endswith(".service"):
            service = interrupt("service", [unit[:-len(".service")]])
            config_interrupts[group_key({"interrupt": service})] = service
    for key, items in groups.items():
        if key != KEY_NOOP:
            config_interrupts[key] = merge_interrupts(items)
    out = dict(spec, config=dict(given, **config))
    out["config"] = {k: v for k, v in out["config"].items()
                     if not k.startswith(RESOLVED_PREFIX) or k in config}
    out.setdefault("interrupt", merge_interrupts([s["interrupt"] for s in resolved["settings"].values()]))
    out["config_interrupts"] = dict(config_interrupts, **(spec.get("config_interrupts") or {}))
    return out, per_node
