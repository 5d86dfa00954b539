# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The Kubernetes API's rules for names, label and annotation keys and values, in one place.

Every name NodeWright takes from a person (a module option, an inventory option, a
CLI argument, a field of a resource) is checked here before it goes into a request.
A name is part of a URL path (``/api/v1/nodes/NAME``), a field selector
(``spec.nodeName=NAME``) or a label key (``nodewright.io/status-NAME``): the API
server decodes ``%2F`` in a path back into ``/``, so escaping alone would let
``h200-0000/status`` reach the status subresource. Checked against its rule first, a
name cannot escape its place.

The rules are those of k8s.io/apimachinery's validation package:

* DNS-1123 subdomain (nodes, most objects): at most 253 characters of ``[a-z0-9-.]``,
  each dot-separated part starting and ending with a letter or digit;
* DNS-1123 label (namespaces, and names that become a hostname or a label value):
  at most 63 characters of ``[a-z0-9-]``, starting and ending with a letter or digit;
* qualified name (label, annotation and taint keys): an optional DNS-1123
  subdomain prefix and ``/``, then a name of at most 63 characters of
  ``[A-Za-z0-9-_.]`` starting and ending with a letter or digit;
* label value: empty, or at most 63 characters of ``[A-Za-z0-9-_.]`` starting and
  ending with a letter or digit.

Errors name the option or field, the rule, what is wrong with the value, and the fix.
"""

from __future__ import annotations

import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# A NodeWright resource's name becomes part of label keys on nodes
# (nodewright.io/status-<name>), whose name part is at most 63 characters.
NODEWRIGHT_NAME_MAX = 56

DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME_PATTERN = r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

_LABEL_RE = re.compile(DNS1123_LABEL_PATTERN)
_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_QUALIFIED_RE = re.compile(QUALIFIED_NAME_PATTERN)
_VALUE_RE = re.compile(LABEL_VALUE_PATTERN)

SUBDOMAIN_RULE = ("a DNS-1123 subdomain: at most 253 characters of lowercase letters, digits, '-' and '.', "
                  "starting and ending with a letter or digit")
LABEL_RULE = ("a DNS-1123 label: at most 63 characters of lowercase letters, digits and '-', starting and "
              "ending with a letter or digit")
KEY_RULE = ("an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters of letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit")
VALUE_RULE = ("empty, or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a "
              "letter or digit")


class InvalidName(ValidationError):
    """A name, key or value breaks the Kubernetes API's rule for it."""


def _show(value):
    text = repr(value)
    return text if len(text) <= 80 else "%s...' (%d characters)" % (text[:60], len(value))


def _problem(value, charset, max_length, lowercase):
    """What is wrong with ``value`` under a rule, in a few words."""
    if value == "":
        return "it is empty"
    if len(value) > max_length:
        return "it is %d characters long" % len(value)
    for char in value:
        if char not in charset:
            if lowercase and char.isalpha() and char.lower() in charset:
                return "it has upper-case letters"
            if char == "/":
                return "'/' is not allowed"
            if char == "%":
                return "'%' is not allowed (not URL-encoded)"
            if char.isspace():
                return "it contains white space"
            return "%r is not allowed" % char
    return "it must start and end with a letter or digit"


_SUBDOMAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _suggestion(value, check):
    """A corrected value to offer (lower case, no surrounding space), when it passes."""
    if not isinstance(value, str):
        return None
    for candidate in (value.strip(), value.strip().lower()):
        if candidate != value and candidate and check(candidate):
            return candidate
    return None


def _refuse(value, field, what, rule, problem, fix, suggestion=None, error=InvalidName):
    hint = ("did you mean %r? " % suggestion if suggestion else "") + fix
    raise error("%s is not a valid %s: %s; a %s is %s" % (_show(value), what, problem, what, rule),
                field=field, hint=hint)


def _require_string(value, field, what, error):
    if not isinstance(value, str) or isinstance(value, bool):
        raise error("a %s must be a string, got %s" % (what, type(value).__name__), field=field,
                    hint="quote it in YAML")


def is_subdomain(value):
    return isinstance(value, str) and len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_SUBDOMAIN_RE.fullmatch(value))


def is_dns_label(value):
    return isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX and bool(_LABEL_RE.fullmatch(value))


def subdomain(value, field, what="name", fix=None, max_length=DNS1123_SUBDOMAIN_MAX, error=InvalidName):
    """``value`` when it is a DNS-1123 subdomain of at most ``max_length`` characters."""
    _require_string(value, field, what, error)
    if len(value) <= max_length and _SUBDOMAIN_RE.fullmatch(value):
        return value
    rule = SUBDOMAIN_RULE if max_length == DNS1123_SUBDOMAIN_MAX else \
        SUBDOMAIN_RULE.replace("at most 253", "at most %d" % max_length)
    problem = _problem(value, _SUBDOMAIN_CHARS, max_length, True)
    if problem.startswith("it must start") and (".." in value or ".-" in value or "-." in value):
        problem = "each part between dots must start and end with a letter or digit"
    _refuse(value, field, what, rule, problem, fix or "use the %s as Kubernetes shows it" % what,
            _suggestion(value, lambda v: len(v) <= max_length and bool(_SUBDOMAIN_RE.fullmatch(v))), error)


