# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Read-back checks: what to observe on the host for each setting, what it must read
back as, and the shape of the result.

The verdict itself - does an observation match - is given by one comparator,
``packages/nvidia-tuning/steps/verdict.sh``, which the package's post-interrupt check
runs on the node and the role's check on the controller
(``plugin_utils/tuning_files.check_settings``). This module renders the rows it reads
(``checks_text``) and turns what it prints into the check's result (``check_result``)."""

from __future__ import annotations

import fnmatch

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import settings_of

CMDLINE_PROBE = "proc:cmdline"
MISSING = "<missing>"
UNAVAILABLE = "<unavailable>"


def probes(resolved_or_settings):
    """The observations a check needs: one per setting, plus ``proc:cmdline``."""
    settings = settings_of(resolved_or_settings)
    out = [sid for sid, s in settings.items() if s["mechanism"] != "cmdline"]
    if any(s["mechanism"] == "cmdline" for s in settings.values()):
        out.append(CMDLINE_PROBE)
    return out


def parse_observations(text):
    """Parse ``<probe>\\t<value>`` lines printed by the role's observe script."""
    observed = {}
    for line in str(text or "").splitlines():
        probe, sep, value = line.partition("\t")
        if sep and probe:
            observed[probe.strip()] = value.strip()
    return observed


def _expected(setting):
    mech = setting["mechanism"]
    if mech == "module":
        return "loaded"
    if mech == "gpu":
        return "Enabled" if setting["key"] == "persistence" else "active"
    return setting["value"]


# How an observation is judged, one word per rule, as verdict.sh applies them.
CHECK_RULES = ("eq", "tokens", "enabled", "governor", "skip")


def _rule(setting):
    mech = setting["mechanism"]
    if mech == "cmdline":
        return "tokens"
    if mech == "gpu" and setting["key"] == "persistence":
        return "enabled"
    if mech == "governor":
        return "governor"
    return "eq"


def _skip_reason(sid, skip):
    for pattern, reason in sorted((skip or {}).items()):
        if fnmatch.fnmatchcase(sid, pattern):
            return " ".join(str(reason or "skipped").split())
    return None


def check_expectations(resolved_or_settings, skip=None):
    """What each setting must read back as: one row per setting with ``id``, ``probe``
    (see ``probes``), ``rule`` (one of ``CHECK_RULES``), ``expected`` and, for a
    setting matched by a glob of ``skip`` (setting-id glob -> reason), rule ``skip``
    with the ``reason``."""
    rows = []
    for sid, setting in settings_of(resolved_or_settings).items():
        probe = CMDLINE_PROBE if setting["mechanism"] == "cmdline" else sid
        expected = setting["value"] if setting["mechanism"] == "cmdline" else _expected(setting)
        row = {"id": sid, "probe": probe, "rule": _rule(setting), "expected": " ".join(str(expected).split()),
               "layer": setting.get("layer", ""), "why": setting.get("why", ""), "reboot": bool(setting.get("reboot"))}
        reason = _skip_reason(sid, skip)
        if reason:
            row.update(rule="skip", reason=reason)
        rows.append(row)
    return rows


def checks_text(rows):
    """The rows as verdict.sh reads them (and the package carries them, resolved.checks):
    ``ID<TAB>PROBE<TAB>RULE<TAB>EXPECTED`` (the reason for rule skip)."""
    return "".join("\t".join((row["id"], row["probe"], row["rule"], row.get("reason") or row["expected"] or "-"))
                   + "\n" for row in rows)


def observations_text(observed):
    """Observations as observe.sh prints them: ``PROBE<TAB>VALUE`` lines."""
    return "".join("%s\t%s\n" % (probe, " ".join(str(value).split()))
                   for probe, value in (observed or {}).items() if value is not None)


def parse_verdict(text):
    """verdict.sh's output: ``({id: (verdict, detail)}, summary)``; verdict is ``ok``,
    ``failed`` or ``unverified``, detail the reason of an unverified setting."""
    verdicts, summary = {}, None
    for line in str(text or "").splitlines():
        fields = line.split("\t")
        if fields[0] == "summary":
            summary = "\t".join(fields[1:])
        elif fields[0] in ("ok", "failed", "unverified") and len(fields) > 1:
            verdicts[fields[1]] = (fields[0], fields[2] if fields[0] == "unverified" and len(fields) > 2 else None)
    return verdicts, summary


def check_result(rows, verdict_text, observed, phase="post-interrupt"):
    """The check's result from verdict.sh's output for ``rows`` (``check_expectations``).

    ``phase`` is ``post-interrupt`` (everything must be in effect) or ``live`` (a
    failed setting that needs a reboot is ``pending_reboot`` instead). Returns ``ok``,
    ``phase``, ``failed`` (id, expected, observed, layer, why), ``pending_reboot``,
    ``unverified`` (id, reason), ``verified`` and ``summary``. A setting the verdict
    does not name failed: the comparator did not see it.
    """
    if phase not in ("post-interrupt", "live"):
        raise ValidationError("unknown check phase %r" % (phase,), field="phase",
                              hint="post-interrupt or live")
    verdicts, dummy = parse_verdict(verdict_text)
    observed = observed or {}
    failed, pending, unverified, verified = [], [], [], []
    for row in rows:
        verdict, reason = verdicts.get(row["id"], ("failed", None))
        if verdict == "ok":
            verified.append(row["id"])
        elif verdict == "unverified":
            unverified.append({"id": row["id"], "reason": reason or row.get("reason") or "not verifiable here"})
        elif phase == "live" and row["reboot"]:
            pending.append(row["id"])
        else:
            got = observed.get(row["probe"])
            failed.append({"id": row["id"], "expected": row["expected"],
                           "observed": "<not observed>" if got is None else got, "layer": row["layer"],
                           "why": row["why"]})
    lines = ["%s: expected %s, observed %s (from %s)" % (f["id"], f["expected"], f["observed"], f["layer"])
             for f in failed]
    return {
        "ok": not failed, "phase": phase, "failed": failed, "pending_reboot": pending,
        "unverified": unverified, "verified": verified,
        "summary": ("%d setting(s) did not take effect: %s" % (len(failed), "; ".join(lines)))
        if failed else "all %d setting(s) in effect" % len(verified),
    }
