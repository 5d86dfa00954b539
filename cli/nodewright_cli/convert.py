# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright convert``: upstream NodeWright's objects as NodeWright resources.

    nodewright convert skyhooks.yaml [more.yaml | -] [--drop FIELD]... > nodewright.yaml
    kubectl apply -f nodewright.yaml

Reads ``skyhook.nvidia.com`` ``Skyhook`` and ``nodewright.nvidia.com`` ``NodeWright``
objects and their ``DeploymentPolicy`` objects (files or ``-`` for standard input,
several YAML documents each, a ``List`` too) and prints them as ``nodewright.io``
objects, converted by the same code as ``plan.yml``/``rollout.yml`` convert them.
Each converted object carries where it came from (annotation
``nodewright.io/converted-from``) and the warnings of its conversion (annotation
``nodewright.io/conversion-warnings``, a JSON list: fields that only concern
upstream's package pods, an image tag replaced by the version); the resource's
status then shows them as its ``ConversionWarnings`` condition. The warnings are
also printed on standard error. ``nodewright.io`` objects pass through unchanged.

Exit status: 0; 1 when an object cannot be converted (every problem of every object
is printed, nothing is written to standard output).
"""

from __future__ import annotations

import json
import sys

import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import SOURCE_GROUPS, convert
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

ANNOTATION_CONVERTED_FROM = markers.PREFIX + "/converted-from"
ANNOTATION_CONVERSION_WARNINGS = markers.PREFIX + "/conversion-warnings"
DROP_HINT = "convert with --drop %r to leave it out"


def _documents(paths, stdin):
    for path in paths:
        text = stdin.read() if path == "-" else open(path).read()
        for n, doc in enumerate(yaml.safe_load_all(text)):
            if doc is None:
                continue
            if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                for m, item in enumerate(doc["items"]):
                    yield "%s[%d].items[%d]" % (path, n, m), item
            else:
                yield "%s[%d]" % (path, n), doc


def convert_documents(docs, drop=()):
    """``(objects, warnings, problems)`` for ``[(where, object)]``: the objects as
    NodeWright resources, ``where: warning`` lines, ``where: problem`` lines."""
    objects, warnings, problems = [], [], []
    for where, obj in docs:
        if not isinstance(obj, dict) or not obj.get("kind"):
            problems.append("%s: not a Kubernetes object (no kind)" % where)
            continue
        name = (obj.get("metadata") or {}).get("name", "?")
        if obj.get("apiVersion") not in SOURCE_GROUPS:
            if str(obj.get("apiVersion", "")).startswith(markers.API_GROUP + "/"):
                objects.append(obj)
            else:
                problems.append("%s: %s %s is not an upstream NodeWright object (apiVersion %s)"
                                % (where, obj.get("kind"), name, obj.get("apiVersion")))
            continue
        try:
            conversion = convert(obj, drop=drop, drop_hint=DROP_HINT)
        except ValidationError as exc:
            problems.append("%s: %s %s: %s" % (where, obj.get("kind"), name, exc))
            continue
        resource = conversion.resource
        annotations = resource.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[ANNOTATION_CONVERTED_FROM] = "%s %s/%s" % (obj.get("apiVersion"), obj.get("kind"), name)
        if conversion.warnings:
            annotations[ANNOTATION_CONVERSION_WARNINGS] = json.dumps(list(conversion.warnings))
            warnings.extend("%s: %s %s: %s" % (where, resource["kind"], name, w) for w in conversion.warnings)
        objects.append(resource)
    return objects, warnings, problems


def register(sub):
    """Add ``convert`` to the ``nodewright`` subparsers; return its command function by name."""
    cv = sub.add_parser("convert", help="print upstream NodeWright (Skyhook) objects as NodeWright resources, "
                                        "ready for kubectl apply")
    cv.add_argument("files", nargs="+", metavar="FILE", help="YAML files of upstream objects ('-': standard input)")
    cv.add_argument("--drop", action="append", default=[], metavar="FIELD",
                    help="a field path without a NodeWright equivalent to leave out (e.g. "
                         "'spec.packages.*.valueFrom.fieldRef'; repeatable)")

    def run(args):
        try:
            docs = list(_documents(args.files, sys.stdin))
        except (OSError, yaml.YAMLError) as exc:
            sys.stderr.write("nodewright convert: %s\n" % exc)
            return 1
        objects, warnings, problems = convert_documents(docs, args.drop)
        for line in warnings:
            sys.stderr.write("warning: %s\n" % line)
        if problems:
            for line in problems:
                sys.stderr.write("nodewright convert: %s\n" % line)
            return 1
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
        return 0

    return {"convert": run}
