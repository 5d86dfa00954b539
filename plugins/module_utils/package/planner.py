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
config         same version, some config keys changed                     config (then post-interrupt
                                                                          when one is still owed)
resume         same version, the last run failed at a stage               that stage onwards (config
                                                                          too when keys changed)
rerun          a stage was asked to run again (``nodewright package       that stage onwards, finished
               rerun``), or the node rebooted since the package was       steps run again
               complete and it is to be applied again (reapplyOnReboot)
uninstall      ``state: absent``, or not desired and ``prune``            uninstall
interrupt      done, but the interrupt it asked for has not happened yet  (none)
exhausted      same version and config, erroring at a stage whose         (none: see retries.py)
               attempts used up the retry budget (stageRetries)
downgrade-     desired version is older and the package has               (none: uninstall it first)
refused        uninstall.enabled (refuseDowngrade)
post-interrupt the interrupt happened (phase ``post-interrupt``, or a     post-interrupt
               reboot seen in the main phase through a new boot id)
none           nothing to do
=============  =========================================================  ==========================

Each stage is followed by its ``-check`` stage (the runner does that). A config
change asks only for the interrupts whose ``configInterrupts`` globs match a
changed key; apply, upgrade and downgrade ask for the package's interrupt, and
so does an uninstall (its ``uninstall-interrupt``). The node's interrupt is the
merge of all (``interrupts.py``): reboot > restartAllServices > union of services
> noop. Packages are ordered by ``dependsOn`` (a cycle is an error; a dependency
is a minimum version); uninstalls run first, dependents before what they depend
on.

No config is lost: whatever the recorded stage and state, a plan for a package
whose config keys changed runs the ``config`` stage (and asks for the keys'
interrupts) before the package can be complete, and the runner records the
digests of a config only once its ``config`` stage and check passed. A reboot is
never asked for twice: with the node's current boot id, a pending reboot whose
recorded boot id differs has happened, and the main phase goes on with
post-interrupt.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import field_path
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    STATUS_COMPLETE,
    STATUS_ERRORING,
    STATUS_IN_PROGRESS,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.node.state import parse_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import (  # noqa: F401 - re-exported
    interrupts_for_keys,
    is_noop,
    merge_interrupts,
    parse_interrupt,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    NAME_RE,
    config_hashes,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.versions import Version, is_version
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries as _retries

PHASE_MAIN = "main"
PHASE_POST_INTERRUPT = "post-interrupt"
PHASES = (PHASE_MAIN, PHASE_POST_INTERRUPT)

ACTION_APPLY = "apply"
ACTION_UPGRADE = "upgrade"
ACTION_DOWNGRADE = "downgrade"
ACTION_REINSTALL = "reinstall"
ACTION_CONFIG = "config"
ACTION_RESUME = "resume"
ACTION_RERUN = "rerun"
ACTION_UNINSTALL = "uninstall"
ACTION_INTERRUPT = "interrupt"
ACTION_POST_INTERRUPT = "post-interrupt"
ACTION_NONE = "none"
# Nothing runs, and the node is left alone: the retry budget of the failed stage is spent,
# or the wanted version is a downgrade that needs an explicit uninstall first (retries.py).
ACTION_EXHAUSTED = "exhausted"
ACTION_DOWNGRADE_REFUSED = "downgrade-refused"
REFUSED_ACTIONS = (ACTION_EXHAUSTED, ACTION_DOWNGRADE_REFUSED)
# Actions that run steps on the node.
WORKING_ACTIONS = (ACTION_APPLY, ACTION_UPGRADE, ACTION_DOWNGRADE, ACTION_REINSTALL, ACTION_CONFIG,
                   ACTION_RESUME, ACTION_RERUN, ACTION_UNINSTALL, ACTION_POST_INTERRUPT)

# Package states (Skyhook's vocabulary) and the pseudo-stages of a pending interrupt:
# after a change, and after an uninstall (the package is gone once it happened).
STATE_COMPLETE = "complete"
STATE_IN_PROGRESS = "in_progress"
STATE_ERRORING = "erroring"
STAGE_INTERRUPT = "interrupt"
STAGE_UNINSTALL_INTERRUPT = "uninstall-interrupt"
PENDING_STAGES = (STAGE_INTERRUPT, STAGE_UNINSTALL_INTERRUPT)
# Stages ``nodewright package rerun`` can run again, and what runs then.
RERUN_STAGES = {"apply": ["apply", "config"], "config": ["config"], "upgrade": ["upgrade", "config"],
                "post-interrupt": ["post-interrupt"]}

NOOP = {"type": "noop", "services": []}


# --------------------------------------------------------------------------- interrupts

def normalize_interrupt(value, field="interrupt"):
    """``None`` -> noop; a mapping is checked and returned as ``{type, services}``
    (``interrupts.parse_interrupt``)."""
    if isinstance(value, str):
        value = {"type": value}
    return parse_interrupt(value, field, allow_empty=True)


def changed_keys(old_hashes, new_hashes):
    """Config keys added, removed or modified between two ``config_hashes`` results."""
    old_hashes, new_hashes = old_hashes or {}, new_hashes or {}
    return sorted(k for k in set(old_hashes) | set(new_hashes) if old_hashes.get(k) != new_hashes.get(k))


# --------------------------------------------------------------------------- state

def normalize_state(recorded, field="recorded_state"):
    """Accept the node state as the annotation's JSON text, the state mapping, or a
    mapping of package name to entry; return ``{"packages": {name: entry}}``. Text
    is read by ``node/state.py`` (the one reader): what it cannot parse is an error,
    never an empty state."""
    if recorded is None or recorded == "" or recorded == {}:
        return {"packages": {}}
    if isinstance(recorded, (str, bytes)):
        try:
            recorded = parse_state(recorded, "the recorded node state",
                                   hint="pass the value of the node annotation as it is, or {}")
        except ValidationError as exc:
            raise ValidationError(exc.reason, field=field, hint=exc.hint)
    if not isinstance(recorded, dict):
        raise ValidationError("the recorded node state must be a mapping", field=field)
    packages = recorded.get("packages") if "packages" in recorded else recorded
    if isinstance(packages, dict) and "name" in packages and "version" in packages \
            and not isinstance(packages.get("version"), dict):
        packages = {packages["name"]: packages}  # one package's entry
    if not isinstance(packages, dict):
        raise ValidationError("'packages' must map package names to their state", field=field)
    out = {}
    for name, entry in packages.items():
        where = field_path(field_path(field, "packages"), name)
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
                from_version=None, boot_id=None, updated=None, checks=None, rerun=None):
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
    if checks:
        entry["checks"] = dict(checks)
    if rerun:
        entry["rerun"] = rerun
    if updated:
        entry["updated"] = updated
    return entry


