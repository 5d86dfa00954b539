# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The execution environment definition, the collection's EE metadata and the
collection requirements hold together: the keys ansible-builder 3 and ansible-galaxy
accept, the versions the collection is tested with, files that exist, and the
inventory source of docs/awx.md uses only options the inventory plugin has."""

from __future__ import annotations

import ast
import fnmatch
import pathlib
import importlib.util
import re

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = pathlib.Path(__file__).resolve().parents[3]


def load(path):
    return yaml.safe_load((REPO / path).read_text())


def pins():
    out = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower()] = version.strip()
    return out


def galaxy():
    return load("galaxy.yml")


def test_execution_environment_is_a_version_3_definition():
    ee = load("execution-environment.yml")
    assert ee["version"] == 3
    assert set(ee) <= {"version", "images", "dependencies", "additional_build_files", "additional_build_steps",
                       "build_arg_defaults", "options"}
    assert ee["images"]["base_image"]["name"]
    assert set(ee["dependencies"]) <= {"ansible_core", "ansible_runner", "galaxy", "python", "system",
                                       "python_interpreter", "exclude"}
    steps = {"prepend_base", "append_base", "prepend_galaxy", "append_galaxy", "prepend_builder",
             "append_builder", "prepend_final", "append_final"}
    assert set(ee["additional_build_steps"]) <= steps
    assert set(ee["options"]) <= {"container_init", "package_manager_path", "skip_ansible_check",
                                  "skip_pip_install", "relax_passwd_permissions", "workdir", "user", "tags"}


def test_execution_environment_uses_the_tested_ansible_versions():
    deps = load("execution-environment.yml")["dependencies"]
    tested = pins()
    assert deps["ansible_core"]["package_pip"] == "ansible-core==" + tested["ansible-core"]
    assert deps["ansible_runner"]["package_pip"] == "ansible-runner==" + tested["ansible-runner"]
    # The pair the whole suite runs on: the pinned ansible-core on the Python the ansible-core
    # matrix gives its minor (docs/compatibility.md); every python the image calls is that one.
    spec = importlib.util.spec_from_file_location("matrix", str(REPO / "tests" / "compat" / "ansible_core_matrix.py"))
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    python = matrix.PYTHON_FOR[matrix.core_minor(tested["ansible-core"])]
    found = re.search(r"python(3\.\d+)$", deps["python_interpreter"]["python_path"])
    assert found and found.group(1) == python
    assert deps["python_interpreter"]["package_system"] == "python" + found.group(1)
    steps = "\n".join(load("execution-environment.yml")["additional_build_steps"]["append_final"])
    assert set(re.findall(r"python3\.\d+", steps)) == {"python" + found.group(1)}


def test_execution_environment_installs_the_built_collection():
    ee = load("execution-environment.yml")
    meta = galaxy()
    tarball = "%s-%s-%s.tar.gz" % (meta["namespace"], meta["name"], meta["version"])
    (files,) = ee["additional_build_files"]
    assert fnmatch.fnmatch(tarball, files["src"]), "the name `ansible-galaxy collection build` gives"
    assert not files["dest"].startswith("/") and ".." not in files["dest"]
    galaxy_steps = "\n".join(ee["additional_build_steps"]["append_galaxy"])
    assert "_build/%s/" % files["dest"] in galaxy_steps
    assert "ansible-galaxy collection install" in galaxy_steps and files["src"] in galaxy_steps
    assert "/usr/share/ansible/collections" in galaxy_steps
    # Without a galaxy dependency ansible-builder leaves out the galaxy stage, and with
    # it the append_galaxy steps and the introspection of collection requirements.
    assert "galaxy" in ee["dependencies"]


def test_collection_ee_metadata_names_its_python_requirements():
    meta = load("meta/execution-environment.yml")
    assert meta["version"] == 1
    assert set(meta["dependencies"]) <= {"python", "system"}
    python = REPO / meta["dependencies"]["python"]
    assert python.is_file()
    ignored = galaxy().get("build_ignore") or []
    assert not any(fnmatch.fnmatch(meta["dependencies"]["python"], pattern) for pattern in ignored), \
        "the requirements file must ship in the built collection"
    assert {"kubernetes", "jmespath", "jsonschema"} <= set(pins())


def test_collection_requirements_install_this_collection_from_the_checkout():
    req = load("collections/requirements.yml")
    assert set(req) <= {"collections", "roles"}
    for entry in req["collections"]:
        assert set(entry) <= {"name", "version", "type", "source", "signatures"}
        assert entry.get("type", "galaxy") in ("galaxy", "url", "file", "git", "dir", "subdirs")
    (own,) = [e for e in req["collections"] if e.get("type") == "dir"]
    # AWX runs ansible-galaxy in the project's root, so the path is relative to it.
    assert (REPO / own["name"] / "galaxy.yml").is_file()


def doc_options(path, name):
    tree = ast.parse((REPO / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return set(yaml.safe_load(node.value.value)["options"])
    raise AssertionError("%s has no %s" % (path, name))


def test_inventory_source_in_the_awx_guide_uses_real_plugin_options():
    text = (REPO / "docs" / "awx.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    sources = [b for b in blocks if isinstance(b, dict) and b.get("plugin") == "nodewright.fleet.k8s_nodes"]
    assert sources, "docs/awx.md shows an inventory source"
    known = doc_options("plugins/inventory/k8s_nodes.py", "DOCUMENTATION")
    known |= doc_options("plugins/doc_fragments/k8s_auth.py", "DOCUMENTATION")
    known |= {"compose", "groups", "keyed_groups", "strict", "leading_separator", "use_extra_vars",  # constructed
              "cache", "cache_plugin", "cache_timeout", "cache_connection", "cache_prefix"}  # inventory_cache
    for source in sources:
        assert set(source) <= known, set(source) - known
    assert re.search(r"inventory/[-\w]+\.k8s_nodes\.yml", text)
