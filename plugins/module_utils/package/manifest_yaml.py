# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``package.yaml``: a package manifest in YAML, read where PyYAML is (the controller).

The host's package runner reads JSON only (no PyYAML on a node); the package action
writes the manifest as ``package.json`` into the copy it sends, so a node always gets
JSON. Planning (``desired_state``, ``plan.yml``) and the action read YAML here, with the
same size and alias limits as every other YAML NodeWright reads, and with each value's
line for error messages.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

yaml = safe_load.yaml


def available():
    """Whether this Python can read YAML manifests (PyYAML is importable)."""
    return yaml is not None


def yaml_line_map(text):
    """Map each value's path in a YAML document to its line (1-based)."""
    lines = {}

    def walk(node, path):
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, path + (key.value,))
        elif isinstance(node, yaml.SequenceNode):
            for n, item in enumerate(node.value):
                walk(item, path + (n,))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return lines


def read_manifest(manifest):
    """``(data, lines)`` of the YAML manifest at ``manifest``; a ``ValidationError`` naming the
    line when it is not valid YAML."""
    text = safe_load.read_text(manifest)
    try:
        return safe_load.load_yaml(text, source=manifest), yaml_line_map(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValidationError("not valid YAML: %s" % getattr(exc, "problem", exc), source=manifest,
                              line=mark.line + 1 if mark else None)