def node_status(state):
    """The node's status over its packages: erroring > in_progress > complete."""
    states = [p.get("state") for p in (state or {}).get("packages", {}).values()]
    if STATE_ERRORING in states:
        return STATUS_ERRORING
    if any(s != STATE_COMPLETE for s in states) or any(
            p.get("stage") in PENDING_STAGES for p in state.get("packages", {}).values()):
        return STATUS_IN_PROGRESS
    return STATUS_COMPLETE


def pending_interrupt(state):
    """The interrupt the node still owes its packages (those at stage interrupt or
    uninstall-interrupt)."""
    return merge_interrupts(p.get("interrupt") for p in (state or {}).get("packages", {}).values()
                            if p.get("stage") in PENDING_STAGES)


def finalize_state(state):
    """The state as it is written to the node: packages by name and a status."""
    packages = {name: state["packages"][name] for name in sorted(state.get("packages", {}))}
    out = {"packages": packages}
    out["status"] = node_status(out)
    return out


def mark_rerun(state, name, stage):
    """A copy of a node state in which package ``name`` is to run ``stage`` again (and
    what follows it), finished steps included: what ``nodewright package rerun`` writes.
    Raises ``ValidationError`` when the package is not recorded or the stage cannot be
    rerun."""
    if stage not in RERUN_STAGES:
        raise ValidationError("stage %r cannot be run again" % (stage,), field="stage",
                              hint="one of %s" % ", ".join(sorted(RERUN_STAGES)))
    new = normalize_state(state)
    entry = new["packages"].get(name)
    if entry is None:
        raise ValidationError("package %r is not recorded on the node" % name, field="package",
                              hint="recorded: %s" % (", ".join(sorted(new["packages"])) or "none"))
    if entry.get("stage") in PENDING_STAGES:
        raise ValidationError("package %r waits for its %s interrupt; a rerun would skip it" % (
            name, (entry.get("interrupt") or NOOP)["type"]), field="stage",
            hint="let the rollout perform the interrupt first")
    if stage == "upgrade" and not entry.get("fromVersion"):
        raise ValidationError("package %r has no unfinished upgrade to run again" % name, field="stage",
                              hint="rerun apply or config instead")
    entry = dict(entry, rerun=stage, state=STATE_IN_PROGRESS)
    new["packages"][name] = entry
    full = dict(state) if isinstance(state, dict) else {}
    full["packages"] = new["packages"]
    full["status"] = STATUS_IN_PROGRESS
    return full


