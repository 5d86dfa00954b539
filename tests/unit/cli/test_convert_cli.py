# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""`nodewright convert`: upstream objects in, NodeWright resources out, with where
they came from and their warnings; the status shows the warnings."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import status as fleet_status

pytestmark = pytest.mark.unit

REPO = pathlib.Path(__file__).resolve().parents[3]
UPSTREAM = REPO / "tests" / "fixtures" / "upstream-objects" / "chainsaw-inputs.yaml"


@pytest.fixture(scope="module")
def convert():
    from nodewright_cli import convert as module
    return module


def skyhook(**pkg):
    return {"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook", "metadata": {"name": "demo"},
            "spec": {"packages": {"tool": dict({"version": "1.2"}, **pkg)}}}


def test_a_converted_object_says_where_it_came_from_and_what_was_ignored(convert):
    objects, warnings, problems = convert.convert_documents([("f[0]", skyhook(gracefulShutdown="30s"))])
    assert problems == []
    (obj,) = objects
    annotations = obj["metadata"]["annotations"]
    assert annotations[convert.ANNOTATION_CONVERTED_FROM] == "skyhook.nvidia.com/v1alpha1 Skyhook/demo"
    recorded = json.loads(annotations[convert.ANNOTATION_CONVERSION_WARNINGS])
    assert len(recorded) == 1 and recorded[0].startswith("spec.packages.tool.gracefulShutdown is ignored")
    assert warnings == ["f[0]: NodeWright demo: %s" % recorded[0]]
    assert fleet_status.conversion_warnings_of(obj) == recorded
    # Without warnings, no warnings annotation.
    objects, warnings, _ = convert.convert_documents([("f[0]", skyhook())])
    assert convert.ANNOTATION_CONVERSION_WARNINGS not in objects[0]["metadata"]["annotations"] and warnings == []


def test_nodewright_objects_pass_and_anything_else_is_named(convert):
    own = {"apiVersion": "nodewright.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "p"},
           "spec": {"default": {"budget": {"count": 1}}}}
    objects, _, problems = convert.convert_documents([("a[0]", own), ("a[1]", {"apiVersion": "v1", "kind": "Pod",
                                                                               "metadata": {"name": "x"}}),
                                                      ("a[2]", ["not", "an", "object"])])
    assert objects == [own]
    assert problems == ["a[1]: Pod x is not an upstream NodeWright object (apiVersion v1)",
                        "a[2]: not a Kubernetes object (no kind)"]


def test_every_upstream_test_input_converts_or_is_refused_with_its_reason(convert):
    docs = [("u[%d]" % n, d) for n, d in enumerate(yaml.safe_load_all(UPSTREAM.read_text())) if d]
    objects, _, problems = convert.convert_documents(docs)
    assert objects and len(objects) + len(problems) == len(docs)
    assert all(o["apiVersion"] == "nodewright.io/v1alpha1" for o in objects)


def test_the_command_prints_yaml_and_refuses_with_every_problem(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump_all([skyhook(), {"kind": "List", "items": [skyhook(agentImageOverride="x")]}]))
    proc = subprocess.run([sys.executable, "-m", "nodewright_cli", "convert", str(good)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert [o["kind"] for o in yaml.safe_load_all(proc.stdout)] == ["NodeWright", "NodeWright"]
    assert "good.yaml[1].items[0]: NodeWright demo: spec.packages.tool.agentImageOverride" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    proc = subprocess.run([sys.executable, "-m", "nodewright_cli", "convert", str(good), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "ConfigMap c is not an upstream NodeWright object" in proc.stderr


def test_the_status_shows_the_recorded_warnings_as_a_condition():
    obj = {"metadata": {"annotations": {fleet_status.ANNOTATION_CONVERSION_WARNINGS: json.dumps(["a", "b"])}}}
    status = fleet_status.compute_status("r", [], [], [], conversion_warnings=fleet_status.conversion_warnings_of(obj))
    (cond,) = [c for c in status["conditions"] if c["type"] == "ConversionWarnings"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "FieldsWithoutEffect", "a\nb")
    plain = fleet_status.compute_status("r", [], [], [])
    assert "ConversionWarnings" not in {c["type"] for c in plain["conditions"]}
    assert fleet_status.conversion_warnings_of({"metadata": {"annotations": {
        fleet_status.ANNOTATION_CONVERSION_WARNINGS: "{oops"}}})[0].startswith("the annotation")
