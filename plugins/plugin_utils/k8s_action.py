# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Action plugin shared by NodeWright's Kubernetes modules.

These modules only talk to the Kubernetes API, and a rollout runs them for every
node, usually with ``delegate_to: localhost``. Shipping each call as a separate
Python process that re-imports the Kubernetes client costs about a second of CPU
per task; when the task runs on the controller, this plugin runs the module's
logic inside the controller's worker process instead - same argument spec, same
result. Elsewhere (a task that really runs on a remote host) the module is
executed the ordinary way. ``NODEWRIGHT_INPROCESS=0`` turns the shortcut off.

Ansible forks a new worker for every task and host; the Kubernetes API classes
are loaded once in the controller (see below), so the workers inherit them.
"""

from __future__ import annotations

import importlib
import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import warm_imports
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import (
    InProcessModule,
    full_argument_spec,
    result_of,
)

# The strategy loads this class in the controller before it forks the task workers
# (to read BYPASS_HOST_LOOP); loading the Kubernetes API classes here means every
# worker inherits them instead of importing them again for each node and task.
warm_imports()


def _short_name(action):
    return action.rsplit(".", 1)[-1]


class K8sModuleAction(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def _runs_on_controller(self):
        if os.environ.get("NODEWRIGHT_INPROCESS", "1") in ("0", "false", "no"):
            return False
        return getattr(self._connection, "transport", None) in ("local", "ansible.builtin.local")

    def run(self, tmp=None, task_vars=None):
        result = super(K8sModuleAction, self).run(tmp, task_vars)
        if not self._runs_on_controller():
            result.update(self._execute_module(task_vars=task_vars))
            return result
        name = _short_name(self._task.resolved_action or self._task.action)
        module = importlib.import_module("ansible_collections.nodewright.fleet.plugins.modules." + name)
        validator = ArgumentSpecValidator(full_argument_spec(module.ARGUMENT_SPEC))
        validated = validator.validate(dict(self._task.args))
        if validated.error_messages:
            result.update(failed=True, msg="; ".join(validated.error_messages))
            return result
        check_mode = bool(self._task.check_mode if self._task.check_mode is not None
                          else self._play_context.check_mode)
        shim = InProcessModule(validated.validated_parameters, check_mode)
        outcome = result_of(lambda: module.run(shim))
        outcome["invocation"] = {"module_args": {k: v for k, v in validated.validated_parameters.items()
                                                 if k != "api_key"}}
        result.update(outcome)
        return result
