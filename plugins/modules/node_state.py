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
  name:
    description: Name of the node.
    type: str
    required: true
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
      - Set (a mapping with C(reason) and C(message)) or clear (V(false)) the C(nodewright.io/Erroring)
        node condition.
    type: raw
  event:
    description: An Event to record on the node - C(reason), C(message), optional C(type) (Normal or Warning).
    type: dict
  clear:
    description: Remove O(resource)'s status label and state annotation.
    type: bool
    default: false
extends_documentation_fragment:
  - nodewright.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
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

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


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


def run(module):
    p = module.params
    core = node_ops.core_api(module.api_client())
    name, resource = p["name"], p["resource"]
    node = node_ops.get_node(core, name)
    changed = False
    if p["clear"]:
        patch = node_ops.clear_marks_patch(node, resource)
    else:
        patch = node_ops.state_patch(node, resource, status=p["status"], state=p["state"]) \
            if (p["status"] or p["state"]) else None
        if patch and records_nothing_new(node, patch):
            patch = None
    if patch:
        changed = True
        if not module.check_mode:
            node = node_ops.patch_node(core, name, patch) and node_ops.get_node(core, name)
    error = p["error"]
    if error is not None and error is not True:
        if error is False or error in ("false", "False", "no"):
            cond = node_ops.condition_patch(node, markers.CONDITION_ERRORING, "False", "Healthy", "no NodeWright error")
            if not any(c.get("type") == markers.CONDITION_ERRORING and c.get("status") == "True"
                       for c in (node.get("status") or {}).get("conditions") or []):
                cond = None
        elif isinstance(error, dict) and error.get("message"):
            cond = node_ops.condition_patch(node, markers.CONDITION_ERRORING, "True",
                                            error.get("reason", "NodeWrightError"), error["message"])
        else:
            raise ValidationError("error must be false or a mapping with reason and message", field="error")
        if cond:
            changed = True
            if not module.check_mode:
                node_ops.patch_node_status(core, name, cond)
                node = node_ops.get_node(core, name)
    if p["event"]:
        ev = p["event"]
        if not ev.get("reason") or not ev.get("message"):
            raise ValidationError("event needs reason and message", field="event")
        changed = True
        if not module.check_mode:
            node_ops.emit_event(core, name, ev["reason"], ev["message"], ev.get("type", "Normal"))
    result = summary(node, resource)
    result["changed"] = changed
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    resource=dict(type="str", default="default"),
    status=dict(type="str", choices=list(markers.STATUSES)),
    state=dict(type="dict"),
    error=dict(type="raw"),
    event=dict(type="dict"),
    clear=dict(type="bool", default=False),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
