#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_wait_pods
short_description: Wait for non-interruptible pods on a node to finish, never evicting them
version_added: "0.1.0"
description:
  - Waits until no pod matching O(selectors) is Pending or Running on the node - for example a multi-day
    training job that must not be interrupted. Such pods are never evicted.
  - While waiting, the node carries the annotation C(nodewright.io/blocked-by) naming the pods, and with
    O(resource) its NodeWright status is C(blocked), so C(kubectl get node) explains the wait.
  - When O(timeout) passes with pods still running the module fails and nothing was evicted.
options:
  selectors:
    description:
      - Non-interruptible pods, as a label selector string, a LabelSelector mapping (a NodeWright
        resource's C(podNonInterruptLabels)), or a list of those (all must match).
    type: raw
    required: true
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between checks.
    type: float
    default: 2.0
  resource:
    description: NodeWright resource whose node status shows C(blocked) while waiting.
    type: str
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Let the training job finish first (up to 2 days)
  nodewright.fleet.node_wait_pods:
    name: "{{ inventory_hostname }}"
    selectors:
      matchLabels:
        app.kubernetes.io/component: training
    timeout: 172800
  delegate_to: localhost
"""

RETURN = r"""
initially_blocking:
  description: Non-interruptible pods found at the start, with phase and age in seconds.
  returned: always
  type: list
  elements: dict
  sample: [{pod: training/train-h100-0-x7k2p, phase: Running, age_seconds: 86400}]
blocking:
  description: Pods still blocking at the end (empty on success).
  returned: always
  type: list
  elements: dict
waited_seconds:
  description: How long the module waited.
  returned: always
  type: float
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    if p["resource"] is not None:
        names.nodewright_name(p["resource"], "resource")
    return node_waits.wait_for_critical_pods(
        node_ops.core_api(module.api_client()), p["name"], p["selectors"], p["timeout"], poll=p["poll_interval"],
        resource=p["resource"], check_mode=module.check_mode)


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    selectors=dict(type="raw", required=True),
    timeout=dict(type="int", default=3600),
    poll_interval=dict(type="float", default=2.0),
    resource=dict(type="str"),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
