# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one seam to ansible-core internals: it knows the running version, loads nothing
internal at plugin load, and on a version whose worker plumbing it was not written for the
rollout forks workers as ``linear`` does and says so in one line."""

from __future__ import annotations

import ast
import pathlib

import pytest

from ansible.release import __version__ as CORE_VERSION

from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals

pytestmark = pytest.mark.unit


def test_the_running_ansible_core_is_one_the_seam_knows():
    # A new ansible-core release fails here, by name, before any user's rollout meets it:
    # check its strategy and worker internals (docs/compatibility.md), then add it to SUPPORTED.
    assert core_internals.known(CORE_VERSION), (
        "ansible-core %s is not known to plugins/plugin_utils/core_internals.py (SUPPORTED: %s)"
        % (CORE_VERSION, ", ".join("%d.%d" % m for m in sorted(core_internals.SUPPORTED))))
    assert core_internals.unknown_version_warning(CORE_VERSION) is None


@pytest.mark.parametrize("version, minor", [
    ("2.16.19", (2, 16)), ("2.19.14", (2, 19)), ("2.21.0rc1", (2, 21)), ("2.22.0.dev0", (2, 22)), ("3", (3, 0)),
])
def test_versions_are_read_as_major_minor(version, minor):
    assert core_internals.core_minor(version) == minor


def test_a_version_the_seam_does_not_know_gets_one_line_naming_it():
    line = core_internals.unknown_version_warning("2.22.0")
    assert "ansible-core 2.22.0 is not one the collection was tested on" in line
    assert "2.16, 2.17, 2.18, 2.19, 2.20, 2.21" in line and "\n" not in line
    assert core_internals.thread_worker_class("2.22.0") is None
    assert "on ansible-core 2.22.0 every task runs in a forked worker" in core_internals.thread_workers_unavailable(
        "2.22.0")


@pytest.mark.parametrize("version", ["2.16.19", "2.17.14", "2.18.19", "2.21.5"])
def test_thread_workers_fall_back_to_processes_where_the_plumbing_differs(version):
    assert core_internals.thread_worker_class(version) is None
    assert core_internals.thread_workers_unavailable(version).startswith(
        "nodewright_rollout_workers=threads needs ansible-core 2.19 or 2.20")


def test_thread_workers_load_on_the_versions_they_are_written_for():
    worker = core_internals.thread_worker_class()
    if core_internals.core_minor() in core_internals.THREAD_WORKER_MINORS:
        assert worker is not None and worker.__name__ == "ThreadWorker"
    else:
        assert worker is None


def _internal_imports(path):
    """(line, name, inside a function) for each import of ansible-core internals in ``path``:
    a module under ``ansible._internal`` or a private name taken from an ``ansible`` module."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and (child.module or "").split(".")[0] == "ansible":
                for alias in child.names:
                    private = alias.name.startswith("_") and not alias.name.endswith("__")
                    if child.module.startswith("ansible._internal") or private:
                        found.append((child.lineno, "%s.%s" % (child.module, alias.name), nested))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("ansible._internal"):
                        found.append((child.lineno, alias.name, nested))
            visit(child, nested)
    visit(tree, False)
    return found


def test_ansible_core_internals_are_imported_only_by_the_seam_and_never_at_load():
    root = pathlib.Path(core_internals.__file__).resolve().parents[2]
    seam = pathlib.Path(core_internals.__file__).resolve()
    elsewhere, at_load = [], []
    for path in sorted((root / "plugins").rglob("*.py")) + sorted((root / "cli").rglob("*.py")):
        for line, name, nested in _internal_imports(path):
            where = "%s:%d %s" % (path.relative_to(root), line, name)
            if path.resolve() != seam:
                elsewhere.append(where)
            elif not nested:
                at_load.append(where)
    assert elsewhere == [], "ansible-core internals outside plugins/plugin_utils/core_internals.py"
    assert at_load == [], "internals imported when the seam loads (a version without them could not load it)"
    assert any(nested for _line, _name, nested in _internal_imports(seam))


def test_results_are_keyed_by_host_and_task_on_every_version():
    class Named(object):
        def __init__(self, **kw):
            self.__dict__.update(kw)
    host, task = Named(name="gpu-1"), Named(_uuid="u-1")
    assert core_internals.result_key(Named(host=host, task=task)) == ("gpu-1", "u-1")
    assert core_internals.result_key(Named(_host=host, _task=task)) == ("gpu-1", "u-1")


# Fields of PlayIterator and TaskQueueManager that no plugin API gives; only the seam touches them.
_PRIVATE_FIELDS = (".all_tasks", ".cur_task", ".end_play", "._terminated", "._unreachable_hosts", "._stats",
                   "iterator._play")


def test_play_iterator_and_task_queue_fields_are_read_only_through_the_seam():
    root = pathlib.Path(core_internals.__file__).resolve().parents[2]
    seam = pathlib.Path(core_internals.__file__).resolve()
    found = []
    for path in sorted((root / "plugins").rglob("*.py")):
        if path.resolve() == seam:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            code = code.replace("core_internals.", "core_internals:")
            found.extend("%s:%d %s" % (path.relative_to(root), number, field) for field in _PRIVATE_FIELDS
                         if field in code)
    assert found == [], "use plugins/plugin_utils/core_internals.py for these"


def test_the_seam_starts_the_tasks_over_and_ends_the_play():
    class Iterator(object):
        def __init__(self):
            self.all_tasks, self.cur_task, self.end_play, self._play = ["a", "b"], 2, False, "play"
    it = Iterator()
    tasks = core_internals.play_tasks(it)
    it.all_tasks.append("handler block")
    core_internals.replay_tasks(it, tasks)
    assert (it.all_tasks, it.cur_task, core_internals.play_ended(it), core_internals.play_of(it)) == (
        ["a", "b"], 0, False, "play")
    core_internals.end_play(it)
    assert core_internals.play_ended(it)
