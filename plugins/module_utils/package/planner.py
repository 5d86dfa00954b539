# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Decide what each package needs on one node: the lifecycle planner.

Pure functions over plain data, so that a dry run can show the plan and tests can
drive it by tables. Inputs:

* desired packages: ``{name, version, state (present|absent), config or
  configHashes, interrupt, configInterrupts, dependsOn}``;
* the node's recorded state, the JSON that NodeWright keeps in the node annotation
  ``nodewright.io/state-<resource>`` (and on the host): ``{"packages": {name:
  {name, version, stage, state, configHashes, dependsOn, interrupt, fromVersion,
  bootId, updated}}, "status": ...}``.

Per package the planner picks one action:

=============  =========================================================  ==========================
action         when                                                       stages run
=============  =========================================================  ==========================
apply          not on the node                                            apply, config
upgrade        desired version is newer                                   upgrade, config
downgrade      desired version is older                                   old uninstall, apply, config
reinstall      an apply or uninstall of another version never finished   old uninstall, apply, config
config         same version, some config keys changed                     config
resume         same version, the last run failed at a stage               that stage onwards
uninstall      ``state: absent``, or not desired and ``prune``            uninstall
interrupt      done, but the interrupt it asked for has not happened yet  (none)
post-interrupt phase ``post-interrupt``, the interrupt happened           post-interrupt
none           nothing to do
=============  =========================================================  ==========================

Each stage is followed by its ``-check`` stage (the runner does that). A config
change asks only for the interrupts whose ``configInterrupts`` globs match a
changed key; the other actions ask for the package's interrupt. The node's
interrupt is the merge of all: reboot > restartAllServices > union of services >
noop. Packages are ordered by ``dependsOn`` (a cycle is an error); uninstalls
run first, dependents before what they depend on.
"""

from __future__ import annotations

import json

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    STATUS_COMPLETE,
    STATUS_ERRORING,
    STATUS_IN_PROGRESS,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    INTERRUPT_TYPES,
    NAME_RE,
    Version,
    config_hashes,
    config_key_matches,
    is_version,
)

PHASE_MAIN = "main"
PHASE_POST_INTERRUPT = "post-interrupt"
PHASES = (PHASE_MAIN, PHASE_POST_INTERRUPT)

ACTION_APPLY = "apply"
ACTION_UPGRADE = "upgrade"
ACTION_DOWNGRADE = "downgrade"
ACTION_REINSTALL = "reinstall"
ACTION_CONFIG = "config"
ACTION_RESUME = "resume"
ACTION_UNINSTALL = "uninstall"
ACTION_INTERRUPT = "interrupt"
ACTION_POST_INTERRUPT = "post-interrupt"
ACTION_NONE = "none"
# Actions that run steps on the node.
WORKING_ACTIONS = (ACTION_APPLY, ACTION_UPGRADE, ACTION_DOWNGRADE, ACTION_REINSTALL, ACTION_CONFIG,
                   ACTION_RESUME, ACTION_UNINSTALL, ACTION_POST_INTERRUPT)

# Package states (Skyhook's vocabulary) and the pseudo-stage of a pending interrupt.
STATE_COMPLETE = "complete"
STATE_IN_PROGRESS = "in_progress"
STATE_ERRORING = "erroring"
STAGE_INTERRUPT = "interrupt"

NOOP = {"type": "noop", "services": []}


# --------------------------------------------------------------------------- interrupts

def normalize_interrupt(value, field="interrupt"):
    """``None`` -> noop; a mapping is checked and returned as ``{type, services}``."""
    if value is None or value == {}:
        return dict(NOOP, services=[])
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or value.get("type") not in INTERRUPT_TYPES:
        raise ValidationError("unknown interrupt %r" % (value,), field=field,
                              hint="type is one of %s" % ", ".join(reversed(INTERRUPT_TYPES)))
    services = value.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
        raise ValidationError("services must be a list of unit names", field=field + ".services")
    if value["type"] == "service" and not services:
        raise ValidationError("interrupt type 'service' needs services", field=field + ".services",
                              hint="e.g. services: [containerd.service]")
    return {"type": value["type"], "services": sorted(set(services)) if value["type"] == "service" else []}


def merge_interrupts(interrupts):
    """One interrupt for a node: reboot > restartAllServices > services (union) > noop."""
    rank = 0
    services = set()
    for item in interrupts:
        if not item:
            continue
        item = normalize_interrupt(item)
        rank = max(rank, INTERRUPT_TYPES.index(item["type"]))
        services.update(item["services"])
    itype = INTERRUPT_TYPES[rank]
    return {"type": itype, "services": sorted(services) if itype == "service" else []}


def is_noop(interrupt):
    return not interrupt or interrupt.get("type", "noop") == "noop"


def interrupts_for_keys(config_interrupts, keys):
    """The interrupts that the changed ``keys`` ask for through configInterrupts globs."""
    found = []
    for pattern, interrupt in sorted((config_interrupts or {}).items()):
        if any(config_key_matches(pattern, key) for key in keys):
            found.append(normalize_interrupt(interrupt, "configInterrupts[%r]" % pattern))
    return found


def changed_keys(old_hashes, new_hashes):
    """Config keys added, removed or modified between two ``config_hashes`` results."""
    old_hashes, new_hashes = old_hashes or {}, new_hashes or {}
    return sorted(k for k in set(old_hashes) | set(new_hashes) if old_hashes.get(k) != new_hashes.get(k))


# --------------------------------------------------------------------------- state

def normalize_state(recorded, field="recorded_state"):
    """Accept the node state as the annotation's JSON text, the state mapping, or a
    mapping of package name to entry; return ``{"packages": {name: entry}}``."""
    if recorded is None or recorded == "" or recorded == {}:
        return {"packages": {}}
    if isinstance(recorded, str):
        try:
            recorded = json.loads(recorded)
        except ValueError as exc:
            raise ValidationError("the recorded node state is not JSON: %s" % exc, field=field,
                                  hint="pass the value of the node annotation as it is, or {}")
    if not isinstance(recorded, dict):
        raise ValidationError("the recorded node state must be a mapping", field=field)
    packages = recorded.get("packages") if "packages" in recorded else recorded
    if "name" in packages and "version" in packages and not isinstance(packages.get("version"), dict):
        packages = {packages["name"]: packages}  # one package's entry
    if not isinstance(packages, dict):
        raise ValidationError("'packages' must map package names to their state", field=field)
    out = {}
    for name, entry in packages.items():
        where = "%s.packages.%s" % (field, name)
        if not isinstance(entry, dict) or not is_version(entry.get("version")):
            raise ValidationError("recorded package %r has no valid version" % name, field=where,
                                  hint="reset the node's state annotation if it was edited by hand")
        entry = dict(entry)
        entry["name"] = name
        entry.setdefault("stage", "config")
        entry.setdefault("state", STATE_COMPLETE)
        out[name] = entry
    return {"packages": out}


def state_entry(name, version, stage, state, config_hashes=None, depends_on=None, interrupt=None,
                from_version=None, boot_id=None, updated=None):
    """One package's entry in the node state (camelCase: it lives in an annotation)."""
    entry = {"name": name, "version": version, "stage": stage, "state": state}
    if config_hashes is not None:
        entry["configHashes"] = dict(config_hashes)
    if depends_on:
        entry["dependsOn"] = dict(depends_on)
    if interrupt and not is_noop(interrupt):
        entry["interrupt"] = normalize_interrupt(interrupt)
    if from_version:
        entry["fromVersion"] = from_version
    if boot_id:
        entry["bootId"] = boot_id
    if updated:
        entry["updated"] = updated
    return entry


