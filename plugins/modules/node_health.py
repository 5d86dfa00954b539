#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_health
short_description: Health gates for a node - before maintenance starts and before it returns to work
version_added: "0.1.0"
description:
  - Checks named node conditions (for example those of node-problem-detector, NVIDIA's fault monitoring or
    the GPU Operator's validator) and node labels; optionally runs a validation Job pinned to the node
    (a GPU burn-in or NCCL check supplied by the operator) and requires it to succeed.
  - With O(phase=pre) a node that already shows a fault is reported and left to its owners (the module
    fails with C(preexisting_fault=true)), so maintenance never drains a broken node blindly.
  - With O(phase=post) the node may go back to work only when every gate passes.
  - Nodes in a GPU Operator driver upgrade (label C(nvidia.com/gpu-driver-upgrade-state) not
    C(upgrade-done)) are reported as busy in O(phase=pre) so NodeWright never fights that controller.
options:
  phase:
    description: C(pre) before maintenance, C(post) before uncordon.
    type: str
    choices: [pre, post]
    default: post
  conditions:
    description:
      - Conditions with the status a healthy node has. C(Ready) expects V(True) by default; any other
        type expects V(False) (a problem condition) unless O(conditions[].status) says otherwise.
    type: list
    elements: dict
    default: [{type: Ready}]
    suboptions:
      type:
        description: Condition type.
        type: str
        required: true
      status:
        description: Healthy status.
        type: str
        choices: ["True", "False", "Unknown"]
      required:
        description: Fail when the node does not report this condition at all.
        type: bool
        default: false
  labels:
    description: Labels with the value a healthy node has.
    type: dict
    default: {}
  validation_job:
    description:
      - A Job run on the node in O(phase=post) - C(namespace), C(name) (prefix, a DNS-1123 label of at most
        30 characters), C(template) (a pod template) and C(backoff_limit). The module pins it to the node and
        tolerates the cordon. Creating it is a change - the result says C(changed=true).
    type: dict
  tolerations:
    description:
      - Tolerations added to the pods of O(validation_job), for a node with taints of its own (a NodeWright
        resource's C(additionalTolerations)).
    type: list
    elements: dict
    default: []
  timeout:
    description: Seconds to wait for the gates to pass (conditions may take a moment after a reboot).
    type: int
    default: 300
extends_documentation_fragment:
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
    details: Reads only; the validation Job is not run in check mode.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Refuse to start on a node that is already faulty
  nodewright.fleet.node_health:
    name: "{{ inventory_hostname }}"
    phase: pre
    conditions:
      - type: Ready
      - type: GpuXidError
  delegate_to: localhost

- name: Gate the uncordon on a GPU burn-in
  nodewright.fleet.node_health:
    name: "{{ inventory_hostname }}"
    conditions: [{type: Ready}]
    labels:
      nvidia.com/gpu.present: "true"
    validation_job:
      namespace: gpu-validation
      name: burn-in
      template:
        spec:
          containers:
            - name: burn
              image: registry.example.com/gpu-burn:1.0
              resources: {limits: {nvidia.com/gpu: 8}}
  delegate_to: localhost
"""

RETURN = r"""
healthy:
  description: Whether every gate passed.
  returned: always
  type: bool
failures:
  description: The gates that failed, each with a message.
  returned: always
  type: list
  elements: dict
preexisting_fault:
  description: In O(phase=pre), whether the node was already faulty before maintenance.
  returned: always
  type: bool
validation_job:
  description: The validation Job's name and outcome.
  returned: when O(validation_job) is set and O(phase=post)
  type: dict
"""

import time

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


def run(module):
    p = module.params
    api = module.api_client()
    core = node_ops.core_api(api)
    name = p["name"]
    names.node_name(name, "name")
    names.labels(p["labels"], "labels")
    if p["validation_job"] is not None:
        node_waits.check_validation_job(p["validation_job"])
    node_waits.validate_timeout(p["timeout"])
    deadline = time.monotonic() + p["timeout"]
    while True:
        node = node_ops.get_node(core, name)
        failures = node_waits.evaluate_health(node, p["conditions"], p["labels"])
        if p["phase"] == "pre":
            upgrade = ((node.get("metadata") or {}).get("labels") or {}).get(markers.GPU_OPERATOR_UPGRADE_STATE)
            if upgrade and upgrade not in ("upgrade-done", ""):
                failures.append({"gate": "gpu-operator", "actual": upgrade,
                                 "message": "GPU Operator driver upgrade in progress (%s)" % upgrade})
            break
        if not failures or time.monotonic() >= deadline or module.check_mode:
            break
        time.sleep(2)
    result = {"changed": False, "node": name, "healthy": not failures, "failures": failures,
              "preexisting_fault": p["phase"] == "pre" and bool(failures)}
    if failures:
        text = "; ".join(f["message"] for f in failures)
        if p["phase"] == "pre":
            raise NodeWrightError("node %s is already unhealthy before maintenance: %s; left to its owners, "
                                  "nothing was changed" % (name, text), result=result)
        raise NodeWrightError("node %s failed its health gates: %s" % (name, text),
                              hint="the node stays cordoned for triage", result=result)
    if p["phase"] == "post" and p["validation_job"] and not module.check_mode:
        remaining = max(1, int(deadline - time.monotonic()))
        job = node_waits.run_validation_job(api, name, p["validation_job"], remaining,
                                            tolerations=p["tolerations"] or ())
        result["validation_job"] = job
        result["changed"] = True  # a Job was created in the cluster
        if not job["succeeded"]:
            result["healthy"] = False
            raise NodeWrightError("node %s failed its validation job %s: %s" % (name, job["job"], job["message"]),
                                  hint="the node stays cordoned for triage", result=result)
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    phase=dict(type="str", choices=["pre", "post"], default="post"),
    conditions=dict(type="list", elements="dict", default=[{"type": "Ready"}], options=dict(
        type=dict(type="str", required=True),
        status=dict(type="str", choices=["True", "False", "Unknown"]),
        required=dict(type="bool", default=False))),
    labels=dict(type="dict", default={}),
    validation_job=dict(type="dict"),
    tolerations=dict(type="list", elements="dict", default=[]),
    timeout=dict(type="int", default=300),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
