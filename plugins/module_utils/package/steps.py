# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Running the steps of a stage on a host: environment, flags, checks, timeouts,
logs, and the supervisor that binds a step's life to the host's package lock.

A step never runs unseen and never twice at once. Each step is started by a small
supervisor process (the Python that runs the runner, outside any chroot) that
holds the host's package lock (``/var/lib/nodewright/lock``, inherited from the
run), starts the step in its own process group, enforces its timeout, writes its
log and its outcome to ``/var/lib/nodewright/step.json``, and only then exits. If
the run that started it dies (a killed module, a lost connection), the supervisor
lives on with the step and keeps the lock, so a new run refuses to start while the
step runs (``another NodeWright run holds ...: step X is still running``), and when
it has ended the new run adopts its outcome: a step that finished well gets its
flag and is not repeated.

Stdlib only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import from_words
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import CHECK_SUFFIX
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import (
    CONFIG_DIRNAME,
    STORE,
    iso,
    now,
    read_json,
    write_json,
)

KEEP_LOGS = 5
TAIL_LINES = 20
TAIL_CHARS = 4000
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Stages whose finished non-idempotent steps leave a flag. Config always reruns:
# it is what a config change asks for.
FLAGGED_STAGES = ("apply", "upgrade", "uninstall", "post-interrupt")
STEP_RECORD = "%s/step.json" % STORE
LOCK_FILE = "%s/lock" % STORE

# Check results recorded per check stage in the node state.
CHECK_PASSED = "passed"
CHECK_FAILED = "failed"
CHECK_SKIPPED = "skipped"

# The supervisor: runs one step, enforces its timeout, writes its log and outcome.
# A self-contained script (it runs as ``python -c``, also where the module's own
# files are packed in a zip): the spec arrives as JSON on stdin.
SUPERVISOR = r'''
import json, os, signal, subprocess, sys, time
spec = json.loads(sys.stdin.read())

def enter():
    if spec["chroot"]:
        os.chroot(spec["chroot"])
    os.chdir(spec["cwd"])

def write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)

record = spec["record"]
outcome = {"exit_code": None, "reason": ""}
started = time.time()
clock = time.monotonic()
with open(spec["out"], "wb") as out, open(spec["err"], "wb") as err:
    proc = None
    for attempt in (spec["argv"], ["/bin/sh"] + spec["argv"]):
        try:
            proc = subprocess.Popen(attempt, env=spec["env"], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    preexec_fn=enter, start_new_session=True, close_fds=True)
            break
        except OSError as exc:
            if exc.errno == 8 and attempt is spec["argv"]:
                continue  # ENOEXEC: a script without a '#!' line runs with sh, as a shell would
            outcome["reason"] = "could not start %s: %s" % (spec["argv"][0], exc.strerror or exc)
            break
    if proc is not None:
        write(spec["record_path"], dict(record, status="running", pid=proc.pid, supervisor=os.getpid()))
        try:
            outcome["exit_code"] = proc.wait(timeout=spec["timeout"])
            if outcome["exit_code"] < 0:
                outcome["reason"] = "killed by signal %d" % -outcome["exit_code"]
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            outcome["exit_code"] = proc.wait()
            outcome["reason"] = spec["timeout_reason"]
duration = round(time.monotonic() - clock, 3)

def text(path):
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "replace")

stdout, stderr = text(spec["out"]), text(spec["err"])
with open(spec["log"], "w") as fh:
    fh.write(spec["header"])
    fh.write("--- stdout ---\n%s\n--- stderr ---\n%s\n" % (stdout.rstrip("\n"), stderr.rstrip("\n")))
    fh.write("--- exit code %s (accepted: %s)%s after %.3fs\n" % (
        outcome["exit_code"], spec["accepted"], ("; " + outcome["reason"]) if outcome["reason"] else "", duration))
for path in (spec["out"], spec["err"]):
    os.unlink(path)
limit = spec["tail_chars"]
write(spec["record_path"], dict(record, status="finished", exit_code=outcome["exit_code"],
                                reason=outcome["reason"], duration_s=duration,
                                stdout_tail=stdout[-limit:], stderr_tail=stderr[-limit:],
                                finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
if spec["lock_fd"] is not None:
    os.close(spec["lock_fd"])  # the outcome is recorded: a run whose supervisor this outlived may go on
'''


