# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Errors raised by NodeWright's core; each says what failed, where, and what to do."""

from __future__ import annotations

import contextlib


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
        self.problem = message  # without the field and source in front
        where = []
        if source and not _names_itself(message, str(source)):
            where.append(str(source) + (":%d" % line if line else ""))
        # "timeout must be ..." needs no "timeout: " in front of it.
        if field and not _names_itself(message, field):
            where.append(field)
        prefix = (": ".join(where) + ": ") if where else ""
        super().__init__(prefix + message, hint=hint)


def _names_itself(message, where):
    """Whether ``message`` already starts with ``where`` (its field or source)."""
    return message.startswith(where) and message[len(where):len(where) + 1] in (" ", ":", "")


class SelectorError(ValidationError):
    """A label or field selector could not be parsed."""


class ClusterError(NodeWrightError):
    """The Kubernetes API could not be reached or refused a request."""


class TimeoutExceeded(NodeWrightError):
    """A wait ran past its deadline. ``details['result']`` holds what was seen."""


@contextlib.contextmanager
def carry_result(result):
    """Inside, a failure carries ``result`` - what was done so far, ``changed`` included -
    into the failed result: a task that cordoned a node and then failed says
    ``changed: true``. Keys the error carries itself win."""
    try:
        yield result
    except NodeWrightError as exc:
        own = exc.details.get("result") if isinstance(exc.details.get("result"), dict) else {}
        merged = dict(result)
        merged.update(own)
        merged["changed"] = bool(result.get("changed") or own.get("changed") or exc.details.get("changed"))
        exc.details["result"] = merged
        raise
    except Exception as exc:
        try:
            exc.nodewright_result = dict(result)
        except AttributeError:  # an exception type without a __dict__ carries nothing
            pass
        raise


def name_list(items, limit=5):
    """``a, b, c and 4 more``: the first ``limit`` of ``items`` for a message, and how many
    were left out."""
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (" and %d more" % (len(items) - limit) if len(items) > limit else "")