def reboot_happened(recorded, boot_id):
    """Whether the reboot ``recorded`` (an entry at a pending stage) waits for has
    happened: the node's boot id differs from the one recorded when it was asked for."""
    interrupt = recorded.get("interrupt") or {}
    return bool(interrupt.get("type") == "reboot" and boot_id and recorded.get("bootId")
                and recorded["bootId"] != boot_id)


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

def _where(spec, index):
    return spec.get("where") or "packages[%d]" % index


def normalize_desired(spec, index=0):
    """Check one desired package and fill defaults; config values become hashes.
    ``where`` (optional) is the package's field path in the input, for errors."""
    if not isinstance(spec, dict):
        raise ValidationError("a desired package must be a mapping", field="packages[%d]" % index)
    where = _where(spec, index)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError("invalid package name %r" % (name,), field=field_path(where, "name"),
                              hint="names match %s" % NAME_RE.pattern)
    state = spec.get("state", "present")
    if state not in ("present", "absent"):
        raise ValidationError("state must be present or absent, got %r" % (state,), field=field_path(where, "state"))
    version = spec.get("version")
    if state == "present" and not is_version(version):
        raise ValidationError("version %r of package %r is not a semantic version" % (version, name),
                              field=field_path(where, "version"), hint="use MAJOR.MINOR.PATCH")
    hashes = spec.get("configHashes")
    if hashes is None:
        hashes = config_hashes(spec.get("config") or {})
    deps = spec.get("dependsOn") or {}
    for dep, dep_version in deps.items():
        if not is_version(dep_version):
            raise ValidationError("dependency %r version %r is not a semantic version" % (dep, dep_version),
                                  field=field_path(field_path(where, "dependsOn"), dep), hint="use MAJOR.MINOR.PATCH")
    config_interrupts = spec.get("configInterrupts") or {}
    return {
        "name": name, "version": version, "state": state, "configHashes": hashes, "where": where,
        "interrupt": normalize_interrupt(spec.get("interrupt"), field_path(where, "interrupt")),
        "configInterrupts": {k: normalize_interrupt(v, field_path(field_path(where, "configInterrupts"), k))
                             for k, v in config_interrupts.items()},
        "dependsOn": dict(deps), "reapplyOnReboot": bool(spec.get("reapplyOnReboot")),
        "stageRetries": spec.get("stageRetries"), "refuseDowngrade": bool(spec.get("refuseDowngrade")),
    }


PACKAGE_SPEC_KEYS = ("name", "src", "version", "config", "env", "interrupt", "config_interrupts", "depends_on",
                     "state", "stage_timeout", "reapply_on_reboot", "stage_retries", "retry_backoff",
                     "refuse_downgrade")
# Keys a NodeWright resource's specs carry besides the module's options: ``env_from``
# (Secret and ConfigMap references, read by nodewright.fleet.maintain when the package runs).
RESOURCE_SPEC_KEYS = ("env_from",)


