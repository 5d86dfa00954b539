# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Package versions: semver 2.0.0 precedence, upstream's MAJOR.MINOR shorthands."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.package import model, versions

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("a, b, expected", [
    ("1.2", "1.2.0", 0), ("1", "1.0.0", 0), ("v1.2.3", "1.2.3", 0),
    ("1.0.0-rc.1", "1.0.0", -1), ("1.0.0-alpha", "1.0.0-alpha.1", -1), ("1.0.0-2", "1.0.0-10", -1),
    ("1.0.0-alpha.beta", "1.0.0-alpha.1", 1), ("1.0.0+build.1", "1.0.0+build.2", 0), ("2.0.0", "1.9.9", 1),
])
def test_precedence(a, b, expected):
    va, vb = versions.Version(a), versions.Version(b)
    assert ((va > vb) - (va < vb), va == vb, va <= vb, va >= vb) == (expected, expected == 0, expected <= 0,
                                                                      expected >= 0)


@pytest.mark.parametrize("text, ok", [("1.2.3", True), ("1.2", True), ("v3", True), ("01.2.3", False),
                                      ("1.2.3.4", False), ("latest", False), (None, False), (3, False)])
def test_what_a_version_may_look_like(text, ok):
    assert versions.is_version(text) is ok


def test_the_text_is_kept_as_written_and_an_error_says_what_a_version_is():
    assert str(versions.Version("1.2")) == "1.2"
    assert len({versions.Version("1.2"), versions.Version("1.2.0")}) == 1
    with pytest.raises(ValueError, match="MAJOR.MINOR.PATCH"):
        versions.Version("one")


def test_the_package_model_checks_versions_with_them():
    assert model.is_version is versions.is_version
