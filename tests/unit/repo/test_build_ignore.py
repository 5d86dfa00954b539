# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The built collection holds the collection and nothing of the development tree: the listing of
the tarball `ansible-galaxy collection build` makes (galaxy.yml's build_ignore), and a sanity
ignore file for every ansible-core that meta/runtime.yml admits."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tarfile

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GALAXY = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")

# What a user of the collection gets.
MUST_SHIP = ["MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.md", "changelogs/changelog.yaml",
             "changelogs/config.yaml", "meta/runtime.yml", "meta/execution-environment.yml", "requirements.txt",
             "bindep.txt", "plugins/callback/report.py", "plugins/plugin_utils/report_html.py",
             "plugins/strategy/rollout.py", "roles/safe_update/tasks/main.yml", "playbooks/rollout.yml",
             "packages/sysctl/package.json", "deploy/crds/nodewright.io_nodewrights.yaml",
             "deploy/grafana/nodewright-dashboard.json", "deploy/helm/nodewright/Chart.yaml",
             "docs/operating.md", "inventory/simulator.k8s_nodes.yml", "examples/runner_rollout.py",
             "cli/nodewright_cli/rollout.py", "cli/pyproject.toml", "cli/nodewright_cli/reconciler.py",
             "tests/sanity/ignore-2.19.txt"]
# Development, test and CI files, build output and local state.
MUST_NOT_SHIP = [".ci", ".collections", ".venv", ".git", ".gitignore", ".ansible-lint", "Makefile", "pyproject.toml",
                 "requirements-dev.txt", "execution-environment.yml", "collections", "bench", "simulator",
                 "extensions", "build", "bin", "tests/unit", "tests/integration", "tests/conformance",
                 "tests/fixtures", "tests/conftest.py", "tests/sanity/run.sh", "tests/sanity/get_pip_offline.py",
                 "changelogs/.plugin-cache.yaml", "nodewright-report.json", "nodewright-report.html"]


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([GALAXY, "collection", "build", REPO, "--output-path", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob("nodewright-fleet-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_the_tarball_holds_the_collection(listing):
    missing = [path for path in MUST_SHIP if path not in listing]
    assert not missing, missing


def test_the_tarball_holds_nothing_of_the_development_tree(listing):
    found = [name for name in listing for path in MUST_NOT_SHIP if name == path or name.startswith(path + "/")]
    assert not found, found
    assert not [n for n in listing if ".egg-info/" in n or "__pycache__" in n or n.endswith((".pyc", ".tar.gz"))]


def test_every_top_level_entry_is_meant_to_ship(listing):
    top = {name.split("/", 1)[0] for name in listing}
    assert top == {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.md", "bindep.txt",
                   "requirements.txt", "changelogs", "cli", "deploy", "docs", "examples", "inventory",
                   "meta", "packages", "playbooks", "plugins", "roles", "tests"}
    assert {name.split("/", 2)[1] for name in listing if name.startswith("tests/")} == {"sanity"}


def test_a_sanity_ignore_file_for_every_admitted_ansible_core():
    runtime = yaml.safe_load(open(os.path.join(REPO, "meta", "runtime.yml")))
    # Every ansible-core minor the collection supports and tests (the internals seam's list).
    minors = sorted(minor for _major, minor in core_internals.SUPPORTED)
    assert runtime["requires_ansible"] == ">=2.%d.0" % minors[0]
    assert minors == list(range(minors[0], minors[-1] + 1))
    files = {f for f in os.listdir(os.path.join(REPO, "tests", "sanity")) if fnmatch.fnmatch(f, "ignore-*.txt")}
    assert files == {"ignore-2.%d.txt" % minor for minor in minors}
    for name in files:
        for number, line in enumerate(open(os.path.join(REPO, "tests", "sanity", name)), 1):
            assert " # " in line, "%s:%d: every ignore entry says why" % (name, number)
