# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Run package stages on a host: the part of NodeWright that executes ON the node.

A ``PackageRunner`` works on a host root for one NodeWright resource: ``/`` runs
steps directly (SSH), any other path runs them in a chroot of that directory (the
k8s-native connection's ``/host`` mount, the simulator's per-node roots). It
carries out a plan (``planner.py``) package by package: copies and config and
files on the host (``store.py``), the steps of each stage and its check, flags,
logs, timeouts and the step supervisor (``steps.py``), and the node state it
returns and keeps in ``/var/lib/nodewright/state/<resource>.json``.

What it records is only what happened: the config digests of a package are those
of the config whose ``config`` stage and check passed, each check stage's outcome
(passed, failed with its exit code, skipped and why) is in the run report and the
node state, and a step that a crashed run left running is waited for, never
started twice.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import parse_duration
from ansible_collections.nodewright.fleet.plugins.module_utils.node.state import parse_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    CHECK_SUFFIX,
    config_hashes,
    load_package,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    ACTION_DOWNGRADE,
    ACTION_INTERRUPT,
    ACTION_NONE,
    ACTION_POST_INTERRUPT,
    ACTION_REINSTALL,
    ACTION_RESUME,
    REFUSED_ACTIONS,
    ACTION_UNINSTALL,
    STAGE_INTERRUPT,
    STAGE_UNINSTALL_INTERRUPT,
    STATE_COMPLETE,
    STATE_ERRORING,
    STATE_IN_PROGRESS,
    desired_from_spec,
    finalize_state,
    is_noop,
    merge_interrupts,
    normalize_state,
    pending_interrupt,
    plan,
    state_entry,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries as package_retries
