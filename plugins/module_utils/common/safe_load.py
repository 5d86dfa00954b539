# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one loader of the YAML and JSON that NodeWright reads itself: package
manifests, resources and policies from files, vars files, Skyhook ``config.json``,
OCI manifests.

A few hundred bytes of YAML can stand for billions of values: an anchor used nine
times, each use an alias of an anchor used nine times, and so on ("billion laughs").
PyYAML builds such a document cheaply (an alias is the same object), but whatever
walks it afterwards - validation, a copy, ``json.dumps`` to send it to a node - pays
for every value and runs out of memory or time. This loader refuses such a document
before anything is built from it:

* the text is at most ``max_bytes`` long (checked before parsing; files are read
  at most that far);
* the parser's event stream is walked once (iteratively, no recursion) to count the
  values the document would expand to with every alias followed, and the nesting
  depth; more than ``max_values`` values, a recursive alias or nesting deeper than
  ``max_depth`` is refused with a message that says so;
* only then is the document built, with PyYAML's safe loader (plain data only).

JSON has no aliases, so its size bounds its values; its depth is bounded too.
A refusal is an ``InputRefused`` (a ``ValidationError``) naming the source; a syntax
error stays the parser's own (``yaml.YAMLError``, ``ValueError`` for JSON), so callers
keep reporting its line.
"""

from __future__ import annotations

import io
import json

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None
    HAS_YAML = False

MiB = 1024 * 1024
# Defaults that no real input comes near: the largest shipped package manifest is a
# few KiB, a CRD some 30 KiB, a fleet's worth of resources well under a MiB.
MAX_BYTES = 8 * MiB
MAX_VALUES = 250000
MAX_DEPTH = 64


class InputRefused(ValidationError):
    """An input is larger, more deeply nested or expands to more values than allowed."""


class Limits(object):
    __slots__ = ("max_bytes", "max_values", "max_depth")

    def __init__(self, max_bytes=MAX_BYTES, max_values=MAX_VALUES, max_depth=MAX_DEPTH):
        self.max_bytes = max_bytes
        self.max_values = max_values
        self.max_depth = max_depth


DEFAULT_LIMITS = Limits()


def _where(source):
    return str(source) if source else "the input"


def _too_big(size, limits, source):
    return InputRefused("is %s, more than the %s NodeWright reads" % (_size(size), _size(limits.max_bytes)),
                        source=source or "input",
                        hint="this is not a NodeWright input; check that the right file is given")


def _size(n):
    if n >= MiB:
        return "%.1f MiB" % (n / float(MiB))
    if n >= 1024:
        return "%.1f KiB" % (n / 1024.0)
    return "%d bytes" % n


def check_size(text, source=None, limits=DEFAULT_LIMITS):
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > limits.max_bytes:
        raise _too_big(size, limits, source)
    return text


def read_text(path, limits=DEFAULT_LIMITS, binary=False):
    """The content of the file ``path``, refusing one larger than ``limits.max_bytes``
    without reading more than that."""
    with open(path, "rb") as fh:
        data = fh.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise InputRefused("is larger than the %s NodeWright reads" % _size(limits.max_bytes), source=path,
                           hint="this is not a NodeWright input; check that the right file is given")
    return data if binary else data.decode("utf-8")


# --------------------------------------------------------------------------- YAML

def _loader_class():
    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


def _measure(text, source, limits):
    """Walk the event stream once: refuse more than ``max_values`` values with every
    alias followed, nesting deeper than ``max_depth`` and recursive aliases."""
    events = yaml.parse(io.StringIO(text) if isinstance(text, str) else io.BytesIO(text), Loader=_loader_class())
    sizes = {}          # anchor -> values under it, once its node is complete
    stack = []          # [anchor, values so far] per open collection
    total = 0
    open_anchors = set()

    def add(n):
        nonlocal total
        if stack:
            stack[-1][1] += n
        else:
            total += n
        if total > limits.max_values or (stack and stack[-1][1] > limits.max_values):
            raise InputRefused(
                "expands to more than %d values once its aliases (*name) are followed; a document this "
                "size cannot mean that - it looks like a YAML bomb" % limits.max_values, source=_where(source),
                hint="write the values out, or use fewer anchors and aliases")

    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) >= limits.max_depth:
                raise InputRefused("is nested more than %d levels deep" % limits.max_depth, source=_where(source),
                                   hint="no NodeWright input is nested this deeply; check the file")
            if event.anchor:
                open_anchors.add(event.anchor)
            stack.append([event.anchor, 1])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, count = stack.pop()
            if anchor:
                open_anchors.discard(anchor)
                sizes[anchor] = count
            add(count)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                sizes[event.anchor] = 1
            add(1)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise InputRefused("has an alias (*%s) inside its own anchor: a recursive structure" % event.anchor,
                                   source=_where(source), hint="NodeWright inputs are plain trees; remove the alias")
            add(sizes.get(event.anchor, 1))
        elif isinstance(event, yaml.DocumentEndEvent):
            total = 0 if not stack else total  # each document is measured on its own
    return True


def load_yaml_all(text, source=None, limits=DEFAULT_LIMITS):
    """The documents of a YAML stream (``yaml.safe_load_all``), bounded; empty documents dropped."""
    if not HAS_YAML:  # pragma: no cover
        raise ValidationError("PyYAML is needed to read %s" % _where(source), hint="pip install PyYAML")
    check_size(text, source, limits)
    _measure(text, source, limits)
    return [doc for doc in yaml.load_all(text, Loader=_loader_class()) if doc is not None]


def load_yaml(text, source=None, limits=DEFAULT_LIMITS):
    """One YAML document (``yaml.safe_load``), bounded; None for an empty document."""
    if not HAS_YAML:  # pragma: no cover
        raise ValidationError("PyYAML is needed to read %s" % _where(source), hint="pip install PyYAML")
    check_size(text, source, limits)
    _measure(text, source, limits)
    return yaml.load(text, Loader=_loader_class())


def load_yaml_file(path, limits=DEFAULT_LIMITS):
    return load_yaml(read_text(path, limits), source=path, limits=limits)


# --------------------------------------------------------------------------- JSON

def _json_depth(value, limit):
    """The nesting depth of decoded JSON, walked without recursion (stops past ``limit``)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_json(text, source=None, limits=DEFAULT_LIMITS):
    """Decoded JSON (``json.loads``), bounded in size and depth. A syntax error is the
    decoder's ``ValueError`` (``json.JSONDecodeError``, with its line)."""
    check_size(text, source, limits)
    try:
        value = json.loads(text)
    except RecursionError:
        raise InputRefused("is nested more deeply than can be read", source=_where(source),
                           hint="no NodeWright input is nested this deeply; check the file")
    if _json_depth(value, limits.max_depth) > limits.max_depth:
        raise InputRefused("is nested more than %d levels deep" % limits.max_depth, source=_where(source),
                           hint="no NodeWright input is nested this deeply; check the file")
    return value


