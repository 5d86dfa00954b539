#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: desired_state
short_description: Read NodeWright resources and work out, per node, what a rollout would do
version_added: "0.1.0"
description:
  - Reads C(NodeWright) resources (one by O(name), or all, in priority order) and the C(DeploymentPolicy)
    resources they name, from the cluster or from O(resources) (for example files kept in Git).
    Skyhook's C(skyhook.nvidia.com/v1alpha1) C(Skyhook) and C(DeploymentPolicy) objects are converted.
  - Validates each resource with the same rules as the CRDs, loads and validates each package from its
    source, and plans every targeted node from its recorded state - apply, upgrade, downgrade, config,
    uninstall or nothing, and the merged interrupt.
  - A resource that cannot be rolled out (malformed, a missing policy, a missing package) is reported in
    RV(blocked) with the field and the reason; nothing is changed anywhere.
options:
  name:
    description: The NodeWright resource to read. Without it, all of them.
    type: str
  resources:
    description:
      - Resources given directly (NodeWright, DeploymentPolicy, Skyhook, Skyhook DeploymentPolicy objects)
        instead of reading them from the cluster. The cluster is still read for nodes.
    type: list
    elements: dict
  package_dirs:
    description: Directories holding package directories (the collection's C(packages/) first).
    type: list
    elements: path
    default: []
  fail_on_blocked:
    description: Fail when a requested resource cannot be rolled out.
    type: bool
    default: true
extends_documentation_fragment:
  - nodewright.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
    details: Reads only.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: What would the gpu-tuning rollout do?
  nodewright.fleet.desired_state:
    name: gpu-tuning
    package_dirs: ["{{ playbook_dir }}/../packages"]
  register: desired
  delegate_to: localhost
"""

RETURN = r"""
rollouts:
  description: One entry per resource that can be rolled out, in priority order.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Resource name., type: str}
    targets: {description: 'Targeted nodes, oldest first.', type: list}
    work: {description: Targeted nodes with something to do., type: list}
    nodes: {description: 'Per node: actions per package, interrupt, disruptive.', type: dict}
    policy: {description: The DeploymentPolicy spec in force., type: dict}
    packages: {description: Package specs with their sources resolved., type: list}
blocked:
  description: Resources that cannot be rolled out, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-tuning, reason: "spec.deploymentPolicy: DeploymentPolicy 'canary' does not exist"}]
"""

import json

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import API_GROUP, API_VERSION
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import convert

try:
    from kubernetes import client as k8s_client
except ImportError:
    k8s_client = None


def _list(api, plural):
    custom = k8s_client.CustomObjectsApi(api)
    resp = call("list %s.%s" % (plural, API_GROUP), custom.list_cluster_custom_object, API_GROUP, API_VERSION,
                plural, _preload_content=False)
    return json.loads(resp.data).get("items", [])


def _normalise_inputs(objects):
    nodewrights, policies = [], {}
    for n, obj in enumerate(objects):
        if not isinstance(obj, dict) or "kind" not in obj:
            raise ValidationError("not a Kubernetes object (no kind)", field="resources[%d]" % n)
        if obj.get("apiVersion", "").startswith(("skyhook.nvidia.com/", "nodewright.nvidia.com/")):
            obj = convert(obj).resource
        if obj["kind"] == "NodeWright":
            nodewrights.append(obj)
        elif obj["kind"] == "DeploymentPolicy":
            policies[obj["metadata"]["name"]] = obj
        else:
            raise ValidationError("unsupported kind %r" % obj["kind"], field="resources[%d].kind" % n,
                                  hint="NodeWright, DeploymentPolicy, or Skyhook's Skyhook/DeploymentPolicy")
    return nodewrights, policies


def run(module):
    p = module.params
    api = module.api_client()
    core = k8s_client.CoreV1Api(api)
    nodes = json.loads(call("list nodes", core.list_node, _preload_content=False).data).get("items", [])
    if p["resources"] is not None:
        nodewrights, policies = _normalise_inputs(p["resources"])
    else:
        nodewrights = _list(api, "nodewrights")
        policies = {o["metadata"]["name"]: o for o in _list(api, "deploymentpolicies")}
    if p["name"]:
        nodewrights = [r for r in nodewrights if (r.get("metadata") or {}).get("name") == p["name"]]
        if not nodewrights:
            raise NodeWrightError("NodeWright resource %r does not exist" % p["name"],
                                  hint="list them with `kubectl get nodewrights`")
    rollouts, blocked = [], []
    for resource in desired_state.order_resources(nodewrights):
        name = (resource.get("metadata") or {}).get("name", "?")
        try:
            rollouts.append(desired_state.describe(resource, nodes, policies, p["package_dirs"]))
        except NodeWrightError as exc:
            blocked.append({"name": name, "reason": str(exc)})
    desired_state.apply_sequencing(rollouts)
    result = {"changed": False, "rollouts": rollouts, "blocked": blocked}
    if blocked and p["fail_on_blocked"]:
        result["failed"] = True
        result["msg"] = "cannot roll out: " + "; ".join("%s: %s" % (b["name"], b["reason"]) for b in blocked)
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    resources=dict(type="list", elements="dict"),
    package_dirs=dict(type="list", elements="path", default=[]),
    fail_on_blocked=dict(type="bool", default=True),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
