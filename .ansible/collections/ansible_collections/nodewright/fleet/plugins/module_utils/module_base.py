# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What every NodeWright module shares: the auth options, the client, and turning
NodeWright errors into one clear failure message."""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodewright.fleet.plugins.module_utils.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s_client import AUTH_ARG_SPEC, get_api_client


class NodeWrightModule(AnsibleModule):
    def __init__(self, argument_spec, **kwargs):
        spec = dict(AUTH_ARG_SPEC)
        spec.update(argument_spec)
        kwargs.setdefault("supports_check_mode", True)
        super(NodeWrightModule, self).__init__(argument_spec=spec, **kwargs)

    def api_client(self):
        return get_api_client(self.params)

    def run(self, fn):
        """Call ``fn()``, which returns the result dict; failures become fail_json."""
        try:
            result = fn()
        except NodeWrightError as exc:
            extra = {}
            if exc.hint:
                extra["hint"] = exc.hint
            for key, value in (exc.details or {}).items():
                if key == "result" and isinstance(value, dict):
                    extra.update(value)
                else:
                    extra[key] = value
            extra.pop("changed", None)
            self.fail_json(msg=exc.message, changed=bool((exc.details or {}).get("changed")), **extra)
        except Exception as exc:  # an unexpected bug: keep the traceback, but lead with a sentence
            self.fail_json(msg="unexpected error: %s" % exc, exception=traceback.format_exc())
        if result.pop("failed", False):
            self.fail_json(**result)
        self.exit_json(**result)
