# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Step 2 of the migration from upstream NodeWright: `nodewright convert` prints the
operator's objects as NodeWright resources, they are applied as printed, rolled out,
and the resource's status carries the conversion's warnings."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from fleet_helpers import GROUP, VERSION, Fleet

pytestmark = pytest.mark.integration

SKYHOOK = """\
apiVersion: skyhook.nvidia.com/v1alpha1
kind: Skyhook
metadata:
  name: {name}
spec:
  nodeSelectors:
    matchLabels:
      rollout-test: {label}
  interruptionBudget:
    count: 2
  packages:
    shellscript:
      version: "1.0"
      gracefulShutdown: 30s
      configMap:
        apply.sh: "echo converted > /etc/converted"
        apply_check.sh: "test -s /etc/converted"
"""


def test_converted_upstream_objects_apply_roll_out_and_show_their_warnings(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    name = "converted-" + fleet.label
    source = tmp_path / "skyhook.yaml"
    source.write_text(SKYHOOK.format(name=name, label=fleet.label))
    proc = subprocess.run([sys.executable, "-m", "nodewright_cli", "convert", str(source)], capture_output=True,
                          text=True, env=sim.env())
    assert proc.returncode == 0, proc.stderr
    warning = ("spec.packages.shellscript.gracefulShutdown is ignored: NodeWright runs package steps on the host, "
               "not in a package pod, so there is no pod grace period")
    assert "warning: %s[0]: NodeWright %s: %s" % (source, name, warning) in proc.stderr
    (obj,) = list(yaml.safe_load_all(proc.stdout))
    assert obj["apiVersion"] == "nodewright.io/v1alpha1" and obj["kind"] == "NodeWright"
    # Applied as printed.
    fleet.custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", obj)

    run = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % name)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for node in fleet.nodes:
        assert fleet.node_labels(node)["nodewright.io/status-%s" % name] == "complete"
        with open("%s/etc/converted" % sim.host_root(node)) as fh:
            assert fh.read().strip() == "converted"
    status = fleet.resource(name)["status"]
    assert status["status"] == "complete"
    conditions = {c["type"]: c for c in status["conditions"]}
    converted = conditions["ConversionWarnings"]
    assert (converted["status"], converted["reason"], converted["message"]) == ("True", "FieldsWithoutEffect",
                                                                               warning)
    # The version is kept as written, as upstream keeps it.
    assert status["packageList"] == "shellscript:1.0"
