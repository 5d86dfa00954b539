# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every file a shipped playbook, role or scenario names through ``playbook_dir`` or
``role_path`` exists: a task file that moved away fails the run only on the node, as an
include that cannot be loaded."""

from __future__ import annotations

import glob
import os
import re

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
REFERENCE = re.compile(r"\{\{\s*(playbook_dir|role_path)\s*\}\}(/[^\"'\s{}]+)")


def yaml_files():
    out = []
    for pattern in ("playbooks/*.yml", "playbooks/**/*.yml", "roles/**/*.yml", "extensions/molecule/**/*.yml"):
        out.extend(glob.glob(os.path.join(REPO, pattern), recursive=True))
    return sorted(set(out))


def references():
    found = []
    for path in yaml_files():
        with open(path) as fh:
            text = fh.read()
        for match in REFERENCE.finditer(text):
            kind, rest = match.groups()
            if kind == "playbook_dir":
                base = os.path.dirname(path)
            else:
                rel = os.path.relpath(path, REPO).split(os.sep)
                base = os.path.join(REPO, *rel[:2])  # roles/<name>
            found.append((os.path.relpath(path, REPO), match.group(0), os.path.normpath(base + rest)))
    return found


def test_the_shipped_files_name_some_paths():
    # The check below has something to check (the rollout's package dirs, the role's profiles).
    assert len(references()) >= 4


@pytest.mark.parametrize("source,text,target", references(), ids=lambda v: v if isinstance(v, str) else None)
def test_each_named_path_exists(source, text, target):
    assert os.path.exists(target), "%s names %s (%s), which does not exist" % (source, text, target)
