# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every field of every CRD in deploy/crds is shown to matter by some test.

A field a user can set but that changes nothing is a silent lie (a drain option
that was validated, documented and never passed to the drain went unnoticed this
way), so ``tests/crd_field_coverage.yml`` maps each field of each CRD schema to the
tests that show it:

- a ``spec`` field maps to tests that set it and assert an outcome that depends on
  it (nodes drained or not, batch sizes, a node erroring, a taint, a status), not
  merely that validation accepts it;
- a ``status`` field maps to tests that assert the value NodeWright writes there,
  since status is what NodeWright tells the user: a status field nothing asserts is
  as unchecked as a spec field nothing reads.

Only ``spec`` and ``status`` are enumerated: ``apiVersion``, ``kind`` and
``metadata`` are Kubernetes' own. A field path is written as in test_crds.py:
``*`` for a map's values (``additionalProperties``), ``[]`` for a list's items.
Leaves are listed: a map or list of scalars is one field, an object is its
properties.

This test fails for a schema field without an entry, for an entry naming a field
no schema has any more, and for an entry naming a test that does not exist (the
test files are parsed, so a renamed or deleted test is caught).
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = pathlib.Path(__file__).resolve().parents[3]
CRDS = REPO / "deploy" / "crds"
MAPPING = REPO / "tests" / "crd_field_coverage.yml"
HOW = ("Map each field in tests/crd_field_coverage.yml to the tests (tests/...py::test_name or "
       "tests/...py::Class::test_name) that change it and assert its effect (spec) or assert its value "
       "(status); write such a test where none exists.")


def _is_object_with_fields(schema):
    return isinstance(schema, dict) and bool(schema.get("properties"))


def _fields(schema, path):
    """Leaf field paths under ``schema``."""
    if _is_object_with_fields(schema):
        for name, sub in schema["properties"].items():
            yield from _fields(sub, path + [name])
        return
    items = schema.get("items")
    if schema.get("type") == "array" and _is_object_with_fields(items):
        yield from _fields(items, path + ["[]"])
        return
    values = schema.get("additionalProperties")
    nested = isinstance(values, dict) and isinstance(values.get("additionalProperties"), dict)
    if isinstance(values, dict) and (_is_object_with_fields(values) or nested):
        yield from _fields(values, path + ["*"])
        return
    yield ".".join(path)


def crd_fields():
    """``{kind: [field path, ...]}`` for every CRD version in deploy/crds."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                root = version["schema"]["openAPIV3Schema"].get("properties") or {}
                for top in ("spec", "status"):
                    if top in root:
                        for field in _fields(root[top], [top]):
                            if field not in out.setdefault(kind, []):
                                out[kind].append(field)
    return out


def existing_test_ids():
    """Every ``tests/...py::name`` and ``tests/...py::Class::name`` of the repository."""
    ids = set()
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids.add("%s::%s" % (rel, node.name))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test"):
                        ids.add("%s::%s::%s" % (rel, node.name, sub.name))
    return ids


def load_mapping():
    data = yaml.safe_load(MAPPING.read_text()) or {}
    assert isinstance(data, dict), "%s: expected kind -> field -> [test node id]" % MAPPING
    return data


def test_the_walk_finds_the_fields_that_went_unwired_before():
    fields = crd_fields()
    assert "spec.drainConfig.ignoreDaemonSets" in fields["NodeWright"]
    assert "spec.packages.*.interrupt.type" in fields["NodeWright"]
    assert "spec.packages.*.env.[].valueFrom.configMapKeyRef.key" in fields["NodeWright"]
    assert "spec.compartments.[].strategy.linear.delta" in fields["DeploymentPolicy"]
    # A map of scalars is one field; an object is its properties.
    assert "spec.nodeSelectors.matchLabels" in fields["NodeWright"]
    assert "spec.drainConfig" not in fields["NodeWright"]
    assert "status.nodeStatus" in fields["NodeWright"]


def coverage_problems(fields, mapping, existing):
    """One line per field without tests, per entry for a field no schema has, and per
    node id that names no test."""
    problems = []
    for kind, paths in sorted(fields.items()):
        entries = mapping.get(kind) or {}
        for path in paths:
            tests = entries.get(path)
            if not tests:
                problems.append("%s %s: no test shows this field's effect" % (kind, path))
                continue
            for node_id in tests:
                if node_id not in existing:
                    problems.append("%s %s: %s is not a test (renamed or deleted?)" % (kind, path, node_id))
    for kind, entries in sorted(mapping.items()):
        for path in sorted(entries or {}):
            if path not in fields.get(kind, []):
                problems.append("%s %s: no such field in deploy/crds any more; remove the entry" % (kind, path))
    return problems


def test_each_kind_of_gap_is_named():
    fields = {"NodeWright": ["spec.a", "spec.b", "spec.c"]}
    mapping = {"NodeWright": {"spec.a": ["tests/x.py::test_a"], "spec.b": ["tests/x.py::test_gone"],
                              "spec.old": ["tests/x.py::test_a"]},
               "Retired": {"spec.d": ["tests/x.py::test_a"]}}
    assert coverage_problems(fields, mapping, {"tests/x.py::test_a"}) == [
        "NodeWright spec.b: tests/x.py::test_gone is not a test (renamed or deleted?)",
        "NodeWright spec.c: no test shows this field's effect",
        "NodeWright spec.old: no such field in deploy/crds any more; remove the entry",
        "Retired spec.d: no such field in deploy/crds any more; remove the entry",
    ]


def test_every_crd_field_maps_to_tests_that_exist():
    problems = coverage_problems(crd_fields(), load_mapping(), existing_test_ids())
    assert not problems, "%s:\n  %s\n%s" % (MAPPING.relative_to(REPO), "\n  ".join(problems), HOW)
