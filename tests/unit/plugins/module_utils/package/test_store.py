# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What the package runner keeps on a host: paths resolved inside the host root as a
chroot would, the per-resource layout, JSON records, history, config files, files
laid onto the host and restored, and the migration from the earlier layout. Every
host root is a temporary directory."""

from __future__ import annotations

import datetime
import hashlib
import json
import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.package import store
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.package.store import (
    HostRoot,
    Layout,
    PackageStore,
    UnsafePath,
)

pytestmark = pytest.mark.unit


class Store(PackageStore):
    """The store side alone, on a host root."""

    def __init__(self, root, resource="r"):
        self.root = HostRoot(str(root))
        self.resource = resource
        self.layout = Layout(resource)


def write(path, text=""):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as fh:
        fh.write(text)


def read(path):
    with open(str(path)) as fh:
        return fh.read()


def make_package(root, files=None, name="demo", version="1.0.0"):
    root = str(root)
    write(os.path.join(root, "steps", "apply.sh"), "#!/bin/sh\nexit 0\n")
    write(os.path.join(root, "package.json"), json.dumps(
        {"name": name, "version": version, "stages": {"apply": [{"path": "apply.sh"}],
                                                       "apply-check": [{"path": "apply.sh", "idempotent": True}]}}))
    for inner, text in (files or {}).items():
        write(os.path.join(root, "files", inner.lstrip("/")), text)
    return load_package(root)


# --------------------------------------------------------------------------- host root


@pytest.mark.parametrize("inner, outer", [
    ("/var/lib/x", "/var/lib/x"),
    ("var/lib/x", "/var/lib/x"),
    ("//etc", "/etc"),
])
def test_the_real_root_is_not_chrooted(inner, outer):
    root = HostRoot("/")
    assert root.chrooted is False
    assert root.outer(inner) == outer
    assert HostRoot(None).path == "/" and HostRoot("").path == "/"


@pytest.mark.parametrize("inner, rel", [
    ("/etc/x.conf", "etc/x.conf"),
    ("etc/./x.conf", "etc/x.conf"),
    ("/../../etc/x.conf", "etc/x.conf"),           # '..' stops at the root
    ("/a/b/../c", "a/c"),
    ("/", ""),
])
def test_outer_resolves_inside_the_root(tmp_path, inner, rel):
    root = HostRoot(str(tmp_path))
    assert root.chrooted is True
    expected = os.path.join(str(tmp_path), rel) if rel else str(tmp_path)
    assert root.outer(inner) == expected


def test_symlinks_are_resolved_inside_the_root(tmp_path):
    os.makedirs(str(tmp_path / "real" / "dir"))
    os.symlink("/real", str(tmp_path / "abs"))                 # absolute: taken inside the root
    os.symlink("../../..", str(tmp_path / "real" / "dir" / "up"))  # relative: cannot climb out
    os.symlink("/etc/passwd", str(tmp_path / "passwd"))
    root = HostRoot(str(tmp_path))
    assert root.outer("/abs/dir/f") == str(tmp_path / "real" / "dir" / "f")
    assert root.outer("/real/dir/up/etc/x") == str(tmp_path / "etc" / "x")
    assert root.outer("/passwd") == str(tmp_path / "etc" / "passwd")
    # Not following the last component names the link itself.
    assert root.outer("/passwd", follow=False) == str(tmp_path / "passwd")
    assert root.outer("/abs/dir", follow=False) == str(tmp_path / "real" / "dir")


def test_a_symlink_loop_is_refused(tmp_path):
    os.symlink("/b", str(tmp_path / "a"))
    os.symlink("/a", str(tmp_path / "b"))
    with pytest.raises(UnsafePath) as caught:
        HostRoot(str(tmp_path)).outer("/a/x")
    assert "/a/x on host root %s: too many levels of symlinks" % tmp_path in str(caught.value)


def test_boot_id(tmp_path):
    root = HostRoot(str(tmp_path))
    assert root.boot_id() == ""
    write(tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id", "abc-123\n")
    assert root.boot_id() == "abc-123"


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize("method, args, path", [
    ("package_dir", ("p", "1.0"), "/var/lib/nodewright/packages/res/p/1.0"),
    ("packages_of", ("p",), "/var/lib/nodewright/packages/res/p"),
    ("log_dir", ("p", "1.0"), "/var/log/nodewright/res/p/1.0"),
    ("data_dir", ("p",), "/var/lib/nodewright/data/res/p"),
    ("interrupt_file", ("p",), "/var/lib/nodewright/interrupts/res/p"),
    ("flag_dir", ("p",), "/var/lib/nodewright/flags/res/p"),
    ("flag_dir", ("p", "1.0"), "/var/lib/nodewright/flags/res/p/1.0"),
    ("flag_dir", ("p", "1.0", "apply"), "/var/lib/nodewright/flags/res/p/1.0/apply"),
    ("flag_dir", ("p", None, "apply"), "/var/lib/nodewright/flags/res/p/apply"),
    ("history_file", ("p",), "/var/lib/nodewright/history/res/p.json"),
    ("files_manifest", ("p",), "/var/lib/nodewright/files/res/p.json"),
    ("backup_dir", ("p",), "/var/lib/nodewright/backup/res/p"),
    ("state_file", (), "/var/lib/nodewright/state/res.json"),
    ("skyhook_root", (), "/var/lib/nodewright/resources/res"),
])
def test_layout(method, args, path):
    assert getattr(Layout("res"), method)(*args) == path


def test_two_resources_never_share_a_path():
    a, b = Layout("a"), Layout("b")
    for method, args in (("package_dir", ("p", "1")), ("flag_dir", ("p", "1")), ("history_file", ("p",)),
                         ("files_manifest", ("p",)), ("backup_dir", ("p",)), ("data_dir", ("p",)),
                         ("state_file", ()), ("log_dir", ("p", "1"))):
        assert getattr(a, method)(*args) != getattr(b, method)(*args)


def test_store_paths_follow_the_layout(tmp_path):
    s = Store(tmp_path, "res")
    assert s.package_dir("p", "1") == Layout("res").package_dir("p", "1")
    assert s.flag_dir("p", "1", "apply") == Layout("res").flag_dir("p", "1", "apply")
    assert s.state_file() == "/var/lib/nodewright/state/res.json"


# --------------------------------------------------------------------------- records


def test_write_and_read_json(tmp_path):
    path = str(tmp_path / "a" / "b.json")
    store.write_json(path, {"b": 1, "a": [1]})
    assert read(path) == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'
    assert not os.path.exists(path + ".tmp")
    assert store.read_json(path) == {"a": [1], "b": 1}


@pytest.mark.parametrize("content", [None, "", "{broken"])
def test_read_json_default(tmp_path, content):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    assert store.read_json(str(path)) is None
    assert store.read_json(str(path), {"d": 1}) == {"d": 1}


def test_iso_and_sha256(tmp_path):
    moment = datetime.datetime(2026, 12, 1, 8, 5, 9, 123, tzinfo=datetime.timezone.utc)
    assert store.iso(moment) == "2026-12-01T08:05:09Z"
    assert store.iso().endswith("Z")
    path = tmp_path / "f"
    path.write_bytes(b"x" * 70000)
    assert store.sha256(str(path)) == hashlib.sha256(b"x" * 70000).hexdigest()


def test_record_history_keeps_the_last_hundred(tmp_path):
    s = Store(tmp_path)
    for n in range(store.HISTORY_LIMIT + 5):
        s.record_history("p", "1.0.%d" % n, {"n": n})
    data = store.read_json(s.root.outer(s.history_file("p")))
    assert data["name"] == "p" and data["version"] == "1.0.104"
    assert len(data["history"]) == store.HISTORY_LIMIT
    assert [h["n"] for h in data["history"][:2]] == [5, 6]
    assert data["history"][-1]["resource"] == "r" and data["history"][-1]["time"].endswith("Z")


# --------------------------------------------------------------------------- config and copies


def test_write_config_replaces_stale_keys_and_links(tmp_path):
    s = Store(tmp_path)
    pkg_root = tmp_path / "copy"
    write(pkg_root / "configmaps" / "stale", "old")
    write(tmp_path / "elsewhere", "keep")
    os.symlink(str(tmp_path / "elsewhere"), str(pkg_root / "configmaps" / "linked"))
    s.write_config(str(pkg_root), {"linked": "new", "obj": {"a": 1}, "n": 3})
    assert sorted(os.listdir(str(pkg_root / "configmaps"))) == ["linked", "n", "obj"]
    assert not os.path.islink(str(pkg_root / "configmaps" / "linked"))
    assert read(tmp_path / "elsewhere") == "keep"
    package = type("Copy", (), {"root": str(pkg_root)})()
    assert s.stored_config(package) == {"linked": "new", "n": "3", "obj": '{"a": 1}'}


def test_stored_config_of_a_copy_without_config(tmp_path):
    package = type("Copy", (), {"root": str(tmp_path)})()
    assert Store(tmp_path).stored_config(package) == {}


def test_install_copies_the_package_with_its_config(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    package = make_package(tmp_path / "src")
    s = Store(host)
    assert s.stored_package("demo", "1.0.0") is None
    copy = s.install(package, {})
    dest = s.root.outer(s.package_dir("demo", "1.0.0"))
    assert copy.root == dest and (copy.name, copy.version) == ("demo", "1.0.0")
    assert os.access(os.path.join(dest, "steps", "apply.sh"), os.X_OK)
    assert json.loads(read(os.path.join(dest, "package.json"))) == store.package_manifest(package)
    stored = s.stored_package("demo", "1.0.0")
    assert (stored.name, stored.version) == ("demo", "1.0.0")


def test_package_manifest_is_the_native_manifest_without_format(tmp_path):
    manifest = store.package_manifest(make_package(tmp_path))
    assert "format" not in manifest and "configScripts" not in manifest
    assert (manifest["name"], manifest["version"]) == ("demo", "1.0.0")


def test_an_unsafe_package_is_refused_before_copying(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    package = make_package(tmp_path / "src")
    os.symlink("/etc/shadow", str(tmp_path / "src" / "steps" / "evil"))
    with pytest.raises(UnsafePath) as caught:
        Store(host).install(package, {})
    assert "package demo 1.0.0: steps/evil is a symlink to the absolute path /etc/shadow" in str(caught.value)
    assert "nothing was copied to host root" in str(caught.value)
    assert not os.path.exists(str(host / "var"))


def test_remove_stored_and_clear_flags(tmp_path):
    s = Store(tmp_path)
    for version in ("1", "2"):
        write(s.root.outer(s.package_dir("p", version) + "/x"))
        write(s.root.outer(s.flag_dir("p", version, "apply") + "/step.abc"))
        write(s.root.outer(s.flag_dir("p", version, "config") + "/step.abc"))
    s.clear_flags("p", "2", ["apply"])
    assert not os.path.exists(s.root.outer(s.flag_dir("p", "2", "apply")))
    assert os.path.exists(s.root.outer(s.flag_dir("p", "2", "config")))
    s.remove_stored("p", keep="2")
    assert os.listdir(s.root.outer(s.layout.packages_of("p"))) == ["2"]
    assert not os.path.exists(s.root.outer(s.flag_dir("p", "1")))
    s.remove_stored("p")
    assert not os.path.exists(s.root.outer(s.layout.packages_of("p")))
    s.remove_stored("never-there")


# --------------------------------------------------------------------------- files laid onto the host


def test_lay_files_backs_up_and_remove_files_restores(tmp_path):
    host = tmp_path / "host"
    write(host / "etc" / "app.conf", "original")
    package = make_package(tmp_path / "src", {"/etc/app.conf": "ours", "/etc/new.conf": "new"})
    s = Store(host)
    assert s.lay_files(package) == ["/etc/app.conf", "/etc/new.conf"]
    assert read(host / "etc" / "app.conf") == "ours"
    manifest = store.read_json(s.root.outer(s.layout.files_manifest("demo")))
    assert manifest["backups"] == ["/etc/app.conf"] and manifest["version"] == "1.0.0"
    assert manifest["files"]["/etc/new.conf"] == hashlib.sha256(b"new").hexdigest()
    assert s.remove_files("demo") == ["/etc/app.conf", "/etc/new.conf"]
    assert read(host / "etc" / "app.conf") == "original"
    assert not os.path.exists(str(host / "etc" / "new.conf"))
    assert not os.path.exists(s.root.outer(s.layout.files_manifest("demo")))
    assert s.remove_files("demo") == []


def test_a_file_edited_since_it_was_laid_is_left_in_place(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    package = make_package(tmp_path / "src", {"/etc/app.conf": "ours"})
    s = Store(host)
    s.lay_files(package)
    write(host / "etc" / "app.conf", "edited by hand")
    s.remove_files("demo")
    assert read(host / "etc" / "app.conf") == "edited by hand"


def test_a_file_the_next_version_drops_is_removed(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    s = Store(host)
    s.lay_files(make_package(tmp_path / "v1", {"/etc/a": "a", "/etc/b": "b"}))
    assert s.lay_files(make_package(tmp_path / "v2", {"/etc/a": "a2"}, version="2.0.0")) == ["/etc/a"]
    assert not os.path.exists(str(host / "etc" / "b"))
    assert read(host / "etc" / "a") == "a2"


def test_a_package_without_files_leaves_no_manifest(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    s = Store(host)
    assert s.lay_files(make_package(tmp_path / "src")) == []
    assert not os.path.exists(s.root.outer(s.layout.files_manifest("demo")))


def test_files_are_never_laid_outside_the_host_root(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    os.symlink("/", str(host / "etc"))        # resolved inside the host root: lands in host/
    s = Store(host)
    assert s.lay_files(make_package(tmp_path / "src", {"/etc/app.conf": "ours"})) == ["/etc/app.conf"]
    assert read(host / "app.conf") == "ours"


# --------------------------------------------------------------------------- the earlier layout


def test_migrate_legacy_moves_records_under_the_resource(tmp_path):
    s = Store(tmp_path, "res")
    root = s.root
    write(root.outer("/var/lib/nodewright/packages/p/1.0.0/package.json"), "{}")
    write(root.outer("/var/lib/nodewright/flags/p/1.0.0/apply/step.abc"), "{}")
    write(root.outer("/var/lib/nodewright/history/p.json"), '{"history": []}')
    state = {"packages": {"p": {"version": "1.0.0"}, "q": {"version": "1.0.0"}, "bad": {"version": "x y"}}}
    assert s.migrate_legacy(state) == ["p"]
    assert os.path.isfile(root.outer(s.package_dir("p", "1.0.0") + "/package.json"))
    assert os.path.isfile(root.outer(s.flag_dir("p", "1.0.0", "apply") + "/step.abc"))
    assert os.path.isfile(root.outer(s.history_file("p")))
    # No other resource waits for it: the legacy record is gone.
    assert not os.path.exists(root.outer("/var/lib/nodewright/packages/p"))
    assert not os.path.exists(root.outer("/var/lib/nodewright/history/p.json"))
    assert s.migrate_legacy(state) == []


def test_migrate_legacy_keeps_what_another_resource_still_needs(tmp_path):
    s = Store(tmp_path, "res")
    root = s.root
    write(root.outer("/var/lib/nodewright/packages/p/1.0.0/package.json"), "{}")
    store.write_json(root.outer(Layout("other").state_file()), {"packages": {"p": {"version": "1.0.0"}}})
    assert s.migrate_legacy({"packages": {"p": {"version": "1.0.0"}}}) == ["p"]
    assert os.path.isfile(root.outer("/var/lib/nodewright/packages/p/1.0.0/package.json"))


@pytest.mark.parametrize("state", [None, {}, {"packages": None}])
def test_migrate_legacy_of_nothing(tmp_path, state):
    assert Store(tmp_path).migrate_legacy(state) == []
