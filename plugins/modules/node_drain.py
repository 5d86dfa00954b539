#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_drain
short_description: Drain a node through the Eviction API, respecting PodDisruptionBudgets
version_added: "0.1.0"
description:
  - Cordons the node (recording NodeWright's ownership) unless O(cordon=false), then evicts its pods
    through the Eviction API so that PodDisruptionBudgets hold.
  - An eviction refused with HTTP 429 (a PDB allows no disruption now) is retried with backoff until
    O(timeout). The drain waits until each evicted pod is really gone (by UID), not only until the
    eviction was accepted.
  - What happens to each pod is decided by filters, each giving a reason in the result - DaemonSet and
    static (mirror) pods stay; finished pods are removed; pods with emptyDir data need
    O(delete_emptydir_data); pods without a controller need O(force); pods matching
    O(non_interruptible_selector) make the drain refuse (wait for them first with
    M(nodewright.fleet.node_wait_pods)). A refusal changes nothing.
  - On timeout the module B(fails), names what held each pod still on the node - the PodDisruptionBudget
    that refused its eviction, or, for a pod that was evicted but did not go, its finalizers or the
    kubelet that did not confirm its end - leaves the node cordoned and records an Event on it. The
    result says C(changed=true) when the node was cordoned or a pod evicted before the failure.
  - While PodDisruptionBudgets refuse its evictions the node carries the condition C(nodewright.io/DrainBlocked)
    (C(True), reason C(EvictionRefused)), naming each budget, the pods it holds and since when, within about a
    second of the first refusal; it turns C(False) once the evictions go through (C(EvictionsAccepted)) or the
    drain ends (C(DrainEnded)).
options:
  cordon:
    description: Cordon the node first (with NodeWright's ownership record).
    type: bool
    default: true
  timeout:
    description: Seconds the whole drain may take, evictions and waiting for pods to be gone.
    type: int
    default: 600
  grace_period:
    description:
      - Override of the pods' termination grace period in seconds. V(0) really means zero.
      - Unset uses each pod's own C(terminationGracePeriodSeconds).
    type: int
  force:
    description: Also evict pods that no controller manages (they are not recreated).
    type: bool
    default: false
  delete_emptydir_data:
    description: Also evict pods using emptyDir volumes (their data is lost).
    type: bool
    default: false
  ignore_daemonsets:
    description: Leave DaemonSet pods in place. When false, a DaemonSet pod makes the drain refuse.
    type: bool
    default: true
  skip_namespaces:
    description: Namespaces whose pods are left in place.
    type: list
    elements: str
    default: []
  skip_pod_selector:
    description: Label selector of pods to leave in place.
    type: raw
  pod_selector:
    description: Only pods matching this label selector are drained.
    type: raw
  non_interruptible_selector:
    description:
      - Label selector (string, LabelSelector mapping or list) of pods that must never be evicted,
        such as training jobs. If such a pod runs on the node the drain refuses.
    type: raw
  disable_eviction:
    description: Delete pods directly instead of evicting them. This B(bypasses PodDisruptionBudgets).
    type: bool
    default: false
  max_parallel:
    description: How many evictions are in flight at once.
    type: int
    default: 32
  resource:
    description:
      - The NodeWright resource the drain is for. While PodDisruptionBudgets refuse the evictions, its
        C(DrainBlocked) condition is C(True) with one line for this node (the node's name, then the budgets, the
        pods they hold and since when), beside the lines of its other nodes; the line goes when the evictions go through or the drain ends,
        and the condition turns C(False) when no line is left.
    type: str
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.node
  - nodewright.fleet.k8s_auth
notes:
  - Compared with C(kubernetes.core.k8s_drain) - a PDB 429 is retried until the deadline instead of failing
    at once, a timeout fails instead of warning, O(grace_period=0) is honoured, and the result is structured.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Drain, waiting up to 15 minutes for PDBs
  nodewright.fleet.node_drain:
    name: "{{ inventory_hostname }}"
    timeout: 900
    delete_emptydir_data: true
    non_interruptible_selector: app.kubernetes.io/component=training
  delegate_to: localhost
"""

RETURN = r"""
evicted:
  description: Pods evicted (or deleted when finished) and confirmed gone.
  returned: always
  type: list
  elements: str
  sample: [workloads/inference-h100-6d9f-abcde]
kept:
  description: Pods left in place, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{pod: gpu-monitoring/dcgm-exporter-x, reason: "DaemonSet pod stays (DaemonSet dcgm-exporter)"}]
refused:
  description: Pods that stop the drain, each with the reason (nothing is evicted then).
  returned: always
  type: list
  elements: dict
still_present:
  description: Pods that were still on the node at the end.
  returned: always
  type: list
  elements: str
blocking_pdbs:
  description: PodDisruptionBudgets that refused evictions of pods still present, with their message.
  returned: always
  type: list
  elements: dict
  sample: [{pdb: workloads/strict, message: "The disruption budget strict needs 2 healthy pods...", pods: [workloads/x]}]
accepted:
  description: Pods whose eviction (or deletion) the API server accepted, gone or not.
  returned: success or when the drain failed after evicting
  type: list
  elements: str
stuck:
  description:
    - Pods asked to go that were still on the node at the end, with what held each - C(terminating),
      C(since) (the deletion time), C(grace_period) and C(finalizers).
  returned: success or when the drain failed after evicting
  type: list
  elements: dict
  sample: [{pod: jobs/etl-0, terminating: true, since: "2026-01-01T10:00:00Z", grace_period: 30,
            finalizers: [example.com/upload], phase: Running}]
eviction_attempts:
  description: Eviction requests sent, retries included.
  returned: success
  type: int
duration:
  description: Seconds the drain took.
  returned: success
  type: float
drain_blocked_errors:
  description: Why the C(nodewright.io/DrainBlocked) condition could not be written (the drain went on).
  returned: when a write of the condition failed
  type: list
  elements: str
cordon:
  description: Result of the cordon step.
  returned: when O(cordon=true)
  type: dict
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.node import drain
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import carry_result
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule


def run(module):
    p = module.params
    names.node_name(p["name"], "name")
    names.namespaces(p["skip_namespaces"], "skip_namespaces")
    opts = drain.DrainOptions(
        force=p["force"], delete_emptydir_data=p["delete_emptydir_data"], ignore_daemonsets=p["ignore_daemonsets"],
        grace_period=p["grace_period"], skip_namespaces=p["skip_namespaces"], skip_selector=p["skip_pod_selector"],
        pod_selector=p["pod_selector"], non_interruptible=p["non_interruptible_selector"],
        disable_eviction=p["disable_eviction"], timeout=p["timeout"], max_parallel=p["max_parallel"])
    core = node_ops.core_api(module.api_client())
    node = p["name"]
    current = node_ops.get_node(core, node)
    pods = drain.list_node_pods(core, node)
    plan = drain.plan_drain(pods, opts)
    result = {"node": node, "kept": plan[drain.SKIP], "refused": plan[drain.REFUSE],
              "evicted": [], "still_present": [], "blocking_pdbs": [], "changed": False}
    if plan[drain.REFUSE]:
        raise NodeWrightError(
            "drain of node %s refused before evicting anything: %s" % (
                node, "; ".join("%s: %s" % (r["pod"], r["reason"]) for r in plan[drain.REFUSE])),
            result=result)
    with carry_result(result):
        if p["cordon"]:
            result["cordon"] = node_ops.set_cordon(core, node, "cordoned", reason="drain",
                                                   check_mode=module.check_mode)
            result["changed"] = result["cordon"]["changed"]
        if module.check_mode:
            result["would_evict"] = plan[drain.EVICT]
            result["would_delete"] = plan[drain.DELETE]
            result["changed"] = result["changed"] or bool(plan[drain.EVICT] or plan[drain.DELETE])
            return result
        outcome = drain.Drainer(core, node, opts, showing_blocked=drain.drain_blocked_showing(current),
                                resource=p["resource"]).run(plan)
        result.update(outcome)
        # An accepted eviction changed the cluster, whether or not the pod is gone yet.
        result["changed"] = bool(result["changed"] or outcome["evicted"] or outcome["accepted"])
        if outcome["still_present"]:
            message = drain.describe_failure(node, outcome, p["timeout"])
            node_ops.emit_event(core, node, markers.EVENT_DRAIN_FAILED, message, event_type="Warning")
            raise NodeWrightError(message, hint=drain.failure_hint(outcome), result=result)
    node_ops.emit_event(core, node, markers.EVENT_DRAIN, "drained: %d pods evicted in %.1fs"
                        % (len(outcome["evicted"]), outcome["duration"]))
    return result


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    cordon=dict(type="bool", default=True),
    timeout=dict(type="int", default=600),
    grace_period=dict(type="int"),
    force=dict(type="bool", default=False),
    delete_emptydir_data=dict(type="bool", default=False),
    ignore_daemonsets=dict(type="bool", default=True),
    skip_namespaces=dict(type="list", elements="str", default=[]),
    skip_pod_selector=dict(type="raw"),
    pod_selector=dict(type="raw"),
    non_interruptible_selector=dict(type="raw"),
    disable_eviction=dict(type="bool", default=False),
    max_parallel=dict(type="int", default=32),
    resource=dict(type="str"),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