def node_status(state):
    """The node's status over its packages: erroring > in_progress > complete."""
    states = [p.get("state") for p in (state or {}).get("packages", {}).values()]
    if STATE_ERRORING in states:
        return STATUS_ERRORING
    if any(s != STATE_COMPLETE for s in states) or any(
            p.get("stage") == STAGE_INTERRUPT for p in state.get("packages", {}).values()):
        return STATUS_IN_PROGRESS
    return STATUS_COMPLETE


def pending_interrupt(state):
    """The interrupt the node still owes its packages (those at stage interrupt)."""
    return merge_interrupts(p.get("interrupt") for p in (state or {}).get("packages", {}).values()
                            if p.get("stage") == STAGE_INTERRUPT)


def finalize_state(state):
    """The state as it is written to the node: packages by name and a status."""
    packages = {name: state["packages"][name] for name in sorted(state.get("packages", {}))}
    out = {"packages": packages}
    out["status"] = node_status(out)
    return out


# --------------------------------------------------------------------------- ordering

def order_by_dependencies(depends_on, field="dependsOn"):
    """Names in an order where every package comes after what it depends on; ties
    keep alphabetical order. A cycle raises a ValidationError that names it."""
    names = sorted(depends_on)
    deps = {n: sorted(d for d in (depends_on[n] or {}) if d in depends_on) for n in names}
    done, order = set(), []
    while len(order) < len(names):
        ready = [n for n in names if n not in done and all(d in done for d in deps[n])]
        if not ready:
            raise ValidationError("dependency cycle: %s" % " -> ".join(_find_cycle(deps, done)), field=field,
                                  hint="remove one of these dependsOn entries")
        done.add(ready[0])
        order.append(ready[0])
    return order


