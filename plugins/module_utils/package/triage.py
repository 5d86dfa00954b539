# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Triage on the host: a package's step logs (also while a step runs), marking a
stage to run again, and recovery - a package's stage and state set by hand, or the
package forgotten - what ``nodewright package logs``, ``nodewright package rerun``,
``nodewright node update-state`` and ``nodewright reset NODE --package`` do through
the ``nodewright.fleet.package`` module, over whatever connection reaches the node
(local host root, SSH, the k8s node pod).

Stdlib only: this runs on the node.
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import ALL_STAGES, NAME_RE, STAGES
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    STATE_COMPLETE,
    STATE_ERRORING,
    STATE_IN_PROGRESS,
    finalize_state,
    mark_rerun,
    normalize_state,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import PackageRunner
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import LOG_ROOT

MAX_LOG_BYTES = 256 * 1024


def _version_dirs(runner, name):
    base = runner.root.outer("%s/%s/%s" % (LOG_ROOT, runner.resource, name))
    return base, sorted(os.listdir(base)) if os.path.isdir(base) else []


def read_logs(host_root, resource, name, stage=None, offsets=None, every=False, version=None):
    """The step logs of package ``name`` of ``resource`` on a host root.

    Returns ``{package, resource, version, logs: [{path, stage, step, started,
    size, text, offset, live}], running}``: the latest log of each step (``every``:
    all kept ones), of ``stage`` only when given, oldest first; ``text`` starts at
    ``offsets[path]`` (bytes already shown, for following). A step running now has
    ``live`` true and its output so far. ``running`` is the step record when one of
    this package's steps runs. ``version`` defaults to the one the node records."""
    if stage is not None and stage not in ALL_STAGES:
        raise ValidationError("unknown stage %r" % (stage,), field="stage", hint="one of %s" % ", ".join(ALL_STAGES))
    runner = PackageRunner(host_root, resource=resource)
    offsets = offsets or {}
    state = runner.read_state()
    entry = state["packages"].get(name) or {}
    version = version or entry.get("version")
    base, versions = _version_dirs(runner, name)
    if version is None and versions:
        version = versions[-1]
    out = {"package": name, "resource": resource, "version": version, "logs": [], "running": None,
           "recorded": {k: entry.get(k) for k in ("stage", "state", "checks") if k in entry}}
    record = runner.running_step()
    if record and record.get("resource") == resource and record.get("package") == name \
            and record.get("status") in ("starting", "running"):
        out["running"] = record
    log_dir = os.path.join(base, version) if version else None
    if not log_dir or not os.path.isdir(log_dir):
        return out
    runs = {}
    for fname in sorted(os.listdir(log_dir)):
        if not fname.endswith((".log", ".log.stdout")):
            continue
        live = fname.endswith(".stdout")
        core = fname[:-len(".stdout")] if live else fname
        parts = core[:-len(".log")].split(".")
        if len(parts) < 4:
            continue
        run_stage, started = parts[0], ".".join(parts[-2:])
        step = ".".join(parts[1:-2])
        if stage is not None and run_stage != stage:
            continue
        if live and os.path.exists(os.path.join(log_dir, core)):
            continue
        runs.setdefault((run_stage, step), []).append((started, fname, live))
    chosen = []
    for (run_stage, step), items in runs.items():
        for started, fname, live in (items if every else items[-1:]):
            chosen.append((started, run_stage, step, fname, live))
    for started, run_stage, step, fname, live in sorted(chosen):
        path = os.path.join(log_dir, fname)
        inner = "/" + os.path.relpath(path, runner.root.path) if runner.root.chrooted else path
        size = os.path.getsize(path)
        offset = min(int(offsets.get(inner, 0) or 0), size)
        if size - offset > MAX_LOG_BYTES:
            offset = size - MAX_LOG_BYTES
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
        if live:
            err = path[:-len(".stdout")] + ".stderr"
            if os.path.exists(err):
                with open(err, "rb") as fh:
                    tail = fh.read().decode("utf-8", "replace")
                if tail and offset == 0:
                    text += "--- stderr so far ---\n" + tail
        out["logs"].append({"path": inner, "stage": run_stage, "step": step, "started": started, "size": size,
                            "offset": offset, "text": text, "live": live})
    return out


