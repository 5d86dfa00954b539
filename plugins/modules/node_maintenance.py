#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_maintenance
short_description: Ask NVIDIA's maintenance-operator for a node's maintenance, or release it
version_added: "0.1.0"
description:
  - "Requestor mode of NVIDIA's maintenance-operator (C(maintenance.nvidia.com/v1alpha1)): instead of cordoning and
    draining the node itself, NodeWright creates a C(NodeMaintenance) of its requestor ID C(nodewright.io) for the
    node, named C(nodewright-<node>), and waits until the operator reports it C(Ready): the operator has cordoned the
    node, waited for the pods of O(wait_for_pods) and drained it, under its own C(maxParallelOperations) and
    C(maxUnavailable) shared with the other requestors (the GPU and Network Operators)."
  - With O(state=absent) the request is deleted, and with O(wait) the module waits until it is gone (the operator
    uncordons the node when no requestor is left, then removes its finalizer).
  - A request already there under that name is NodeWright's own (a run resumed after a crash) and is kept as it is;
    an object of that name of another requestor is refused.
  - M(nodewright.fleet.maintain) uses this module when its O(nodewright.fleet.maintain#module:maintenance_request)
    option is set.
options:
  state:
    description: C(present) asks for the node's maintenance (and with O(wait) waits until it is Ready); C(absent)
      releases it.
    type: str
    choices: [present, absent]
    default: present
  namespace:
    description: Namespace of the C(NodeMaintenance) (the maintenance-operator watches every namespace).
    type: str
    default: default
  wait:
    description: Wait until the request is C(Ready) (O(state=present)) or gone (O(state=absent)).
    type: bool
    default: true
  timeout:
    description: Seconds to wait at most; past them the module fails naming the request's phase.
    type: int
    default: 3600
  cordon:
    description: Whether the operator cordons the node (C(spec.cordon)).
    type: bool
    default: true
  drain:
    description: The operator's drain (C(spec.drainSpec)); omitted, the operator does not drain.
    type: dict
    suboptions:
      force:
        description: Delete pods without a controller.
        type: bool
        default: false
      delete_emptydir_data:
        description: Evict pods with emptyDir data.
        type: bool
        default: false
      timeout:
        description: Seconds the operator's drain may take.
        type: int
      pod_selector:
        description: Drain only the pods this label selector matches.
        type: str
  wait_for_pods:
    description: Pods the operator waits for before it drains (C(spec.waitForPodCompletion)).
    type: dict
    suboptions:
      pod_selector:
        description: A label selector string, a LabelSelector mapping, or a list of them (all must match).
        type: raw
        required: true
      timeout:
        description: Seconds the operator waits for them.
        type: int
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
notes:
  - "Runs where the Kubernetes API is reachable, usually with C(delegate_to: localhost). Needs C(get), C(create)
    and C(delete) on C(nodemaintenances.maintenance.nvidia.com)."
  - "Where the C(NodeMaintenance) CRD is not installed the module fails and says so."
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Ask the maintenance-operator to cordon and drain the node
  nodewright.fleet.node_maintenance:
    name: "{{ inventory_hostname }}"
    drain: {force: false, timeout: 600}
    wait_for_pods:
      pod_selector: {matchLabels: {app.kubernetes.io/component: training}}
  delegate_to: localhost

- name: Give the node back
  nodewright.fleet.node_maintenance:
    name: "{{ inventory_hostname }}"
    state: absent
  delegate_to: localhost
"""

RETURN = r"""
maintenance:
  description: The C(NodeMaintenance) as the cluster has it (as it would be created, in check mode); absent after
    O(state=absent).
  returned: when O(state=present)
  type: dict
phase:
  description: The request's phase, the reason of its C(Ready) condition (C(Pending) before the operator took it up).
  returned: when O(state=present)
  type: str
  sample: Ready
msg:
  description: Human summary.
  returned: always
  type: str
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import maintenance


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    api = module.api_client()
    where = "%s/%s" % (p["namespace"], maintenance.object_name(p["name"]))
    if p["state"] == "absent":
        changed = maintenance.release(api, p["name"], p["namespace"], timeout=p["timeout"],
                                      check_mode=module.check_mode, wait=p["wait"])
        return {"changed": changed, "msg": ("released NodeMaintenance %s" % where) if changed
                else "NodeMaintenance %s is not there" % where}
    changed, obj = maintenance.request(api, p["name"], p["namespace"], drain=p["drain"],
                                       wait_for_pods=p["wait_for_pods"], cordon=p["cordon"],
                                       check_mode=module.check_mode)
    if p["wait"] and not module.check_mode:
        obj = maintenance.wait_ready(api, p["name"], p["namespace"], timeout=p["timeout"])
    _ready, phase = maintenance.phase(obj)
    return {"changed": changed, "maintenance": obj, "phase": phase,
            "msg": "%s NodeMaintenance %s (phase %s)" % ("asked for" if changed else "kept", where, phase)}


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    namespace=dict(type="str", default=maintenance.DEFAULT_NAMESPACE),
    wait=dict(type="bool", default=True),
    timeout=dict(type="int", default=maintenance.DEFAULT_TIMEOUT),
    cordon=dict(type="bool", default=True),
    drain=dict(type="dict", options=dict(
        force=dict(type="bool", default=False),
        delete_emptydir_data=dict(type="bool", default=False),
        timeout=dict(type="int"),
        pod_selector=dict(type="str"),
    )),
    wait_for_pods=dict(type="dict", options=dict(
        pod_selector=dict(type="raw", required=True),
        timeout=dict(type="int"),
    )),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
