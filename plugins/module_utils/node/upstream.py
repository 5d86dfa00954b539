# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Upstream NodeWright's per-node state (NVIDIA's operator, formerly Skyhook), read,
and what of it NodeWright can take over: the decisions of ``nodewright adopt``.

The operator keeps, per node and per resource ``<name>`` (its metadata prefix is
``nodewright.nvidia.com`` from operator v0.18, ``skyhook.nvidia.com`` before; a node
migrated by the operator may carry both, and the newer key wins, as the operator's
own migration decides):

* annotation ``<prefix>/nodeState_<name>``: JSON object ``{"<package>|<version>":
  {"name", "version", "image", "containerSHA", "stage", "state", "restarts"}}``;
* annotation and label ``<prefix>/status_<name>``: the node's status for the resource;
* annotation ``<prefix>/version_<name>``: the operator version that wrote the state;
* annotation ``<prefix>/cordon_<name>`` = ``"true"`` while that resource holds the
  node's cordon; ``<prefix>/runtimeRequiredCordon`` for the persistent cordon of
  ``runtimeRequiredCordonAfter``;
* the runtime-required taint ``nodewright.nvidia.com=runtime-required:NoSchedule``
  (``skyhook.nvidia.com`` before v0.18).

A package is complete for the operator when its state is ``complete`` at stage
``post-interrupt``, or at stage ``config`` when the package has no interrupt (its
``IsPackageComplete``). Only those are adopted: NodeWright records them as complete
in its own node state so that nothing is applied again. Anything else (in
progress, erroring, skipped, waiting for its interrupt, an uninstall under way) is
left out, so that NodeWright applies it from the start, and said so.

Pure functions over plain dicts; nothing here writes to the cluster.
"""

from __future__ import annotations

import json

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.package.versions import Version, is_version

# Newest first: a key under the newer prefix wins over the legacy one.
PREFIXES = (markers.UPSTREAM_PREFIX, markers.SKYHOOK_PREFIX)
NODE_STATE = "nodeState_"
STATUS = "status_"
VERSION = "version_"
CORDON = "cordon_"
RUNTIME_CORDON = "runtimeRequiredCordon"

# Package entries: state, and the stages after which a package is complete.
UP_COMPLETE = "complete"
STAGE_CONFIG = "config"
STAGE_POST_INTERRUPT = "post-interrupt"


def same_version(a, b):
    """Whether two versions are the same as upstream compares them: ``"1.2"`` is ``1.2.0``
    (``versions.Version``; the text is kept as written everywhere)."""
    return is_version(a) and is_version(b) and Version(a) == Version(b)


def _meta(node, kind):
    return ((node or {}).get("metadata") or {}).get(kind) or {}


def key(prefix, kind, name):
    return "%s/%s%s" % (prefix, kind, name)


def resources_on(node):
    """The upstream resource names that left state, a status or a cordon on ``node``."""
    found = set()
    for kind in ("annotations", "labels"):
        for k in _meta(node, kind):
            for prefix in PREFIXES:
                for what in (NODE_STATE, STATUS, CORDON):
                    head = "%s/%s" % (prefix, what)
                    if k.startswith(head) and len(k) > len(head):
                        found.add(k[len(head):])
    return sorted(found)


def _first(mapping, kind, name):
    """``(key, value)`` of the newest prefix's key for ``kind``/``name``, or ``(None, None)``."""
    for prefix in PREFIXES:
        k = key(prefix, kind, name)
        if k in mapping:
            return k, mapping[k]
    return None, None


def read(node, name):
    """What upstream recorded on ``node`` for resource ``name``:
    ``{key, raw, status, operator_version, cordon_key, packages, problems, error}``.
    ``packages`` is the list of parsed entries (``parse_entries``); ``error`` is set
    (and ``packages`` empty) when the annotation is not a JSON object."""
    annotations, labels = _meta(node, "annotations"), _meta(node, "labels")
    state_key, raw = _first(annotations, NODE_STATE, name)
    status = _first(annotations, STATUS, name)[1] or _first(labels, STATUS, name)[1]
    cordon_key, cordon = _first(annotations, CORDON, name)
    out = {"key": state_key, "raw": raw, "status": status, "operator_version": _first(annotations, VERSION, name)[1],
           "cordon_key": cordon_key if cordon is not None else None, "packages": [], "problems": [], "error": None}
    if raw is None:
        return out
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        out["error"] = "annotation %s is not valid JSON (%s)" % (state_key, exc)
        return out
    if value is None:
        return out
    if not isinstance(value, dict):
        kind = type(value).__name__
        out["error"] = "annotation %s must hold a JSON object of packages, not %s" % (state_key, kind)
        return out
    out["packages"], out["problems"] = parse_entries(value)
    return out


def parse_entries(state):
    """The entries of a parsed upstream node state (``{"name|version": entry}``):
    ``(entries, problems)``. Each entry is ``{name, version, stage, state, image,
    restarts, key}`` (the version as upstream wrote it: ``"1.2"`` stays ``"1.2"``, and
    compares as ``1.2.0``); an entry that cannot be read is a
    problem (one line naming it), never an exception."""
    entries, problems = [], []
    for k in sorted(state):
        value = state[k]
        if not isinstance(value, dict):
            problems.append("entry %r is not an object" % (k,))
            continue
        key_name, _sep, key_version = str(k).partition("|")
        name = value.get("name") or key_name
        version = value.get("version") or key_version
        if not isinstance(name, str) or not name:
            problems.append("entry %r has no package name" % (k,))
            continue
        if not is_version(version):
            problems.append("entry %r: version %r is not a version (MAJOR.MINOR.PATCH, or MAJOR.MINOR as upstream "
                            "writes it)" % (k, version))
            continue
        entries.append({"key": k, "name": name, "version": version, "stage": value.get("stage"),
                        "state": value.get("state"), "image": value.get("image"),
                        "restarts": value.get("restarts") or 0})
    return entries, problems