def desired_from_spec(spec, package=None, index=0, where=None, config_field="config"):
    """A desired package from a package spec (the module's options: name, src,
    version, config, env, interrupt, config_interrupts, depends_on, state,
    stage_timeout) and the package loaded from its src (None when there is none).
    The spec's interrupt, config_interrupts and depends_on override the manifest's,
    as a NodeWright resource's fields do; config is merged over the manifest's
    defaultConfig. ``where`` and ``config_field`` name the package and its config in
    errors: ``packages[0]``/``config`` for the module, ``spec.packages.<name>``/
    ``configMap`` for a resource."""
    where = where or "packages[%d]" % index
    unknown = sorted(set(spec) - set(PACKAGE_SPEC_KEYS) - set(RESOURCE_SPEC_KEYS))
    if unknown:
        raise ValidationError("unknown key(s) %s" % ", ".join(unknown), field=where,
                              hint="allowed: %s" % ", ".join(PACKAGE_SPEC_KEYS))
    name, state = spec.get("name"), spec.get("state") or "present"
    version = spec.get("version")
    if version is not None and not is_version(version):
        raise ValidationError("version %r of package %r is not a semantic version"
                              % (version, name or (package.name if package else None)),
                              field=field_path(where, "version"), hint="use MAJOR.MINOR.PATCH or MAJOR.MINOR")
    if package is not None:
        # A package is its name; src is only where its steps come from. The name and the
        # version given win over the manifest's: one generic package (shellscript) serves
        # under any name and version, each name with its own node state, host copy and logs.
        name = name or package.name
        version = version or package.version
    elif state == "present":
        raise ValidationError("package %r has no source" % (name,), field=field_path(where, "src"),
                              hint="give src (a package directory) or the name of a shipped package")
    if not name:
        raise ValidationError("give name or src", field=where)
    config = spec.get("config") or {}
    if package is not None:
        config = package.validate_config(config, field=field_path(where, config_field))

    def pick(key, default):
        return spec[key] if spec.get(key) is not None else default

    return {
        "name": name, "state": state, "version": version,
        "config": config, "where": where, "reapplyOnReboot": bool(spec.get("reapply_on_reboot")),
        "stageRetries": spec.get("stage_retries"), "refuseDowngrade": bool(spec.get("refuse_downgrade")),
        "interrupt": pick("interrupt", package.interrupt.to_dict() if package else None),
        "configInterrupts": pick("config_interrupts", {k: v.to_dict() for k, v in package.config_interrupts.items()}
                                 if package else {}),
        "dependsOn": pick("depends_on", dict(package.depends_on) if package else {}),
    }


def _check_dependencies(desired):
    """``dependsOn`` names the lowest version of another desired package (the same
    rule as the CRD and the manifest): an unmet one fails before any node is touched."""
    present = {d["name"]: d for d in desired if d["state"] == "present"}
    absent = {d["name"] for d in desired if d["state"] == "absent"}
    for d in present.values():
        for dep, minimum in sorted(d["dependsOn"].items()):
            here = field_path(field_path(d["where"], "dependsOn"), dep)
            if dep not in present:
                why = "which is being uninstalled" if dep in absent else "which is not among the desired packages"
                raise ValidationError(
                    "package %r depends on %r %s or later, %s: the dependency cannot be met"
                    % (d["name"], dep, minimum, why), field=here,
                    hint="add %r (at least %s) to the packages, or drop the dependency" % (dep, minimum))
            if Version(present[dep]["version"]) < Version(minimum):
                raise ValidationError(
                    "package %r needs %r at least %s, but %s is desired: the dependency cannot be met"
                    % (d["name"], dep, minimum, present[dep]["version"]), field=here,
                    hint="raise %r to %s or later, or lower the dependsOn version" % (dep, minimum))


# --------------------------------------------------------------------------- planning

def _entry(name, action, reason, version=None, from_version=None, stages=(), interrupt=None,
           changed=(), depends_on=None, rerun=False):
    interrupt = merge_interrupts([interrupt]) if interrupt else dict(NOOP, services=[])
    entry = {"name": name, "action": action, "version": version, "from_version": from_version,
             "stages": list(stages), "interrupt": interrupt, "post_interrupt": not is_noop(interrupt),
             "changed_keys": list(changed), "depends_on": dict(depends_on or {}), "reason": reason}
    if rerun:
        entry["rerun"] = True  # the runner clears the stages' flags: finished steps run again
    return entry


def _owed_post_interrupt(recorded, boot_id):
    """Whether the package still owes its post-interrupt stage although the interrupt
    happened: a reboot seen through a new boot id, or a post-interrupt that failed."""
    stage, state = recorded.get("stage"), recorded.get("state")
    if stage == STAGE_INTERRUPT:
        return reboot_happened(recorded, boot_id)
    return stage == "post-interrupt" and state != STATE_COMPLETE


