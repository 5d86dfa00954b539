# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What changed between the settings recorded on the host and the resolved ones, the
interrupt the change needs, and the record the role keeps."""

from __future__ import annotations

import copy

from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import cmdline_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP, apply_interrupt, merge_interrupts, removal_interrupt
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import norm, settings_of


def diff_settings(old, new, reapply=()):
    """Which settings changed between ``old`` and ``new`` and the interrupt they need.

    ``old``/``new`` are resolved profiles or their ``settings`` mappings (``old`` is
    usually the state recorded on the host; empty means nothing applied yet).
    ``reapply`` lists setting ids whose files were rewritten although the setting
    did not change (drift); they get their interrupt again, except a reboot.

    Returns ``changed``, ``added``/``removed``/``modified`` (ids), ``changes`` (one
    entry per id with old and new value and its interrupt), ``interrupt`` (merged),
    ``reboot``, ``lingering`` (removed settings whose effect stays until a reboot)
    and ``cmdline`` (``add``/``remove`` tokens for bootloader tools).
    """
    old_s, new_s = settings_of(old), settings_of(new)
    added = [sid for sid in new_s if sid not in old_s]
    removed = [sid for sid in old_s if sid not in new_s]
    modified = [sid for sid in new_s if sid in old_s and (
        norm(old_s[sid].get("value")) != norm(new_s[sid].get("value"))
        or bool(old_s[sid].get("reboot")) != bool(new_s[sid].get("reboot")))]
    changes, interrupts, lingering = [], [], []
    for sid in added + modified:
        it = apply_interrupt(new_s[sid])
        interrupts.append(it)
        changes.append({"id": sid, "change": "added" if sid in added else "modified",
                        "old": old_s.get(sid, {}).get("value"), "new": new_s[sid]["value"],
                        "interrupt": it})
    for sid in removed:
        it, note = removal_interrupt(old_s[sid])
        interrupts.append(it)
        changes.append({"id": sid, "change": "removed", "old": old_s[sid].get("value"), "new": None,
                        "interrupt": it})
        if note:
            lingering.append({"id": sid, "value": old_s[sid].get("value"), "note": note})
    for sid in reapply or ():
        if sid in new_s and sid not in added and sid not in modified:
            it = apply_interrupt(new_s[sid])
            if it["type"] != "reboot":
                interrupts.append(it)
                changes.append({"id": sid, "change": "reapplied", "old": new_s[sid]["value"],
                                "new": new_s[sid]["value"], "interrupt": it})
    merged = merge_interrupts(interrupts)
    new_tokens = cmdline_tokens(new_s)
    old_tokens = cmdline_tokens(old_s)
    return {
        "changed": bool(added or removed or modified),
        "added": added, "removed": removed, "modified": modified,
        "changes": changes, "interrupt": merged, "reboot": merged["type"] == "reboot",
        "lingering": lingering,
        "cmdline": {"add": [t for t in new_tokens if t not in old_tokens],
                    "remove": [t for t in old_tokens if t not in new_tokens],
                    "desired": new_tokens},
    }


def state_record(resolved, pending_interrupt=None, initramfs=None):
    """What the role records on the host: the applied settings, files and pending
    interrupt, and - where the OS has one - the checksum of the driver options the
    initramfs was last built from, with the command that rebuilds it."""
    settings = copy.deepcopy(settings_of(resolved))
    for setting in settings.values():
        # What the node had before is read again at every run; the record keeps what was written.
        setting.pop("current", None)
        setting.pop("current_source", None)
    record = {
        "version": 1,
        "profile": {k: resolved.get(k) for k in ("accelerator", "intent", "os", "cloud", "options")},
        "settings": settings,
        "files": [f["path"] for f in resolved.get("files", [])],
        "bootloader": resolved.get("bootloader") or {"method": "none"},
        "pending_interrupt": merge_interrupts(pending_interrupt or NOOP),
    }
    builder = resolved.get("initramfs") or {}
    if initramfs and builder.get("method", "none") != "none":
        record["initramfs"] = initramfs
        record["initramfs_command"] = list(builder.get("update_command") or [])
    return record


def applied_sysctls(record):
    """``{key: value}`` of the sysctls a role record says NodeWright wrote."""
    return {s.get("key"): s.get("value") for s in settings_of((record or {}).get("settings") or {}).values()
            if s.get("mechanism") == "sysctl"}