def _children(item):
    # The base types' own methods: a subclass (a lazily templated container) is read as
    # it is stored, without rendering each value on the way.
    if isinstance(item, dict):
        return list(dict.keys(item)) + list(dict.values(item))
    if isinstance(item, list):
        return list(list.__iter__(item))
    return list(tuple.__iter__(item))


def _container(item):
    return isinstance(item, (dict, list, tuple))


def bounded_size(value, limit=MAX_VALUES, unwrap=None):
    """The number of values in already-loaded data (dicts, lists, scalars), a shared
    object counted every time it is reached, as ``json.dumps`` or a deep copy would
    meet it - for data loaded by someone else (ansible-core's variables) that may share
    objects the way a YAML bomb does. Each distinct object is walked once; the count
    stops at ``limit + 1``. ``unwrap(child)`` may turn a stored placeholder into the
    value it stands for (the filter plugin's: ansible-core's not yet rendered values)."""
    if unwrap is not None:
        def children(item):
            return [unwrap(c) for c in _children(item)]
    else:
        children = _children
    if not _container(value):
        return 1
    seen = {}
    on_path = set()
    stack = [(value, False)]
    while stack:
        item, finished = stack.pop()
        key = id(item)
        if finished:
            on_path.discard(key)
            size = 1
            for child in children(item):
                size += seen.get(id(child), 1) if _container(child) else 1  # a cycle counts once
                if size > limit:
                    size = limit + 1
                    break
            seen[key] = size
            continue
        if key in seen or key in on_path:
            continue
        on_path.add(key)
        stack.append((item, True))
        stack.extend((child, False) for child in children(item)
                     if _container(child) and id(child) not in seen and id(child) not in on_path)
    return seen[id(value)]
