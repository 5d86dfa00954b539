# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""No Python file of the repository is longer than ``MAX_LINES``: a module that grows past
it is split by concept into modules beside it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MAX_LINES = 800


def python_files():
    """The repository's tracked Python files (those of the work tree that still exist)."""
    if not shutil.which("git") or not os.path.exists(os.path.join(REPO, ".git")):
        # An unpacked tree without git: every Python file outside what tools make.
        made = {".git", ".venv", ".matrix", ".collections", ".ansible", "build", "node_modules", "__pycache__"}
        found = []
        for dirpath, dirnames, filenames in os.walk(REPO):
            dirnames[:] = [d for d in dirnames if d not in made and not d.endswith(".egg-info")]
            found.extend(os.path.relpath(os.path.join(dirpath, f), REPO) for f in filenames if f.endswith(".py"))
        return sorted(found)
    out = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--", "*.py"], capture_output=True, check=True).stdout
    paths = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    return [p for p in paths if os.path.isfile(os.path.join(REPO, p))]


def line_count(path):
    with open(os.path.join(REPO, path), "rb") as fh:
        return sum(1 for _ in fh)


def test_no_python_file_is_over_the_limit():
    files = python_files()
    assert files, "git ls-files found no Python file"
    counts = {path: line_count(path) for path in files}
    over = sorted((n, path) for path, n in counts.items() if n > MAX_LINES)
    assert not over, "Python files over %d lines (split each by concept): %s" % (
        MAX_LINES, ", ".join("%s (%d)" % (path, n) for n, path in reversed(over)))