def _find_cycle(deps, done):
    for start in sorted(n for n in deps if n not in done):
        path, seen = [start], {start}
        node = start
        while True:
            nxt = next(d for d in deps[node] if d not in done)
            if nxt in seen:
                return path[path.index(nxt):] + [nxt]
            path.append(nxt)
            seen.add(nxt)
            node = nxt
    return []  # pragma: no cover - only called when a cycle exists


# --------------------------------------------------------------------------- desired

def normalize_desired(spec, index=0):
    """Check one desired package and fill defaults; config values become hashes."""
    where = "packages[%d]" % index
    if not isinstance(spec, dict):
        raise ValidationError("a desired package must be a mapping", field=where)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError("invalid package name %r" % (name,), field=where + ".name",
                              hint="names match %s" % NAME_RE.pattern)
    state = spec.get("state", "present")
    if state not in ("present", "absent"):
        raise ValidationError("state must be present or absent, got %r" % (state,), field=where + ".state")
    version = spec.get("version")
    if state == "present" and not is_version(version):
        raise ValidationError("version %r of package %r is not a semantic version" % (version, name),
                              field=where + ".version", hint="use MAJOR.MINOR.PATCH")
    hashes = spec.get("configHashes")
    if hashes is None:
        hashes = config_hashes(spec.get("config") or {})
    deps = spec.get("dependsOn") or {}
    for dep, dep_version in deps.items():
        if not is_version(dep_version):
            raise ValidationError("dependency %r version %r is not a semantic version" % (dep, dep_version),
                                  field="%s.dependsOn.%s" % (where, dep))
    config_interrupts = spec.get("configInterrupts") or {}
    return {
        "name": name, "version": version, "state": state, "configHashes": hashes,
        "interrupt": normalize_interrupt(spec.get("interrupt"), where + ".interrupt"),
        "configInterrupts": {k: normalize_interrupt(v, "%s.configInterrupts[%r]" % (where, k))
                             for k, v in config_interrupts.items()},
        "dependsOn": dict(deps),
    }


PACKAGE_SPEC_KEYS = ("name", "src", "version", "config", "env", "interrupt", "config_interrupts", "depends_on",
                     "state")


def desired_from_spec(spec, package=None, index=0):
    """A desired package from a package spec (the module's options: name, src,
    version, config, env, interrupt, config_interrupts, depends_on, state) and the
    package loaded from its src (None when there is none). The spec's interrupt,
    config_interrupts and depends_on override the manifest's, as a NodeWright
    resource's fields do; config is merged over the manifest's defaultConfig."""
    where = "packages[%d]" % index
    unknown = sorted(set(spec) - set(PACKAGE_SPEC_KEYS))
    if unknown:
        raise ValidationError("unknown key(s) %s" % ", ".join(unknown), field=where,
                              hint="allowed: %s" % ", ".join(PACKAGE_SPEC_KEYS))
    name, state = spec.get("name"), spec.get("state") or "present"
    if package is not None:
        if name and name != package.name and package.format == "nodewright":
            raise ValidationError("the package at %s is %r, not %r" % (spec.get("src"), package.name, name),
                                  field=where + ".name", hint="fix name, or point src at the %s package" % name)
        name = name or package.name
        if spec.get("version") and spec["version"] != package.version:
            raise ValidationError("%s at %s is version %s, not %s" % (name, spec.get("src"), package.version,
                                                                      spec["version"]),
                                  field=where + ".version",
                                  hint="point src at version %s, or change version" % spec["version"])
    elif state == "present":
        raise ValidationError("package %r has no source" % (name,), field=where + ".src",
                              hint="give src (a package directory) or the name of a shipped package")
    if not name:
        raise ValidationError("give name or src", field=where)
    config = spec.get("config") or {}
    if package is not None:
        config = package.validate_config(config, field=where + ".config")

    def pick(key, default):
        return spec[key] if spec.get(key) is not None else default

    return {
        "name": name, "state": state, "version": package.version if package else spec.get("version"),
        "config": config,
        "interrupt": pick("interrupt", package.interrupt.to_dict() if package else None),
        "configInterrupts": pick("config_interrupts", {k: v.to_dict() for k, v in package.config_interrupts.items()}
                                 if package else {}),
        "dependsOn": pick("depends_on", dict(package.depends_on) if package else {}),
    }


