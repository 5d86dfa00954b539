# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The package format: loading, validation with field paths and lines, Skyhook
manifests, the JSON Schema agreeing with the validator."""

from __future__ import annotations

import copy
import json
import os

import jsonschema
import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    FORMAT_SKYHOOK,
    PackageError,
    config_hashes,
    load_package,
    render_config_value,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.versions import Version


def compare_versions(a, b):
    va, vb = Version(a), Version(b)
    return (va > vb) - (va < vb)


pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
SHIPPED = os.path.join(REPO, "packages")
SKYHOOK_FIXTURES = os.path.join(REPO, "tests", "fixtures", "skyhook")
SCHEMA = os.path.join(REPO, "docs", "schemas", "package.schema.json")

VALID = {
    "name": "demo",
    "version": "1.2.0",
    "description": "a test package",
    "interrupt": {"type": "service", "services": ["containerd.service"]},
    "configInterrupts": {"kernel.*": {"type": "reboot"}},
    "dependsOn": {"base": "1.0.0"},
    "expectedConfig": ["mode"],
    "stages": {
        "apply": [{"path": "apply.sh", "arguments": ["a"], "env": {"X": "1"}, "returncodes": [0, 3]}],
        "apply-check": [{"path": "check.sh", "idempotent": True}],
        "upgrade": [{"path": "upgrade.sh", "upgrade_step": True}],
        "upgrade-check": [{"path": "check.sh"}],
    },
}


def schema_validator():
    with open(SCHEMA) as fh:
        return jsonschema.Draft202012Validator(json.load(fh))


def write_package(root, manifest, scripts=("apply.sh", "check.sh", "upgrade.sh"), text=None):
    os.makedirs(os.path.join(root, "steps"), exist_ok=True)
    for script in scripts:
        with open(os.path.join(root, "steps", script), "w") as fh:
            fh.write("#!/bin/sh\nexit 0\n")
    text = text if text is not None else json.dumps(manifest, indent=2)
    with open(os.path.join(root, "package.json"), "w") as fh:
        fh.write(text)
    return text


def line_of(text, needle):
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n
    raise AssertionError("%r not in manifest" % needle)


def test_valid_package_loads(tmp_path):
    write_package(str(tmp_path), VALID)
    pkg = load_package(str(tmp_path))
    assert (pkg.name, pkg.version, pkg.format) == ("demo", "1.2.0", "nodewright")
    step = pkg.steps("apply")[0]
    assert (step.name, step.arguments, step.env, step.returncodes, step.idempotent) == (
        "apply.sh", ("a",), {"X": "1"}, (0, 3), False)
    assert pkg.steps("upgrade")[0].upgrade_step
    assert pkg.interrupt.to_dict() == {"type": "service", "services": ["containerd.service"]}
    assert pkg.depends_on == {"base": "1.0.0"}
    assert [i.type for i in pkg.interrupts_for_keys(["kernel.panic"])] == ["reboot"]
    assert pkg.interrupts_for_keys(["vm.swappiness"]) == []
    json.dumps(pkg.to_dict())
    assert not list(schema_validator().iter_errors(VALID))


def mutate(path, value):
    def apply(manifest):
        target = manifest
        for key in path[:-1]:
            target = target[key]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return apply


DELETE = object()

# (id, change to VALID, field, words in the message, text on the reported line, the
#  JSON Schema also rejects it)
INVALID = [
    ("missing check stage", mutate(("stages", "apply-check"), DELETE), "stages.apply",
     "has steps but 'apply-check' has none", '"apply": [', True),
    ("bad version", mutate(("version",), "1.0.0.1"), "version", "'1.0.0.1' is not a semantic version",
     '"version"', True),
    ("unknown interrupt type", mutate(("interrupt", "type"), "reboo"), "interrupt.type",
     "unknown interrupt type 'reboo'", '"type": "reboo"', True),
    ("script missing", mutate(("stages", "apply", 0, "path"), "missing.sh"), "stages.apply[0].path",
     "step script 'missing.sh' does not exist", '"path": "missing.sh"', False),
    ("bad name", mutate(("name",), "Demo_Pkg"), "name", "invalid package name", '"name": "Demo_Pkg"', True),
    ("unknown field", mutate(("stage",), {}), "stage", "unknown field 'stage'", '"stage"', True),
    ("service without services", mutate(("interrupt",), {"type": "service"}), "interrupt.services",
     "needs the services", '"interrupt"', True),
    ("path leaves steps/", mutate(("stages", "apply", 0, "path"), "../apply.sh"), "stages.apply[0].path",
     "must be relative", '"path": "../apply.sh"', True),
    ("upgrade_step outside upgrade", mutate(("stages", "apply", 0, "upgrade_step"), True),
     "stages.apply[0].upgrade_step", "only meaningful in upgrade", '"upgrade_step": true', False),
    ("glob interrupt", mutate(("configInterrupts", "kernel.*", "type"), "halt"),
     "configInterrupts.kernel.*.type", "unknown interrupt type 'halt'", '"type": "halt"', True),
    ("dependency version", mutate(("dependsOn", "base"), "latest"), "dependsOn.base",
     "is not a semantic version", '"base": "latest"', True),
    ("returncodes", mutate(("stages", "apply", 0, "returncodes"), []), "stages.apply[0].returncodes",
     "non-empty list", '"returncodes": []', True),
    ("unknown stage", mutate(("stages", "instal"), []), "stages.instal", "unknown stage 'instal'",
     '"instal"', True),
]


@pytest.mark.parametrize("change,field,words,line_text,schema_rejects",
                         [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_package_names_package_field_line_and_fix(tmp_path, change, field, words, line_text,
                                                          schema_rejects):
    manifest = copy.deepcopy(VALID)
    change(manifest)
    text = write_package(str(tmp_path), manifest)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    err = next(e for e in caught.value.errors if e.field == field)
    assert words in err.message
    assert err.source == os.path.join(str(tmp_path), "package.json")
    assert err.line == line_of(text, line_text)
    assert err.hint, "every package error says how to fix it"
    if manifest.get("name") == "demo":
        assert "package 'demo'" in str(err)
    if schema_rejects:
        assert list(schema_validator().iter_errors(manifest)), "the JSON Schema should reject it too"


def test_script_missing_hint_gives_the_expected_path(tmp_path):
    manifest = copy.deepcopy(VALID)
    manifest["stages"]["apply"][0]["path"] = "sub/run.sh"
    write_package(str(tmp_path), manifest)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert os.path.join(str(tmp_path), "steps", "sub/run.sh") in caught.value.hint


def test_every_problem_is_reported_at_once(tmp_path):
    manifest = copy.deepcopy(VALID)
    manifest["version"] = "one"
    manifest["interrupt"]["type"] = "reboo"
    write_package(str(tmp_path), manifest)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert {e.field for e in caught.value.errors} == {"version", "interrupt.type"}
    assert "2 problem(s)" in str(caught.value)


def test_expected_config_key_not_supplied(tmp_path):
    write_package(str(tmp_path), VALID)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path), config={"other": "x"})
    assert caught.value.field == "config.mode"
    assert "expected config key 'mode' is not supplied" in str(caught.value)
    assert "expectedConfig" in caught.value.hint
    assert load_package(str(tmp_path), config={"mode": "fast"}).name == "demo"


def test_config_key_must_be_a_file_name(tmp_path):
    write_package(str(tmp_path), VALID)
    pkg = load_package(str(tmp_path))
    with pytest.raises(PackageError) as caught:
        pkg.validate_config({"mode": "x", "etc/passwd": "y"})
    assert caught.value.field == "config.etc/passwd"


def test_default_config_is_merged_under_config(tmp_path):
    manifest = dict(copy.deepcopy(VALID), defaultConfig={"mode": "safe", "level": 1})
    write_package(str(tmp_path), manifest)
    pkg = load_package(str(tmp_path))
    assert pkg.validate_config({"level": 2}) == {"mode": "safe", "level": 2}


def test_invalid_json_reports_its_line(tmp_path):
    text = '{\n  "name": "demo",\n  "version": "1.0.0",\n}\n'
    write_package(str(tmp_path), None, text=text)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert caught.value.line == 4
    assert "not valid JSON" in str(caught.value)


def test_directory_without_manifest(tmp_path):
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert "holds no package manifest" in str(caught.value)
    assert "config.json" in caught.value.hint


def test_package_yaml_needs_pyyaml(tmp_path, monkeypatch):
    from ansible_collections.nodewright.fleet.plugins.module_utils.package import manifest_yaml
    (tmp_path / "package.yaml").write_text("name: demo\n")
    monkeypatch.setattr(manifest_yaml, "yaml", None)  # a node's Python: no PyYAML
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert "is YAML, which this Python cannot read (no PyYAML)" in str(caught.value)


def test_package_yaml_that_is_not_yaml_names_its_line(tmp_path):
    (tmp_path / "package.yaml").write_text("name: demo\nversion: [1.0.0\n")
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert "not valid YAML" in str(caught.value) and caught.value.line


def test_package_yaml_loads_wherever_package_json_does_with_lines(tmp_path):
    os.makedirs(str(tmp_path / "steps"))
    (tmp_path / "steps" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "package.yaml").write_text(
        "name: demo\n"
        "version: 1.0.0\n"
        "stages:\n"
        "  config:\n"
        "    - path: run.sh\n"
        "  config-check:\n"
        "    - path: run.sh\n"
        "interrupt:\n"
        "  type: sometimes\n")
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    assert caught.value.field == "interrupt.type"
    assert caught.value.line == 9
    (tmp_path / "package.yaml").write_text((tmp_path / "package.yaml").read_text().replace("sometimes", "reboot"))
    assert load_package(str(tmp_path)).interrupt.type == "reboot"


@pytest.mark.parametrize("name", sorted(os.listdir(SHIPPED)))
def test_shipped_packages_are_valid_for_validator_and_schema(name):
    pkg = load_package(os.path.join(SHIPPED, name))
    assert pkg.name == name
    with open(os.path.join(SHIPPED, name, "package.json")) as fh:
        manifest = json.load(fh)
    assert not list(schema_validator().iter_errors(manifest))
    for stage in ("apply", "config", "upgrade", "uninstall"):
        if stage in ("apply", "upgrade") and not pkg.steps(stage):
            continue
        assert pkg.steps(stage + "-check") or not pkg.steps(stage)
    assert pkg.steps("uninstall") and pkg.steps("uninstall-check"), "every shipped package uninstalls"


def test_skyhook_shellscript_fixture_loads_into_the_model():
    pkg = load_package(os.path.join(SKYHOOK_FIXTURES, "shellscript"))
    assert (pkg.name, pkg.version, pkg.format) == ("shellscript", "1.0.0", FORMAT_SKYHOOK)
    assert (pkg.steps_dirname, pkg.files_dirname) == ("skyhook_dir", "root_dir")
    assert pkg.expected_config == ("apply.sh",)
    apply = pkg.steps("apply")[0]
    assert (apply.name, apply.path, apply.arguments, apply.idempotent) == (
        "apply", "shellscript_run.sh", ("apply", "env:GREETING"), False)
    assert pkg.steps("config")[0].returncodes == (0, 3)
    assert pkg.steps("config")[0].env == {"EXTRA": "from-step"}
    assert pkg.steps("upgrade")[0].upgrade_step


def test_skyhook_mode_without_its_check_and_unknown_schema(tmp_path):
    with open(os.path.join(SKYHOOK_FIXTURES, "sysctl", "config.json")) as fh:
        data = json.load(fh)
    del data["modes"]["config-check"]
    data["schema_version"] = "v2"
    os.makedirs(str(tmp_path / "skyhook_dir"))
    for script in ("apply_sysctl.sh", "check_sysctl.sh", "remove_sysctl.sh"):
        (tmp_path / "skyhook_dir" / script).write_text("#!/bin/sh\n")
    text = json.dumps(data, indent=4)
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(PackageError) as caught:
        load_package(str(tmp_path))
    fields = {e.field: e for e in caught.value.errors}
    assert "mode 'config' has steps but 'config-check' has none" in fields["modes.config"].message
    assert fields["schema_version"].line == line_of(text, '"schema_version"')


def test_skyhook_expected_config_file_missing():
    with pytest.raises(PackageError) as caught:
        load_package(os.path.join(SKYHOOK_FIXTURES, "sysctl"), config={})
    assert "expected config key 'sysctl.conf'" in str(caught.value)
    assert "expected_config_files" in caught.value.hint


@pytest.mark.parametrize("a,b,expected", [
    ("1.0.0", "1.0.0", 0),
    ("1.0.0", "1.0.1", -1),
    ("1.10.0", "1.9.9", 1),
    ("2.0.0-rc.1", "2.0.0", -1),
    ("2.0.0-rc.2", "2.0.0-rc.10", -1),
    ("2.0.0-alpha", "2.0.0-1", 1),
    ("1.0.0+build.5", "1.0.0", 0),
])
def test_version_precedence(a, b, expected):
    assert compare_versions(a, b) == expected


@pytest.mark.parametrize("text", ["01.0.0", "1.0.0-", "", "1.2.3.4", "1.02", "1.2-rc.1", "1.2+b", "vv1", "V1.0.0"])
def test_not_a_version(text):
    with pytest.raises(ValueError):
        Version(text)


@pytest.mark.parametrize("short,full", [("1.2", "1.2.0"), ("2", "2.0.0"), ("v1.2.3", "1.2.3"), ("v0.15", "0.15.0")])
def test_shorthand_versions_are_kept_as_written_and_compare_padded(short, full):
    # As upstream NodeWright takes them (Go's x/mod/semver, the v optional).
    assert Version(short) == Version(full) and str(Version(short)) == short
    assert compare_versions(short, full) == 0
    assert compare_versions(short, "3.3") == -1 and compare_versions("3.3", "3.3.1") == -1


def test_config_hashes_are_per_key_and_stable():
    a = config_hashes({"x": "1", "y": {"b": 2, "a": 1}})
    b = config_hashes({"y": {"a": 1, "b": 2}, "x": "1"})
    assert a == b and set(a) == {"x", "y"}
    assert config_hashes({"x": "2", "y": {"a": 1, "b": 2}})["y"] == a["y"]
    assert render_config_value({"a": 1}) == '{"a": 1}' and render_config_value(10) == "10"


def test_one_problem_names_its_place_once(tmp_path):
    root = tmp_path / "demo"
    write_package(str(root), {"name": "demo", "version": "1.0.0", "stages": {"apply": [{"path": "apply.sh"}]}},
                  scripts=("apply.sh",))
    with pytest.raises(PackageError) as err:
        load_package(str(root))
    text = str(err.value)
    assert text.startswith("%s:" % (root / "package.json")) and text.count("stages.apply:") == 1, text