def plan_package(desired, recorded, boot_id=None):
    """The main-phase action for one desired package given its recorded entry and the
    node's current boot id (None when unknown)."""
    name, version = desired["name"], desired["version"]
    deps = desired["dependsOn"]
    if desired["state"] == "absent":
        return _plan_absent(desired, recorded, boot_id, "state is absent")
    if recorded is None:
        return _entry(name, ACTION_APPLY, "not on the node", version, stages=["apply", "config"],
                      interrupt=desired["interrupt"], depends_on=deps)
    have, stage, state = recorded["version"], recorded.get("stage"), recorded.get("state")
    owed = _owed_post_interrupt(recorded, boot_id)
    waiting = stage in PENDING_STAGES and not owed
    pending = recorded.get("interrupt") if waiting or (state != STATE_COMPLETE and not owed) else None
    keys = changed_keys(recorded.get("configHashes"), desired["configHashes"])
    key_interrupts = interrupts_for_keys(desired["configInterrupts"], keys)
    if stage == STAGE_UNINSTALL_INTERRUPT:
        # Uninstalled, its interrupt still to come, and wanted again: a fresh apply.
        return _entry(name, ACTION_APPLY, "uninstalled (its %s is pending) and wanted again"
                      % (recorded.get("interrupt") or NOOP)["type"], version, stages=["apply", "config"],
                      interrupt=merge_interrupts([desired["interrupt"], pending]), depends_on=deps)
    unfinished = state != STATE_COMPLETE and stage in ("apply", "uninstall")
    cmp = (Version(version) > Version(have)) - (Version(version) < Version(have))
    if cmp < 0 and desired.get("refuseDowngrade"):
        return _entry(name, ACTION_DOWNGRADE_REFUSED, _retries.downgrade_reason(name, have, version), version,
                      from_version=have, depends_on=deps)
    if cmp == 0 and _retries.exhausted(recorded, desired.get("stageRetries")) and not changed_keys(
            recorded.get("attemptedHashes", recorded.get("configHashes")), desired["configHashes"]):
        return _entry(name, ACTION_EXHAUSTED, _retries.exhausted_reason(recorded, desired.get("stageRetries")),
                      version, depends_on=deps)
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
    if desired.get("reapplyOnReboot") and state == STATE_COMPLETE and stage not in PENDING_STAGES \
            and boot_id and recorded.get("bootId") and recorded["bootId"] != boot_id:
        entry = _entry(name, ACTION_RERUN, "the node rebooted since %s completed (boot id %s -> %s): applying it "
                       "again (reapplyOnReboot)" % (version, recorded["bootId"], boot_id), version,
                       stages=["apply", "config"], interrupt=merge_interrupts([desired["interrupt"]] + key_interrupts),
                       changed=keys, depends_on=deps, rerun=True)
        entry["after_reboot"] = True
        return entry
    rerun = recorded.get("rerun")
    if rerun in RERUN_STAGES:
        stages = list(RERUN_STAGES[rerun])
        asked = [desired["interrupt"]] if rerun in ("apply", "upgrade") else []
        if keys and "config" not in stages:
            stages = ["config"] + stages
        return _entry(name, ACTION_RERUN, "stage %s asked to run again" % rerun, version,
                      from_version=recorded.get("fromVersion") if rerun == "upgrade" else None, stages=stages,
                      interrupt=merge_interrupts(asked + [pending] + key_interrupts), changed=keys, depends_on=deps,
                      rerun=True)
    if owed:
        why = ("the reboot it waited for happened (boot id %s -> %s)" % (recorded.get("bootId"), boot_id)
               if stage == STAGE_INTERRUPT else "its post-interrupt was %s" % state)
        if keys:
            # The new config first, with the interrupts its keys ask for; post-interrupt
            # follows now, or after that interrupt.
            asked = merge_interrupts(key_interrupts)
            stages = ["config"] + (["post-interrupt"] if is_noop(asked) else [])
            return _entry(name, ACTION_CONFIG, "config changed: %s; %s" % (", ".join(keys), why), version,
                          stages=stages, interrupt=asked, changed=keys, depends_on=deps)
        if stage == STAGE_INTERRUPT:
            return _entry(name, ACTION_POST_INTERRUPT, why, version, stages=["post-interrupt"], depends_on=deps)
        return _entry(name, ACTION_RESUME, "stage post-interrupt was %s: running it again" % state, version,
                      stages=["post-interrupt"], depends_on=deps)
    if waiting:
        if keys:
            return _entry(name, ACTION_CONFIG, "config changed: %s" % ", ".join(keys), version, stages=["config"],
                          interrupt=merge_interrupts([pending] + key_interrupts), changed=keys, depends_on=deps)
        return _entry(name, ACTION_INTERRUPT, "waiting for its %s interrupt" % (pending or NOOP)["type"], version,
                      interrupt=pending, depends_on=deps)
    if state != STATE_COMPLETE:
        if stage == "uninstall":
            return _entry(name, ACTION_APPLY, "its uninstall did not finish (%s); applying again" % state,
                          version, stages=["apply", "config"], interrupt=desired["interrupt"], depends_on=deps)
        resume = {"apply": (["apply", "config"], [desired["interrupt"], pending] + key_interrupts),
                  "upgrade": (["upgrade", "config"], [desired["interrupt"], pending] + key_interrupts),
                  "config": (["config"], [pending] + key_interrupts)}.get(stage)
        if resume is None:
            resume = (["apply", "config"], [desired["interrupt"], pending] + key_interrupts)
        return _entry(name, ACTION_RESUME, "stage %s was %s: running it again" % (stage, state), version,
                      from_version=recorded.get("fromVersion") if stage == "upgrade" else None,
                      stages=resume[0], interrupt=merge_interrupts(resume[1]), changed=keys, depends_on=deps)
    if keys:
        return _entry(name, ACTION_CONFIG, "config changed: %s" % ", ".join(keys), version, stages=["config"],
                      interrupt=merge_interrupts(key_interrupts), changed=keys, depends_on=deps)
    return _entry(name, ACTION_NONE, "%s is complete" % version, version, depends_on=deps)


