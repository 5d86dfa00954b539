#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_state
short_description: Read and write NodeWright's markers on a node
version_added: "0.1.0"
description:
  - Reads the node (readiness, bootID, cordon owner) and NodeWright's state for O(resource).
  - Writes, when asked - the status label C(nodewright.io/status-<resource>) and the aggregate
    C(nodewright.io/status), the JSON state annotation C(nodewright.io/state-<resource>), the node
    condition C(nodewright.io/Erroring), and a Kubernetes Event on the node.
  - Every key is defined once in the collection's C(markers) module utility.
  - Without any of O(status), O(state), O(error), O(event) or O(clear) it only reads, and reports
    C(changed=false).
  - A O(status) or O(state) the node already records is not written again (C(changed=false); the state's
    C(updated) time stays that of the last real change).
options:
  resource:
    description: Name of the NodeWright resource the markers belong to.
    type: str
    default: default
  status:
    description: Status to record for O(resource).
    type: str
    choices: [complete, in_progress, erroring, blocked, waiting, unknown]
  state:
    description: Keys merged into the JSON state annotation (for example package versions, stage, reason).
    type: dict
  error:
    description:
      - O(resource)'s error - a mapping with C(message) and an optional C(reason) - or V(false) when it
        has none.
      - The C(nodewright.io/Erroring) node condition is computed over every NodeWright resource on the node,
        whenever O(error), O(status) or O(clear) is given - C(True) while any resource's status label says
        C(erroring) (or its state annotation cannot be read), its message naming each resource with its
        reason; C(False) only when none does. A resource that succeeds never clears another one's error.
    type: raw
  event:
    description: An Event to record on the node - C(reason), C(message), optional C(type) (Normal or Warning).
    type: dict
  clear:
    description: Remove O(resource)'s status label and state annotation.
    type: bool
    default: false
  keep:
    description:
      - With O(clear), packages whose entries stay in the state annotation (packages still on the node, such
        as those a deleted resource does not uninstall); the annotation goes only when none of them is recorded.
    type: list
    elements: str
    default: []
    version_added: "0.2.0"
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Mark the node erroring with the reason
  nodewright.fleet.node_state:
    name: "{{ inventory_hostname }}"
    resource: gpu-tuning
    status: erroring
    state:
      reason: "package sysctl 1.2.0 apply-check failed"
    error:
      reason: PackageFailed
      message: "sysctl 1.2.0 apply-check failed: vm.swappiness is 60, expected 10"
    event:
      reason: NodeWrightFailed
      message: "sysctl 1.2.0 apply-check failed"
      type: Warning
  delegate_to: localhost

- name: Read the node's boot ID and NodeWright state
  nodewright.fleet.node_state:
    name: "{{ inventory_hostname }}"
    resource: gpu-tuning
  register: node
  delegate_to: localhost
"""

RETURN = r"""
boot_id:
  description: The node's bootID.
  returned: always
  type: str
ready:
  description: Whether the node is Ready.
  returned: always
  type: bool
unschedulable:
  description: Whether the node is cordoned.
  returned: always
  type: bool
cordon:
  description: Cordon owner - uncordoned, cordoned_by_nodewright or cordoned_by_other.
  returned: always
  type: str
status:
  description: NodeWright status of O(resource) on the node after the task.
  returned: always
  type: str
state:
  description: NodeWright's JSON state for O(resource) after the task (C(error) when hand-edited and malformed).
  returned: always
  type: dict
conditions:
  description: The node's conditions, type to status.
  returned: always
  type: dict
"""

import json

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError, carry_result
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule, check_text
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import check_keys

EVENT_TYPES = ("Normal", "Warning")
_FALSE = (False, "false", "False", "no", "No")


def _state_content(text):
    """A state annotation's value without its ``updated`` time, for comparison."""
    try:
        state = json.loads(text) if text else None
    except ValueError:
        return text
    if isinstance(state, dict):
        state.pop("updated", None)
    return state


def records_nothing_new(node, patch):
    """True when every label and annotation of a metadata patch is already on the node."""
    meta = node.get("metadata") or {}
    for kind in ("labels", "annotations"):
        current = meta.get(kind) or {}
        for key, value in ((patch.get("metadata") or {}).get(kind) or {}).items():
            if kind == "annotations" and key.startswith(markers.ANNOTATION_STATE_PREFIX):
                if _state_content(current.get(key)) != _state_content(value):
                    return False
            elif current.get(key) != value:
                return False
    return True


def summary(node, resource):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {
        "boot_id": node_ops.boot_id(node), "ready": node_ops.is_ready(node),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "cordon": node_ops.cordon_state(node),
        "status": labels.get(markers.status_label(resource)),
        "state": node_ops.read_state(node, resource),
        "conditions": {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []},
    }


def check_error(error):
    """None (leave the condition), False (no error of this resource) or {reason, message}."""
    if error is None or error is True:
        return None
    if error in _FALSE:
        return False
    if not isinstance(error, dict):
        raise ValidationError("must be false or a mapping with reason and message, got %r" % (error,),
                              field="error", hint="e.g. error: {reason: PackageFailed, message: ...}")
    check_keys(error, ("reason", "message"), "error")
    check_text(error.get("message"), "error.message", required=True)
    check_text(error.get("reason"), "error.reason", max_length=128)
    return {"reason": error.get("reason") or node_ops.ERRORING_REASON, "message": error["message"]}


def check_event(event):
    if event is None:
        return None
    check_keys(event, ("reason", "message", "type"), "event")
    check_text(event.get("reason"), "event.reason", max_length=128, required=True)
    check_text(event.get("message"), "event.message", required=True)
    if event.get("type", "Normal") not in EVENT_TYPES:
        raise ValidationError("must be Normal or Warning, got %r" % (event.get("type"),), field="event.type")
    return event


def run(module):
    p = module.params
    name, resource = p["name"], p["resource"]
    # Every option is checked before the node is touched.
    names.node_name(name, "name")
    names.nodewright_name(resource, "resource")
    error = check_error(p["error"])
    event = check_event(p["event"])
    core = node_ops.core_api(module.api_client())
    node = node_ops.get_node(core, name)
    result = {"changed": False}
    with carry_result(result):
        if p["clear"]:
            patch = node_ops.clear_marks_patch(node, resource, keep=p["keep"])
        else:
            patch = node_ops.state_patch(node, resource, status=p["status"], state=p["state"]) \
                if (p["status"] or p["state"]) else None
            if patch and records_nothing_new(node, patch):
                patch = None
        if patch:
            result["changed"] = True
            if module.check_mode:
                node = node_ops.merged(node, patch)
            else:
                node_ops.patch_node(core, name, patch)
                node = node_ops.get_node(core, name)
        # The condition follows every resource on the node, not only this one: recomputed
        # whenever this resource's error or status labels change.
        if error is not None or p["status"] or p["clear"]:
            cond = node_ops.erroring_condition_patch(node, resource, error or None)
            if cond:
                result["changed"] = True
                if not module.check_mode:
                    node_ops.patch_node_status(core, name, cond)
                    node = node_ops.get_node(core, name)
        if event:
            result["changed"] = True
            if not module.check_mode:
                node_ops.emit_event(core, name, event["reason"], event["message"], event.get("type", "Normal"))
    result.update(summary(node, resource))
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    resource=dict(type="str", default="default"),
    status=dict(type="str", choices=list(markers.STATUSES)),
    state=dict(type="dict"),
    error=dict(type="raw"),
    event=dict(type="dict"),
    clear=dict(type="bool", default=False),
    keep=dict(type="list", elements="str", default=[]),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
