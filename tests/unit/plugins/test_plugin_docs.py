# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every plugin of the collection has documentation that ``ansible-doc`` renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGIN_TYPES = ("modules", "inventory", "strategy", "callback", "connection", "filter", "lookup", "test")


def plugins():
    found = []
    for folder in PLUGIN_TYPES:
        path = os.path.join(REPO, "plugins", folder)
        if not os.path.isdir(path):
            continue
        # A file of filters or tests documents each one in <name>.yml beside it.
        ext = ".yml" if folder in ("filter", "test") else ".py"
        for name in sorted(os.listdir(path)):
            if name.endswith(ext) and not name.startswith("_"):
                found.append(("module" if folder == "modules" else folder, name[:-len(ext)]))
    return found


def test_every_plugin_type_is_found():
    kinds = {kind for kind, _name in plugins()}
    assert {"module", "inventory", "strategy", "callback", "connection"} <= kinds


@pytest.mark.parametrize("kind,name", plugins())
def test_ansible_doc_renders(kind, name):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", kind,
                           "nodewright.fleet." + name], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert proc.returncode == 0 and "[ERROR]" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)["nodewright.fleet." + name]["doc"]
    assert doc["short_description"] and doc["description"]
    for item in doc.get("notes") or ():
        assert isinstance(item, str), "notes entry is not text (a ': ' in it makes YAML read a mapping): %r" % item