from ansible_collections.nodewright.fleet.plugins.module_utils.package.steps import (  # noqa: F401 - re-exported
    CHECK_FAILED,
    CHECK_SKIPPED,
    KEEP_LOGS,
    LOCK_FILE,
    StepExecutor,
    StepFailed,
    check_summary,
    lock_holder_text,
    step_alive,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import (  # noqa: F401 - re-exported
    HostRoot,
    Layout,
    PackageStore,
    UnsafePath,
    iso,
    package_manifest,
    write_json,
)

CHECK_NOT_RUN = "not-run"
CHECK_NONE = "none"
# How long a run waits for the supervisor of a step recorded finished to exit and give
# the lock back, before it reports the lock held.
LOCK_HANDOVER_S = 10.0


class PackageRunner(PackageStore, StepExecutor):
    """Runs planned package actions on one host root for one NodeWright resource."""

    def __init__(self, host_root="/", resource="default", keep_logs=KEEP_LOGS):
        self.root = HostRoot(host_root)
        self.resource = resource
        self.layout = Layout(resource)
        self.keep_logs = max(1, int(keep_logs))
        self.lock_fd = None

    # ----------------------------------------------------------------- state
    def read_state(self):
        """The node state this host keeps for the resource (used when the caller
        has no recorded state from the node annotation). A file that cannot be
        parsed is an error, never an empty state."""
        path = self.root.outer(self.state_file())
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            return normalize_state(None)
        try:
            return normalize_state(parse_state(text, "the host's state file %s" % path,
                                               hint="fix or remove the file (give recorded_state from the node "
                                                    "annotation to go on from there)"))
        except ValidationError as exc:
            raise ValidationError(exc.reason, field="recorded_state", hint=exc.hint)

    def write_state(self, state):
        final = finalize_state(state)
        write_json(self.root.outer(self.state_file()), final)
        return final

    # ----------------------------------------------------------------- actions
    def execute(self, entry, package=None, config=None, env=None, state=None, stage_timeout=None, retries=None,
                retry_backoff=None):
        """Carry out one plan entry. ``package`` is the desired package (None for an
        uninstall or post-interrupt, which use the copy on the host); ``state`` is
        the node state, updated in place; ``stage_timeout`` (seconds, None or 0 for
        none) bounds each stage with its check; a failed stage runs again up to
        ``retries`` times (default none), ``retry_backoff`` seconds apart, doubling
        (``retries.py``). Returns the package's result; raises ``StepFailed`` (the
        state then says ``erroring`` at the stage that failed, with its attempts)."""
        state = state if state is not None else self.read_state()
        name, action = entry["name"], entry["action"]
        if action in REFUSED_ACTIONS:
            # Nothing is touched: the plan says why and what to do.
            raise StepFailed("package %s: %s" % (name, entry.get("reason") or action))
        result = {"name": name, "action": action, "version": entry.get("version"),
                  "from_version": entry.get("from_version"), "stages": [], "steps": [], "checks": {},
                  "interrupt": dict(entry.get("interrupt") or {"type": "noop", "services": []}),
                  "requested_interrupt": None, "changed": False}
        if action in (ACTION_NONE, ACTION_INTERRUPT):
            return result
        context = {"action": action, "env": env or {}, "changed_keys": entry.get("changed_keys") or [],
                   "results": result["steps"]}
        packages = state.setdefault("packages", {})
        previous = dict(packages.get(name) or {})
        current = {"stage": None, "version": entry.get("version") or entry.get("from_version"),
                   "hashes": previous.get("configHashes")}
        checks = dict(previous.get("checks") or {})
        # Attempts of each stage of this piece of work: a resumed stage (a run that stopped
        # mid-way) goes on counting; anything new asked of the package starts afresh.
        attempts = dict(previous.get("attempts") or {}) if action == ACTION_RESUME and \
            not entry.get("changed_keys") else {}
        carried = bool(attempts)
        total = package_retries.budget(retries)
        backoff = package_retries.DEFAULT_RETRY_BACKOFF if retry_backoff is None else float(retry_backoff)
        result["retries"] = []
        result["changed"] = True

        def mark(stage, status, version=None, **extra):
            current["stage"] = stage
            current["version"] = version or current["version"]
            fields = {"config_hashes": current["hashes"], "depends_on": entry.get("depends_on"),
                      "interrupt": entry.get("interrupt"), "from_version": entry.get("from_version"),
                      "boot_id": previous.get("bootId"), "checks": checks}
            fields.update(extra)
            packages[name] = state_entry(name, current["version"], stage, status, updated=iso(), **fields)
            # Recorded once a stage failed (or a resumed count goes on): the budget at work.
            if attempts and (status == STATE_ERRORING or result["retries"] or carried):
                packages[name]["attempts"] = dict(attempts)
                if config is not None:
                    # The config those attempts had: another one is something new to try.
                    packages[name]["attemptedHashes"] = config_hashes(config)

        def record_check(stage, ran, failed_stage=None):
            summary = check_summary(ran, stage)
            if failed_stage == stage:
                summary = {"result": CHECK_NOT_RUN, "exitCode": None, "reason": "stage %s failed before it" % stage}
            elif summary is None:
                summary = {"result": CHECK_NONE, "exitCode": None,
                           "reason": "the package has no %s%s steps" % (stage, CHECK_SUFFIX)}
            summary["at"] = iso()
            checks[stage + CHECK_SUFFIX] = summary
            result["checks"][stage + CHECK_SUFFIX] = summary

        def run(pkg, stage, before_check=None, **ctx):
            while True:
                attempts[stage] = attempts.get(stage, 0) + 1
                try:
                    return run_once(pkg, stage, before_check, **ctx)
                except StepFailed as exc:
                    done = attempts[stage]
                    if done >= total:
                        exc.message = "%s\n%s" % (exc.message, (
                            "stage %s failed %d time(s): its retry budget is spent (stageRetries %d)"
                            % (stage, done, total - 1)) if total > 1 else "stage %s is not retried (stageRetries 0)"
                            % stage)
                        raise
                    delay = package_retries.backoff_delay(done, backoff)
                    result["retries"].append({"stage": stage, "attempt": done, "error": exc.message.splitlines()[0],
                                              "log": exc.log, "retry_in_s": delay})
                    mark(stage, STATE_IN_PROGRESS, version=pkg.version)
                    self.write_state(state)  # a run that stops during the pause goes on counting
                    time.sleep(delay)

        def run_once(pkg, stage, before_check=None, **ctx):
            mark(stage, STATE_IN_PROGRESS, version=pkg.version)
            self.prepare_dirs(pkg)
            run_ctx = dict(context, stage=stage, **ctx)
            if stage_timeout:
                run_ctx.update(deadline=time.monotonic() + stage_timeout, stage_timeout=stage_timeout)
            ran = []
            try:
                ran.extend(self.run_stage(pkg, stage, run_ctx))
            except StepFailed as exc:
                record_check(stage, [], failed_stage=stage)
                result["steps"].extend(exc.results[len(result["steps"]):])
                exc.results = list(result["steps"])
                raise
            result["steps"].extend(ran)
            if before_check:
                before_check()
            try:
                checked = self.run_stage(pkg, stage + CHECK_SUFFIX, run_ctx)
            except StepFailed as exc:
                record_check(stage, exc.results[len(result["steps"]):])
                result["steps"].extend(exc.results[len(result["steps"]):])
                exc.results = list(result["steps"])
                raise
            result["steps"].extend(checked)
            record_check(stage, checked)
            result["stages"].append(stage)
            requested = self.take_interrupt_request(pkg.name)
            if requested:
                result["requested_interrupt"] = merge_interrupts([result["requested_interrupt"], requested])

        if action == ACTION_POST_INTERRUPT:
            # Not a failure of the package: the state stays "interrupt" until it happened.
            self._check_interrupt_happened(entry, packages.get(name) or {})
        try:
            if action == ACTION_UNINSTALL:
                self._uninstall(entry["from_version"], name, package, config, mark, context, run=run)
                if is_noop(entry.get("interrupt")):
                    packages.pop(name, None)
                else:
                    # The package is gone; the node still owes the interrupt its removal asks
                    # for (uninstall-interrupt), then the entry goes too.
                    mark(STAGE_UNINSTALL_INTERRUPT, STATE_IN_PROGRESS, version=entry["from_version"],
                         interrupt=entry["interrupt"], boot_id=self.root.boot_id(), config_hashes=None)
                self.record_history(name, None, {"action": action, "version": entry["from_version"],
                                                 "result": "ok"})
                return result
            if action == ACTION_POST_INTERRUPT:
                return self._post_interrupt(entry, run, mark, result, packages)
            if action in (ACTION_DOWNGRADE, ACTION_REINSTALL):
                self._uninstall(entry["from_version"], name, None, None, mark, context,
                                required=action == ACTION_DOWNGRADE, run=run)
            if package is None:
                raise StepFailed("package %s %s: no package source was given for %s" % (name, entry["version"],
                                                                                        action))
            installed = self.install(package, config)
            stages = [s for s in entry["stages"] if s != "uninstall"]  # done above
            if entry.get("rerun"):
                self.clear_flags(name, installed.version, stages)
            if "apply" in stages or "upgrade" in stages:
                result["files"] = self.lay_files(installed)
            for stage in stages:
                if stage == "config":
                    run(installed, stage)
                    # Only now is this config applied: its digests are what the node records.
                    current["hashes"] = config_hashes(self.stored_config(installed))
                    mark("config", STATE_IN_PROGRESS)
                elif stage == "upgrade":
                    run(installed, stage, from_version=entry.get("from_version"))
                else:
                    run(installed, stage)
            if entry.get("from_version") and entry["from_version"] != installed.version:
                self.remove_stored(name, keep=installed.version)
            self._finish(entry, installed, result, mark)
            self.record_history(name, installed.version, {
                "action": action, "version": installed.version, "fromVersion": entry.get("from_version"),
                "stages": result["stages"], "result": "ok", "interrupt": result["interrupt"]["type"]})
            return result
        except (OSError, StepFailed, UnsafePath) as exc:
            if isinstance(exc, StepFailed):
                failure = exc
            elif isinstance(exc, UnsafePath):
                failure = StepFailed(exc.message, hint=exc.hint)
            else:
                failure = StepFailed("package %s: %s failed on host root %s: %s" % (name, action, self.root.path, exc),
                                     hint="fix the host (space, permissions), then run again")
            mark(current["stage"] or action, STATE_ERRORING)
            self.record_history(name, current["version"], {
                "action": action, "version": current["version"], "stage": current["stage"], "result": "failed",
                "error": failure.message.splitlines()[0], "log": failure.log})
            failure.results = failure.results or list(result["steps"])
            raise failure

    def _uninstall(self, version, name, package, config, mark, context, required=True, run=None):
        stored = self.stored_package(name, version)
        if stored is None and package is not None and package.version == version:
            stored = self.install(package, config)
        if stored is None:
            if not required:
                return False
            raise StepFailed("package %s %s: its copy is not on the host (%s), so its uninstall cannot run"
                             % (name, version, self.root.outer(self.package_dir(name, version))),
                             hint="give the package's source (src) for version %s, or remove the package's "
                                  "entry from the node state if it is really gone" % version)
        mark("uninstall", STATE_IN_PROGRESS, version=version, from_version=None)
        # The uninstall runs with the config the package was installed with; its files
        # are removed between the uninstall steps and their check.
        run(stored, "uninstall", changed_keys=[], before_check=lambda: self.remove_files(name))
        self.remove_stored(name)
        shutil.rmtree(self.root.outer(self.flag_dir(name)), ignore_errors=True)
        shutil.rmtree(self.root.outer(self.data_dir(name)), ignore_errors=True)
        mark("uninstall", STATE_COMPLETE, version=version, from_version=None, config_hashes=None, boot_id=None)
        return True

    def _check_interrupt_happened(self, entry, recorded):
        interrupt = recorded.get("interrupt") or entry.get("interrupt") or {}
        if interrupt.get("type") == "reboot" and recorded.get("bootId") and \
                recorded["bootId"] == self.root.boot_id():
            version = entry.get("version") or entry.get("from_version")
            raise StepFailed("package %s %s: a reboot was asked for, but the node has not rebooted since "
                             "(boot id %s)" % (entry["name"], version, recorded["bootId"]),
                             hint="reboot the node (the safe sequence does), then run the post-interrupt phase")

    def _post_interrupt(self, entry, run, mark, result, packages):
        name, version = entry["name"], entry["version"]
        recorded = packages.get(name) or {}
        if recorded.get("stage") == STAGE_UNINSTALL_INTERRUPT:
            packages.pop(name, None)
            result["interrupt"] = {"type": "noop", "services": []}
            self.record_history(name, None, {"action": entry["action"], "version": entry.get("from_version"),
                                             "stages": [], "result": "ok", "after": "uninstall-interrupt"})
            return result
        stored = self.stored_package(name, version)
        if stored is None:
            raise StepFailed("package %s %s: its copy is not on the host, so post-interrupt cannot run"
                             % (name, version), hint="apply the package again")
        run(stored, "post-interrupt")
        mark("post-interrupt", STATE_COMPLETE, interrupt=None, boot_id=self.root.boot_id(), from_version=None,
             version=version)
        result["interrupt"] = {"type": "noop", "services": []}
        self.record_history(name, version, {"action": entry["action"], "version": version,
                                            "stages": result["stages"], "result": "ok"})
        return result

    def _finish(self, entry, installed, result, mark):
        interrupt = merge_interrupts([entry.get("interrupt"), result["requested_interrupt"]])
        result["interrupt"] = interrupt
        last = result["stages"][-1] if result["stages"] else entry["action"]
        if is_noop(interrupt) or last == "post-interrupt":
            mark(last, STATE_COMPLETE, interrupt=None, from_version=None, boot_id=self.root.boot_id(),
                 version=installed.version)
            return
        # The interrupt is the safe sequence's to perform; post-interrupt runs after it.
        shutil.rmtree(self.root.outer(self.flag_dir(installed.name, installed.version, "post-interrupt")),
                      ignore_errors=True)
        mark(STAGE_INTERRUPT, STATE_IN_PROGRESS, interrupt=interrupt, boot_id=self.root.boot_id(),
             from_version=None, version=installed.version)

    def run_plan(self, plan, sources=None, state=None):
        """Carry out a whole plan in its order, stopping at the first failure.

        ``sources`` maps package name to ``(Package, config, env[, stage_timeout[, retries[,
        retry_backoff]]])``.
        Returns ``(results, state)``; on failure raises ``StepFailed`` with
        ``results`` (of all packages so far) and ``state`` attributes. The node
        state is written to the host after each package."""
        sources = sources or {}
        state = normalize_state(state) if state is not None else self.read_state()
        with self.locked():
            self.migrate_legacy(state)
            return self._run_plan(plan, sources, state)

    @contextlib.contextmanager
    def locked(self):
        """One package run at a time per host: two resources' runs would otherwise
        interleave their steps. The lock is held by the run and by the supervisor of
        the step running now, so a step outlives neither unseen: a run that finds it
        held says which step holds it."""
        path = self.root.outer(LOCK_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        handover = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                pass
            record = self.running_step()
            # A step recorded finished: its supervisor (which outlived the run that started it)
            # gives the lock back as it exits. Wait for that, briefly, rather than fail.
            if (record or {}).get("status") == "finished":
                if handover is None:
                    handover = time.monotonic() + LOCK_HANDOVER_S
                if time.monotonic() < handover:
                    time.sleep(0.05)
                    continue
            os.close(fd)
            holder = lock_holder_text(record)
            raise StepFailed("another NodeWright package run holds %s on host root %s%s"
                             % (path, self.root.path, (": " + holder) if holder else ""),
                             hint="wait for it to finish, then run again; a step is never started twice")
        record = self.running_step()
        if step_alive(record) and record.get("bootId") == self.root.boot_id():
            os.close(fd)
            raise StepFailed("on host root %s %s, left by a run whose supervisor was killed"
                             % (self.root.path, lock_holder_text(record)),
                             hint="wait for process %s to end (or end it), then run again; its step is not "
                                  "started a second time meanwhile" % record.get("pid"))
        self.lock_fd = fd
        try:
            yield
        finally:
            # Closing, not unlocking: a supervisor that outlives this run keeps the lock.
            self.lock_fd = None
            os.close(fd)

    def _run_plan(self, plan, sources, state):
        results = []
        for entry in plan["packages"]:
            source = tuple(sources.get(entry["name"], ())) + (None,) * 6
            package, config, env, stage_timeout, retries, retry_backoff = source[:6]
            try:
                results.append(self.execute(entry, package, config, env, state, stage_timeout=stage_timeout,
                                            retries=retries, retry_backoff=retry_backoff))
            except StepFailed as exc:
                results.append({"name": entry["name"], "action": entry["action"], "version": entry.get("version"),
                                "from_version": entry.get("from_version"), "steps": exc.results,
                                "checks": dict(((state.get("packages") or {}).get(entry["name"]) or {})
                                               .get("checks") or {}),
                                "failed": True, "changed": True})
                exc.package_results = results
                exc.state = self.write_state(state)
                raise
            if results[-1]["changed"]:
                self.write_state(state)
        return results, finalize_state(state)


# Drift checks: the check stages that say whether an installed package still holds,
# and the stage whose rerun repairs what each of them found.
DRIFT_CHECK_STAGES = ("apply-check", "config-check", "post-interrupt-check")
DRIFT_REPAIR_STAGE = {"apply-check": "apply", "config-check": "config", "post-interrupt-check": "config"}


def mark_for_reapply(state, drifted):
    """A copy of a node state in which each drifted package is in progress at the stage
    whose rerun repairs it, so that the next main phase resumes it there (finished
    steps that are not idempotent stay finished: their flags decide). Returns
    ``(state, names marked)``."""
    new = json.loads(json.dumps(state or {}))
    packages = new.get("packages") if isinstance(new.get("packages"), dict) else {}
    marked = []
    for item in drifted or ():
        entry = packages.get(item.get("name"))
        if not isinstance(entry, dict):
            continue
        entry["state"] = STATE_IN_PROGRESS
        entry["stage"] = DRIFT_REPAIR_STAGE.get(item.get("stage"), "apply")
        marked.append(item["name"])
    return new, sorted(marked)


def check_packages(host_root="/", resource="default", recorded_state=None, keep_logs=KEEP_LOGS, reapply=False):
    """Drift check: run again the check stages of every package the node state records
    as complete, from the copy kept on the host, with the config it was installed with.

    Nothing is installed and no flag is written; only the checks' step logs - and, with
    ``reapply``, the host's state, where drifted packages are marked for the next run
    (``mark_for_reapply``). Returns ``{checked: [names], drifted: [{name, version,
    stage, message, log}], skipped: [{name, reason}], reapply: [names], state}``; a
    package with no check stages counts as checked. Raises ``StepFailed`` when
    another package run holds the host's lock."""
    runner = PackageRunner(host_root, resource=resource, keep_logs=keep_logs)
    state = normalize_state(recorded_state if recorded_state is not None else runner.read_state())
    checked, drifted, skipped = [], [], []
    with runner.locked():
        runner.migrate_legacy(state)
        for name in sorted(state["packages"]):
            entry = state["packages"][name]
            if entry.get("state") != STATE_COMPLETE or entry.get("stage") in (STAGE_INTERRUPT, "uninstall"):
                skipped.append({"name": name, "reason": "not complete (%s %s)" % (entry.get("stage"),
                                                                                  entry.get("state"))})
                continue
            stored = runner.stored_package(name, entry["version"])
            if stored is None and entry.get("adoptedFrom"):
                # Taken over from upstream NodeWright, which ran it from its image: no copy here to
                # check with until NodeWright applies a version of it itself.
                skipped.append({"name": name, "reason": "adopted from upstream NodeWright (%s): its checks are not "
                                                        "on the host" % entry["adoptedFrom"]})
                continue
            if stored is None:
                drifted.append({"name": name, "version": entry["version"], "stage": None, "log": None,
                                "message": "the package copy is missing from %s"
                                           % runner.root.outer(runner.package_dir(name, entry["version"]))})
                continue
            runner.prepare_dirs(stored)
            for stage in DRIFT_CHECK_STAGES:
                try:
                    runner.run_stage(stored, stage, {"action": "check"})
                except StepFailed as exc:
                    drifted.append({"name": name, "version": entry["version"], "stage": stage, "log": exc.log,
                                    "message": exc.message})
                    break
            else:
                checked.append(name)
        marked = []
        if reapply and drifted:
            state, marked = mark_for_reapply(state, drifted)
            state = runner.write_state(state)
    return {"checked": checked, "drifted": drifted, "skipped": skipped, "reapply": marked,
            "state": finalize_state(state)}


def run_packages(specs, host_root="/", resource="default", recorded_state=None, prune=False, phase="main",
                 check_mode=False, keep_logs=KEEP_LOGS, stage_timeout=None, adopted=None):
    """Load, plan and run packages on a host root: the whole job of the
    ``nodewright.fleet.package`` module, usable without Ansible.

    ``specs`` are package specs (name, src directory, version, config, env,
    interrupt, config_interrupts, depends_on, state, stage_timeout).
    ``recorded_state`` None means the state the host keeps. ``stage_timeout``
    (seconds) is the default of the specs' own. ``adopted`` (name -> entry) are the
    packages ``nodewright adopt`` recorded complete from upstream NodeWright's state:
    each one the host's state does not record is taken as recorded, so that it is
    not applied again. Returns ``{changed, plan,
    results, state, interrupt}``; in check mode nothing runs and ``state`` is the
    recorded one. Raises ``ValidationError`` before anything runs, or
    ``StepFailed`` (with ``plan``, ``state`` and ``package_results``)."""
    runner = PackageRunner(host_root, resource=resource, keep_logs=keep_logs)
    desired, sources = [], {}
    default_timeout = parse_stage_timeout(stage_timeout, "stage_timeout")
    for n, spec in enumerate(specs or []):
        package = load_package(spec["src"]) if spec.get("src") else None
        item = desired_from_spec(spec, package, n)
        if package is not None:
            # The package runs as the name and version it has in the resource, whatever its
            # manifest says: its host copy, flags, logs, history and node state are theirs.
            package.name, package.version = item["name"], item["version"]
            runner.check_source(package)
        desired.append(item)
        timeout = parse_stage_timeout(spec.get("stage_timeout"), "packages[%d].stage_timeout" % n)
        sources[item["name"]] = (package, item["config"], spec.get("env") or {},
                                 timeout if timeout is not None else default_timeout,
                                 _retries_option(spec.get("stage_retries"), "packages[%d].stage_retries" % n),
                                 parse_duration(spec.get("retry_backoff"), "packages[%d].retry_backoff" % n,
                                                what="retry backoff"))
    recorded = normalize_state(recorded_state if recorded_state is not None else runner.read_state())
    for name, entry in sorted(normalize_state(adopted or {})["packages"].items()):
        recorded["packages"].setdefault(name, entry)
    decided = plan(desired, recorded, prune=prune, phase=phase, boot_id=runner.root.boot_id())
    if check_mode:
        return {"changed": decided["changed"], "plan": decided, "results": [], "state": finalize_state(recorded),
                "interrupt": decided["interrupt"]}
    try:
        results, state = runner.run_plan(decided, sources, recorded)
    except StepFailed as exc:
        exc.plan = decided
        raise
    return {"changed": any(r["changed"] for r in results), "plan": decided, "results": results, "state": state,
            "interrupt": pending_interrupt(state)}


def _retries_option(value, field):
    """A stage's retries: None (the default) or a whole number from 0 to 10."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= package_retries.MAX_RETRIES:
        raise ValidationError("stage retries must be a whole number from 0 to %d, got %r"
                              % (package_retries.MAX_RETRIES, value), field=field)
    return value


def parse_stage_timeout(value, field):
    """Seconds from a stage timeout (a whole number of seconds, or a duration such as
    ``30m``); 0 or None mean no bound. A negative one is refused."""
    seconds = parse_duration(value, field, what="stage timeout")
    return seconds or None


__all__ = ["PackageRunner", "StepFailed", "NodeWrightError", "run_packages", "check_packages", "mark_for_reapply",
           "package_manifest", "CHECK_SKIPPED", "CHECK_FAILED"]
