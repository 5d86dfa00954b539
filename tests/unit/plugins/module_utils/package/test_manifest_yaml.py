# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""YAML package manifests: each value's line, and invalid YAML reported with its line."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package import manifest_yaml

pytestmark = pytest.mark.unit


def test_available_follows_pyyaml(monkeypatch):
    assert manifest_yaml.available() is True
    monkeypatch.setattr(manifest_yaml, "yaml", None)
    assert manifest_yaml.available() is False


@pytest.mark.parametrize("text, expected", [
    ("", {}),
    ("name: demo\n", {(): 1, ("name",): 1}),
    ("name: demo\nversion: 1.0.0\n", {(): 1, ("name",): 1, ("version",): 2}),
    ("stages:\n  apply:\n    - path: a.sh\n    - path: b.sh\n      idempotent: true\n",
     {(): 1, ("stages",): 2, ("stages", "apply"): 3, ("stages", "apply", 0): 3, ("stages", "apply", 0, "path"): 3,
      ("stages", "apply", 1): 4, ("stages", "apply", 1, "path"): 4, ("stages", "apply", 1, "idempotent"): 5}),
    ("# comment\n\nlist: [1,\n  2]\n", {(): 3, ("list",): 3, ("list", 0): 3, ("list", 1): 4}),
    ("- a\n- b: c\n", {(): 1, (0,): 1, (1,): 2, (1, "b"): 2}),
])
def test_yaml_line_map(text, expected):
    assert manifest_yaml.yaml_line_map(text) == expected


def test_read_manifest(tmp_path):
    path = tmp_path / "package.yaml"
    path.write_text("name: demo\nversion: 1.0.0\nstages:\n  apply:\n    - path: run.sh\n")
    data, lines = manifest_yaml.read_manifest(str(path))
    assert data == {"name": "demo", "version": "1.0.0", "stages": {"apply": [{"path": "run.sh"}]}}
    assert lines[("stages", "apply", 0, "path")] == 5


@pytest.mark.parametrize("text, line", [
    ("name: demo\nversion: [1.0.0\n", 3),
    ("name: demo\n  bad: indent\n", 2),
    ("a: 'unterminated\n", 2),
])
def test_invalid_yaml_names_its_line(tmp_path, text, line):
    path = tmp_path / "package.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError) as caught:
        manifest_yaml.read_manifest(str(path))
    assert caught.value.reason.startswith("not valid YAML: ")
    assert (caught.value.source, caught.value.line) == (str(path), line)


def test_a_missing_manifest_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        manifest_yaml.read_manifest(str(tmp_path / "package.yaml"))


def test_an_oversized_manifest_is_refused_before_parsing(tmp_path):
    from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
    path = tmp_path / "package.yaml"
    path.write_text("x: " + "a" * safe_load.DEFAULT_LIMITS.max_bytes + "\n")
    with pytest.raises(safe_load.InputRefused) as caught:
        manifest_yaml.read_manifest(str(path))
    assert "NodeWright reads" in str(caught.value)
