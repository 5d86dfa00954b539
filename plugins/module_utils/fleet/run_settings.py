# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The play variables of a rollout run and the settings read from them (``read_settings``):
which policy, which driver, admission, alert gate, notifications; ``serial`` refused."""

from __future__ import annotations


from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
)


VAR_POLICY = "nodewright_rollout_policy"
VAR_POLICY_NAME = "nodewright_rollout_policy_name"
VAR_WAIT_FOR_WINDOW = "nodewright_rollout_wait_for_window"
VAR_K8S_AUTH = "nodewright_rollout_k8s_auth"
VAR_DRIVER = "nodewright_rollout_driver"   # set by `nodewright rollout`: it makes the waves itself
VAR_STATE_RESOURCE = "nodewright_rollout_state_resource"
VAR_DESIRED = "nodewright_rollout_desired"          # the desired_state result: one or more resources
# The custom stat (per run, aggregated) in which nodewright.fleet.maintain names the nodes it left
# blocked by non-interruptible pods (node -> pods): the rollout counts them as neither done nor failed.
STAT_BLOCKED = "nodewright_blocked"
# Likewise the nodes that stopped at a step boundary because their resource was paused or
# disabled during the run (node -> where it stopped): neither done nor failed.
STAT_PAUSED = "nodewright_paused"
VAR_ADMISSION = "nodewright_rollout_admission"      # reserve waves in the cluster (default: with VAR_DESIRED)
VAR_RESERVATION_TTL = "nodewright_rollout_reservation_ttl"
VAR_CAPACITY_TIMEOUT = "nodewright_rollout_capacity_timeout"
VAR_LOCK_NAMESPACE = "nodewright_rollout_lock_namespace"
VAR_ALERT_GATE = "nodewright_rollout_alert_gate"    # the run's alertGate: replaces every policy's
VAR_NOTIFY = "nodewright_rollout_notify"            # Apprise URLs the run's events go to (fleet/notify.py)
VAR_NODE_LABELS = "nodewright_node_labels"
VAR_INVENTORY_NODE = "k8s_node"
FACT = "nodewright_rollout"
OUTCOME_FACT = "nodewright_rollout_outcome"
CUSTOM_STAT = "nodewright_rollout"

DRIVER_WAVE_RUNNER = "wave_runner"
# Above this many hosts without labels one LIST of all nodes is cheaper than a GET per node.
_NODE_GET_LIMIT = 20
# A wait for a maintenance window wakes up this often to notice an interrupt.
_WAIT_SLICE = 30.0


class RolloutSettings(object):
    """The rollout's play variables, checked."""

    def __init__(self, policy_spec=None, policy_name=None, wait_for_window=True, k8s_auth=None, driver=None,
                 state_resource=None, desired=None, admission=None, reservation_ttl=None, capacity_timeout=None,
                 lock_namespace=None, alert_gate=None, notify=None):
        self.state_resource = state_resource
        self.notify = notify  # a notify.NotifySettings, or None
        self.alert_gate = alert_gate  # an alerts.AlertGate, or None
        self.policy_spec = policy_spec
        self.policy_name = policy_name
        self.wait_for_window = wait_for_window
        self.k8s_auth = k8s_auth or {}
        self.driver = driver
        self.desired = desired
        # Waves of NodeWright resources are always reserved in the cluster; a play over
        # arbitrary hosts only when asked.
        self.admission = (desired is not None) if admission is None else admission
        self.reservation_ttl = reservation_ttl
        self.capacity_timeout = capacity_timeout
        self.lock_namespace = lock_namespace


def _truthy(value, name):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "true", "on", "1", "no", "false", "off", "0"):
        return value.strip().lower() in ("yes", "true", "on", "1")
    raise NodeWrightError("%s must be true or false, got %r" % (name, value))


