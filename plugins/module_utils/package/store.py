# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What the package runner keeps on a host, per NodeWright resource.

Everything lives in the host root, and everything a resource's packages leave is
keyed by the resource as well as the package and version, so that two resources
using the same package (``shellscript`` 1.0.0 with different scripts) never share
flags, copies or config:

``/var/lib/nodewright/packages/<resource>/<name>/<version>/``
    the package copy the steps run from (``NODEWRIGHT_PACKAGE_DIR``,
    ``SKYHOOK_DIR``) with its config files under ``configmaps/``; kept so that
    uninstall and downgrade run the installed version's own scripts with the config
    it was installed with;
``/var/lib/nodewright/flags/<resource>/<name>/<version>/<stage>/``
    one flag per finished non-idempotent step, so a rerun does not repeat it;
``/var/lib/nodewright/history/<resource>/<name>.json``
    what ran when, newest last;
``/var/lib/nodewright/files/<resource>/<name>.json``, ``backup/<resource>/<name>/``
    the files laid onto the host from ``files/`` (``root_dir/``) and the originals
    they replaced, restored on uninstall;
``/var/lib/nodewright/data/<resource>/<name>/``
    the package's own data (``NODEWRIGHT_DATA_DIR``);
``/var/lib/nodewright/state/<resource>.json``
    the node state also returned for the node annotation;
``/var/lib/nodewright/step.json``
    the step running now (or the last one, when the run that started it did not
    return), see ``steps.py``;
``/var/log/nodewright/<resource>/<name>/<version>/``
    one log per step run, the last five kept per step.

A host written by the earlier layout (``packages/<name>/<version>/``, without the
resource) is migrated when a resource's run first reads it: what the resource's
recorded state names is copied under the resource, flags included, so nothing that
finished runs again (``migrate_legacy``).

Every path is resolved inside the host root the way a chroot would resolve it
(``HostRoot.outer``): a symlink on the host, absolute or relative, can never make
the runner read or write outside the host root. Stdlib only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    FORMAT_NATIVE,
    MANIFEST_JSON,
    MANIFEST_YAML,
    check_tree,
    is_version,
    load_package,
    render_config_value,
)

STORE = "/var/lib/nodewright"
LOG_ROOT = "/var/log/nodewright"
CONFIG_DIRNAME = "configmaps"
HISTORY_LIMIT = 100
_MAX_LINKS = 40


