#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_cordon
short_description: Cordon or uncordon a Kubernetes node, recording NodeWright's ownership
version_added: "0.1.0"
description:
  - Marks a node unschedulable (C(cordoned)) or schedulable (C(uncordoned)).
  - A cordon made by NodeWright is recorded in the C(nodewright.io/cordoned-by) annotation (owner, time,
    reason). C(uncordoned) only undoes NodeWright's own cordon; a node somebody else cordoned stays
    cordoned unless O(force=true). A re-run after a crash recognises NodeWright's own cordon.
  - An Event is recorded on the node for every change.
options:
  state:
    description: Desired state.
    type: str
    choices: [cordoned, uncordoned]
    default: cordoned
  force:
    description: With O(state=uncordoned), also uncordon a node that NodeWright did not cordon.
    type: bool
    default: false
  reason:
    description: Why the node is cordoned; stored in the ownership record and the Event.
    type: str
  resource:
    description: Name of the NodeWright resource on whose behalf the node is cordoned.
    type: str
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
notes:
  - "Runs where the Kubernetes API is reachable, usually with C(delegate_to: localhost)."
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Cordon the node before maintenance
  nodewright.fleet.node_cordon:
    name: "{{ inventory_hostname }}"
    state: cordoned
    reason: kernel tuning
  delegate_to: localhost

- name: Return it to work (only if NodeWright cordoned it)
  nodewright.fleet.node_cordon:
    name: "{{ inventory_hostname }}"
    state: uncordoned
  delegate_to: localhost
"""

RETURN = r"""
previous:
  description: Cordon state before the task.
  returned: always
  type: str
  sample: uncordoned
  choices: [uncordoned, cordoned_by_nodewright, cordoned_by_other]
current:
  description: Cordon state after the task (what it would be, in check mode).
  returned: success
  type: str
  sample: cordoned
action:
  description: What was done.
  returned: always
  type: str
  sample: cordon
msg:
  description: Human summary.
  returned: always
  type: str
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule, check_text


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    if p["resource"] is not None:
        names.nodewright_name(p["resource"], "resource")
    check_text(p["reason"], "reason")
    return node_ops.set_cordon(node_ops.core_api(module.api_client()), p["name"], p["state"], force=p["force"],
                               reason=p["reason"], resource=p["resource"], check_mode=module.check_mode)


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", choices=["cordoned", "uncordoned"], default="cordoned"),
    force=dict(type="bool", default=False),
    reason=dict(type="str"),
    resource=dict(type="str"),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
