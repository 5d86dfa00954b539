#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: maintain
short_description: The safe sequence of one node as one task
version_added: "0.3.0"
author:
  - NodeWright maintainers (@nodewright)
description:
  - Reads the node, checks it is healthy, marks it in progress; cordons it, waits for its non-interruptible pods
    and drains it when the work disrupts workloads; runs the packages; reboots or restarts services when a
    package asks for it, waits for the new boot and runs the post-interrupt stages; checks the health gates and
    uncordons it; marks it complete.
  - A failure marks the node erroring (status label, C(nodewright.io/Erroring) condition, Warning Event) and
    leaves it cordoned for triage (or uncordons it with O(on_failure=uncordon)); the message says which step
    failed and whether the node is cordoned.
  - The Kubernetes steps run on the controller through the same code as M(nodewright.fleet.node_cordon),
    M(nodewright.fleet.node_drain), M(nodewright.fleet.node_wait_pods), M(nodewright.fleet.node_wait_ready),
    M(nodewright.fleet.node_health) and M(nodewright.fleet.node_gate); the packages run on the host through
    M(nodewright.fleet.package) over the task's connection.
  - Under the C(nodewright.fleet.rollout) strategy in C(playbooks/rollout.yml) the task needs no options; the
    resource, its packages and the node's plan come from the rollout. Used on its own, give O(resource) and
    O(packages).
  - The C(safe_update) role runs it in phases (O(phase)) around your own tasks.
  - Every option not set in the task falls back to the C(safe_update_) variable of the same name (for example
    C(safe_update_drain_timeout)), then to the resource's C(drainConfig), then to the default shown.
