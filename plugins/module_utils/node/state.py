# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The node state: the JSON a NodeWright resource keeps on each of its nodes, read
in one place.

It lives in the node annotation ``nodewright.io/state-<resource>`` (and, written
by the package runner, in the host's ``/var/lib/nodewright/state/<resource>.json``):
``{"status", "packages": {name: entry}, "step", "reason", ...}``. Every part of
NodeWright - the planner, the desired state, the resource status, the inventory,
the runtime-required gate, the reconciler, the CLI - reads it through
``read_node_state`` or ``parse_state``, with one behaviour for a value that
cannot be parsed (a hand edit gone wrong): it is reported, never trusted and
never overwritten. Readers get ``{"error": <what is wrong and how to fix it>}``;
writers call ``refuse_to_overwrite`` first; a rollout leaves such a node out and
marks it with the ``nodewright.io/Erroring`` condition (reason ``MalformedState``),
and re-evaluates that condition once the state reads again (``repaired_malformed``).

Stdlib only: the package runner on the node uses it too.
"""

from __future__ import annotations

import json

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of

REASON_MALFORMED = markers.REASON_MALFORMED_STATE


class UnreadableState(ValidationError):
    """A node state that is not a JSON object."""


def fix_hint(node_name, resource):
    return ("fix the annotation %s on node %s by hand, or forget NodeWright's record of it with "
            "`nodewright reset %s --resource %s` (the next rollout then applies the packages again)"
            % (markers.state_annotation(resource), node_name, node_name, resource))


def parse_state(raw, what="the node state", hint=None):
    """The state as a mapping from its annotation text (or an already parsed value);
    ``{}`` when there is none. Raises ``UnreadableState`` for anything that is not a
    JSON object."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise UnreadableState("%s is malformed: not valid JSON (%s)" % (what, exc), hint=hint)
    else:
        value = raw
    if not isinstance(value, dict):
        raise UnreadableState("%s is malformed: it must hold a JSON object, not %s" % (what, _kind(value)),
                              hint=hint)
    return dict(value)


def _kind(value):
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def annotation_text(node, resource):
    return (((node or {}).get("metadata") or {}).get("annotations") or {}).get(markers.state_annotation(resource))


def read_node_state(node, resource):
    """What ``resource`` recorded on ``node``: ``{}`` when nothing, the state mapping,
    or ``{"error": message}`` when the annotation cannot be parsed (the message names
    the node, the annotation and the fix)."""
    try:
        return parse_state(annotation_text(node, resource), _what(node, resource))
    except UnreadableState as exc:
        return {"error": "%s; %s" % (exc.reason, fix_hint(name_of(node), resource))}


def _what(node, resource):
    return "annotation %s on node %s" % (markers.state_annotation(resource), name_of(node))


def unreadable(node, resource):
    """The error of ``read_node_state``, or None when the state can be read."""
    return read_node_state(node, resource).get("error")


def refuse_to_overwrite(node, resource):
    """Raise ``UnreadableState`` when the node's state for ``resource`` cannot be
    parsed: what a person wrote there is theirs to fix, not NodeWright's to replace."""
    try:
        parse_state(annotation_text(node, resource), _what(node, resource))
    except UnreadableState as exc:
        raise UnreadableState("%s; NodeWright leaves it as it is and does not maintain the node for %s until "
                              "it is fixed" % (exc.reason, resource), hint=fix_hint(name_of(node), resource))


def states_by_resource(annotations):
    """Per resource named in ``annotations`` (a node's), ``{"state": mapping}`` or
    ``{"error": message}``."""
    out = {}
    for key, value in sorted((annotations or {}).items()):
        if not key.startswith(markers.ANNOTATION_STATE_PREFIX):
            continue
        resource = key[len(markers.ANNOTATION_STATE_PREFIX):]
        try:
            out[resource] = {"state": parse_state(value, "annotation %s" % key)}
        except UnreadableState as exc:
            out[resource] = {"error": exc.reason}
    return out


def repaired_malformed(node):
    """The node carries the ``nodewright.io/Erroring`` condition for a malformed state
    (reason ``MalformedState``) and every NodeWright state on it reads again: the mark
    is stale and is to be re-evaluated (a node without work is never visited, so a
    rollout or the reconciler does it)."""
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == markers.CONDITION_ERRORING:
            if cond.get("status") != "True" or cond.get("reason") != REASON_MALFORMED:
                return False
            annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
            return not any("error" in v for v in states_by_resource(annotations).values())
    return False


def package_entries(state):
    """The package entries of a parsed state: name -> entry (mappings only)."""
    packages = (state or {}).get("packages")
    if not isinstance(packages, dict):
        return {}
    return {name: entry for name, entry in packages.items() if isinstance(entry, dict)}


def boot_id(node):
    return (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""