def read_settings(variables):
    """RolloutSettings from (templated) play variables; NodeWrightError when they do not make sense."""
    spec = variables.get(VAR_POLICY)
    name = variables.get(VAR_POLICY_NAME)
    driver = variables.get(VAR_DRIVER)
    desired = variables.get(VAR_DESIRED)
    if desired is not None and (spec is not None or name):
        raise NodeWrightError("the play sets %s and a policy (%s/%s)" % (VAR_DESIRED, VAR_POLICY, VAR_POLICY_NAME),
                              hint="NodeWright resources bring their own DeploymentPolicy; drop the policy variable")
    if desired is not None:
        # Read through the plan's types once, before any node is touched.
        from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import RunPlan
        desired = RunPlan.from_dict(desired, VAR_DESIRED)
    if spec is not None and name:
        raise NodeWrightError("the play sets both %s and %s" % (VAR_POLICY, VAR_POLICY_NAME),
                              hint="keep one: an inline DeploymentPolicy spec, or the name of a DeploymentPolicy "
                                   "resource in the cluster")
    if spec is None and not name and desired is None and driver != DRIVER_WAVE_RUNNER:
        raise NodeWrightError("the nodewright.fleet.rollout strategy needs a DeploymentPolicy",
                              hint="set the play variable %s (an inline DeploymentPolicy spec) or %s (the name of a "
                                   "DeploymentPolicy resource); see docs/rollout.md" % (VAR_POLICY, VAR_POLICY_NAME))
    if name is not None and not isinstance(name, str):
        raise NodeWrightError("%s must be the name of a DeploymentPolicy, got %r" % (VAR_POLICY_NAME, name))
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
    if name:
        names.object_name(name, VAR_POLICY_NAME, "DeploymentPolicy")
    auth = variables.get(VAR_K8S_AUTH) or {}
    if not isinstance(auth, dict):
        raise NodeWrightError("%s must be a mapping of Kubernetes connection options (kubeconfig, context, host, "
                              "api_key, ...), got %s" % (VAR_K8S_AUTH, type(auth).__name__))
    wait = variables.get(VAR_WAIT_FOR_WINDOW)
    state_resource = variables.get(VAR_STATE_RESOURCE)
    if state_resource is not None and not isinstance(state_resource, str):
        raise NodeWrightError("%s must be the name of a NodeWright resource, got %r"
                              % (VAR_STATE_RESOURCE, state_resource))
    if state_resource:
        names.nodewright_name(state_resource, VAR_STATE_RESOURCE)
    admission = variables.get(VAR_ADMISSION)
    gate = variables.get(VAR_ALERT_GATE)
    if gate is not None:
        from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.alerts import parse_alert_gate
        gate = parse_alert_gate(gate, VAR_ALERT_GATE)
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.notify import parse_notify
    notify = parse_notify(variables.get(VAR_NOTIFY), VAR_NOTIFY)
    return RolloutSettings(policy_spec=spec, policy_name=name or None,
                           wait_for_window=True if wait is None else _truthy(wait, VAR_WAIT_FOR_WINDOW),
                           k8s_auth=dict(auth), driver=driver, state_resource=state_resource or None,
                           desired=desired,
                           admission=None if admission is None else _truthy(admission, VAR_ADMISSION),
                           reservation_ttl=_number(variables.get(VAR_RESERVATION_TTL), VAR_RESERVATION_TTL, 15),
                           capacity_timeout=_number(variables.get(VAR_CAPACITY_TIMEOUT), VAR_CAPACITY_TIMEOUT, 0),
                           lock_namespace=variables.get(VAR_LOCK_NAMESPACE) or None, alert_gate=gate,
                           notify=notify)


def _number(value, name, minimum):
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise NodeWrightError("%s must be a whole number of seconds, got %r" % (name, value))
    if number < minimum:
        raise NodeWrightError("%s must be %d or more, got %d" % (name, minimum, number))
    return number


def check_serial(serial, play_name):
    """The strategy makes its own waves; a ``serial`` play would give it a fresh engine per batch."""
    if serial:
        raise NodeWrightError(
            "play %r sets serial: %s, but the nodewright.fleet.rollout strategy decides the waves itself from the "
            "DeploymentPolicy" % (play_name, list(serial)),
            hint="remove serial from the play; size the waves with the policy's budget and strategy "
                 "(e.g. fixed: {initialBatch: N} with budget: {count: N})")
