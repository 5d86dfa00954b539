# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NVIDIA tuning's shipped files, read on the controller."""

from __future__ import annotations

import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import shipped

pytestmark = pytest.mark.unit


def test_the_paths_point_into_the_collection():
    for path in (shipped.ROLE_DIR, shipped.PROFILES_DIR, shipped.TEMPLATES_DIR, shipped.PACKAGE_DIR):
        assert os.path.isdir(path), path
    assert os.path.isfile(os.path.join(shipped.PACKAGE_DIR, "package.json"))


def test_every_shipped_layer_loads_by_its_path_name():
    layers = shipped.load_profiles()
    assert "base" in layers and all(isinstance(v, dict) for v in layers.values())
    assert all("\\" not in name and not name.endswith(".yml") for name in layers)


def test_a_layer_that_is_not_a_mapping_or_twice_defined_is_refused(tmp_path):
    (tmp_path / "a.yml").write_text("- 1\n")
    with pytest.raises(ValidationError, match="is not a mapping"):
        shipped.load_profiles(str(tmp_path))
    (tmp_path / "a.yml").write_text("settings: {}\n")
    (tmp_path / "a.yaml").write_text("settings: {}\n")
    with pytest.raises(ValidationError, match="defined twice"):
        shipped.load_profiles(str(tmp_path))


def test_a_missing_profiles_directory_says_where_profiles_come_from(tmp_path):
    with pytest.raises(ValidationError) as err:
        shipped.load_profiles(str(tmp_path / "nowhere"))
    assert "does not exist" in str(err.value) and "controller" in err.value.hint


def test_rendered_files_end_with_a_newline(tmp_path):
    (tmp_path / "t.j2").write_text("value={{ item.value }}")
    out = shipped.render_files({"files": [{"template": "t.j2", "value": 3, "path": "/etc/x"}]},
                               templates_dir=str(tmp_path))
    assert out == [{"template": "t.j2", "value": 3, "path": "/etc/x", "content": "value=3\n"}]
