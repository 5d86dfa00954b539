# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Package versions: what a version may look like and how two compare. Stdlib only:
this module also runs on the node."""

from __future__ import annotations

import re

# A package version as upstream NodeWright takes it (Go's golang.org/x/mod/semver with the
# leading v optional): MAJOR.MINOR.PATCH with an optional pre-release and build, or the
# shorthands MAJOR.MINOR and MAJOR, which stand for MAJOR.MINOR.0 and MAJOR.0.0. The text
# is kept as written (it is the image tag and the node-state key); it compares as padded.
SEMVER_RE = re.compile(
    r"^v?(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?)?)?$")


class Version(object):
    """A semantic version (semver 2.0.0) with its precedence rules; ``1.2`` and ``1``
    (and a leading ``v``) are shorthands of ``1.2.0`` and ``1.0.0``, equal to them."""

    __slots__ = ("text", "major", "minor", "patch", "prerelease", "build")

    def __init__(self, text):
        m = SEMVER_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise ValueError("%r is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.2.0, or MAJOR.MINOR)" % (text,))
        self.text = text
        self.major, self.minor, self.patch = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)
        self.prerelease = tuple(m.group(4).split(".")) if m.group(4) else ()
        self.build = m.group(5) or ""

    def _key(self):
        # A release sorts after its pre-releases; numeric identifiers sort before
        # alphanumeric ones and compare as numbers.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if pre else 1, pre)

    def __eq__(self, other):
        return isinstance(other, Version) and self._key() == other._key()

    def __ne__(self, other):
        return not self == other

    def __lt__(self, other):
        return self._key() < other._key()

    def __le__(self, other):
        return self._key() <= other._key()

    def __gt__(self, other):
        return self._key() > other._key()

    def __ge__(self, other):
        return self._key() >= other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        return self.text

    def __repr__(self):
        return "Version(%r)" % self.text


def is_version(text):
    return isinstance(text, str) and bool(SEMVER_RE.match(text))
