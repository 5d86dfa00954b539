#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_gate
short_description: Open or hold the runtime-required gate of a node (runtimeRequired)
version_added: "0.1.0"
description:
  - A node that must not run workloads before NodeWright prepared its host carries the taint
    C(nodewright.io/runtime-required=true:NoSchedule) - from the kubelet's C(--register-with-taints), or
    added by the reconciler for resources with C(autoTaintNewNodes).
  - With O(state=auto) the module removes the taint when every C(runtimeRequired) NodeWright resource
    that targets the node has completed on it (every package recorded complete at the version the resource
    asks for). Otherwise the taint stays, and the first resource still missing, in priority order, is
    recorded in the node condition C(nodewright.io/Blocked); a failed package or a malformed state
    annotation also records a Warning Event on the node.
  - A node that no C(runtimeRequired) resource targets keeps its taint; NodeWright does not know who
    else is responsible for it. A disabled resource does not hold the gate; a paused one does.
  - With O(state=present) the module adds the taint (what C(autoTaintNewNodes) does).
options:
  state:
    description: V(auto) decides from the node's NodeWright state; V(present) adds the taint.
    type: str
    choices: [auto, present]
    default: auto
  taint_key:
    description: Key of the taint.
    type: str
    default: nodewright.io/runtime-required
  resources:
    description:
      - The NodeWright resources to decide with (as the API returns them). Omitted, they are read
        from the cluster.
    type: list
    elements: dict
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
notes:
  - Runs where the Kubernetes API is reachable, usually with C(delegate_to=localhost).
  - C(playbooks/rollout.yml) runs it for every node at the end of its maintenance, also when it failed.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Let workloads onto the node once its runtimeRequired resources are complete
  nodewright.fleet.node_gate:
    name: "{{ inventory_hostname }}"
  delegate_to: localhost

- name: Keep workloads off a node until NodeWright has prepared it
  nodewright.fleet.node_gate:
    name: gpu-node-17
    state: present
  delegate_to: localhost
"""

RETURN = r"""
action:
  description: What the gate did (would do, in check mode) - open (taint removed), keep, none, or taint.
  returned: always
  type: str
  sample: open
tainted:
  description: Whether the node carries the taint after the task (would, in check mode).
  returned: always
  type: bool
resources:
  description: The runtimeRequired resources that target the node, in priority order, each with
    C(resource), C(priority), C(progress) (complete, pending, failed, malformed), C(detail) and C(paused).
  returned: always
  type: list
  elements: dict
  sample: [{resource: gpu-runtime, priority: 100, progress: failed, paused: false,
            detail: "package driver-tuning 1.2.0 failed at stage apply"}]
msg:
  description: Human summary.
  returned: always
  type: str
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names, nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    names.taint_key(p["taint_key"], "taint_key")
    api = module.api_client()
    core = node_ops.core_api(api)
    if p["state"] == "present":
        return gating.add_taint(core, p["name"], p["taint_key"], check_mode=module.check_mode)
    resources = p["resources"]
    if resources is None:
        resources = nodewright_api.list_all(api, nodewright_api.NODEWRIGHTS, "list NodeWright resources")
    return gating.enforce(core, p["name"], resources, p["taint_key"], check_mode=module.check_mode)


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", choices=["auto", "present"], default="auto"),
    taint_key=dict(type="str", default=markers.TAINT_RUNTIME_REQUIRED, no_log=False),
    resources=dict(type="list", elements="dict"),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
