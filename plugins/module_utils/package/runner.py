# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Run package stages on a host: the part of NodeWright that executes ON the node.

A ``PackageRunner`` works on a host root: ``/`` runs steps directly (SSH), any
other path runs them in a chroot of that directory (the k8s-native connection's
``/host`` mount, the simulator's per-node roots). Everything it keeps lives in
the host root:

``/var/lib/nodewright/packages/<name>/<version>/``
    the package copy the steps run from (``NODEWRIGHT_PACKAGE_DIR``,
    ``SKYHOOK_DIR``) with its config files under ``configmaps/``; kept so that
    uninstall and downgrade run the installed version's own scripts with the
    config it was installed with;
``/var/lib/nodewright/flags/<name>/<version>/<stage>/``
    one flag per finished non-idempotent step, so a rerun does not repeat it;
``/var/lib/nodewright/history/<name>.json``
    what ran when, newest last;
``/var/lib/nodewright/files/<name>.json`` and ``backup/<name>/``
    the files laid onto the host from ``files/`` (``root_dir/``) and the
    originals they replaced, restored on uninstall;
``/var/lib/nodewright/state/<resource>.json``
    the node state also returned for the node annotation;
``/var/log/nodewright/<name>/<version>/``
    one log per step run, the last five kept per step.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    CHECK_SUFFIX,
    FORMAT_NATIVE,
    MANIFEST_JSON,
    MANIFEST_YAML,
    config_hashes,
    load_package,
    render_config_value,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    ACTION_DOWNGRADE,
    ACTION_INTERRUPT,
    ACTION_NONE,
    ACTION_POST_INTERRUPT,
    ACTION_REINSTALL,
    ACTION_UNINSTALL,
    STAGE_INTERRUPT,
    STATE_COMPLETE,
    STATE_ERRORING,
    STATE_IN_PROGRESS,
    desired_from_spec,
    finalize_state,
    is_noop,
    merge_interrupts,
    normalize_interrupt,
    normalize_state,
    pending_interrupt,
    plan,
    state_entry,
)

STORE = "/var/lib/nodewright"
LOG_ROOT = "/var/log/nodewright"
CONFIG_DIRNAME = "configmaps"
KEEP_LOGS = 5
TAIL_LINES = 20
TAIL_CHARS = 4000
HISTORY_LIMIT = 100
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Stages whose finished non-idempotent steps leave a flag. Config always reruns:
# it is what a config change asks for.
FLAGGED_STAGES = ("apply", "upgrade", "uninstall", "post-interrupt")