def _check_dependencies(desired):
    present = {d["name"]: d for d in desired if d["state"] == "present"}
    for d in present.values():
        for dep, minimum in sorted(d["dependsOn"].items()):
            if dep not in present:
                raise ValidationError(
                    "package %r depends on %r %s, which is not among the desired packages" % (d["name"], dep, minimum),
                    field="%s.dependsOn.%s" % (d["name"], dep), hint="add %r to the packages, or drop the dependency" % dep)
            if Version(present[dep]["version"]) < Version(minimum):
                raise ValidationError(
                    "package %r needs %r at least %s, but %s is desired" % (d["name"], dep, minimum,
                                                                           present[dep]["version"]),
                    field="%s.dependsOn.%s" % (d["name"], dep), hint="raise %r to %s or later" % (dep, minimum))


# --------------------------------------------------------------------------- planning

def _entry(name, action, reason, version=None, from_version=None, stages=(), interrupt=None,
           changed=(), depends_on=None):
    interrupt = merge_interrupts([interrupt]) if interrupt else dict(NOOP, services=[])
    return {"name": name, "action": action, "version": version, "from_version": from_version,
            "stages": list(stages), "interrupt": interrupt,
            "post_interrupt": action != ACTION_UNINSTALL and not is_noop(interrupt),
            "changed_keys": list(changed), "depends_on": dict(depends_on or {}), "reason": reason}


def plan_package(desired, recorded):
    """The main-phase action for one desired package given its recorded entry."""
    name, version = desired["name"], desired["version"]
    deps = desired["dependsOn"]
    if desired["state"] == "absent":
        if recorded is None:
            return _entry(name, ACTION_NONE, "absent and not on the node")
        return _entry(name, ACTION_UNINSTALL, "state is absent", from_version=recorded["version"],
                      stages=["uninstall"])
    if recorded is None:
        return _entry(name, ACTION_APPLY, "not on the node", version, stages=["apply", "config"],
                      interrupt=desired["interrupt"], depends_on=deps)
    have, stage, state = recorded["version"], recorded.get("stage"), recorded.get("state")
    pending = recorded.get("interrupt") if stage == STAGE_INTERRUPT or state != STATE_COMPLETE else None
    keys = changed_keys(recorded.get("configHashes"), desired["configHashes"])
    key_interrupts = interrupts_for_keys(desired["configInterrupts"], keys)
    unfinished = state != STATE_COMPLETE and stage in ("apply", "uninstall")
    cmp = (Version(version) > Version(have)) - (Version(version) < Version(have))
    if cmp != 0 and unfinished:
        return _entry(name, ACTION_REINSTALL, "the %s of %s did not finish (%s)" % (stage, have, state), version,
                      from_version=have, stages=["uninstall", "apply", "config"], interrupt=desired["interrupt"],
                      depends_on=deps)
    if cmp > 0:
        return _entry(name, ACTION_UPGRADE, "%s -> %s" % (have, version), version, from_version=have,
                      stages=["upgrade", "config"],
                      interrupt=merge_interrupts([desired["interrupt"], pending] + key_interrupts),
                      changed=keys, depends_on=deps)
    if cmp < 0:
        return _entry(name, ACTION_DOWNGRADE, "%s -> %s: uninstall %s, apply %s" % (have, version, have, version),
                      version, from_version=have, stages=["uninstall", "apply", "config"],
                      interrupt=merge_interrupts([desired["interrupt"], pending]), depends_on=deps)
    if stage == STAGE_INTERRUPT:
        if keys:
            return _entry(name, ACTION_CONFIG, "config changed: %s" % ", ".join(keys), version, stages=["config"],
                          interrupt=merge_interrupts([pending] + key_interrupts), changed=keys, depends_on=deps)
        return _entry(name, ACTION_INTERRUPT, "waiting for its %s interrupt" % (pending or NOOP)["type"], version,
                      interrupt=pending, depends_on=deps)
    if state != STATE_COMPLETE:
        if stage == "uninstall":
            return _entry(name, ACTION_APPLY, "its uninstall did not finish (%s); applying again" % state,
                          version, stages=["apply", "config"], interrupt=desired["interrupt"], depends_on=deps)
        resume = {"apply": (["apply", "config"], [desired["interrupt"], pending]),
                  "upgrade": (["upgrade", "config"], [desired["interrupt"], pending] + key_interrupts),
                  "config": (["config"], [pending] + key_interrupts),
                  "post-interrupt": (["post-interrupt"], [])}.get(stage)
        if resume is None:
            resume = (["apply", "config"], [desired["interrupt"], pending])
        return _entry(name, ACTION_RESUME, "stage %s was %s: running it again" % (stage, state), version,
                      from_version=recorded.get("fromVersion") if stage == "upgrade" else None,
                      stages=resume[0], interrupt=merge_interrupts(resume[1]), changed=keys, depends_on=deps)
    if keys:
        return _entry(name, ACTION_CONFIG, "config changed: %s" % ", ".join(keys), version, stages=["config"],
                      interrupt=merge_interrupts(key_interrupts), changed=keys, depends_on=deps)
    return _entry(name, ACTION_NONE, "%s is complete" % version, version, depends_on=deps)


