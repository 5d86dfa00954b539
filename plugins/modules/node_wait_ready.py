#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_wait_ready
short_description: Wait for a node to be Ready again after an interrupt, with a new bootID after a reboot
version_added: "0.1.0"
description:
  - Waits until the node reports C(Ready). With O(previous_boot_id) it also waits for a different
    C(status.nodeInfo.bootID), which proves that the reboot really happened.
  - Fails at O(timeout), saying whether the node is still NotReady or never rebooted.
options:
  previous_boot_id:
    description: The bootID before the reboot. When set, the node must come back with another one.
    type: str
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 900
  poll_interval:
    description: Seconds between checks.
    type: float
    default: 1.0
extends_documentation_fragment:
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
    details: Reads only; in check mode it reports the current state without waiting.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Record the boot ID
  nodewright.fleet.node_state:
    name: "{{ inventory_hostname }}"
  register: before
  delegate_to: localhost

- name: Wait for the node to come back from its reboot
  nodewright.fleet.node_wait_ready:
    name: "{{ inventory_hostname }}"
    previous_boot_id: "{{ before.boot_id }}"
    timeout: 1200
  delegate_to: localhost
"""

RETURN = r"""
ready:
  description: Whether the node is Ready.
  returned: always
  type: bool
boot_id:
  description: The node's current bootID.
  returned: always
  type: str
rebooted:
  description: Whether a new bootID was required and seen.
  returned: success
  type: bool
seen_not_ready:
  description: Whether the node was seen NotReady while waiting.
  returned: success
  type: bool
waited_seconds:
  description: How long the module waited.
  returned: success
  type: float
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    node_waits.validate_timeout(p["timeout"])
    core = node_ops.core_api(module.api_client())
    if module.check_mode:
        node = node_ops.get_node(core, p["name"])
        return {"changed": False, "ready": node_ops.is_ready(node), "boot_id": node_ops.boot_id(node)}
    result = node_waits.wait_ready(core, p["name"], p["timeout"], previous_boot_id=p["previous_boot_id"],
                                   poll=p["poll_interval"])
    result["changed"] = False
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    previous_boot_id=dict(type="str"),
    timeout=dict(type="int", default=900),
    poll_interval=dict(type="float", default=1.0),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
