# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A package is its name; ``source`` is only where its steps come from: two packages of
one resource from the same shipped package, under their own names and versions, both run
through rollout.yml, each with its own node state, host copy and history."""

from __future__ import annotations

import json
import os

import pytest

from fleet_helpers import Fleet

pytestmark = pytest.mark.integration


def scripts(name):
    return {"apply.sh": "echo %s > /etc/%s-ready\n" % (name, name), "apply_check.sh": "test -s /etc/%s-ready\n" % name}


def test_two_packages_from_one_source_run_under_their_own_names(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    (node,) = fleet.nodes
    res = "names-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "packages": {"alpha": {"source": "shellscript", "version": "1.0.0", "configMap": scripts("alpha")},
                     # MAJOR.MINOR, as upstream writes it: kept as written
                     "beta": {"source": "shellscript", "version": "2.1", "configMap": scripts("beta"),
                              "dependsOn": {"alpha": "1.0"}}}})
    plan = fleet.plan(res)
    assert plan["nodes"][node]["actions"] == {"alpha": "apply", "beta": "apply"}

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    root = sim.host_root(node)
    assert open(os.path.join(root, "etc/alpha-ready")).read() == "alpha\n"
    assert open(os.path.join(root, "etc/beta-ready")).read() == "beta\n"
    annotations = sim.core.read_node(node).metadata.annotations
    state = json.loads(annotations["nodewright.io/state-%s" % res])["packages"]
    assert {name: (e["version"], e["state"]) for name, e in state.items()} == {
        "alpha": ("1.0.0", "complete"), "beta": ("2.1", "complete")}
    for name, version in (("alpha", "1.0.0"), ("beta", "2.1")):
        copy = os.path.join(root, "var/lib/nodewright/packages", res, name, version)
        with open(os.path.join(copy, "package.json")) as fh:
            manifest = json.load(fh)
        assert (manifest["name"], manifest["version"]) == (name, version)
        with open(os.path.join(root, "var/lib/nodewright/history", res, name + ".json")) as fh:
            assert json.load(fh)["version"] == version
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete"
    entries = status["nodeState"][node]
    assert sorted(entries) == ["alpha|1.0.0", "beta|2.1"]   # upstream's "package|version" keys
    assert {e["state"] for e in entries.values()} == {"complete"}

    again = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert again.returncode == 0, again.stdout[-3000:]
    assert not [h for h in again.report["hosts"] if h != "localhost"]
    assert fleet.plan(res)["nodes"][node]["actions"] == {"alpha": "none", "beta": "none"}