def is_complete(entry, has_interrupt):
    """Upstream's rule: complete at ``post-interrupt``, or at ``config`` with no interrupt."""
    if entry.get("state") != UP_COMPLETE:
        return False
    if entry.get("stage") == STAGE_POST_INTERRUPT:
        return True
    return entry.get("stage") == STAGE_CONFIG and not has_interrupt


def _why_not(entry, has_interrupt):
    state, stage = entry.get("state"), entry.get("stage")
    if state == UP_COMPLETE and stage == STAGE_CONFIG and has_interrupt:
        return "upstream applied it but its interrupt had not happened"
    if state == UP_COMPLETE and stage == "interrupt":
        return "upstream's interrupt happened but its post-interrupt stage had not run"
    if stage in ("uninstall", "uninstall-interrupt"):
        return "an uninstall was under way upstream (%s at stage %s)" % (state, stage)
    return "upstream left it %s at stage %s" % (state or "without a state", stage or "unknown")


def decide(node, name, desired, recorded):
    """What adopting resource ``name``'s upstream state on ``node`` means.

    ``desired``: the NodeWright resource's packages, ``{package: {version,
    has_interrupt}}``, or None when no NodeWright resource has that name.
    ``recorded``: NodeWright's own package entries for the resource on the node.

    Returns ``{resource, key, status, operator_version, cordon_key, adopt: [entry],
    already: [entry], redo: [{name, version, why}], skipped: [{name, version, why}],
    problems: [text], error}``. ``adopt`` are the complete packages NodeWright does not
    record yet (each with the version upstream completed); ``already`` those it
    records (its own record wins); ``redo`` the desired packages upstream did not
    finish; ``skipped`` the entries NodeWright has no use for (not in the resource, or
    another version than the one adopted).
    """
    found = read(node, name)
    out = {"resource": name, "key": found["key"], "status": found["status"],
           "operator_version": found["operator_version"], "cordon_key": found["cordon_key"], "adopt": [],
           "already": [], "redo": [], "skipped": [], "problems": list(found["problems"]), "error": found["error"]}
    if found["error"] or desired is None:
        return out
    recorded = recorded or {}
    by_name = {}
    for entry in found["packages"]:
        by_name.setdefault(entry["name"], []).append(entry)
    for pkg in sorted(by_name):
        entries = by_name[pkg]
        if pkg not in desired:
            for e in entries:
                out["skipped"].append({"name": pkg, "version": e["version"],
                                       "why": "not a package of NodeWright resource %s" % name})
            continue
        wanted = desired[pkg]
        interrupt = bool(wanted.get("has_interrupt"))
        at_wanted = [e for e in entries if same_version(e["version"], wanted.get("version"))]
        complete = [e for e in entries if is_complete(e, interrupt)]
        # The wanted version when it is complete; else the newest complete one (the rollout
        # then upgrades or downgrades it); else nothing is adopted.
        done = [e for e in at_wanted if e in complete]
        chosen = done[0] if done else (max(complete, key=lambda e: Version(e["version"])) if complete else None)
        for e in entries:
            if chosen is not None and e is not chosen:
                out["skipped"].append({"name": pkg, "version": e["version"],
                                       "why": "superseded by %s %s" % (pkg, chosen["version"])})
        if chosen is None:
            e = at_wanted[0] if at_wanted else entries[0]
            out["redo"].append({"name": pkg, "version": e["version"],
                                "why": "%s; NodeWright applies it from the start" % _why_not(e, interrupt)})
            continue
        mine = recorded.get(pkg)
        if isinstance(mine, dict):
            out["already"].append(dict(chosen, version=mine.get("version") or chosen["version"],
                                       upstream_version=chosen["version"], adopted=bool(mine.get("adoptedFrom"))))
        else:
            # Recorded at the resource's own text of the version when it is the same one.
            version = wanted["version"] if same_version(chosen["version"], wanted.get("version")) else \
                chosen["version"]
            out["adopt"].append(dict(chosen, version=version, upstream_version=chosen["version"]))
    return out


def runtime_taints(node):
    """Upstream's runtime-required taints on ``node`` (``key=value:effect`` each)."""
    out = []
    for t in ((node or {}).get("spec") or {}).get("taints") or []:
        if t.get("key") in markers.UPSTREAM_RUNTIME_TAINT_KEYS:
            out.append("%s=%s:%s" % (t.get("key"), t.get("value", ""), t.get("effect", "")))
    return out


def runtime_cordon(node):
    """The upstream annotation of a ``runtimeRequiredCordonAfter`` cordon on ``node``, or None."""
    annotations = _meta(node, "annotations")
    for prefix in PREFIXES:
        k = "%s/%s" % (prefix, RUNTIME_CORDON)
        if k in annotations:
            return k
    return None
