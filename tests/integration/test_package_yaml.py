# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A package whose manifest is package.yaml rolls out like one with package.json: planned
on the controller, sent to the node as JSON (a node has no YAML parser), complete."""

from __future__ import annotations

import os

import pytest
from nodewright_sim import hostroot

from fleet_helpers import Fleet

pytestmark = pytest.mark.integration

MANIFEST = """\
name: yamlpkg
version: 1.0.0
description: A package written in YAML
interrupt: {type: noop}
stages:
  apply:
    - {name: write, path: run.sh, arguments: [apply]}
  apply-check:
    - {name: check, path: run.sh, arguments: [check]}
  uninstall:
    - {name: remove, path: run.sh, arguments: [remove]}
  uninstall-check:
    - {name: removed, path: run.sh, arguments: [removed]}
"""
SCRIPT = """\
#!/bin/sh
case "$1" in
  apply) echo from-yaml > /etc/yamlpkg ;;
  check) grep -qx from-yaml /etc/yamlpkg ;;
  remove) rm -f /etc/yamlpkg ;;
  removed) test ! -e /etc/yamlpkg ;;
esac
"""


def test_a_package_yaml_package_rolls_out_and_the_node_gets_json(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    (node,) = fleet.nodes
    pkg = tmp_path / "yamlpkg"
    (pkg / "steps").mkdir(parents=True)
    (pkg / "package.yaml").write_text(MANIFEST)
    (pkg / "steps" / "run.sh").write_text(SCRIPT)
    os.chmod(str(pkg / "steps" / "run.sh"), 0o755)
    res = "yaml-" + fleet.label
    fleet.create("NodeWright", res, {"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
                                     "packages": {"yamlpkg": {"version": "1.0.0", "source": str(pkg)}}})
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.report["hosts"][node]["outcome"] == "ok"
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "1/1", status
    root = sim.host_root(node)
    assert hostroot.run(root, "cat /etc/yamlpkg").stdout == "from-yaml\n"
    found = hostroot.run(root, "find /var/lib/nodewright -name 'package.*' -path '*yamlpkg*'").stdout.split()
    assert found and all(path.endswith("package.json") for path in found), found