def dns_label(value, field, what="name", fix=None, error=InvalidName):
    """``value`` when it is a DNS-1123 label."""
    _require_string(value, field, what, error)
    if len(value) <= DNS1123_LABEL_MAX and _LABEL_RE.fullmatch(value):
        return value
    _refuse(value, field, what, LABEL_RULE, _problem(value, _LABEL_CHARS, DNS1123_LABEL_MAX, True),
            fix or "use the %s as Kubernetes shows it" % what, _suggestion(value, is_dns_label), error)


def node_name(value, field="name"):
    """A Node's name (a DNS-1123 subdomain)."""
    return subdomain(value, field, "node name",
                     fix="give the node's name as `kubectl get nodes` prints it, e.g. h100-0001")


def node_names(values, field):
    return [node_name(v, "%s[%d]" % (field, n)) for n, v in enumerate(values or ())]


def name_of(obj, default="?"):
    """The ``metadata.name`` of an object as the API returned it, or ``default``."""
    return ((obj or {}).get("metadata") or {}).get("name") or default


def namespace(value, field="namespace"):
    """A namespace's name (a DNS-1123 label)."""
    return dns_label(value, field, "namespace name",
                     fix="give the namespace as `kubectl get namespaces` prints it, e.g. nodewright")


def namespaces(values, field):
    return [namespace(v, "%s[%d]" % (field, n)) for n, v in enumerate(values or ())]


def object_name(value, field, kind="object"):
    """The name of an object whose kind names objects with DNS-1123 subdomains
    (most kinds: Pods, Secrets, Jobs, PriorityClasses, custom resources)."""
    return subdomain(value, field, "%s name" % kind,
                     fix="give the %s's name as `kubectl get` prints it" % kind)


def nodewright_name(value, field="name"):
    """A NodeWright resource's name: a DNS-1123 subdomain of at most 56 characters,
    because it becomes part of label keys on nodes (``nodewright.io/status-<name>``)."""
    return subdomain(value, field, "NodeWright name", max_length=NODEWRIGHT_NAME_MAX,
                     fix="give the name as `kubectl get nodewrights` prints it; at most %d characters, as the "
                         "name is part of label keys on nodes" % NODEWRIGHT_NAME_MAX)


def qualified_key(key, field, what="label key", error=InvalidName):
    """A label, annotation or taint key: ``[prefix/]name``."""
    _require_string(key, field, what, error)
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        problem = "the prefix before '/' is empty"
    elif slash and "/" in prefix:
        problem = "it has more than one '/'"
    elif slash and not (len(prefix) <= DNS1123_SUBDOMAIN_MAX and _SUBDOMAIN_RE.fullmatch(prefix)):
        problem = "its prefix %s is not a DNS-1123 subdomain (%s)" % (
            _show(prefix), _problem(prefix, _SUBDOMAIN_CHARS, DNS1123_SUBDOMAIN_MAX, True))
    elif len(name) <= QUALIFIED_NAME_MAX and _QUALIFIED_RE.fullmatch(name):
        return key
    else:
        problem = _problem(name, _NAME_CHARS, QUALIFIED_NAME_MAX, False)
        if slash:
            problem = "its name part after '/' is wrong: " + problem
    _refuse(key, field, what, KEY_RULE, problem, "e.g. nvidia.com/gpu.product or nodepool", error=error)


def label_key(key, field, error=InvalidName):
    return qualified_key(key, field, "label key", error=error)


def taint_key(key, field):
    return qualified_key(key, field, "taint key")


def label_value(value, field, error=InvalidName):
    """A label value (also the value of a taint and of a selector requirement)."""
    _require_string(value, field, "label value", error)
    if len(value) <= LABEL_VALUE_MAX and _VALUE_RE.fullmatch(value):
        return value
    _refuse(value, field, "label value", VALUE_RULE, _problem(value, _NAME_CHARS, LABEL_VALUE_MAX, False),
            "quote numbers and booleans in YAML; e.g. \"true\" or h100", error=error)


def labels(mapping, field):
    """A mapping of label keys to label values; every problem is named."""
    if not isinstance(mapping, dict):
        raise InvalidName("labels must be a mapping of label keys to values, got %s" % type(mapping).__name__,
                          field=field)
    problems = Problems()
    for key, value in mapping.items():
        with problems.collect():
            label_key(key, '%s["%s"]' % (field, key) if isinstance(key, str) else field)
        with problems.collect():
            label_value(value, '%s["%s"]' % (field, key))
    problems.raise_if_any()
    return mapping


# --------------------------------------------------------------------------- URL paths

def path_segment(value, field, what="name"):
    """A value that is safe as one segment of an API path (the API server's own rule):
    not ``.`` or ``..`` and without ``/`` or ``%``. The finer rules are the kinds'."""
    _require_string(value, field, what, InvalidName)
    if value in ("", ".", ".."):
        raise InvalidName("%s is not a valid %s: it cannot be empty, '.' or '..'" % (_show(value), what),
                          field=field, hint="give the %s as Kubernetes shows it" % what)
    for char in ("/", "%"):
        if char in value:
            raise InvalidName("%s is not a valid %s: %r is not allowed" % (_show(value), what, char),
                              field=field, hint="give the %s itself, not a path or a URL-encoded value" % what)
    return value