class UnsafePath(NodeWrightError):
    """A path on the host would resolve outside the host root, or a package entry
    would be laid there."""


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment=None):
    return (moment or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(65536), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


class HostRoot(object):
    """A host's filesystem seen from where the runner runs."""

    def __init__(self, path="/"):
        self.path = os.path.realpath(os.path.abspath(path or "/"))

    @property
    def chrooted(self):
        return self.path != "/"

    def outer(self, inner, follow=True):
        """The path, as the runner sees it, of ``inner`` (a path on the host),
        resolved as a chroot would: ``..`` stops at the root and a symlink's target,
        absolute or relative, is taken inside the root. With ``follow`` false the
        last component is not followed (to replace a link rather than write through
        it)."""
        if not self.chrooted:
            return "/" + inner.lstrip("/")
        current = self.path
        todo = [p for p in inner.split("/") if p not in ("", ".")]
        links = 0
        while todo:
            part = todo.pop(0)
            if part == "..":
                if current != self.path:
                    current = os.path.dirname(current)
                continue
            candidate = os.path.join(current, part)
            if os.path.islink(candidate) and (todo or follow):
                links += 1
                if links > _MAX_LINKS:
                    raise UnsafePath("%s on host root %s: too many levels of symlinks" % (inner, self.path))
                target = os.readlink(candidate)
                if target.startswith("/"):
                    current = self.path
                todo = [p for p in target.split("/") if p not in ("", ".")] + todo
                continue
            current = candidate
        return current

    def boot_id(self):
        try:
            with open(self.outer("/proc/sys/kernel/random/boot_id")) as fh:
                return fh.read().strip()
        except OSError:
            return ""


class Layout(object):
    """Where one resource's package records live on the host (paths on the host)."""

    def __init__(self, resource):
        self.resource = resource

    def package_dir(self, name, version):
        return "%s/packages/%s/%s/%s" % (STORE, self.resource, name, version)

    def packages_of(self, name):
        return "%s/packages/%s/%s" % (STORE, self.resource, name)

    def log_dir(self, name, version):
        return "%s/%s/%s/%s" % (LOG_ROOT, self.resource, name, version)

    def data_dir(self, name):
        return "%s/data/%s/%s" % (STORE, self.resource, name)

    def interrupt_file(self, name):
        return "%s/interrupts/%s/%s" % (STORE, self.resource, name)

    def flag_dir(self, name, version=None, stage=None):
        return "/".join([STORE, "flags", self.resource, name] + [p for p in (version, stage) if p])

    def history_file(self, name):
        return "%s/history/%s/%s.json" % (STORE, self.resource, name)

    def files_manifest(self, name):
        return "%s/files/%s/%s.json" % (STORE, self.resource, name)

    def backup_dir(self, name):
        return "%s/backup/%s/%s" % (STORE, self.resource, name)

    def state_file(self):
        return "%s/state/%s.json" % (STORE, self.resource)

    def skyhook_root(self):
        return "%s/resources/%s" % (STORE, self.resource)


# The earlier layout: one record per package and version, whatever the resource.
LEGACY = {
    "package": "%s/packages/{name}/{version}" % STORE,
    "flags": "%s/flags/{name}/{version}" % STORE,
    "history": "%s/history/{name}.json" % STORE,
    "files": "%s/files/{name}.json" % STORE,
    "backup": "%s/backup/{name}" % STORE,
    "data": "%s/data/{name}" % STORE,
}


class PackageStore(object):
    """The host side of a ``PackageRunner``: copies, config, flags, history, files.
    Needs ``self.root`` (a ``HostRoot``), ``self.resource`` and ``self.layout``."""

    # ----------------------------------------------------------------- paths
    def package_dir(self, name, version):
        return self.layout.package_dir(name, version)

    def log_dir(self, name, version):
        return self.layout.log_dir(name, version)

    def data_dir(self, name):
        return self.layout.data_dir(name)

    def interrupt_file(self, name):
        return self.layout.interrupt_file(name)

    def flag_dir(self, name, version=None, stage=None):
        return self.layout.flag_dir(name, version, stage)

    def history_file(self, name):
        return self.layout.history_file(name)

    def state_file(self):
        return self.layout.state_file()

    # ----------------------------------------------------------------- history
    def record_history(self, name, version, record):
        path = self.root.outer(self.history_file(name))
        data = read_json(path, None) or {"name": name, "history": []}
        record = dict(record, time=iso(), resource=self.resource)
        data["history"] = (data.get("history") or [])[-(HISTORY_LIMIT - 1):] + [record]
        data["version"] = version
        write_json(path, data)

    # ----------------------------------------------------------------- the package copy
    def stored_package(self, name, version):
        """The copy of ``name`` ``version`` kept on the host for this resource, or None."""
        outer = self.root.outer(self.package_dir(name, version))
        if not os.path.isdir(outer):
            return None
        return self._load_copy(outer, name, version)

    @staticmethod
    def _load_copy(path, name, version):
        package = load_package(path)
        # A copy is the package under the name and version it was installed as (its
        # directory), whatever the manifest it came with says (shellscript as "setup" 2.1).
        package.name, package.version = name, version
        return package

    def stored_config(self, package):
        """The config files of a package copy, as a mapping."""
        config = {}
        cdir = os.path.join(package.root, CONFIG_DIRNAME)
        for key in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else ():
            with open(os.path.join(cdir, key)) as fh:
                config[key] = fh.read()
        return config

    def check_source(self, package):
        """Refuse a package whose entries could reach outside it or outside the host
        root (symlinks, devices), before anything is copied or laid."""
        problems = check_tree(package.root, package.files_dirname)
        if problems:
            rel, message, hint = problems[0]
            more = "" if len(problems) == 1 else " (and %d more)" % (len(problems) - 1)
            raise UnsafePath("package %s %s: %s %s%s; nothing was copied to host root %s"
                             % (package.name, package.version, rel, message, more, self.root.path), hint=hint)

    def install(self, package, config):
        """Copy ``package`` to its directory on the host and write its config files;
        returns the copy, loaded (the steps run from it)."""
        dest = self.root.outer(self.package_dir(package.name, package.version))
        if os.path.realpath(package.root) != os.path.realpath(dest):
            self.check_source(package)
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
                write_json(os.path.join(tmp, MANIFEST_JSON), package_manifest(package))
            steps_dir = os.path.join(tmp, package.steps_dirname)
            for stage_steps in package.stages.values():
                for step in stage_steps:
                    script = os.path.join(steps_dir, step.path)
                    if os.path.isfile(script) and not os.path.islink(script):
                        os.chmod(script, os.stat(script).st_mode | 0o111)
            old = dest + ".old"
            shutil.rmtree(old, ignore_errors=True)
            if os.path.exists(dest):
                os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        self.write_config(dest, package.effective_config(config))
        return self._load_copy(dest, package.name, package.version)

    def write_config(self, package_root, config):
        cdir = os.path.join(package_root, CONFIG_DIRNAME)
        os.makedirs(cdir, exist_ok=True)
        for stale in os.listdir(cdir):
            if stale not in config:
                os.unlink(os.path.join(cdir, stale))
        for key, value in sorted(config.items()):
            path = os.path.join(cdir, key)
            if os.path.islink(path):
                os.unlink(path)
            with open(path, "w") as fh:
                fh.write(render_config_value(value))

    def remove_stored(self, name, keep=None):
        """Remove the package copies (and their flags) of ``name`` except ``keep``."""
        base = self.root.outer(self.layout.packages_of(name))
        for version in os.listdir(base) if os.path.isdir(base) else ():
            if version != keep:
                shutil.rmtree(os.path.join(base, version), ignore_errors=True)
                shutil.rmtree(self.root.outer(self.flag_dir(name, version)), ignore_errors=True)
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)

    def clear_flags(self, name, version, stages):
        """Forget the finished steps of ``stages``: they run again (a rerun)."""
        for stage in stages:
            shutil.rmtree(self.root.outer(self.flag_dir(name, version, stage)), ignore_errors=True)

    # ----------------------------------------------------------------- files laid onto the host
    def _backup(self, name, inner):
        return self.root.outer("%s/%s" % (self.layout.backup_dir(name), inner.lstrip("/")), follow=False)

    def _dest(self, inner):
        """Where a laid file goes: its directory resolved inside the host root, the
        file itself not followed (a link there is replaced, not written through)."""
        parent = self.root.outer(os.path.dirname(inner))
        return os.path.join(parent, os.path.basename(inner))

    def lay_files(self, package):
        """Copy the package's ``files/`` (``root_dir/``) onto the host. A file it
        replaces is backed up and restored on uninstall; a file the previous
        version laid and this one does not is removed. Every entry is checked
        before the first is written."""
        src_root = os.path.join(package.root, package.files_dirname)
        self.check_source(package)
        manifest_path = self.root.outer(self.layout.files_manifest(package.name))
        old = read_json(manifest_path, None) or {"files": {}, "backups": []}
        laid, backups = {}, set(old.get("backups") or [])
        entries = []
        for dirpath, dirnames, filenames in os.walk(src_root) if os.path.isdir(src_root) else ():
            dirnames.sort()
            for fname in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
                src = os.path.join(dirpath, fname)
                inner = "/" + os.path.relpath(src, src_root)
                entries.append((src, inner, self._dest(inner)))
        for _src, inner, dest in entries:
            if not dest.startswith(self.root.path.rstrip("/") + "/"):
                raise UnsafePath("package %s %s: %s would be laid outside host root %s (at %s)"
                                 % (package.name, package.version, inner, self.root.path, dest),
                                 hint="nothing was laid; check the host's symlinks on that path")
        for src, inner, dest in entries:
            if os.path.lexists(dest) and inner not in old["files"] and inner not in backups:
                backup = self._backup(package.name, inner)
                os.makedirs(os.path.dirname(backup), exist_ok=True)
                shutil.copy2(dest, backup, follow_symlinks=False)
                backups.add(inner)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest) and (os.path.islink(dest) or os.path.islink(src)):
                os.unlink(dest)
            shutil.copy2(src, dest, follow_symlinks=False)
            laid[inner] = "" if os.path.islink(dest) else sha256(dest)
        for inner, digest in sorted(old["files"].items()):
            if inner not in laid:
                self._remove_laid(package.name, inner, digest, backups)
        if laid or backups:
            write_json(manifest_path, {"version": package.version, "files": laid, "backups": sorted(backups)})
        elif os.path.exists(manifest_path):
            os.unlink(manifest_path)
        return sorted(laid)

    def _remove_laid(self, name, inner, digest, backups):
        dest = self._dest(inner)
        if os.path.lexists(dest) and (os.path.islink(dest) or sha256(dest) == digest):
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
        manifest_path = self.root.outer(self.layout.files_manifest(name))
        old = read_json(manifest_path, None)
        if not old:
            return []
        backups = set(old.get("backups") or [])
        for inner, digest in sorted(old.get("files", {}).items()):
            self._remove_laid(name, inner, digest, backups)
        for inner in sorted(backups):
            self._remove_laid(name, inner, None, backups)
        os.unlink(manifest_path)
        shutil.rmtree(self.root.outer(self.layout.backup_dir(name)), ignore_errors=True)
        return sorted(old.get("files", {}))

    # ----------------------------------------------------------------- the earlier layout
    def migrate_legacy(self, state):
        """Move what the earlier, resource-less layout holds for the packages this
        resource's ``state`` records under the resource (copy, flags included: no
        finished step runs again). A legacy record is removed once no resource's state
        file on the host still waits for it. Returns the names migrated."""
        migrated = []
        for name, entry in sorted(((state or {}).get("packages") or {}).items()):
            version = (entry or {}).get("version")
            if not is_version(version):
                continue
            legacy = {k: self.root.outer(v.format(name=name, version=version)) for k, v in LEGACY.items()}
            new_copy = self.root.outer(self.package_dir(name, version))
            if not os.path.isdir(legacy["package"]) or os.path.exists(new_copy):
                continue
            _copy_tree(legacy["package"], new_copy)
            _copy_tree(legacy["flags"], self.root.outer(self.flag_dir(name, version)))
            _copy_tree(legacy["backup"], self.root.outer(self.layout.backup_dir(name)))
            _copy_tree(legacy["data"], self.root.outer(self.data_dir(name)))
            for key, dest in (("history", self.history_file(name)), ("files", self.layout.files_manifest(name))):
                if os.path.isfile(legacy[key]) and not os.path.exists(self.root.outer(dest)):
                    os.makedirs(os.path.dirname(self.root.outer(dest)), exist_ok=True)
                    shutil.copy2(legacy[key], self.root.outer(dest))
            migrated.append(name)
            if not self._legacy_still_needed(name, version):
                for key in ("package", "flags", "history", "files", "backup", "data"):
                    path = legacy[key]
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    elif os.path.lexists(path):
                        os.unlink(path)
                _prune_empty(self.root.outer("%s/packages/%s" % (STORE, name)))
                _prune_empty(self.root.outer("%s/flags/%s" % (STORE, name)))
        return migrated

    def _legacy_still_needed(self, name, version):
        state_dir = self.root.outer("%s/state" % STORE)
        for fname in sorted(os.listdir(state_dir)) if os.path.isdir(state_dir) else ():
            if not fname.endswith(".json") or fname[:-5] == self.resource:
                continue
            other = read_json(os.path.join(state_dir, fname), None) or {}
            entry = ((other.get("packages") if isinstance(other, dict) else None) or {}).get(name)
            if isinstance(entry, dict) and entry.get("version") == version and not os.path.isdir(
                    self.root.outer(Layout(fname[:-5]).package_dir(name, version))):
                return True
        return False


def _copy_tree(src, dest):
    if os.path.isdir(src) and not os.path.islink(src) and not os.path.exists(dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copytree(src, dest, symlinks=True)


def _prune_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


def package_manifest(package):
    """The native manifest (package.json) of a package: what the host copy holds."""
    data = package.to_dict()
    data.pop("format", None)
    if not data.get("configScripts"):
        data.pop("configScripts", None)
    return data
