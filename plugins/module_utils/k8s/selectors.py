# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Label selectors, the one implementation shared by the inventory, the policy
engine and the modules.

Two input forms are accepted and give the same ``Selector``:

* the string syntax of ``kubectl -l`` (``a=b``, ``a==b``, ``a!=b``,
  ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``), requirements joined by commas;
* a Kubernetes ``LabelSelector`` mapping (``matchLabels``, ``matchExpressions`` with
  ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``).

``Selector.to_string()`` renders the selector for server-side filtering, so a LIST
call returns only the matching objects.
"""

from __future__ import annotations

import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import SelectorError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names

_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def validate_key(key, where=None):
    """A label key (``names.label_key``), as a SelectorError."""
    return names.label_key(key, where, error=SelectorError)


def validate_value(value, where=None):
    """A label value (``names.label_value``), as a SelectorError."""
    return names.label_value(value, where, error=SelectorError)


class Requirement(object):
    __slots__ = ("key", "op", "values")

    def __init__(self, key, op, values=()):
        self.key = key
        self.op = op
        self.values = tuple(values)

    def matches(self, labels):
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match nodes without the key, as Kubernetes does.
        return not present or labels[self.key] not in self.values

    def to_string(self):
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return "!" + self.key
        if self.op in ("=", "!="):
            return "%s%s%s" % (self.key, self.op, self.values[0])
        return "%s %s (%s)" % (self.key, self.op, ",".join(self.values))

    def __eq__(self, other):
        return isinstance(other, Requirement) and (self.key, self.op, self.values) == (
            other.key, other.op, other.values)

    def __hash__(self):
        return hash((self.key, self.op, self.values))

    def __repr__(self):
        return "Requirement(%r)" % self.to_string()


class Selector(object):
    """A conjunction of requirements; the empty selector matches everything."""

    def __init__(self, requirements=()):
        self.requirements = tuple(requirements)

    def matches(self, labels):
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def to_string(self):
        return ",".join(r.to_string() for r in self.requirements)

    def and_(self, other):
        return Selector(self.requirements + tuple(other.requirements))

    @property
    def empty(self):
        return not self.requirements

    def __eq__(self, other):
        return isinstance(other, Selector) and set(self.requirements) == set(other.requirements)

    def __hash__(self):
        return hash(frozenset(self.requirements))

    def __repr__(self):
        return "Selector(%r)" % self.to_string()


_TOKEN_RE = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


def _tokenize(text):
    tokens = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise SelectorError("cannot parse label selector %r at position %d" % (text, pos))
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def parse_label_selector(text, where=None):
    """Parse the ``kubectl -l`` syntax into a ``Selector``."""
    if text is None:
        return Selector()
    if not isinstance(text, str):
        raise SelectorError("a label selector must be a string, got %s" % type(text).__name__,
                            field=where)
    tokens = _tokenize(text)
    reqs = []
    i = 0

    def fail(msg):
        raise SelectorError("%s in label selector %r" % (msg, text), field=where,
                            hint="use e.g. 'nvidia.com/gpu.family in (hopper,blackwell),!nodewright.io/ignore'")

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            if i + 1 >= len(tokens):
                fail("'!' needs a key")
            reqs.append(Requirement(validate_key(tokens[i + 1], where), "!"))
            i += 2
        elif tok in ("=", "==", "!=", "(", ")", ","):
            fail("unexpected %r" % tok)
        else:
            key = validate_key(tok, where)
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
                i += 1
            elif nxt in ("=", "==", "!="):
                if i + 2 >= len(tokens) or tokens[i + 2] in (",", "(", ")", "=", "==", "!=", "!"):
                    value = ""
                    i += 2
                else:
                    value = tokens[i + 2]
                    i += 3
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=",
                                        [validate_value(value, where)]))
            elif nxt in ("in", "notin"):
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    fail("'%s' needs a parenthesised list" % nxt)
                j = i + 3
                values = []
                expect_value = True
                while j < len(tokens) and tokens[j] != ")":
                    if tokens[j] == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                    else:
                        if not expect_value:
                            fail("missing ',' between values")
                        values.append(validate_value(tokens[j], where))
                        expect_value = False
                    j += 1
                if j >= len(tokens):
                    fail("unclosed '('")
                if not values:
                    fail("'%s' needs at least one value" % nxt)
                reqs.append(Requirement(key, nxt, sorted(set(values))))
                i = j + 1
            else:
                fail("unexpected %r after key %r" % (nxt, key))
        if i < len(tokens):
            if tokens[i] != ",":
                fail("expected ',' before %r" % tokens[i])
            i += 1
            if i >= len(tokens):
                fail("trailing ','")
    return Selector(reqs)


def from_label_selector(obj, where=None):
    """Build a ``Selector`` from a Kubernetes LabelSelector mapping (or None)."""
    if obj is None:
        return Selector()
    if not isinstance(obj, dict):
        raise SelectorError("a LabelSelector must be a mapping", field=where)
    unknown = set(obj) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise SelectorError("unknown LabelSelector field(s): %s" % ", ".join(sorted(unknown)),
                            field=where, hint="allowed: matchLabels, matchExpressions")
    reqs = []
    for key, value in sorted((obj.get("matchLabels") or {}).items()):
        reqs.append(Requirement(validate_key(key, where), "=",
                                [validate_value(str(value), where)]))
    for n, expr in enumerate(obj.get("matchExpressions") or []):
        path = "%s.matchExpressions[%d]" % (where or "selector", n)
        if not isinstance(expr, dict):
            raise SelectorError("must be a mapping", field=path)
        op = _EXPR_OPS.get(expr.get("operator"))
        if op is None:
            raise SelectorError("unknown operator %r" % (expr.get("operator"),), field=path,
                                hint="one of In, NotIn, Exists, DoesNotExist")
        values = [validate_value(str(v), path) for v in (expr.get("values") or [])]
        if op in ("in", "notin") and not values:
            raise SelectorError("%s needs values" % expr["operator"], field=path)
        if op in ("exists", "!") and values:
            raise SelectorError("%s takes no values" % expr["operator"], field=path)
        reqs.append(Requirement(validate_key(expr.get("key"), path), op, sorted(set(values))))
    return Selector(reqs)


def to_selector(value, where=None):
    """Accept a string, a LabelSelector mapping, a list of strings, or a Selector."""
    if isinstance(value, Selector):
        return value
    if value is None or value == "":
        return Selector()
    if isinstance(value, str):
        return parse_label_selector(value, where)
    if isinstance(value, dict):
        return from_label_selector(value, where)
    if isinstance(value, (list, tuple)):
        result = Selector()
        for n, item in enumerate(value):
            result = result.and_(to_selector(item, "%s[%d]" % (where or "selectors", n)))
        return result
    raise SelectorError("cannot use %s as a label selector" % type(value).__name__, field=where)