def _plan_absent(desired, recorded, boot_id, why):
    """An uninstall, or the wait for the interrupt an uninstall asked for."""
    name = desired["name"] if desired else recorded["name"]
    if recorded is None:
        return _entry(name, ACTION_NONE, "absent and not on the node")
    if recorded.get("stage") == STAGE_UNINSTALL_INTERRUPT:
        if reboot_happened(recorded, boot_id):
            return _entry(name, ACTION_POST_INTERRUPT, "uninstalled; the reboot it asked for happened",
                          from_version=recorded["version"])
        return _entry(name, ACTION_INTERRUPT, "uninstalled, waiting for its %s interrupt"
                      % (recorded.get("interrupt") or NOOP)["type"], from_version=recorded["version"],
                      interrupt=recorded.get("interrupt"))
    interrupt = (desired or {}).get("interrupt") or None
    return _entry(name, ACTION_UNINSTALL, why, from_version=recorded["version"], stages=["uninstall"],
                  interrupt=interrupt)


def _plan_post_interrupt(recorded):
    entries = {}
    for name, rec in recorded.items():
        stage = rec.get("stage")
        if stage == STAGE_UNINSTALL_INTERRUPT:
            entries[name] = _entry(name, ACTION_POST_INTERRUPT, "its uninstall's interrupt is done",
                                   from_version=rec["version"], interrupt=rec.get("interrupt"))
            entries[name]["post_interrupt"] = False
        elif stage == STAGE_INTERRUPT or (stage == "post-interrupt" and rec.get("state") != STATE_COMPLETE):
            entries[name] = _entry(name, ACTION_POST_INTERRUPT, "its interrupt is done", rec["version"],
                                   stages=["post-interrupt"], interrupt=rec.get("interrupt"),
                                   depends_on=rec.get("dependsOn"))
            entries[name]["post_interrupt"] = False
        else:
            entries[name] = _entry(name, ACTION_NONE, "no interrupt pending", rec["version"],
                                   depends_on=rec.get("dependsOn"))
    order = order_by_dependencies({n: rec.get("dependsOn") for n, rec in recorded.items()})
    return [entries[n] for n in order]


def plan(desired, recorded=None, prune=False, phase=PHASE_MAIN, boot_id=None):
    """Plan one node. ``desired`` is a list of desired packages, ``recorded`` the
    node state (see ``normalize_state``), ``boot_id`` the node's current boot id
    (so a reboot that already happened is not asked for again). Returns a
    JSON-serialisable mapping: ``{phase, packages: [entry...] in execution order,
    interrupt, changed}``; each entry has name, action, version, from_version,
    stages, interrupt, post_interrupt, changed_keys, depends_on, a human reason,
    and ``rerun`` when finished steps are to run again."""
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
        entries[d["name"]] = plan_package(d, recorded.get(d["name"]), boot_id)
    for name, rec in recorded.items():
        if name in by_name:
            continue
        if prune or rec.get("stage") == STAGE_UNINSTALL_INTERRUPT:
            entries[name] = _plan_absent(None, rec, boot_id, "not desired (prune)")
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
