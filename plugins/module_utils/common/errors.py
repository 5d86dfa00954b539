# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Errors raised by NodeWright's core; each says what failed, where, and what to do."""

from __future__ import annotations


class NodeWrightError(Exception):
    """Base error. ``hint`` tells the operator what to do next."""

    def __init__(self, message, hint=None, **details):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def __str__(self):
        if self.hint:
            return "%s (%s)" % (self.message, self.hint)
        return self.message


class ValidationError(NodeWrightError):
    """Input (a policy, a package, a resource, an option) is malformed.

    Raised before any node is touched. ``field`` is a dotted path into the input.
    """

    def __init__(self, message, field=None, hint=None, source=None, line=None):
        self.reason = message  # the message without the source and field prefix
        self.field = field
        self.source = source
        self.line = line
        where = []
        if source:
            where.append(str(source) + (":%d" % line if line else ""))
        if field:
            where.append(field)
        prefix = (": ".join(where) + ": ") if where else ""
        super().__init__(prefix + message, hint=hint)


class SelectorError(ValidationError):
    """A label or field selector could not be parsed."""


class ClusterError(NodeWrightError):
    """The Kubernetes API could not be reached or refused a request."""


class TimeoutExceeded(NodeWrightError):
    """A wait ran past its deadline. ``details['result']`` holds what was seen."""
