# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""JSON manifests with line numbers: every value's field path mapped to its line, and
syntax errors reported with theirs."""

from __future__ import annotations

import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.safe_load import InputRefused
from ansible_collections.nodewright.fleet.plugins.module_utils.package.jsonlines import (
    json_line_map,
    parse_json_manifest,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import PackageError

pytestmark = pytest.mark.unit


def test_json_line_map():
    text = '{\n  "a": [\n    1,\n    {"b": "x"}\n  ],\n  "c": "\\"}"\n}'
    lines = json_line_map(text)
    assert lines[("a",)] == 2 and lines[("a", 0)] == 3 and lines[("a", 1, "b")] == 4 and lines[("c",)] == 6


@pytest.mark.parametrize("text, expected", [
    ("{}", {(): 1}),
    ("[]", {(): 1}),
    ("3", {(): 1}),
    ('"s"', {(): 1}),
    ("\n\n  null", {(): 3}),
    ('{"a": {}, "b": []}', {(): 1, ("a",): 1, ("b",): 1}),
    ('{\n"a":\n\n1}', {(): 1, ("a",): 4}),   # the value's line, not its key's
    ('[\n-1.5e3,\ntrue,\nfalse,\nnull\n]', {(): 1, (0,): 2, (1,): 3, (2,): 4, (3,): 5}),
    ('{"k\\u00e9y": {\n "x\\ny": [\n  {}\n ]\n}}', {(): 1, ("k\u00e9y",): 1, ("k\u00e9y", "x\ny"): 2,
                                                   ("k\u00e9y", "x\ny", 0): 3}),
    ('{"a"  :  "b, c"  ,\r\n "d":2}', {(): 1, ("a",): 1, ("d",): 2}),
])
def test_json_line_map_table(text, expected):
    json.loads(text)
    assert json_line_map(text) == expected


def test_the_map_covers_every_value():
    data = {"name": "demo", "stages": {"apply": [{"path": "a.sh", "returncodes": [0, 3]}]}}
    text = json.dumps(data, indent=2)
    lines = json_line_map(text)
    assert lines[("stages", "apply", 0, "returncodes", 1)] == text.splitlines().index("          3") + 1
    assert len(lines) == 9


def test_parse_json_manifest_returns_data_and_lines():
    data, lines = parse_json_manifest('{\n  "name": "demo"\n}', source="package.json")
    assert data == {"name": "demo"}
    assert lines == {(): 1, ("name",): 2}


@pytest.mark.parametrize("text, line", [
    ('{\n  "name": "demo",\n}', 3),
    ('{\n  "name": demo\n}', 2),
    ("", 1),
])
def test_a_syntax_error_names_its_line_and_the_usual_cause(text, line):
    with pytest.raises(PackageError) as caught:
        parse_json_manifest(text, source="/pkg/package.json")
    err = caught.value
    assert len(err.errors) == 1
    assert err.errors[0].reason.startswith("not valid JSON: ")
    assert str(err).startswith("/pkg/package.json:%d: not valid JSON: " % line)
    assert (err.source, err.line) == ("/pkg/package.json", line)
    assert err.hint == "fix the syntax (a trailing comma or a missing quote is the usual cause)"


def test_too_deep_a_manifest_is_refused_as_such():
    with pytest.raises(InputRefused, match="nested more than"):
        parse_json_manifest("[" * 200 + "]" * 200, source="package.json")