class StepFailed(NodeWrightError):
    """A step or a check failed. ``results`` are the step results of the package so
    far, the failing one last; ``log`` is its log file (as seen from outside)."""

    def __init__(self, message, hint=None, results=None, log=None):
        super().__init__(message, hint=hint)
        self.results = results or []
        self.log = log


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _iso(moment=None):
    return (moment or _now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tail(text, lines=TAIL_LINES):
    text = text[-TAIL_CHARS:]
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(65536), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def _read_json(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


class HostRoot(object):
    """A host's filesystem seen from where the runner runs."""

    def __init__(self, path="/"):
        self.path = os.path.abspath(path or "/")

    @property
    def chrooted(self):
        return self.path != "/"

    def outer(self, inner):
        """The path, as the runner sees it, of ``inner`` (a path on the host)."""
        return os.path.join(self.path, inner.lstrip("/"))

    def boot_id(self):
        try:
            with open(self.outer("/proc/sys/kernel/random/boot_id")) as fh:
                return fh.read().strip()
        except OSError:
            return ""


class PackageRunner(object):
    """Runs planned package actions on one host root for one NodeWright resource."""

    def __init__(self, host_root="/", resource="default", keep_logs=KEEP_LOGS):
        self.root = HostRoot(host_root)
        self.resource = resource
        self.keep_logs = max(1, int(keep_logs))

    # ----------------------------------------------------------------- paths
    def package_dir(self, name, version):
        return "%s/packages/%s/%s" % (STORE, name, version)

    def log_dir(self, name, version):
        return "%s/%s/%s" % (LOG_ROOT, name, version)

    def data_dir(self, name):
        return "%s/data/%s" % (STORE, name)

    def interrupt_file(self, name):
        return "%s/interrupts/%s" % (STORE, name)

    def flag_dir(self, name, version=None, stage=None):
        parts = [STORE, "flags", name] + [p for p in (version, stage) if p]
        return "/".join(parts)

    def history_file(self, name):
        return "%s/history/%s.json" % (STORE, name)

    def state_file(self):
        return "%s/state/%s.json" % (STORE, self.resource)

    # ----------------------------------------------------------------- state
    def read_state(self):
        """The node state this host keeps for the resource (used when the caller
        has no recorded state from the node annotation)."""
        return normalize_state(_read_json(self.root.outer(self.state_file()), None))

    def write_state(self, state):
        final = finalize_state(state)
        _write_json(self.root.outer(self.state_file()), final)
        return final

    def history(self, name):
        return _read_json(self.root.outer(self.history_file(name)), {"name": name, "history": []})

    def _record_history(self, name, version, record):
        path = self.root.outer(self.history_file(name))
        data = _read_json(path, None) or {"name": name, "history": []}
        record = dict(record, time=_iso(), resource=self.resource)
        data["history"] = (data.get("history") or [])[-(HISTORY_LIMIT - 1):] + [record]
        data["version"] = version
        _write_json(path, data)

    # ----------------------------------------------------------------- the package copy
    def stored_package(self, name, version):
        """The copy of ``name`` ``version`` kept on the host, or None."""
        outer = self.root.outer(self.package_dir(name, version))
        if not os.path.isdir(outer):
            return None
        return self._load_copy(outer, name)

    @staticmethod
    def _load_copy(path, name):
        package = load_package(path)
        package.name = name  # a Skyhook package_name may differ from the name it has on the node
        return package

    def stored_config(self, package):
        """The config files of a package copy, as a mapping."""
        config = {}
        cdir = os.path.join(package.root, CONFIG_DIRNAME)
        for key in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else ():
            with open(os.path.join(cdir, key)) as fh:
                config[key] = fh.read()
        return config

    def install(self, package, config):
        """Copy ``package`` to its directory on the host and write its config files;
        returns the copy, loaded (the steps run from it)."""
        dest = self.root.outer(self.package_dir(package.name, package.version))
        if os.path.realpath(package.root) != os.path.realpath(dest):
            parent = os.path.dirname(dest)
            os.makedirs(parent, exist_ok=True)
            tmp = dest + ".new"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(package.root, tmp, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", CONFIG_DIRNAME, "*.pyc"))
            if package.format == FORMAT_NATIVE:
                # The node reads JSON only: a package.yaml becomes package.json.
                for stale in (MANIFEST_YAML, MANIFEST_JSON):
                    if os.path.exists(os.path.join(tmp, stale)):
                        os.unlink(os.path.join(tmp, stale))
                _write_json(os.path.join(tmp, MANIFEST_JSON), package_manifest(package))
            steps_dir = os.path.join(tmp, package.steps_dirname)
            for stage_steps in package.stages.values():
                for step in stage_steps:
                    script = os.path.join(steps_dir, step.path)
                    if os.path.isfile(script):
                        os.chmod(script, os.stat(script).st_mode | 0o111)
            old = dest + ".old"
            shutil.rmtree(old, ignore_errors=True)
            if os.path.exists(dest):
                os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        self.write_config(dest, package.effective_config(config))
        return self._load_copy(dest, package.name)

    def write_config(self, package_root, config):
        cdir = os.path.join(package_root, CONFIG_DIRNAME)
        os.makedirs(cdir, exist_ok=True)
        for stale in os.listdir(cdir):
            if stale not in config:
                os.unlink(os.path.join(cdir, stale))
        for key, value in sorted(config.items()):
            with open(os.path.join(cdir, key), "w") as fh:
                fh.write(render_config_value(value))

    def remove_stored(self, name, keep=None):
        """Remove the package copies (and their flags) of ``name`` except ``keep``."""
        base = self.root.outer("%s/packages/%s" % (STORE, name))
        for version in os.listdir(base) if os.path.isdir(base) else ():
            if version != keep:
                shutil.rmtree(os.path.join(base, version), ignore_errors=True)
                shutil.rmtree(self.root.outer(self.flag_dir(name, version)), ignore_errors=True)
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)

    # ----------------------------------------------------------------- files laid onto the host
    def _files_manifest(self, name):
        return self.root.outer("%s/files/%s.json" % (STORE, name))

    def _backup(self, name, inner):
        return self.root.outer("%s/backup/%s/%s" % (STORE, name, inner.lstrip("/")))

    def lay_files(self, package):
        """Copy the package's ``files/`` (``root_dir/``) onto the host. A file it
        replaces is backed up and restored on uninstall; a file the previous
        version laid and this one does not is removed."""
        src_root = os.path.join(package.root, package.files_dirname)
        manifest_path = self._files_manifest(package.name)
        old = _read_json(manifest_path, None) or {"files": {}, "backups": []}
        laid, backups = {}, set(old.get("backups") or [])
        for dirpath, dirnames, filenames in os.walk(src_root) if os.path.isdir(src_root) else ():
            dirnames.sort()
            for fname in sorted(filenames):
                src = os.path.join(dirpath, fname)
                inner = "/" + os.path.relpath(src, src_root)
                dest = self.root.outer(inner)
                if os.path.lexists(dest) and inner not in old["files"] and inner not in backups:
                    backup = self._backup(package.name, inner)
                    os.makedirs(os.path.dirname(backup), exist_ok=True)
                    shutil.copy2(dest, backup, follow_symlinks=False)
                    backups.add(inner)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if os.path.lexists(dest) and (os.path.islink(dest) or os.path.islink(src)):
                    os.unlink(dest)
                shutil.copy2(src, dest, follow_symlinks=False)
                laid[inner] = "" if os.path.islink(dest) else _sha256(dest)
        for inner, digest in sorted(old["files"].items()):
            if inner not in laid:
                self._remove_laid(package.name, inner, digest, backups)
        if laid or backups:
            _write_json(manifest_path, {"version": package.version, "files": laid, "backups": sorted(backups)})
        elif os.path.exists(manifest_path):
            os.unlink(manifest_path)
        return sorted(laid)

    def _remove_laid(self, name, inner, digest, backups):
        dest = self.root.outer(inner)
        if os.path.lexists(dest) and (os.path.islink(dest) or _sha256(dest) == digest):
            os.unlink(dest)
        if inner in backups:
            backup = self._backup(name, inner)
            if os.path.lexists(backup) and not os.path.lexists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(backup, dest, follow_symlinks=False)
            if os.path.lexists(backup):
                os.unlink(backup)
            backups.discard(inner)

    def remove_files(self, name):
        """Undo ``lay_files``: remove what is unchanged since it was laid and put
        back the originals. A file edited since is left in place."""
        manifest_path = self._files_manifest(name)
        old = _read_json(manifest_path, None)
        if not old:
            return []
        backups = set(old.get("backups") or [])
        for inner, digest in sorted(old.get("files", {}).items()):
            self._remove_laid(name, inner, digest, backups)
        for inner in sorted(backups):
            self._remove_laid(name, inner, None, backups)
        os.unlink(manifest_path)
        shutil.rmtree(self.root.outer("%s/backup/%s" % (STORE, name)), ignore_errors=True)
        return sorted(old.get("files", {}))

    # ----------------------------------------------------------------- steps
    def _environment(self, package, stage, context):
        name, version = package.name, package.version
        pkg_dir = self.package_dir(name, version)
        steps_dir = "%s/%s" % (pkg_dir, package.steps_dirname)
        log_dir = self.log_dir(name, version)
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        env.update(context.get("env") or {})
        env.update({
            "NODEWRIGHT_PACKAGE": name, "NODEWRIGHT_VERSION": version, "NODEWRIGHT_STAGE": stage,
            "NODEWRIGHT_ACTION": context.get("action", ""), "NODEWRIGHT_RESOURCE": self.resource,
            "NODEWRIGHT_PACKAGE_DIR": pkg_dir, "NODEWRIGHT_STEPS_DIR": steps_dir,
            "NODEWRIGHT_CONFIG_DIR": "%s/%s" % (pkg_dir, CONFIG_DIRNAME), "NODEWRIGHT_LOG_DIR": log_dir,
            "NODEWRIGHT_DATA_DIR": self.data_dir(name), "NODEWRIGHT_INTERRUPT_FILE": self.interrupt_file(name),
            "NODEWRIGHT_CHANGED_KEYS": " ".join(context.get("changed_keys") or []),
            # What a Skyhook package's scripts read.
            "SKYHOOK_DIR": pkg_dir, "STEP_ROOT": steps_dir, "SKYHOOK_LOG_DIR": log_dir,
            "SKYHOOK_ROOT_DIR": "%s/resources/%s" % (STORE, self.resource),
            "SKYHOOK_RESOURCE_ID": "%s_%s_%s" % (self.resource, name, version),
        })
        previous = context.get("from_version")
        if previous:
            env["NODEWRIGHT_PREVIOUS_VERSION"] = previous
            env["NODEWRIGHT_CURRENT_VERSION"] = version
            if stage.startswith("upgrade"):
                env["PREVIOUS_VERSION"] = previous
                env["CURRENT_VERSION"] = version
        return env

    def _prepare_dirs(self, package):
        for inner in (self.log_dir(package.name, package.version), self.data_dir(package.name),
                      "%s/resources/%s" % (STORE, self.resource), "%s/interrupts" % STORE):
            os.makedirs(self.root.outer(inner), exist_ok=True)

    def _flag_path(self, package, stage, step):
        return self.root.outer("%s/%s.%s" % (self.flag_dir(package.name, package.version, stage), step.name,
                                             step.fingerprint()))

    def run_stage(self, package, stage, context=None):
        """Run the steps of one stage (not its check); returns their results and
        raises ``StepFailed`` at the first failing step."""
        context = context or {}
        results = []
        for step in package.steps(stage):
            flag = None
            if stage in FLAGGED_STAGES and not step.idempotent:
                flag = self._flag_path(package, stage, step)
                if os.path.exists(flag):
                    results.append(self._result(package, stage, step, skipped=True,
                                                reason="finished before (flag %s)" % flag))
                    continue
            result = self.run_step(package, stage, step, context)
            results.append(result)
            if not result["ok"]:
                raise self._failure(package, stage, step, result, context.get("results", []) + results)
            if flag:
                os.makedirs(os.path.dirname(flag), exist_ok=True)
                _write_json(flag, {"finished": _iso(), "exit_code": result["exit_code"]})
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
        tail = "\n".join(t for t in (result.get("stdout_tail"), result.get("stderr_tail")) if t)
        if tail:
            lines.append("last output:\n" + tail)
        if is_check:
            hint = ("the %s stage ran but its check says the host is not as it should be; read the log, fix the "
                    "package or the node, then run again" % stage[:-len(CHECK_SUFFIX)])
        else:
            hint = "read the log, fix the package or the node, then run again: finished steps are not repeated"
        return StepFailed("\n".join(lines), hint=hint, results=results, log=result.get("log"))

    def run_step(self, package, stage, step, context):
        env = self._environment(package, stage, context)
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
                        "STEP_ROOT", "NODEWRIGHT_LOG_DIR", "SKYHOOK_LOG_DIR", "NODEWRIGHT_DATA_DIR"):
                env[key] = self.root.outer(env[key])
            steps_inner = self.root.outer(steps_inner)
        argv = ["%s/%s" % (steps_inner, step.path)] + arguments
        cwd = env["NODEWRIGHT_PACKAGE_DIR"]
        if missing:
            return self._result(package, stage, step, ok=False, reason="argument env:%s names an unset variable"
                                % ", env:".join(missing))
        started = _now()
        clock = time.monotonic()
        out, err, code, reason = self._spawn(argv, env, cwd, chroot, step.timeout)
        duration = round(time.monotonic() - clock, 3)
        log = self._write_log(package, stage, step, argv, started, out, err, code, reason, duration)
        ok = reason == "" and code in step.returncodes
        return self._result(package, stage, step, ok=ok, reason=reason, exit_code=code,
                            stdout_tail=_tail(out), stderr_tail=_tail(err), duration_s=duration, log=log)

    def _spawn(self, argv, env, cwd, chroot, timeout):
        root = self.root.path

        def enter():
            if chroot:
                os.chroot(root)
            os.chdir(cwd)

        for attempt in (argv, ["/bin/sh"] + argv):
            try:
                proc = subprocess.Popen(attempt, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, preexec_fn=enter, start_new_session=True,
                                        close_fds=True)
            except OSError as exc:
                if exc.errno == errno.ENOEXEC and attempt is argv:
                    continue  # a script without a '#!' line: run it with sh, as a shell would
                return "", "", None, "could not start %s: %s" % (argv[0], exc.strerror or exc)
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                out, err = proc.communicate()
                return (out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), proc.returncode,
                        "did not finish within %ss and was killed" % timeout)
            code = proc.returncode
            reason = "killed by signal %d" % -code if code < 0 else ""
            return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code, reason
        return "", "", None, "could not start %s" % argv[0]  # pragma: no cover

    def _write_log(self, package, stage, step, argv, started, out, err, code, reason, duration):
        log_dir = self.root.outer(self.log_dir(package.name, package.version))
        os.makedirs(log_dir, exist_ok=True)
        prefix = "%s.%s." % (stage, step.name)
        path = os.path.join(log_dir, prefix + started.strftime("%Y%m%dT%H%M%S.%f") + ".log")
        with open(path, "w") as fh:
            fh.write("package: %s %s\nstage: %s\nstep: %s\nresource: %s\ncommand: %s\nstarted: %s\n"
                     % (package.name, package.version, stage, step.name, self.resource,
                        " ".join(argv), started.isoformat()))
            fh.write("--- stdout ---\n%s\n--- stderr ---\n%s\n" % (out.rstrip("\n"), err.rstrip("\n")))
            fh.write("--- exit code %s (accepted: %s)%s after %.3fs\n"
                     % (code, ",".join(str(c) for c in step.returncodes), ("; " + reason) if reason else "",
                        duration))
        runs = sorted(f for f in os.listdir(log_dir) if f.startswith(prefix) and f.endswith(".log"))
        for stale in runs[:-self.keep_logs]:
            os.unlink(os.path.join(log_dir, stale))
        return path

    def _take_interrupt_request(self, name):
        """A step may ask for an interrupt at run time by writing ``reboot``,
        ``restartAllServices`` or ``service <unit>...`` to $NODEWRIGHT_INTERRUPT_FILE."""
        path = self.root.outer(self.interrupt_file(name))
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            words = fh.read().split()
        os.unlink(path)
        if not words:
            return None
        try:
            return normalize_interrupt({"type": words[0], "services": words[1:]})
        except NodeWrightError as exc:
            raise StepFailed("package %s asked for an interrupt NodeWright does not know: %r (%s)"
                             % (name, " ".join(words), exc),
                             hint="write reboot, restartAllServices or 'service <unit>...' to "
                                  "$NODEWRIGHT_INTERRUPT_FILE")

    # ----------------------------------------------------------------- actions
    def execute(self, entry, package=None, config=None, env=None, state=None):
        """Carry out one plan entry. ``package`` is the desired package (None for an
        uninstall or post-interrupt, which use the copy on the host); ``state`` is
        the node state, updated in place. Returns the package's result; raises
        ``StepFailed`` (the state then says ``erroring``)."""
        state = state if state is not None else self.read_state()
        name, action = entry["name"], entry["action"]
        result = {"name": name, "action": action, "version": entry.get("version"),
                  "from_version": entry.get("from_version"), "stages": [], "steps": [],
                  "interrupt": dict(entry.get("interrupt") or {"type": "noop", "services": []}),
                  "requested_interrupt": None, "changed": False}
        if action in (ACTION_NONE, ACTION_INTERRUPT):
            return result
        context = {"action": action, "env": env or {}, "changed_keys": entry.get("changed_keys") or [],
                   "results": result["steps"]}
        packages = state.setdefault("packages", {})
        current = {"stage": None, "version": entry.get("version") or entry.get("from_version")}
        result["changed"] = True

        def mark(stage, status, version=None, **extra):
            current["stage"] = stage
            current["version"] = version or current["version"]
            previous = packages.get(name) or {}
            fields = {"config_hashes": previous.get("configHashes"), "depends_on": entry.get("depends_on"),
                      "interrupt": entry.get("interrupt"), "from_version": entry.get("from_version"),
                      "boot_id": previous.get("bootId")}
            fields.update(extra)
            packages[name] = state_entry(name, current["version"], stage, status, updated=_iso(), **fields)

        def run(pkg, stage, **ctx):
            mark(stage, STATE_IN_PROGRESS, version=pkg.version)
            self._prepare_dirs(pkg)
            run_ctx = dict(context, **ctx)
            for s in (stage, stage + CHECK_SUFFIX):
                result["steps"].extend(self.run_stage(pkg, s, run_ctx))
            result["stages"].append(stage)
            requested = self._take_interrupt_request(pkg.name)
            if requested:
                result["requested_interrupt"] = merge_interrupts([result["requested_interrupt"], requested])

        if action == ACTION_POST_INTERRUPT:
            # Not a failure of the package: the state stays "interrupt" until it happened.
            self._check_interrupt_happened(entry, packages.get(name) or {})
        try:
            if action == ACTION_UNINSTALL:
                self._uninstall(entry["from_version"], name, package, config, mark, context)
                result["stages"].append("uninstall")
                packages.pop(name, None)
                self._record_history(name, None, {"action": action, "version": entry["from_version"],
                                                  "result": "ok"})
                return result
            if action == ACTION_POST_INTERRUPT:
                return self._post_interrupt(entry, run, mark, result)
            if action in (ACTION_DOWNGRADE, ACTION_REINSTALL):
                if self._uninstall(entry["from_version"], name, None, None, mark, context,
                                   required=action == ACTION_DOWNGRADE):
                    result["stages"].append("uninstall")
            if package is None:
                raise StepFailed("package %s %s: no package source was given for %s" % (name, entry["version"],
                                                                                         action))
            installed = self.install(package, config)
            stages = [s for s in entry["stages"] if s != "uninstall"]  # done above
            if "apply" in stages or "upgrade" in stages:
                result["files"] = self.lay_files(installed)
            for stage in stages:
                if stage == "config":
                    run(installed, stage)
                    mark("config", STATE_IN_PROGRESS, config_hashes=config_hashes(self.stored_config(installed)))
                elif stage == "upgrade":
                    run(installed, stage, from_version=entry.get("from_version"))
                else:
                    run(installed, stage)
            if entry.get("from_version") and entry["from_version"] != installed.version:
                self.remove_stored(name, keep=installed.version)
            self._finish(entry, installed, result, mark)
            self._record_history(name, installed.version, {
                "action": action, "version": installed.version, "fromVersion": entry.get("from_version"),
                "stages": result["stages"], "result": "ok", "interrupt": result["interrupt"]["type"]})
            return result
        except (OSError, StepFailed) as exc:
            failure = exc if isinstance(exc, StepFailed) else StepFailed(
                "package %s: %s failed on host root %s: %s" % (name, action, self.root.path, exc),
                hint="fix the host (space, permissions), then run again")
            mark(current["stage"] or action, STATE_ERRORING)
            self._record_history(name, current["version"], {
                "action": action, "version": current["version"], "stage": current["stage"], "result": "failed",
                "error": failure.message.splitlines()[0], "log": failure.log})
            failure.results = failure.results or list(result["steps"])
            raise failure

    def _uninstall(self, version, name, package, config, mark, context, required=True):
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
        self._prepare_dirs(stored)
        # The uninstall runs with the config the package was installed with.
        context = dict(context, changed_keys=[])
        steps = context["results"]
        steps.extend(self.run_stage(stored, "uninstall", context))
        self.remove_files(name)
        steps.extend(self.run_stage(stored, "uninstall" + CHECK_SUFFIX, context))
        self.remove_stored(name)
        shutil.rmtree(self.root.outer(self.flag_dir(name)), ignore_errors=True)
        shutil.rmtree(self.root.outer(self.data_dir(name)), ignore_errors=True)
        mark("uninstall", STATE_COMPLETE, version=version, from_version=None, config_hashes=None, boot_id=None)
        return True

    def _check_interrupt_happened(self, entry, recorded):
        interrupt = recorded.get("interrupt") or entry.get("interrupt") or {}
        if interrupt.get("type") == "reboot" and recorded.get("bootId") and \
                recorded["bootId"] == self.root.boot_id():
            raise StepFailed("package %s %s: a reboot was asked for, but the node has not rebooted since "
                             "(boot id %s)" % (entry["name"], entry["version"], recorded["bootId"]),
                             hint="reboot the node (the safe sequence does), then run the post-interrupt phase")

    def _post_interrupt(self, entry, run, mark, result):
        name, version = entry["name"], entry["version"]
        stored = self.stored_package(name, version)
        if stored is None:
            raise StepFailed("package %s %s: its copy is not on the host, so post-interrupt cannot run"
                             % (name, version), hint="apply the package again")
        run(stored, "post-interrupt")
        mark("post-interrupt", STATE_COMPLETE, interrupt=None, boot_id=None, from_version=None, version=version)
        result["interrupt"] = {"type": "noop", "services": []}
        self._record_history(name, version, {"action": entry["action"], "version": version,
                                             "stages": result["stages"], "result": "ok"})
        return result

    def _finish(self, entry, installed, result, mark):
        interrupt = merge_interrupts([entry.get("interrupt"), result["requested_interrupt"]])
        result["interrupt"] = interrupt
        last = result["stages"][-1] if result["stages"] else entry["action"]
        hashes = config_hashes(self.stored_config(installed))
        if is_noop(interrupt) or last == "post-interrupt":
            mark(last, STATE_COMPLETE, interrupt=None, config_hashes=hashes, from_version=None, boot_id=None,
                 version=installed.version)
            return
        # The interrupt is the safe sequence's to perform; post-interrupt runs after it.
        shutil.rmtree(self.root.outer(self.flag_dir(installed.name, installed.version, "post-interrupt")),
                      ignore_errors=True)
        mark(STAGE_INTERRUPT, STATE_IN_PROGRESS, interrupt=interrupt, config_hashes=hashes,
             boot_id=self.root.boot_id(), from_version=None, version=installed.version)

    def run_plan(self, plan, sources=None, state=None):
        """Carry out a whole plan in its order, stopping at the first failure.

        ``sources`` maps package name to ``(Package, config, env)``. Returns
        ``(results, state)``; on failure raises ``StepFailed`` with ``results`` (of
        all packages so far) and ``state`` attributes. The node state is written
        to the host after each package."""
        sources = sources or {}
        state = normalize_state(state) if state is not None else self.read_state()
        with self._locked():
            return self._run_plan(plan, sources, state)

    @contextlib.contextmanager
    def _locked(self):
        """One package run at a time per host: two resources' runs would otherwise
        interleave their steps."""
        path = self.root.outer("%s/lock" % STORE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise StepFailed("another NodeWright package run holds %s on host root %s" % (path, self.root.path),
                                 hint="wait for it to finish, then run again")
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run_plan(self, plan, sources, state):
        results = []
        for entry in plan["packages"]:
            package, config, env = sources.get(entry["name"], (None, None, None))
            try:
                results.append(self.execute(entry, package, config, env, state))
            except StepFailed as exc:
                results.append({"name": entry["name"], "action": entry["action"], "version": entry.get("version"),
                                "from_version": entry.get("from_version"), "steps": exc.results,
                                "failed": True, "changed": True})
                exc.package_results = results
                exc.state = self.write_state(state)
                raise
            if results[-1]["changed"]:
                self.write_state(state)
        return results, finalize_state(state)


def package_manifest(package):
    """The native manifest (package.json) of a package: what the host copy holds."""
    data = package.to_dict()
    data.pop("format", None)
    return data


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
    with runner._locked():
        for name in sorted(state["packages"]):
            entry = state["packages"][name]
            if entry.get("state") != STATE_COMPLETE or entry.get("stage") in (STAGE_INTERRUPT, "uninstall"):
                skipped.append({"name": name, "reason": "not complete (%s %s)" % (entry.get("stage"),
                                                                                  entry.get("state"))})
                continue
            stored = runner.stored_package(name, entry["version"])
            if stored is None:
                drifted.append({"name": name, "version": entry["version"], "stage": None, "log": None,
                                "message": "the package copy is missing from %s"
                                           % runner.root.outer(runner.package_dir(name, entry["version"]))})
                continue
            runner._prepare_dirs(stored)
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
                 check_mode=False, keep_logs=KEEP_LOGS):
    """Load, plan and run packages on a host root: the whole job of the
    ``nodewright.fleet.package`` module, usable without Ansible.

    ``specs`` are package specs (name, src directory, version, config, env,
    interrupt, config_interrupts, depends_on, state). ``recorded_state`` None
    means the state the host keeps. Returns ``{changed, plan, results, state,
    interrupt}``; in check mode nothing runs and ``state`` is the recorded one.
    Raises ``ValidationError`` before anything runs, or ``StepFailed`` (with
    ``plan``, ``state`` and ``package_results``)."""
    runner = PackageRunner(host_root, resource=resource, keep_logs=keep_logs)
    desired, sources = [], {}
    for n, spec in enumerate(specs or []):
        package = load_package(spec["src"]) if spec.get("src") else None
        item = desired_from_spec(spec, package, n)
        if package is not None:
            package.name = item["name"]  # a Skyhook package takes the name it has on the node
        desired.append(item)
        sources[item["name"]] = (package, item["config"], spec.get("env") or {})
    recorded = normalize_state(recorded_state if recorded_state is not None else runner.read_state())
    decided = plan(desired, recorded, prune=prune, phase=phase)
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
