# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""JSON manifests with line numbers: parse a ``package.json`` and map each value's
field path to the line it starts on, so validation errors point into the file.
Stdlib only."""

from __future__ import annotations

import re
from json.decoder import scanstring

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError


def json_line_map(text):
    """Map each value's path in a JSON document to the line it starts on, so errors
    point into the manifest. Call only on text that ``json.loads`` accepted."""
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    lines = {}
    ws = re.compile(r"[ \t\n\r]*")
    scalar = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")

    def line_at(pos):
        lo, hi = 0, len(newlines)
        while lo < hi:
            mid = (lo + hi) // 2
            if newlines[mid] < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo + 1

    def skip(i):
        return ws.match(text, i).end()

    def value(i, path):
        i = skip(i)
        lines[path] = line_at(i)
        c = text[i]
        if c == "{":
            i = skip(i + 1)
            if text[i] == "}":
                return i + 1
            while True:
                key, i = scanstring(text, skip(i) + 1)
                i = skip(i) + 1  # the colon
                i = skip(value(i, path + (key,)))
                if text[i] == "}":
                    return i + 1
                i += 1  # the comma
        if c == "[":
            i = skip(i + 1)
            if text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = skip(value(i, path + (n,)))
                n += 1
                if text[i] == "]":
                    return i + 1
                i += 1
        if c == '"':
            return scanstring(text, i + 1)[1]
        return scalar.match(text, i).end()

    value(0, ())
    return lines


def parse_json_manifest(text, source=None):
    """Parse a JSON manifest; a syntax error becomes a ``PackageError`` with its line."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
    try:
        data = safe_load.load_json(text, source)
    except ValueError as exc:
        from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import PackageError
        raise PackageError([ValidationError(
            "not valid JSON: %s" % getattr(exc, "msg", exc), source=source, line=getattr(exc, "lineno", None),
            hint="fix the syntax (a trailing comma or a missing quote is the usual cause)")])
    return data, json_line_map(text)