options:
  name:
    description: The node. Default the host's C(inventory_hostname).
    type: str
  resource:
    description: The NodeWright resource the markers belong to. Default the rollout's resource for this node.
    type: str
  phase:
    description:
      - C(all) the whole sequence with O(packages) as the work; C(take_out) up to the drain; C(interrupt) the
        interrupt in O(interrupt); C(give_back) the health gates, uncordon and completion; C(fail) marks a
        failure of your own tasks (O(failed_step), O(failure)).
    type: str
    choices: [all, take_out, interrupt, give_back, fail]
    default: all
  packages:
    description: Package specs (as for M(nodewright.fleet.package)). Default the rollout's resource's packages.
    type: list
    elements: dict
  disruptive:
    description: Whether the work disrupts workloads (cordon, wait, drain first). Default the node's plan.
    type: bool
  non_interruptible_selector:
    description: Pods that are never evicted; the sequence waits for them. Default the resource's.
    type: raw
  interrupt:
    description: For O(phase=interrupt), the interrupt to perform (C(type), C(services)).
    type: dict
  host_root:
    description: The node's host root; C(/) over SSH. Default C(nodewright_host_root), else C(/).
    type: str
  runtime_required:
    description: Open the runtime-required gate after the sequence. Default whether the rollout has a
      runtimeRequired resource.
    type: bool
  before_cordon:
    description: For O(phase=give_back) and O(phase=fail), the node's cordon before O(phase=take_out) (its
      C(cordon_before) result).
    type: str
  took_out:
    description: For O(phase=give_back), whether the node was taken out of work.
    type: bool
  failed_step:
    description: For O(phase=fail), the step that failed.
    type: str
  failure:
    description: For O(phase=fail), why it failed.
    type: str
  gate_resources:
    description: Resources to judge the runtime-required gate by (inline resources); default the cluster's.
    type: list
    elements: dict
  wait_timeout:
    description:
      - Seconds to wait for non-interruptible pods. In a rollout (the node admitted by the C(nodewright.fleet.rollout)
        strategy or C(nodewright rollout), which set the C(nodewright_rollout) fact), past it the node stays cordoned
        and is marked blocked (status label C(blocked), annotation C(nodewright.io/blocked-by), node condition
        C(nodewright.io/NonInterruptPodsRunning), the resource's C(NonInterruptPodsRunning) condition, an Event); the
        task does not fail and returns C(blocked), and the next run takes the node up again. Outside a rollout (the
        C(safe_update) role in a play of your own) or with a I(phase) other than C(all), the task fails instead, with
        nothing evicted, and the node is marked erroring.
      - Unset, the resource's C(podNonInterruptWait.timeout), else 3600.
    type: int
    default: 3600
  wait_give_up_after:
    description:
      - Seconds a node may stay blocked by non-interruptible pods, counted from the first run that found it blocked,
        before the node is marked erroring instead. Unset, the resource's C(podNonInterruptWait.giveUpAfter); 0 or
        none never gives up.
    type: int
  drain_timeout:
    description: Seconds the drain may take.
    type: int
    default: 600
  drain_force:
    description: Delete pods without a controller.
    type: bool
    default: false
  drain_delete_emptydir_data:
    description: Evict pods with emptyDir data.
    type: bool
    default: false
  drain_ignore_daemonsets:
    description: Leave DaemonSet pods in place. When false, a DaemonSet pod on the node makes the drain refuse
      before it evicts anything, and the node is marked erroring.
    type: bool
    default: true
  drain_disable_eviction:
    description: Delete pods directly instead of evicting them. This B(bypasses PodDisruptionBudgets).
    type: bool
    default: false
  drain_grace_period:
    description: Grace period for evicted pods (seconds); default each pod's own.
    type: int
  drain_skip_namespaces:
    description: Namespaces whose pods are never evicted.
    type: list
    elements: str
    default: []
  maintenance_request:
    description:
      - "Requestor mode of NVIDIA's maintenance-operator: instead of cordoning, waiting for non-interruptible pods
        and draining itself, NodeWright asks the operator with a C(NodeMaintenance) (M(nodewright.fleet.node_maintenance))
        that carries the drain options above and the non-interruptible selector, waits until the operator reports it
        C(Ready), and deletes it once the node passed its health gates (the operator uncordons). A node the operator
        did not make ready within O(maintenance_request.timeout) is marked erroring and its request withdrawn: nothing
        was done on it. A node that fails later keeps its request, so the operator keeps it cordoned for triage."
      - Falls back to the variable C(safe_update_maintenance_request), as the other options do.
    type: dict
    suboptions:
      namespace:
        description: Namespace of the C(NodeMaintenance) objects.
        type: str
        default: default
      timeout:
        description: Seconds to wait for the operator to make the request Ready, and for it to go once released.
        type: int
        default: 3600
  reboot_timeout:
    description: Seconds a reboot may take until the node is Ready again.
    type: int
    default: 900
  health_conditions:
    description: Node conditions of a healthy node (as for M(nodewright.fleet.node_health)).
    type: list
    elements: dict
    default: [{type: Ready}]
  health_labels:
    description: Labels a healthy node shows.
    type: dict
    default: {}
  health_timeout:
    description: Seconds the health gates may take after the work.
    type: int
    default: 300
  validation_job:
    description: A validation Job run on the node before it returns to work.
    type: dict
  on_failure:
    description: What happens to a failed node.
    type: str
    choices: [keep_cordoned, uncordon]
    default: keep_cordoned
  allow_controller_root:
    description: Allow a local connection with host root C(/) (the controller is itself the node).
    type: bool
    default: false
extends_documentation_fragment:
  - nodewright.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what each step would do; writes nothing to the cluster or the host.
  diff_mode:
    support: none
    description: No diff output.
notes:
  - An action plugin; it runs on the controller and reaches the host over the task's connection.
"""

EXAMPLES = r"""
- name: Maintain each node of a rollout (playbooks/rollout.yml)
  nodewright.fleet.maintain:

- name: Apply one package to a node under the safe sequence
  nodewright.fleet.maintain:
    resource: kernel-tuning
    packages:
      - name: sysctl
        version: 1.0.0
        config: {vm.swappiness: "10"}
    drain_timeout: 1200
"""

RETURN = r"""
steps:
  description: Each step that ran, with C(name), C(changed), C(failed), C(seconds), C(msg) and its C(result).
  returned: always
  type: list
  elements: dict
status:
  description: The resource's status on the node after the task.
  returned: success
  type: str
cordon_before:
  description: The node's cordon before the task (uncordoned, cordoned_by_nodewright, cordoned_by_other).
  returned: success
  type: str
took_out:
  description: Whether the node was cordoned and drained.
  returned: success
  type: bool
interrupt:
  description: The interrupt the packages asked for (and that was performed).
  returned: success
  type: dict
blocked:
  description:
    - The non-interruptible pods (C(namespace/name)) still running on the node when O(wait_timeout) passed; the
      node is left cordoned and marked blocked, and nothing else was done on it. Empty otherwise.
  returned: success
  type: list
  elements: str
  sample: [training/train-h100-0-x7k2p]
failed_step:
  description: The step that failed.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import full_argument_spec
from ansible_collections.nodewright.fleet.plugins.module_utils.node import maintenance as node_maintenance

# The action plugin validates a task's options against this spec before anything is
# read or changed; the defaults apply only where neither the task nor a
# ``safe_update_<option>`` variable nor the resource's drainConfig sets the option.
ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    resource=dict(type="str"),
    phase=dict(type="str", choices=["all", "take_out", "interrupt", "give_back", "fail"], default="all"),
    packages=dict(type="list", elements="dict"),
    disruptive=dict(type="bool"),
    non_interruptible_selector=dict(type="raw"),
    interrupt=dict(type="dict"),
    host_root=dict(type="str"),
    runtime_required=dict(type="bool"),
    before_cordon=dict(type="str"),
    took_out=dict(type="bool"),
    failed_step=dict(type="str"),
    failure=dict(type="str"),
    gate_resources=dict(type="list", elements="dict"),
    wait_timeout=dict(type="int", default=3600),
    wait_give_up_after=dict(type="int"),
    drain_timeout=dict(type="int", default=600),
    drain_force=dict(type="bool", default=False),
    drain_delete_emptydir_data=dict(type="bool", default=False),
    drain_ignore_daemonsets=dict(type="bool", default=True),
    drain_disable_eviction=dict(type="bool", default=False),
    drain_grace_period=dict(type="int"),
    drain_skip_namespaces=dict(type="list", elements="str", default=[]),
    maintenance_request=dict(type="dict", options=dict(
        namespace=dict(type="str", default=node_maintenance.DEFAULT_NAMESPACE),
        timeout=dict(type="int", default=node_maintenance.DEFAULT_TIMEOUT),
    )),
    reboot_timeout=dict(type="int", default=900),
    health_conditions=dict(type="list", elements="dict", default=[{"type": "Ready"}]),
    health_labels=dict(type="dict", default={}),
    health_timeout=dict(type="int", default=300),
    validation_job=dict(type="dict"),
    on_failure=dict(type="str", choices=["keep_cordoned", "uncordon"], default="keep_cordoned"),
    allow_controller_root=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=full_argument_spec(ARGUMENT_SPEC), supports_check_mode=True)
    module.fail_json(msg="nodewright.fleet.maintain runs on the controller (an action plugin); it cannot run as a "
                         "module on the host")


if __name__ == "__main__":
    main()
