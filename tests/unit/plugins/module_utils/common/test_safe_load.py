# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one bounded YAML/JSON loader: bombs, deep nesting and oversized inputs are
refused with a message that says so, before anything is built from them.

Memory is bounded, not timed: the bomb cases run in a child process whose address
space is capped, where expanding the bomb would end in a MemoryError instead of the
refusal the test expects.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


def billion_laughs(levels=9, width=9, key="lol"):
    """The classic: each level an anchor holding ``width`` aliases of the one before."""
    lines = ['l0: &l0 [%s]' % ", ".join(['"%s"' % key] * width)]
    for i in range(1, levels):
        lines.append("l%d: &l%d [%s]" % (i, i, ", ".join(["*l%d" % (i - 1)] * width)))
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_before_it_is_built():
    text = billion_laughs()
    assert len(text) < 700
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_yaml(text, source="package.yaml")
    message = str(err.value)
    assert message.startswith("package.yaml: expands to more than %d values" % safe_load.MAX_VALUES)
    assert "YAML bomb" in message and err.value.hint


def test_every_loader_refuses_it():
    text = billion_laughs()
    for load in (safe_load.load_yaml, safe_load.load_yaml_all):
        with pytest.raises(safe_load.InputRefused):
            load(text)
    with pytest.raises(safe_load.InputRefused):
        safe_load.load_yaml_all("a: 1\n---\n" + billion_laughs())


def test_the_refusal_is_a_validation_error():
    assert issubclass(safe_load.InputRefused, ValidationError)


BOUNDED = textwrap.dedent("""
    import resource, sys
    sys.path.insert(0, %(path)r)
    resource.setrlimit(resource.RLIMIT_AS, (768 * 1024 * 1024, 768 * 1024 * 1024))
    from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
    text = open(%(file)r).read()
    try:
        safe_load.load_yaml(text, source="bomb.yaml")
    except safe_load.InputRefused as exc:
        print("refused:", exc)
    """)


def test_a_bomb_is_refused_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs(levels=10))
    script = BOUNDED % {"path": os.path.join(REPO, ".collections"), "file": str(bomb)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused: bomb.yaml: expands to more than")


def test_a_recursive_alias_is_refused():
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_yaml("a: &x [1, *x]\n")
    assert "recursive" in str(err.value)


def test_deep_nesting_is_refused():
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_yaml("[" * 100 + "]" * 100)
    assert "nested more than %d levels deep" % safe_load.MAX_DEPTH in str(err.value)
    with pytest.raises(safe_load.InputRefused):
        safe_load.load_json("[" * 100 + "]" * 100)
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_json("[" * 200000 + "]" * 200000)
    assert "nested" in str(err.value)


def test_oversized_text_and_files_are_refused(tmp_path):
    small = safe_load.Limits(max_bytes=1024)
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_yaml("a: " + "x" * 2000, source="vars.yml", limits=small)
    assert str(err.value).startswith("vars.yml: is 2.0 KiB, more than the 1.0 KiB NodeWright reads")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"a": "x" * 5000}))
    with pytest.raises(safe_load.InputRefused) as err:
        safe_load.load_yaml_file(str(big), limits=small)
    assert str(big) in str(err.value)


def test_syntax_errors_stay_the_parsers_own():
    with pytest.raises(yaml.YAMLError):
        safe_load.load_yaml("a: [1, 2\n")
    with pytest.raises(ValueError) as err:
        safe_load.load_json('{"a": 1,}')
    assert err.value.lineno == 1


def test_ordinary_aliases_still_load():
    assert safe_load.load_yaml("base: &b {a: 1}\nx: *b\ny: *b\n") == {"base": {"a": 1}, "x": {"a": 1}, "y": {"a": 1}}
    assert safe_load.load_yaml_all("a: 1\n---\n\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    assert safe_load.load_yaml("") is None


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "deploy", "crds", "*.yaml"))
                                        + glob.glob(os.path.join(REPO, "deploy", "examples", "*.yaml"))
                                        + glob.glob(os.path.join(REPO, "inventory", "*.yml"))))
def test_the_shipped_yaml_loads(path):
    with open(path) as fh:
        assert safe_load.load_yaml_all(fh.read(), source=path) == [d for d in yaml.safe_load_all(open(path)) if d]


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "packages", "*", "package.json"))
                                        + glob.glob(os.path.join(REPO, "tests", "fixtures", "skyhook", "*",
                                                                 "config.json"))))
def test_the_shipped_manifests_load(path):
    assert safe_load.load_json(safe_load.read_text(path), source=path) == json.load(open(path))


def test_bounded_size_counts_shared_objects_each_time_without_walking_them_again():
    shared = [1, 2, 3]
    assert safe_load.bounded_size({"a": shared, "b": shared}) == 1 + 2 + 2 * 4
    bomb = yaml.safe_load(billion_laughs())
    assert safe_load.bounded_size(bomb, limit=1000) == 1001
    cycle = []
    cycle.append(cycle)
    assert safe_load.bounded_size(cycle) == 2
    assert safe_load.bounded_size("text") == 1