def mark_rerun_on_host(host_root, resource, name, stage):
    """Mark package ``name`` to run ``stage`` again (finished steps included) in the
    state the host keeps for ``resource``; the next rollout runs it through the safe
    sequence. Returns the new state (for the node annotation too)."""
    runner = PackageRunner(host_root, resource=resource)
    with runner.locked():
        state = runner.read_state()
        return runner.write_state(mark_rerun(state, name, stage))


# States ``nodewright node update-state`` may set, and the stages it may set them at.
SETTABLE_STATES = (STATE_COMPLETE, STATE_IN_PROGRESS, STATE_ERRORING)
SETTABLE_STAGES = STAGES


def _recorded_entry(state, name, version=None):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError("%r is not a package name" % (name,), field="package")
    entry = state["packages"].get(name)
    if entry is None:
        raise ValidationError("package %r is not recorded on the node" % name, field="package",
                              hint="recorded: %s" % (", ".join(sorted(state["packages"])) or "none"))
    if version is not None and entry.get("version") != version:
        raise ValidationError("package %r is recorded at version %s on the node, not %s"
                              % (name, entry.get("version"), version), field="version")
    return entry


def set_package_state(state, name, stage=None, new_state=None, version=None):
    """A copy of a node state in which package ``name`` is at ``stage`` (default: the
    one recorded) with ``new_state``: what ``nodewright node update-state`` writes. A
    rerun asked before is dropped. Raises ``ValidationError`` for a package not
    recorded (at ``version``, when given), or a stage or state that cannot be set."""
    new = normalize_state(state)
    entry = _recorded_entry(new, name, version)
    stage = stage or entry.get("stage")
    if stage not in SETTABLE_STAGES:
        raise ValidationError("package %r is at stage %r, which cannot be set by hand" % (name, stage), field="stage",
                              hint="give the stage: one of %s" % ", ".join(SETTABLE_STAGES))
    if new_state not in SETTABLE_STATES:
        raise ValidationError("state %r cannot be set" % (new_state,), field="package_state",
                              hint="one of %s" % ", ".join(SETTABLE_STATES))
    if stage == "upgrade" and not entry.get("fromVersion"):
        raise ValidationError("package %r has no unfinished upgrade, so it cannot be at stage upgrade" % name,
                              field="stage", hint="give apply, config or post-interrupt")
    entry = {k: v for k, v in entry.items() if k != "rerun"}
    entry.update(stage=stage, state=new_state)
    new["packages"][name] = entry
    return finalize_state(new)


def forget_package(state, name, version=None):
    """A copy of a node state without package ``name``: the next rollout applies it
    from the start (``nodewright reset NODE --package``)."""
    new = normalize_state(state)
    _recorded_entry(new, name, version)
    del new["packages"][name]
    return finalize_state(new)


def update_state_on_host(host_root, resource, name, stage, new_state, version=None):
    """``set_package_state`` on the state the host keeps for ``resource``, under the
    host's run lock (refused while a package run or its step holds it). Returns
    ``(state before, state after)``."""
    runner = PackageRunner(host_root, resource=resource)
    with runner.locked():
        before = finalize_state(runner.read_state())
        return before, runner.write_state(set_package_state(before, name, stage, new_state, version))


def reset_on_host(host_root, resource, name, version=None):
    """Forget package ``name`` in the state the host keeps for ``resource`` and its
    finished steps' flags, under the host's run lock: the next rollout applies it from
    the start, every step included. Returns ``(state before, state after)``."""
    runner = PackageRunner(host_root, resource=resource)
    with runner.locked():
        before = finalize_state(runner.read_state())
        after = forget_package(before, name, version)
        shutil.rmtree(runner.root.outer(runner.flag_dir(name)), ignore_errors=True)
        return before, runner.write_state(after)


def recorded(host_root, resource):
    """The state the host keeps for ``resource``."""
    return finalize_state(PackageRunner(host_root, resource=resource).read_state())