class StepFailed(NodeWrightError):
    """A step or a check failed. ``results`` are the step results of the package so
    far, the failing one last; ``log`` is its log file (as seen from outside)."""

    def __init__(self, message, hint=None, results=None, log=None):
        super().__init__(message, hint=hint)
        self.results = results or []
        self.log = log


def tail(text, lines=TAIL_LINES):
    text = (text or "")[-TAIL_CHARS:]
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def check_summary(results, stage):
    """What a stage's check did, for the run report and the node state: ``{result,
    exitCode, step}`` (``reason`` when it did not run)."""
    check = stage + CHECK_SUFFIX
    ran = [r for r in results if r["stage"] == check]
    if not ran:
        return None
    last = ran[-1]
    if all(r["skipped"] for r in ran):
        return {"result": CHECK_SKIPPED, "exitCode": None, "step": last["step"], "reason": last["reason"]}
    failed = [r for r in ran if not r["ok"]]
    if failed:
        return {"result": CHECK_FAILED, "exitCode": failed[0]["exit_code"], "step": failed[0]["step"],
                "reason": failed[0]["reason"] or None}
    done = [r for r in ran if not r["skipped"]][-1]
    return {"result": CHECK_PASSED, "exitCode": done["exit_code"], "step": done["step"]}


class StepExecutor(object):
    """The step side of a ``PackageRunner``. Needs ``self.root``, ``self.resource``,
    ``self.layout``, ``self.keep_logs`` and, while a run holds it, ``self.lock_fd``."""

    lock_fd = None

    def environment(self, package, stage, context):
        name, version = package.name, package.version
        pkg_dir = self.package_dir(name, version)
        steps_dir = "%s/%s" % (pkg_dir, package.steps_dirname)
        log_dir = self.log_dir(name, version)
        config_dir = "%s/%s" % (pkg_dir, CONFIG_DIRNAME)
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        env.update(context.get("env") or {})
        env.update({
            "NODEWRIGHT_PACKAGE": name, "NODEWRIGHT_VERSION": version, "NODEWRIGHT_STAGE": stage,
            "NODEWRIGHT_ACTION": context.get("action", ""), "NODEWRIGHT_RESOURCE": self.resource,
            "NODEWRIGHT_PACKAGE_DIR": pkg_dir, "NODEWRIGHT_STEPS_DIR": steps_dir,
            "NODEWRIGHT_CONFIG_DIR": config_dir, "NODEWRIGHT_LOG_DIR": log_dir,
            "NODEWRIGHT_DATA_DIR": self.data_dir(name), "NODEWRIGHT_INTERRUPT_FILE": self.interrupt_file(name),
            "NODEWRIGHT_CHANGED_KEYS": " ".join(context.get("changed_keys") or []),
            # What a Skyhook package's scripts read.
            "SKYHOOK_DIR": pkg_dir, "STEP_ROOT": steps_dir, "SKYHOOK_LOG_DIR": log_dir,
            "SKYHOOK_ROOT_DIR": self.layout.skyhook_root(),
            "SKYHOOK_RESOURCE_ID": "%s_%s_%s" % (self.resource, name, version),
        })
        script = context.get("stage_script")
        if script:
            env["NODEWRIGHT_STAGE_SCRIPT"] = "%s/%s" % (config_dir, script)
        previous = context.get("from_version")
        if previous:
            env["NODEWRIGHT_PREVIOUS_VERSION"] = previous
            env["NODEWRIGHT_CURRENT_VERSION"] = version
            if stage.startswith("upgrade"):
                env["PREVIOUS_VERSION"] = previous
                env["CURRENT_VERSION"] = version
        return env

    def prepare_dirs(self, package):
        for inner in (self.log_dir(package.name, package.version), self.data_dir(package.name),
                      self.layout.skyhook_root(), os.path.dirname(self.interrupt_file(package.name))):
            os.makedirs(self.root.outer(inner), exist_ok=True)

    def _flag_path(self, package, stage, step):
        return self.root.outer("%s/%s.%s" % (self.flag_dir(package.name, package.version, stage), step.name,
                                             step.fingerprint()))

    def _stage_script(self, package, stage):
        """``(config key, skip reason)`` of a stage whose script the config supplies."""
        if stage not in package.config_scripts:
            return None, None
        key = package.config_script(stage, self.stored_config(package))
        if key:
            return key, None
        return None, "the config supplies no script for stage %s (%s); nothing to run" % (
            stage, " or ".join(package.config_scripts[stage]))

    def run_stage(self, package, stage, context=None):
        """Run the steps of one stage (not its check); returns their results and
        raises ``StepFailed`` at the first failing step. ``context["deadline"]`` (a
        ``time.monotonic`` value) bounds the stage: its stageTimeout."""
        context = dict(context or {})
        results = []
        script, skip = self._stage_script(package, stage)
        if skip:
            return [self._result(package, stage, step, skipped=True, reason=skip) for step in package.steps(stage)]
        context["stage_script"] = script
        for step in package.steps(stage):
            flag = None
            if stage in FLAGGED_STAGES and not step.idempotent:
                flag = self._flag_path(package, stage, step)
                if os.path.exists(flag):
                    results.append(self._result(package, stage, step, skipped=True,
                                                reason="finished before (flag %s)" % flag))
                    continue
            adopted = self._adopt(package, stage, step)
            if adopted is not None and adopted["ok"] and flag:
                results.append(adopted)
            else:
                result = self.run_step(package, stage, step, context)
                results.append(result)
                if not result["ok"]:
                    raise self._failure(package, stage, step, result, context.get("results", []) + results)
            if flag:
                os.makedirs(os.path.dirname(flag), exist_ok=True)
                write_json(flag, {"finished": iso(), "exit_code": results[-1]["exit_code"]})
        return results

    def _result(self, package, stage, step, skipped=False, reason="", **values):
        result = {"package": package.name, "version": package.version, "stage": stage, "step": step.name,
                  "path": step.path, "ok": True, "skipped": skipped, "reason": reason, "exit_code": None,
                  "stdout_tail": "", "stderr_tail": "", "duration_s": 0.0, "log": None}
        result.update(values)
        return result

    def _failure(self, package, stage, step, result, results):
        is_check = stage.endswith(CHECK_SUFFIX)
        what = "check" if is_check else "step"
        if result.get("reason"):
            cause = result["reason"]
        else:
            cause = "exited %s (accepted: %s)" % (result["exit_code"], ", ".join(str(c) for c in step.returncodes))
        where = " on host root %s" % self.root.path if self.root.chrooted else ""
        lines = ["package %s %s: %s %r of stage %s %s%s" % (package.name, package.version, what, step.name, stage,
                                                            cause, where)]
        if result.get("log"):
            lines.append("log: %s" % result["log"])
        text = "\n".join(t for t in (result.get("stdout_tail"), result.get("stderr_tail")) if t)
        if text:
            lines.append("last output:\n" + text)
        if result.get("stage_timeout"):
            hint = ("the stage ran past its stageTimeout; raise spec.packages.%s.stageTimeout (or spec.stageTimeout) "
                    "if it needs longer, or find what it waits for in the log" % package.name)
        elif is_check:
            hint = ("the %s stage ran but its check says the host is not as it should be; read the log, fix the "
                    "package or the node, then run again" % stage[:-len(CHECK_SUFFIX)])
        else:
            hint = "read the log, fix the package or the node, then run again: finished steps are not repeated"
        return StepFailed("\n".join(lines), hint=hint, results=results, log=result.get("log"))

    def run_step(self, package, stage, step, context):
        env = self.environment(package, stage, context)
        env.update(step.env)
        arguments, missing = [], []
        for arg in step.arguments:
            if arg.startswith("env:"):
                if arg[4:] in env:
                    arguments.append(env[arg[4:]])
                else:
                    missing.append(arg[4:])
            else:
                arguments.append(arg)
        if step.upgrade_step and context.get("from_version"):
            arguments += [context["from_version"], package.version]
        steps_inner = "%s/%s" % (self.package_dir(package.name, package.version), package.steps_dirname)
        chroot = self.root.chrooted and step.on_host
        if not chroot and self.root.chrooted:
            # on_host: false runs beside the host, not in it: paths point into the host root.
            for key in ("NODEWRIGHT_PACKAGE_DIR", "NODEWRIGHT_STEPS_DIR", "NODEWRIGHT_CONFIG_DIR", "SKYHOOK_DIR",
                        "STEP_ROOT", "NODEWRIGHT_LOG_DIR", "SKYHOOK_LOG_DIR", "NODEWRIGHT_DATA_DIR",
                        "NODEWRIGHT_STAGE_SCRIPT"):
                if key in env:
                    env[key] = self.root.outer(env[key])
            steps_inner = self.root.outer(steps_inner)
        argv = ["%s/%s" % (steps_inner, step.path)] + arguments
        cwd = env["NODEWRIGHT_PACKAGE_DIR"]
        if missing:
            return self._result(package, stage, step, ok=False, reason="argument env:%s names an unset variable"
                                % ", env:".join(missing))
        timeout, reason = step.timeout, "did not finish within %ss and was killed" % step.timeout
        deadline = context.get("deadline")
        stage_timeout = False
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._result(package, stage, step, ok=False, stage_timeout=True,
                                    reason="was not started: stage %s ran past its stageTimeout of %ss"
                                    % (context.get("stage", stage), context.get("stage_timeout")))
            if left < timeout:
                timeout = max(1, int(left + 0.999))
                stage_timeout = True
                reason = ("was killed: stage %s ran past its stageTimeout of %ss"
                          % (context.get("stage", stage), context.get("stage_timeout")))
        done = self._supervise(package, stage, step, argv, env, cwd, chroot, timeout, reason)
        ok = not done["reason"] and done["exit_code"] in step.returncodes
        return self._result(package, stage, step, ok=ok, reason=done["reason"], exit_code=done["exit_code"],
                            stdout_tail=tail(done.get("stdout_tail")), stderr_tail=tail(done.get("stderr_tail")),
                            duration_s=done.get("duration_s", 0.0), log=done["log"],
                            stage_timeout=stage_timeout and bool(done["reason"]))

    def _record(self, package, stage, step):
        return {"resource": self.resource, "package": package.name, "version": package.version, "stage": stage,
                "step": step.name, "fingerprint": step.fingerprint(), "bootId": self.root.boot_id()}

    def _supervise(self, package, stage, step, argv, env, cwd, chroot, timeout, timeout_reason):
        """Run one step under the supervisor; returns its outcome (``exit_code``,
        ``reason``, tails, ``duration_s``, ``log``)."""
        log_dir = self.root.outer(self.log_dir(package.name, package.version))
        os.makedirs(log_dir, exist_ok=True)
        started = now()
        prefix = "%s.%s." % (stage, step.name)
        log = os.path.join(log_dir, prefix + started.strftime("%Y%m%dT%H%M%S.%f") + ".log")
        record_path = self.root.outer(STEP_RECORD)
        record = dict(self._record(package, stage, step), log=log, started=iso(started), argv0=argv[0])
        write_json(record_path, dict(record, status="starting"))
        header = ("package: %s %s\nstage: %s\nstep: %s\nresource: %s\ncommand: %s\nstarted: %s\n"
                  % (package.name, package.version, stage, step.name, self.resource, " ".join(argv),
                     started.isoformat()))
        spec = {"argv": argv, "env": env, "cwd": cwd, "chroot": self.root.path if chroot else None,
                "timeout": timeout, "timeout_reason": timeout_reason, "out": log + ".stdout", "err": log + ".stderr",
                "log": log, "header": header, "accepted": ",".join(str(c) for c in step.returncodes),
                "record": record, "record_path": record_path, "tail_chars": TAIL_CHARS, "lock_fd": self.lock_fd}
        keep = (self.lock_fd,) if self.lock_fd is not None else ()
        supervisor = subprocess.Popen([sys.executable, "-I", "-S", "-c", SUPERVISOR], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True,
                                      pass_fds=keep, start_new_session=True)
        dummy, err = supervisor.communicate(json.dumps(spec).encode("utf-8"))
        done = read_json(record_path, {}) or {}
        if done.get("status") != "finished" or done.get("log") != log:
            done = {"exit_code": None, "reason": "the step supervisor failed: %s"
                    % (err.decode("utf-8", "replace").strip().splitlines() or ["exit %s" % supervisor.returncode])[-1]}
        os.unlink(record_path)
        self._rotate_logs(log_dir, prefix)
        done["log"] = log if os.path.exists(log) else None
        return done

    def _rotate_logs(self, log_dir, prefix):
        runs = sorted(f for f in os.listdir(log_dir) if f.startswith(prefix) and f.endswith(".log"))
        for stale in runs[:-self.keep_logs]:
            os.unlink(os.path.join(log_dir, stale))

    def _adopt(self, package, stage, step):
        """The outcome of this very step left by a run that did not return (its record
        in step.json): a result, or None. A finished step is not started again."""
        path = self.root.outer(STEP_RECORD)
        record = read_json(path, None)
        if not record:
            return None
        same = all(record.get(k) == v for k, v in self._record(package, stage, step).items() if k != "bootId")
        if not same:
            return None
        os.unlink(path)
        if record.get("status") != "finished":
            return None  # it never finished (the host rebooted, or its supervisor was killed): run it
        ok = not record.get("reason") and record.get("exit_code") in step.returncodes
        return self._result(package, stage, step, ok=ok, reason="finished in a run that did not return (%s)"
                            % record.get("finished"), exit_code=record.get("exit_code"),
                            stdout_tail=tail(record.get("stdout_tail")), stderr_tail=tail(record.get("stderr_tail")),
                            duration_s=record.get("duration_s", 0.0), log=record.get("log"), adopted=True)

    def running_step(self):
        """The step record on the host (``step.json``), or None."""
        return read_json(self.root.outer(STEP_RECORD), None)

    def take_interrupt_request(self, name):
        """A step may ask for an interrupt at run time by writing ``reboot``,
        ``restartAllServices`` or ``service <unit>...`` to $NODEWRIGHT_INTERRUPT_FILE."""
        path = self.root.outer(self.interrupt_file(name))
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            words = fh.read().split()
        os.unlink(path)
        try:
            return from_words(words, "$NODEWRIGHT_INTERRUPT_FILE")
        except NodeWrightError as exc:
            raise StepFailed("package %s asked for an interrupt NodeWright does not know: %r (%s)"
                             % (name, " ".join(words), exc),
                             hint="write reboot, restartAllServices or 'service <unit>...' to "
                                  "$NODEWRIGHT_INTERRUPT_FILE")


def lock_holder_text(record):
    """Who holds the lock, in words, from a step record."""
    if not record:
        return ""
    text = "step %r of stage %s of package %s %s (resource %s), started %s" % (
        record.get("step"), record.get("stage"), record.get("package"), record.get("version"),
        record.get("resource"), record.get("started"))
    if record.get("status") == "running":
        text += ", is still running (process %s, log %s)" % (record.get("pid"), record.get("log"))
    return text


def step_alive(record):
    """Whether the step a record says is running still runs: its process exists and
    runs the step's script (a recycled pid does not count)."""
    if not record or record.get("status") != "running" or not record.get("pid"):
        return False
    try:
        with open("/proc/%d/cmdline" % int(record["pid"]), "rb") as fh:
            cmdline = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return False
    script = (record.get("argv0") or "").rsplit("/", 1)[-1]
    return bool(script) and script in cmdline