def _plan_post_interrupt(recorded):
    entries = {}
    for name, rec in recorded.items():
        if rec.get("stage") == STAGE_INTERRUPT or (rec.get("stage") == "post-interrupt"
                                                   and rec.get("state") != STATE_COMPLETE):
            entries[name] = _entry(name, ACTION_POST_INTERRUPT, "its interrupt is done", rec["version"],
                                   stages=["post-interrupt"], interrupt=rec.get("interrupt"),
                                   depends_on=rec.get("dependsOn"))
            entries[name]["post_interrupt"] = False
        else:
            entries[name] = _entry(name, ACTION_NONE, "no interrupt pending", rec["version"],
                                   depends_on=rec.get("dependsOn"))
    order = order_by_dependencies({n: rec.get("dependsOn") for n, rec in recorded.items()})
    return [entries[n] for n in order]


def plan(desired, recorded=None, prune=False, phase=PHASE_MAIN):
    """Plan one node. ``desired`` is a list of desired packages, ``recorded`` the
    node state (see ``normalize_state``). Returns a JSON-serialisable mapping:
    ``{phase, packages: [entry...] in execution order, interrupt, changed}``; each
    entry has name, action, version, from_version, stages, interrupt,
    post_interrupt, changed_keys, depends_on and a human reason."""
    if phase not in PHASES:
        raise ValidationError("unknown phase %r" % (phase,), field="phase", hint="one of %s" % ", ".join(PHASES))
    recorded = normalize_state(recorded)["packages"]
    desired = [normalize_desired(spec, n) for n, spec in enumerate(desired or [])]
    names = [d["name"] for d in desired]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        raise ValidationError("package %r is listed twice" % dup, field="packages",
                              hint="a node runs one version of a package")
    if phase == PHASE_POST_INTERRUPT:
        return _finish(phase, _plan_post_interrupt(recorded))
    _check_dependencies(desired)
    by_name = {d["name"]: d for d in desired}
    order = order_by_dependencies({d["name"]: d["dependsOn"] for d in desired if d["state"] == "present"})
    entries = {}
    for d in desired:
        entries[d["name"]] = plan_package(d, recorded.get(d["name"]))
    for name, rec in recorded.items():
        if name in by_name:
            continue
        if prune:
            entries[name] = _entry(name, ACTION_UNINSTALL, "not desired (prune)", from_version=rec["version"],
                                   stages=["uninstall"])
        else:
            entries[name] = _entry(name, ACTION_NONE, "on the node but not desired; kept (prune is off)",
                                   rec["version"])
    uninstalls = [n for n, e in entries.items() if e["action"] == ACTION_UNINSTALL]
    uninstall_order = list(reversed(order_by_dependencies(
        {n: (recorded.get(n) or {}).get("dependsOn") for n in uninstalls})))
    rest = [n for n in order if n not in uninstall_order]
    rest += sorted(n for n in entries if n not in uninstall_order and n not in rest)
    return _finish(phase, [entries[n] for n in uninstall_order + rest])


def _finish(phase, entries):
    # ``interrupt`` is what the node must undergo next; after the post-interrupt
    # phase that is nothing.
    return {
        "phase": phase,
        "packages": entries,
        "interrupt": merge_interrupts(e["interrupt"] for e in entries if e["post_interrupt"]),
        "changed": any(e["action"] in WORKING_ACTIONS for e in entries),
    }


def plan_summary(result):
    """One line per package for people: ``sysctl: upgrade 1.0.0 -> 1.1.0 (noop)``."""
    lines = []
    for e in result["packages"]:
        version = e["version"] or e["from_version"] or ""
        if e["from_version"] and e["version"] and e["from_version"] != e["version"]:
            version = "%s -> %s" % (e["from_version"], e["version"])
        lines.append("%s: %s %s (%s; interrupt %s)" % (e["name"], e["action"], version, e["reason"],
                                                      e["interrupt"]["type"]))
    return lines
