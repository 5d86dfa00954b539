# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every resource the docs show runs as written: each YAML block of docs/ and the README
that is a NodeWright, DeploymentPolicy or upstream object is converted when upstream's,
validated, and planned on a simulator fleet - every node it targets gets its packages."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml
from test_examples import profile_nodes

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    validate_deployment_policy,
    validate_nodewright,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import SOURCE_GROUPS, convert

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PACKAGES = [os.path.join(REPO, "packages")]
KINDS = ("NodeWright", "DeploymentPolicy", "Skyhook")


def yaml_blocks(text):
    """(line, body) of each fenced block that is YAML or has no language."""
    blocks, lines, opened = [], text.splitlines(True), None
    for n, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if opened is None:
            opened = (n, line[3:].strip())
        else:
            if opened[1] in ("", "yaml", "yml"):
                blocks.append((opened[0] + 1, "".join(lines[opened[0] + 1:n])))
            opened = None
    return blocks


def doc_objects():
    """(where, object) of every resource in a YAML block of the docs."""
    found = []
    pages = sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
    for path in pages + [os.path.join(REPO, "README.md")]:
        with open(path) as fh:
            text = fh.read()
        for line, body in yaml_blocks(text):
            if not re.search(r"^kind:\s*(%s)\b" % "|".join(KINDS), body, re.M):
                continue
            where = "%s:%d" % (os.path.relpath(path, REPO), line)
            docs = list(yaml.safe_load_all(body))   # a block that does not parse fails here
            found.extend((where, d) for d in docs if isinstance(d, dict) and d.get("kind") in KINDS)
    return found


def as_nodewright(obj):
    return convert(obj).resource if obj.get("apiVersion") in SOURCE_GROUPS else obj


def policies():
    """The docs' policies, with the shipped examples' for a name the docs only mention."""
    found = {}
    for path in sorted(glob.glob(os.path.join(REPO, "deploy", "examples", "*.yaml"))):
        with open(path) as fh:
            found.update({d["metadata"]["name"]: d for d in yaml.safe_load_all(fh)
                          if d and d["kind"] == "DeploymentPolicy"})
    found.update({o["metadata"]["name"]: as_nodewright(o) for _w, o in doc_objects()
                  if o["kind"] == "DeploymentPolicy"})
    return found


def test_the_docs_show_resources():
    kinds = sorted({o["kind"] for _w, o in doc_objects()})
    assert kinds == ["DeploymentPolicy", "NodeWright"]


@pytest.mark.parametrize("where,obj", doc_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_resource_of_the_docs_validates_and_plans(where, obj):
    resource = as_nodewright(obj)
    if resource["kind"] == "DeploymentPolicy":
        validate_deployment_policy(resource)
        return
    validate_nodewright(resource)
    described = desired_state.describe(resource, profile_nodes("all-gpus"), policies(), PACKAGES)
    assert described.targets, "%s targets no node of the all-gpus fleet" % where
    names = sorted(resource["spec"]["packages"])
    for node in described.targets:
        actions = described.nodes[node].actions
        assert sorted(actions) == names and set(actions.values()) == {"apply"}, (where, node, actions)
