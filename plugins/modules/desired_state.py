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
    Upstream's C(skyhook.nvidia.com/v1alpha1) C(Skyhook), C(nodewright.nvidia.com/v1alpha1) C(NodeWright) and
    their C(DeploymentPolicy) objects are converted as upstream takes them; a field that only concerns
    upstream's package pods (C(resources), C(gracefulShutdown), C(agentImageOverride)) and an image tag that
    the version replaces are each a warning, in the task's warnings and the rollout's C(conversion_warnings).
  - Validates each resource with the same rules as the CRDs, loads and validates each package from its
    source, and plans every targeted node from its recorded state - apply, upgrade, downgrade, config,
    uninstall or nothing, and the merged interrupt.
  - A resource that cannot be rolled out (malformed, a missing policy, a missing package) is reported in
    RV(blocked) with every problem it has, each with its field; nothing is changed anywhere. An item of
    O(resources) that is not a NodeWright, DeploymentPolicy or Skyhook object, a malformed
    DeploymentPolicy and a name given twice fail the task, every such problem named.
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
  skyhook_drop:
    description:
      - Fields of upstream objects in O(resources) that have no NodeWright equivalent and may be left out
        in the conversion, as shell-style patterns over field paths (for example
        V(spec.packages.*.valueFrom.fieldRef)). Each field left out is named in the notes of the conversion;
        any other such field blocks the resource, naming it. A field of upstream's package pods named here is
        left out without a warning.
      - The playbooks take it from the variable C(nodewright_skyhook_drop).
    type: list
    elements: str
    default: []
  maintenance_request:
    description:
      - "The run's requestor mode of NVIDIA's maintenance-operator, as M(nodewright.fleet.maintain) takes it
        (O(nodewright.fleet.maintain#module:maintenance_request)): a mapping with C(namespace) and C(timeout),
        or V(true) for the defaults. When set, the plan refuses a malformed value, and a cluster that does not
        serve the operator's C(NodeMaintenance), before any node is touched."
      - The playbooks take it from the variable C(safe_update_maintenance_request).
    type: raw
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
schema:
  description: "The version of the run plan's layout (this collection writes and reads 1). The strategy plugin,
    the C(maintain) action and C(nodewright rollout) refuse a plan of another version, or with a key this
    version does not know, naming it: plan again with the collection that rolls out."
  returned: always
  type: int
  sample: 1
status:
  description: How a run of every resource would end if every node succeeded (C(complete), C(waiting), ...).
  returned: always
  type: str
reason:
  description: Why, in words.
  returned: always
  type: str
rollouts:
  description: One entry per resource that can be rolled out, in priority order; every field is listed in
    C(plugins/module_utils/fleet/plan.py) (C(ResourcePlan)).
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
    images: {description: "Per package from an image index of several platforms: C(reference), pinned to the
      index, and C(archs), the targeted nodes' architectures, each variant already pulled and checked.", type: dict}
    waves: {description: "This resource's waves in a run of every resource together (wave numbers are the run's),
      with the C(status) and C(reason) the run would end with.", type: dict}
    unavailable: {description: "Targets that are NotReady (Ready not True, or the node lifecycle controller's
      not-ready or unreachable taint) or under the GPU Operator's driver upgrade, each with why and whether it
      counts against the limits and waits, or is resumed (this resource left it in progress).", type: dict}
    protected: {description: "Nodes with work on which non-interruptible pods (C(podNonInterruptLabels)) run now:
      node -> C(namespace/name) of each; a run waits for them there, and past its wait leaves the node
      blocked.", type: dict}
    conversion_warnings: {description: "For a resource converted from an upstream object in O(resources) (and
      its DeploymentPolicy): the fields left out because they have no meaning here and the image tags
      replaced by the version, one line each naming the field; empty otherwise.", type: list}
waves:
  description: The waves a rollout of every resource would make if every node succeeded, C(nodes) mapping each
    node to its resource; the waves C(rollout.yml) then makes.
  returned: always
  type: list
  elements: dict
conflicts:
  description: Settings two resources would both write on one node with different values (both are blocked).
  returned: always
  type: list
  elements: dict
blocked:
  description: Resources that cannot be rolled out, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-tuning, reason: "spec.deploymentPolicy: DeploymentPolicy 'canary' does not exist"}]
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import convert
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import validate_deployment_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import maintenance
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import list_node_maintenances
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits

# How a Skyhook field without an equivalent is left out, in this module's words.
SKYHOOK_DROP_HINT = ("name it in the option skyhook_drop to leave it out (skyhook_drop: [%r]; in the playbooks "
                     "-e '{\"nodewright_skyhook_drop\": [...]}')")


def _inline_name(obj, n):
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    return name if isinstance(name, str) and name else "resources[%d]" % n


def _normalise_inputs(objects, drop=(), warnings=None):
    """``(nodewrights, policies, blocked)`` from the inline objects. A NodeWright or Skyhook
    object that cannot be converted is blocked (with every problem it has); anything else
    that is wrong - not an object, another kind, a bad DeploymentPolicy, a name given twice -
    fails the task, every such problem named. ``warnings`` (a dict, when given) gets each
    converted object's conversion warnings under ``(kind, name)``."""
    nodewrights, policies, blocked = [], {}, []
    problems = Problems()
    seen = {}
    for n, obj in enumerate(objects):
        where = "resources[%d]" % n
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            problems.add(ValidationError("not a Kubernetes object (no kind)", field=where,
                                         hint="each item is a NodeWright, DeploymentPolicy or Skyhook object"))
            continue
        if str(obj.get("apiVersion", "")).startswith(("skyhook.nvidia.com/", "nodewright.nvidia.com/")):
            try:
                converted = convert(obj, drop=drop, drop_hint=SKYHOOK_DROP_HINT)
                obj = converted.resource
                if warnings is not None and converted.warnings:
                    warnings[obj["kind"], _inline_name(obj, n)] = converted.warnings
            except ValidationError as exc:
                if obj.get("kind") == "DeploymentPolicy":
                    problems.add(ValidationError("Skyhook DeploymentPolicy %s: %s" % (_inline_name(obj, n), exc),
                                                 field=where))
                else:
                    blocked.append({"name": _inline_name(obj, n), "reason": str(exc)})
                continue
        kind = obj["kind"]
        if kind not in ("NodeWright", "DeploymentPolicy"):
            problems.add(ValidationError("unsupported kind %r" % kind, field=where + ".kind",
                                         hint="NodeWright, DeploymentPolicy, or Skyhook's Skyhook/DeploymentPolicy"))
            continue
        name = _inline_name(obj, n)
        if (kind, name) in seen:
            problems.add(ValidationError("%s %s is given twice (also as resources[%d])" % (kind, name, seen[kind, name]),
                                         field=where + ".metadata.name", hint="keep one of them"))
            continue
        seen[kind, name] = n
        if kind == "NodeWright":
            nodewrights.append(obj)
            continue
        try:
            policies[name] = validate_deployment_policy(obj)
        except ValidationError as exc:
            problems.add(ValidationError("DeploymentPolicy %s: %s" % (name, exc), field=where))
    problems.raise_if_any()
    return nodewrights, policies, blocked


def _reservations(api):
    """Live reservations of other runs (for the plan); none when they cannot be read."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import ReservationRecord
    record = ReservationRecord(api)
    try:
        _obj, holders, now = record.read()
    except NodeWrightError as exc:
        return {}, None, "reservations of other runs not read: %s" % exc
    live, _expired = record.live(holders, now)
    return live, now, None


def run(module):
    p = module.params
    if p["name"] is not None:
        names.nodewright_name(p["name"], "name")
    api = module.api_client()
    if maintenance.settings(p["maintenance_request"]) is not None:
        maintenance.served(api)
    nodes = []
    for page in list_pages(api, "/api/v1/nodes", "list nodes"):
        nodes.extend(page)
    from_cluster = p["resources"] is None
    blocked = []
    converted = {}
    if not from_cluster:
        nodewrights, policies, blocked = _normalise_inputs(p["resources"], p["skyhook_drop"], converted)
    else:
        nodewrights = nodewright_api.list_all(api, nodewright_api.NODEWRIGHTS)
        policies = {o["metadata"]["name"]: o for o in nodewright_api.list_all(api, nodewright_api.DEPLOYMENT_POLICIES)}
    if p["name"] and not any((r.get("metadata") or {}).get("name") == p["name"] for r in nodewrights) \
            and not any(b["name"] == p["name"] for b in blocked):
        raise NodeWrightError("NodeWright resource %r does not exist" % p["name"],
                              hint="list them with `kubectl get nodewrights`")
    if p["name"]:
        blocked = [b for b in blocked if b["name"] == p["name"]]
    holders, now, warning = _reservations(api)
    pods_of = _pod_reader(api)
    described = desired_state.describe_all(nodewrights, nodes, policies, p["package_dirs"], only=p["name"],
                                           holders=holders, now=now,
                                           env_lookup=desired_state.env_lookup_for(api),
                                           maintenance=list_node_maintenances(api), pods=pods_of)
    for entry in described.rollouts:
        entry.from_cluster = from_cluster
        entry.conversion_warnings = converted.get(("NodeWright", entry.name), [])
        if entry.policy_name:
            entry.conversion_warnings = entry.conversion_warnings + [
                "DeploymentPolicy %s: %s" % (entry.policy_name, w)
                for w in converted.get(("DeploymentPolicy", entry.policy_name), [])]
    _protected_pods(pods_of, described.rollouts)
    described.blocked = blocked + described.blocked
    blocked = described.blocked
    result = dict(described.to_dict(), changed=False)
    # Upstream fields without meaning here, image tags replaced: Ansible prints each.
    result["warnings"] = ([warning] if warning else []) + [
        "%s %s (converted from upstream): %s" % (kind, name, w) for (kind, name), ws in sorted(converted.items())
        for w in ws]
    if not result["warnings"]:
        del result["warnings"]
    if blocked and p["fail_on_blocked"]:
        result["failed"] = True
        result["msg"] = "cannot roll out: " + "; ".join("%s: %s" % (b["name"], b["reason"]) for b in blocked)
    return result


def _pod_reader(api):
    """label selector text -> the pods it matches, each selector LISTed once."""
    cache = {}

    def read(selector):
        if selector not in cache:
            cache[selector] = [pod for page in list_pages(api, "/api/v1/pods", "list non-interruptible pods",
                                                          query=[("labelSelector", selector)]) for pod in page]
        return cache[selector]
    return read


def _protected_pods(pods_of, rollouts):
    """Each rollout's ``protected``: node with work -> the non-interruptible pods running there now,
    which the run will wait for (and past its wait leave the node blocked). One LIST of pods per
    distinct podNonInterruptLabels selector."""
    for entry in rollouts:
        if not entry.non_interruptible or not entry.work:
            continue
        selector = to_selector(entry.non_interruptible, "podNonInterruptLabels")
        if selector.empty:
            continue
        entry.protected = node_waits.protected_by_node(pods_of(selector.to_string()), selector, entry.work)


ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    resources=dict(type="list", elements="dict"),
    package_dirs=dict(type="list", elements="path", default=[]),
    fail_on_blocked=dict(type="bool", default=True),
    skyhook_drop=dict(type="list", elements="str", default=[]),
    maintenance_request=dict(type="raw"),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
