# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every repository path docs/architecture.md names exists: a file that moved or was split
leaves the page describing a tree that is not there.

A path is a word of an inline code span (between backticks, outside fenced blocks) that holds
a ``/`` and ends in a file extension or in ``/``; it is taken relative to the repository root.
Absolute paths (a host's ``/var/lib/...``) and URLs are not the repository's. A placeholder
(``packages/<name>/``) is checked up to the folder before it."""

from __future__ import annotations

import os
import re

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DOC = os.path.join(REPO, "docs", "architecture.md")

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")
PLACEHOLDER = re.compile(r"[<{*$]")


def _path_like(word):
    if "/" not in word or word.startswith(("/", "~")) or "://" in word:
        return False
    return word.endswith("/") or bool(EXTENSION.search(word.rsplit("/", 1)[-1]))


def named_paths(text):
    """The path-like words of the text's inline code spans, in order, each once."""
    found = []
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        for word in span.split():
            if _path_like(word) and word not in found:
                found.append(word)
    return found


def _checked_part(path):
    """The part of ``path`` that must exist: all of it, or the folder before a placeholder."""
    match = PLACEHOLDER.search(path)
    if match is None:
        return path
    return path[:match.start()].rpartition("/")[0]


def missing(paths):
    out = []
    for path in paths:
        part = _checked_part(path)
        if part and not os.path.exists(os.path.join(REPO, part)):
            out.append(path)
    return out


def _doc_text():
    with open(DOC, encoding="utf-8") as fh:
        return fh.read()


def test_the_extraction_finds_paths_and_leaves_the_rest():
    text = "\n".join([
        "See `plugins/strategy/rollout.py`, `deploy/crds/` and `ansible-playbook playbooks/plan.yml`.",
        "Not paths: `nodewright.io/state-<resource>`, `/var/lib/nodewright/state/x.json`, `kube-system/lease`,",
        "`https://example.com/a.md`, `hostvars['localhost']`, `fleet.driver`.",
        "```text",
        "fenced/ignored.py",
        "```",
    ])
    assert named_paths(text) == ["plugins/strategy/rollout.py", "deploy/crds/", "playbooks/plan.yml"]


def test_a_placeholder_is_checked_up_to_its_folder():
    assert _checked_part("packages/<name>/") == "packages"
    assert missing(["packages/<name>/", "nowhere/<name>/x.py", "plugins/nowhere.py"]) == [
        "nowhere/<name>/x.py", "plugins/nowhere.py"]


def test_the_page_names_repository_paths():
    # The check below has something to check: the page points into the code.
    assert len(named_paths(_doc_text())) >= 20


def test_every_path_the_page_names_exists():
    gone = missing(named_paths(_doc_text()))
    assert not gone, "docs/architecture.md names %d path(s) that do not exist (relative to the repository " \
                     "root): %s" % (len(gone), ", ".join(gone))
