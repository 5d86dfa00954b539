# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What every NodeWright module shares: the auth options, the client, and turning
NodeWright errors into one clear failure message."""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import AUTH_ARG_SPEC, get_api_client


class NodeWrightModule(AnsibleModule):
    def __init__(self, argument_spec, **kwargs):
        spec = full_argument_spec(argument_spec)
        kwargs.setdefault("supports_check_mode", True)
        super(NodeWrightModule, self).__init__(argument_spec=spec, **kwargs)

    def api_client(self):
        return get_api_client(self.params)

    def run(self, fn):
        """Call ``fn()``, which returns the result dict; failures become fail_json."""
        result = result_of(fn)
        if result.pop("failed", False):
            self.fail_json(**result)
        self.exit_json(**result)


def result_of(fn):
    """Call ``fn()`` and turn a NodeWright error into a failed result a person can act on.

    A failure says ``changed: true`` when the work changed something before it failed:
    the error's ``details["changed"]``, or ``changed`` in the partial result it carries
    (``details["result"]``, see ``carry_result``)."""
    try:
        result = fn()
    except NodeWrightError as exc:
        result = {}
        if exc.hint:
            result["hint"] = exc.hint
        details = exc.details or {}
        for key, value in details.items():
            if key == "result" and isinstance(value, dict):
                result.update(value)
            else:
                result[key] = value
        partial = details.get("result") if isinstance(details.get("result"), dict) else {}
        result.update(failed=True, msg=exc.message,
                      changed=bool(details.get("changed") or partial.get("changed")))
        return result
    except Exception as exc:  # an unexpected bug: keep the traceback, but lead with a sentence
        partial = getattr(exc, "nodewright_result", None) or {}
        return {"failed": True, "changed": bool(partial.get("changed")), "msg": "unexpected error: %s" % exc,
                "exception": traceback.format_exc()}
    result.setdefault("changed", False)
    return result


class InProcessModule(object):
    """What a module's ``run(module)`` needs, for running it inside the controller
    process (the k8s modules' action plugin does this when the task runs locally)."""

    def __init__(self, params, check_mode):
        self.params = params
        self.check_mode = check_mode

    def api_client(self):
        return get_api_client(self.params)


def check_text(value, field, max_length=1024, required=False):
    """A free-text option (a reason, a message) that ends up in an annotation, a
    condition or an Event: a string of at most ``max_length`` characters."""
    if value is None:
        if required:
            raise ValidationError("is required", field=field)
        return value
    if not isinstance(value, str):
        raise ValidationError("must be text, got %s" % type(value).__name__, field=field)
    if required and not value.strip():
        raise ValidationError("must not be empty", field=field)
    if len(value) > max_length:
        raise ValidationError("is %d characters long; at most %d fit" % (len(value), max_length), field=field,
                              hint="shorten it; the full text belongs in a log or the task's result")
    if "\0" in value:
        raise ValidationError("contains a NUL character", field=field)
    return value


def full_argument_spec(argument_spec):
    spec = dict(AUTH_ARG_SPEC)
    spec.update(argument_spec)
    return spec
