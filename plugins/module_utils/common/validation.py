# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Helpers that read user input (resources, policies, packages, options) field by field.

Every error names the field as a path into the input (``spec.default.budget.count``,
``spec.packages.sysctl.configMap``) and, for an unknown key, the nearest known one.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError


def field_path(where, key):
    """``where`` extended by ``key``: ``a.b`` for a name, ``a[2]`` for an index."""
    if isinstance(key, int):
        return "%s[%d]" % (where, key)
    return "%s.%s" % (where, key) if where else str(key)


def did_you_mean(value, known):
    """``"did you mean 'x'?"`` for the nearest of ``known``, or None."""
    near = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return "did you mean %r?" % near[0] if near else None


def require_mapping(value, where, what, hint=None):
    if not isinstance(value, dict):
        raise ValidationError("%s must be a mapping, got %s" % (what, type(value).__name__),
                              field=where, hint=hint)
    return value


def check_keys(mapping, allowed, where):
    """Refuse the first key of ``mapping`` not in ``allowed``, suggesting the nearest."""
    for key in mapping:
        if key not in allowed:
            hint = "allowed here: %s" % ", ".join(allowed)
            near = did_you_mean(key, allowed)
            if near:
                hint = "%s %s" % (near, hint)
            raise ValidationError("unknown field %r" % (key,), field=field_path(where, key), hint=hint)


def read_int(mapping, key, where, minimum, maximum=None, default=None, hint=None):
    """``mapping[key]`` as a whole number within bounds (``default`` when absent)."""
    path = field_path(where, key)
    value = mapping.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("must be a whole number, got %r" % (value,), field=path, hint=hint)
    if value < minimum or (maximum is not None and value > maximum):
        wanted = ("from %d to %d" % (minimum, maximum)) if maximum is not None else (">= %d" % minimum)
        raise ValidationError("must be %s, got %d" % (wanted, value), field=path, hint=hint)
    return value


def read_bool(mapping, key, where, default):
    value = mapping.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("must be true or false, got %r" % (value,), field=field_path(where, key))
    return value


class Problems(object):
    """Collects every problem of one input, so that a person fixes them all in one go.

    ``with problems.collect(): check(...)`` records a ``ValidationError`` raised inside
    and carries on; ``raise_if_any()`` then raises one ``ValidationErrors`` naming each.
    Parts that depend on a failed one are the caller's to skip (``problems.ok``)."""

    def __init__(self, source=None):
        self.errors = []
        self.source = source

    def add(self, error):
        several = getattr(error, "errors", None)
        if isinstance(several, list) and several and all(isinstance(e, ValidationError) for e in several):
            self.errors.extend(several)  # ValidationErrors, and the package model's PackageError
        else:
            self.errors.append(error)

    def collect(self):
        return _Collect(self)

    @property
    def ok(self):
        return not self.errors

    def raise_if_any(self):
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ValidationErrors(self.errors)


class _Collect(object):
    def __init__(self, problems):
        self.problems = problems
        self.failed = False

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and isinstance(exc, ValidationError):
            self.problems.add(exc)
            self.failed = True
            return True
        return False


class ValidationErrors(ValidationError):
    """Several problems of one input. ``errors`` holds each; the message lists them all."""

    def __init__(self, errors):
        self.errors = list(errors)
        first = self.errors[0]
        self.problems = [str(e) for e in self.errors]
        ValidationError.__init__(self, "%d problems: %s" % (len(self.errors), "; ".join(
            "(%d) %s" % (n, text) for n, text in enumerate(self.problems, 1))))
        self.field = first.field
        self.source = first.source
        self.line = first.line


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
# The form the CRDs accept (Go's time.ParseDuration without signs and sub-millisecond units).
DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h))+)$"


def parse_duration(value, where, what="duration", allow_none=True):
    """Seconds from a duration: ``"90s"``, ``"30m"``, ``"1h30m"``, ``"0"`` (Go's
    notation, as Kubernetes objects write it) or a whole number of seconds. None
    stays None (when allowed); a negative or malformed one is refused."""
    hint = "a duration such as 90s, 30m or 1h30m (0 for none), or a whole number of seconds"
    if value is None:
        if allow_none:
            return None
        raise ValidationError("%s is required" % what, field=where, hint=hint)
    if isinstance(value, bool):
        raise ValidationError("%s must be a duration, got %r" % (what, value), field=where, hint=hint)
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValidationError("%s must not be negative, got %s" % (what, value), field=where, hint=hint)
        return value
    if not isinstance(value, str):
        raise ValidationError("%s must be a duration, got %r" % (what, value), field=where, hint=hint)
    text = value.strip()
    if text.startswith("-"):
        raise ValidationError("%s must not be negative, got %r" % (what, value), field=where, hint=hint)
    if text.isdigit():
        return int(text)
    if not re.match(DURATION_PATTERN, text):
        raise ValidationError("%s %r is not a duration" % (what, value), field=where, hint=hint)
    total = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return int(total) if total == int(total) else total
