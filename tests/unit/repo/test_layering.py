# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The tree's rules: module_utils never reaches up into plugin_utils, every module_utils
file has its own unit test module, and no package is recognised by name in code that
is not its own."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")


def module_utils_files():
    out = subprocess.run(["git", "ls-files", "plugins/module_utils/*.py"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    return [p for p in out if os.path.basename(p) != "__init__.py" and os.path.exists(os.path.join(REPO, p))]


def test_module_utils_never_import_plugin_utils():
    offenders = []
    for path in module_utils_files():
        with open(os.path.join(REPO, path)) as fh:
            for number, line in enumerate(fh, 1):
                if re.search(r"^\s*(from|import)\s+\S*plugins\.plugin_utils", line):
                    offenders.append("%s:%d" % (path, number))
    assert not offenders, "module_utils imports plugin_utils (move the code down, or pass it in): %s" % offenders


def test_every_module_utils_file_has_its_own_test_module():
    missing = []
    for path in module_utils_files():
        domain = os.path.basename(os.path.dirname(path))
        test = os.path.join(REPO, "tests", "unit", "plugins", "module_utils", domain,
                            "test_" + os.path.basename(path))
        if not os.path.exists(test):
            missing.append(os.path.relpath(test, REPO))
    assert not missing, "module_utils files without their own unit test module: %s" % missing


# Code that belongs to a package may name it; generic code decides from the manifest.
_OWN = {"nvidia-tuning": ("plugins/module_utils/tuning/", "plugins/module_utils/package/resolvers.py",
                          "plugins/module_utils/package/model.py", "plugins/filter/tuning.py",
                          "plugins/plugin_utils/tuning_files.py")}


@pytest.mark.parametrize("package", sorted(_OWN))
def test_no_package_is_special_cased_by_name_outside_its_own_code(package):
    pattern = re.compile(r"""==\s*["']%s["']|["']%s["']\s*==|!=\s*["']%s["']""" % ((re.escape(package),) * 3))
    out = subprocess.run(["git", "ls-files", "plugins/*.py", "cli/*.py"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    offenders = []
    for path in out:
        if path.startswith(_OWN[package]) or not os.path.exists(os.path.join(REPO, path)):
            continue
        with open(os.path.join(REPO, path)) as fh:
            text = fh.read()
        if pattern.search(text) or re.search(r"\bPACKAGE_NAME\b", text) and "tuning" in text:
            offenders.append(path)
    assert not offenders, "%s is special-cased by name in %s" % (package, offenders)
