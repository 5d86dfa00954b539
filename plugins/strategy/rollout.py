# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Strategy ``nodewright.fleet.rollout``: progressive waves decided by a DeploymentPolicy.

One play, one batch: the strategy admits the play's hosts into the iteration wave by
wave. The policy engine (``module_utils/fleet/policy.py``) picks each wave; the wave runs the
play's whole task list (handlers included) under the ``linear`` strategy; failed and
unreachable hosts are reported back to the engine, which picks the next wave or halts.

The helpers above the strategy class are plain Python and are shared with
``bin/nodewright-rollout``, which drives the same engine wave by wave through
ansible-runner for those who prefer not to load a third-party strategy.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout
short_description: Roll a play out over nodes in waves decided by a NodeWright DeploymentPolicy
version_added: "0.1.0"
author:
  - NodeWright maintainers (@nodewright)
description:
  - Admits the play's hosts in waves chosen by NodeWright's DeploymentPolicy engine (compartments by label
    selector, budget ceiling, fixed / linear / exponential batch growth, batchThreshold, failureThreshold,
    safetyLimit, maintenance windows) while the play runs.
  - Each wave runs the play's full task list on its hosts in parallel (up to C(forks)), exactly as the
    C(linear) strategy runs one C(serial) batch, handlers included; C(ansible_play_batch) is the wave.
  - At the end of a wave its failed and unreachable hosts count as failed nodes. When the policy halts a
    compartment the play ends with a message naming the compartment and its consecutive failed batches;
    nodes that were never admitted are untouched and absent from the recap.
  - "The policy comes from play variables: C(nodewright_rollout_policy) (an inline DeploymentPolicy spec) or
    C(nodewright_rollout_policy_name) (a cluster-scoped C(DeploymentPolicy) resource, read with NodeWright's
    Kubernetes client)."
  - "Node labels come from each host's C(k8s_node.labels) (the C(nodewright.fleet.k8s_nodes) inventory), else
    its C(nodewright_node_labels) variable, else the Node of that name read from the Kubernetes API."
  - "With C(nodewright_rollout_state_resource) (the name of a NodeWright resource; C(playbooks/rollout.yml) sets
    it) the policy engine's batch state is kept in that resource's status: C(status.rolloutState) and
    C(status.compartmentStatuses) are written after every wave, and the next run resumes from them (a halted
    compartment stays halted). A change of the resource's spec (package version, config, policy) starts a new
    rollout from the first batch; C(nodewright reset-batches NAME) does the same without a change."
  - When the rollout play ends, C(localhost) gets the fact C(nodewright_rollout_outcome) (C(status) complete,
    incomplete, halted, waiting or interrupted; C(reason); C(resource); C(play)) for a later play to publish or
    act on.
  - Each admitted host gets the fact C(nodewright_rollout) with C(wave), C(compartment), C(wave_size) and
    C(policy); the wave decisions go into the run report of the C(nodewright.fleet.report) callback and into
    the custom stats (C(nodewright_rollout)) that ansible-runner reports as C(artifact_data).
notes:
  - The play must not set C(serial); the policy sizes the waves.
  - ansible-core 2.19 prints a deprecation notice for every strategy plugin outside C(ansible.builtin); see
    docs/rollout.md for what it means, how to silence it, and C(bin/nodewright-rollout), which runs the same
    engine without this plugin.
  - "Play variables: C(nodewright_rollout_policy) or C(nodewright_rollout_policy_name);
    C(nodewright_rollout_state_resource) (optional, see above);
    C(nodewright_rollout_wait_for_window) (default true: outside every maintenance window wait for the next
    one; false: end the play and say when it opens); C(nodewright_rollout_k8s_auth) (a mapping of the
    C(nodewright.fleet.k8s_auth) options, for the policy and Node reads)."
"""

import datetime
import gc
import time

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.template import Templar
from ansible.utils.display import Display

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import API_GROUP, API_VERSION
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    HALTED,
    INCOMPLETE,
    WAITING,
    WAVE,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
    compartment_statuses,
    next_wave,
    order_nodes,
    record_wave_result,
)

display = Display()

VAR_POLICY = "nodewright_rollout_policy"
VAR_POLICY_NAME = "nodewright_rollout_policy_name"
VAR_WAIT_FOR_WINDOW = "nodewright_rollout_wait_for_window"
VAR_K8S_AUTH = "nodewright_rollout_k8s_auth"
VAR_DRIVER = "nodewright_rollout_driver"   # set by bin/nodewright-rollout: it makes the waves itself
VAR_STATE_RESOURCE = "nodewright_rollout_state_resource"
NODEWRIGHT_PLURAL = "nodewrights"
VAR_NODE_LABELS = "nodewright_node_labels"
VAR_INVENTORY_NODE = "k8s_node"
FACT = "nodewright_rollout"
OUTCOME_FACT = "nodewright_rollout_outcome"
CUSTOM_STAT = "nodewright_rollout"

DRIVER_WAVE_RUNNER = "wave_runner"
DEPLOYMENT_POLICY_PLURAL = "deploymentpolicies"
# Above this many hosts without labels one LIST of all nodes is cheaper than a GET per node.
_NODE_GET_LIMIT = 20
# A wait for a maintenance window wakes up this often to notice an interrupt.
_WAIT_SLICE = 30.0


class RolloutSettings(object):
    """The rollout's play variables, checked."""

    def __init__(self, policy_spec=None, policy_name=None, wait_for_window=True, k8s_auth=None, driver=None,
                 state_resource=None):
        self.state_resource = state_resource
        self.policy_spec = policy_spec
        self.policy_name = policy_name
        self.wait_for_window = wait_for_window
        self.k8s_auth = k8s_auth or {}
        self.driver = driver


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
    if spec is not None and name:
        raise NodeWrightError("the play sets both %s and %s" % (VAR_POLICY, VAR_POLICY_NAME),
                              hint="keep one: an inline DeploymentPolicy spec, or the name of a DeploymentPolicy "
                                   "resource in the cluster")
    if spec is None and not name and driver != DRIVER_WAVE_RUNNER:
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
    return RolloutSettings(policy_spec=spec, policy_name=name or None,
                           wait_for_window=True if wait is None else _truthy(wait, VAR_WAIT_FOR_WINDOW),
                           k8s_auth=dict(auth), driver=driver, state_resource=state_resource or None)


def check_serial(serial, play_name):
    """The strategy makes its own waves; a ``serial`` play would give it a fresh engine per batch."""
    if serial:
        raise NodeWrightError(
            "play %r sets serial: %s, but the nodewright.fleet.rollout strategy decides the waves itself from the "
            "DeploymentPolicy" % (play_name, list(serial)),
            hint="remove serial from the play; size the waves with the policy's budget and strategy "
                 "(e.g. fixed: {initialBatch: N} with budget: {count: N})")


def _api(auth):
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_api_client
    return get_api_client(auth)


def fetch_deployment_policy(name, auth=None):
    """The spec of the cluster-scoped DeploymentPolicy ``name``, parsed (ClusterError/ValidationError)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, get_json
    path = api_path("%s/%s" % (API_GROUP, API_VERSION), DEPLOYMENT_POLICY_PLURAL, name, field=VAR_POLICY_NAME)
    obj = get_json(_api(auth), path, "read DeploymentPolicy %s" % name)
    return parse_policy(obj.get("spec"), "DeploymentPolicy %s: spec" % name)


def spec_key(resource):
    """What a rollout's batch state belongs to: the resource's packages and its spec generation.

    Any change of the spec (a new package version, new config, another policy) makes a
    new key, and so a new rollout that starts from the first batch."""
    packages = ((resource or {}).get("spec") or {}).get("packages") or {}
    names = ",".join("%s:%s" % (name, (packages[name] or {}).get("version", "")) for name in sorted(packages))
    return "%s (generation %s)" % (names, ((resource or {}).get("metadata") or {}).get("generation", "?"))


def resume_state(policy, resource):
    """``(state, note)``: the RolloutState a run of ``resource`` starts from.

    The batch states recorded in ``status.rolloutState`` are taken up again when they
    belong to the same spec (``spec_key``); a changed spec, or a record that cannot be
    read, starts from the first batch. Node outcomes are not carried over: which nodes
    still have work comes from their markers. ``note`` says what happened, or is None."""
    key = spec_key(resource)
    saved = ((resource or {}).get("status") or {}).get("rolloutState") or {}
    fresh = RolloutState(policy, version=key)
    if not isinstance(saved, dict) or not saved.get("batchStates"):
        return fresh, None
    if saved.get("version") != key:
        return fresh, "the resource changed since the recorded rollout (%s, now %s): starting from the first " \
                      "batch" % (saved.get("version"), key)
    known = {comp.name for comp in policy.all_compartments}
    try:
        batches = {name: BatchState.from_dict(data, "status.rolloutState.batchStates.%s" % name)
                   for name, data in (saved.get("batchStates") or {}).items() if name in known}
    except (ValidationError, TypeError, AttributeError) as exc:
        return fresh, "the recorded batch state cannot be used (%s): starting from the first batch" % exc
    if not batches:
        return fresh, None
    halted = sorted(name for name, b in batches.items() if b.should_stop)
    note = "resuming the recorded batch state of %s" % ", ".join(
        "%s (batch %d)" % (name, b.current_batch) for name, b in sorted(batches.items()))
    if halted:
        note += "; halted: %s - change the resource or run `nodewright reset-batches %s` to start again" % (
            ", ".join(halted), (resource.get("metadata") or {}).get("name", "NAME"))
    return RolloutState(policy, batches=batches, version=key), note


def state_patch(state, nodes, previous_status=None):
    """Merge patch of a NodeWright's status that records ``state``: ``rolloutState``
    (spec key, wave count, batch states) and ``compartmentStatuses``; compartments no
    longer in the policy are removed."""
    previous_status = previous_status or {}
    compartments = compartment_statuses(state, nodes)
    batches = {name: b.to_dict() for name, b in sorted(state.batches.items())}
    for old, value in (previous_status.get("compartmentStatuses") or {}).items():
        if value is not None:
            compartments.setdefault(old, None)
    for old, value in ((previous_status.get("rolloutState") or {}).get("batchStates") or {}).items():
        if value is not None:
            batches.setdefault(old, None)
    return {"status": {"rolloutState": {"version": state.version, "waveNumber": state.wave_number,
                                        "batchStates": batches},
                       "compartmentStatuses": compartments}}


def fetch_resource(name, auth=None):
    """The NodeWright resource ``name`` as the API server has it (ClusterError when it cannot be read)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, get_json
    return get_json(_api(auth), api_path("%s/%s" % (API_GROUP, API_VERSION), NODEWRIGHT_PLURAL, name,
                                         name_rule="nodewright", field=VAR_STATE_RESOURCE),
                    "read NodeWright %s" % name)


class StateKeeper(object):
    """Writes a rollout's batch state into a NodeWright resource's status (``state_patch``)."""

    def __init__(self, name, auth=None, status=None):
        self.name = name
        self.auth = auth or {}
        self.status = status or {}

    @classmethod
    def resume(cls, name, policy, auth=None, check_mode=False):
        """``(state, note, keeper)`` for the resource ``name``: the resumed state, what was
        resumed, and the keeper (None in check mode, or when the resource cannot be read -
        then ``note`` says so and the state is fresh)."""
        try:
            resource = fetch_resource(name, auth)
        except NodeWrightError as exc:
            return RolloutState(policy), "the batch state of %s is neither resumed nor kept: %s" % (name, exc), None
        state, note = resume_state(policy, resource)
        keeper = None if check_mode else cls(name, auth, resource.get("status"))
        return state, note, keeper

    def save(self, state, nodes):
        """Write ``state``; returns None, or the reason it could not be written."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call, k8s_client
        patch = state_patch(state, nodes, self.status)
        custom = k8s_client.CustomObjectsApi(_api(self.auth))
        try:
            call("write the rollout state of NodeWright %s" % self.name, custom.patch_cluster_custom_object_status,
                 API_GROUP, API_VERSION, NODEWRIGHT_PLURAL, self.name, patch)
        except NodeWrightError as exc:
            return "could not record the batch state of %s: %s" % (self.name, exc)
        self.status = patch["status"]
        return None


def load_policy(settings):
    """(policy, source) for the settings; source is ``inline`` or ``DeploymentPolicy/<name>``."""
    if settings.policy_name:
        return fetch_deployment_policy(settings.policy_name, settings.k8s_auth), \
            "DeploymentPolicy/%s" % settings.policy_name
    return parse_policy(settings.policy_spec, VAR_POLICY), "inline"


def node_from_vars(host, variables):
    """The engine's view of one host (name, labels, creationTimestamp) from its variables, or None
    when neither ``k8s_node.labels`` nor ``nodewright_node_labels`` is set."""
    node = variables.get(VAR_INVENTORY_NODE)
    labels = None
    created = None
    source = None
    if isinstance(node, dict) and node.get("labels") is not None:
        labels = node.get("labels")
        created = node.get("creationTimestamp") or node.get("creation_timestamp")
        source = "%s.labels" % VAR_INVENTORY_NODE
    elif variables.get(VAR_NODE_LABELS) is not None:
        labels = variables.get(VAR_NODE_LABELS)
        source = VAR_NODE_LABELS
    if labels is None:
        return None
    if not isinstance(labels, dict):
        raise NodeWrightError("host %s: %s must be a mapping of label keys to values, got %s"
                              % (host, source, type(labels).__name__))
    return {"name": host, "labels": {str(k): str(v) for k, v in labels.items()},
            "creationTimestamp": str(created) if created else None}


def fetch_nodes(names, auth=None):
    """name → node view for Nodes read from the API; names that are no Node are left out."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names as k8s_names
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, get_json, list_pages
    api = _api(auth)
    wanted = set(names)
    found = {}

    def keep(obj):
        meta = obj.get("metadata") or {}
        if meta.get("name") in wanted:
            found[meta["name"]] = {"name": meta["name"], "labels": meta.get("labels") or {},
                                   "creationTimestamp": meta.get("creationTimestamp")}

    if len(wanted) > _NODE_GET_LIMIT:
        for page in list_pages(api, api_path("v1", "nodes"), "list nodes"):
            for obj in page:
                keep(obj)
        return found
    for name in sorted(wanted):
        if not k8s_names.is_subdomain(name):
            continue  # an inventory host that cannot be a Node's name is no Node: nothing to ask
        try:
            keep(get_json(api, api_path("v1", "nodes", name, name_rule="node"), "read node %s" % name))
        except ClusterError as exc:
            if exc.details.get("status") != 404:
                raise
    return found


def collect_nodes(host_names, variables_of, auth=None):
    """Node views for ``host_names`` (in order), labels from host variables, else from the API.

    ``variables_of(host)`` returns a host's (templated) variables as a mapping.
    """
    nodes = {}
    missing = []
    for host in host_names:
        view = node_from_vars(host, variables_of(host))
        if view is None:
            missing.append(host)
        else:
            nodes[host] = view
    if missing:
        try:
            fetched = fetch_nodes(missing, auth)
        except NodeWrightError as exc:
            raise NodeWrightError("%d host(s) have no node labels (%s) and reading their Nodes from the "
                                  "Kubernetes API failed: %s" % (len(missing), _names(missing), exc),
                                  hint="use the nodewright.fleet.k8s_nodes inventory, or set the host variable %s "
                                       "(a mapping, {} for none)" % VAR_NODE_LABELS)
        absent = [h for h in missing if h not in fetched]
        if absent:
            raise NodeWrightError("%d host(s) have no node labels and no Node of that name exists in the cluster: "
                                  "%s" % (len(absent), _names(absent)),
                                  hint="use the nodewright.fleet.k8s_nodes inventory, or set the host variable %s "
                                       "(a mapping, {} for none)" % VAR_NODE_LABELS)
        nodes.update(fetched)
    return [nodes[h] for h in host_names]


def _names(items, limit=5):
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _iso(moment):
    return moment.isoformat(timespec="seconds") if moment is not None else None


def wave_facts(wave, policy_source):
    """host → the ``nodewright_rollout`` fact of a wave's hosts."""
    facts = {}
    for compartment, hosts in wave.compartments.items():
        for host in hosts:
            facts[host] = {"wave": wave.number, "compartment": compartment, "wave_size": len(wave.nodes),
                           "policy": policy_source}
    return facts


def seconds_until(moment, now):
    """Seconds from ``now`` until ``moment`` (0 if it has passed)."""
    return max(0.0, (moment - now).total_seconds())


class RolloutRecord(object):
    """What one rollout decided and what each wave did, for the run report.

    ``to_dict()`` is the report's ``rollout`` entry; the strategy and the wave runner
    write the same shape.
    """

    def __init__(self, play, policy, source, nodes, driver):
        self.play = play
        self.policy = policy
        self.source = source
        self.nodes = nodes
        self.driver = driver
        self.decisions = []
        self.waves = []
        self.assignment = {}
        self.left_out = {}
        self.status = None
        self.reason = None
        self.started = _now()
        self.finished = None
        self.notes = []

    def note(self, text):
        self.notes.append(text)

    def leave_out(self, hosts, why):
        for host in hosts:
            self.left_out[host] = why

    def decision(self, decision, now=None):
        entry = {"at": _iso(now or _now()), "status": decision.status, "reason": decision.reason,
                 "notes": list(decision.notes)}
        if decision.wave is not None:
            entry["wave"] = decision.wave.number
        if decision.halted:
            entry["halted"] = dict(decision.halted)
        if decision.next_window is not None:
            entry["nextWindow"] = _iso(decision.next_window)
        self.decisions.append(entry)
        return entry

    def wave_started(self, wave):
        for host, fact in wave_facts(wave, self.source).items():
            self.assignment[host] = {"wave": fact["wave"], "compartment": fact["compartment"]}
        entry = {"number": wave.number, "nodes": list(wave.nodes),
                 "compartments": {k: list(v) for k, v in wave.compartments.items()},
                 "started": _iso(_now())}
        self.waves.append(entry)
        return entry

    def wave_finished(self, succeeded, failed, outcome):
        entry = self.waves[-1]
        entry.update({"finished": _iso(_now()), "succeeded": sorted(succeeded), "failed": sorted(failed),
                      "batches": outcome})
        return entry

    def finish(self, status, reason):
        self.status = status
        self.reason = reason
        self.finished = _now()

    def untouched(self):
        """Nodes never admitted into a wave, in batch order."""
        return [name for name in order_nodes(self.nodes) if name not in self.assignment]

    def to_dict(self, state=None):
        out = {
            "play": self.play, "driver": self.driver,
            "policy": {"source": self.source, "spec": self.policy.to_dict()},
            "status": self.status, "reason": self.reason,
            "started": _iso(self.started), "finished": _iso(self.finished),
            "nodes": len(self.nodes), "decisions": self.decisions, "waves": self.waves,
            "assignment": self.assignment,
            "untouched": self.untouched(),
            "leftOut": dict(self.left_out),
        }
        if self.notes:
            out["notes"] = list(self.notes)
        if state is not None:
            out["compartments"] = compartment_statuses(state, self.nodes)
            out["failed"] = sorted(state.failed)
        return out


def halt_message(decision, untouched):
    """The words that end a halted rollout."""
    text = "NodeWright rollout halted: %s" % decision.reason
    if untouched:
        text += ". %d node(s) were never admitted and are untouched: %s" % (len(untouched), _names(untouched))
    return text


class _TemplatedVariables(object):
    """``get(name)`` templates only values that hold a template (most labels are plain text,
    and values read from the API are never trusted as templates)."""

    def __init__(self, variables, loader, probe):
        self._variables = variables
        self._loader = loader
        self._probe = probe

    def get(self, name, default=None):
        value = self._variables.get(name, default)
        if value is not None and self._probe.is_template(value):
            value = Templar(loader=self._loader, variables=self._variables).template(value)
        return value


class StrategyModule(LinearStrategyModule):
    """The ``linear`` strategy, run once per wave over the hosts the policy admits."""

    def __init__(self, tqm):
        super(StrategyModule, self).__init__(tqm)
        # Where this play's record sits in the custom stat (one entry per rollout play).
        self._nw_slot = None
        self._nw_probe = None  # a Templar that only tells templates from plain values
        self._nw_keeper = None  # writes the batch state into the resource's status, when there is one

    # ------------------------------------------------------------------ inputs

    def _play_variables(self, play):
        variables = self._variable_manager.get_vars(play=play)
        templar = Templar(loader=self._loader, variables=variables)
        wanted = (VAR_POLICY, VAR_POLICY_NAME, VAR_WAIT_FOR_WINDOW, VAR_K8S_AUTH, VAR_DRIVER, VAR_STATE_RESOURCE)
        return {name: templar.template(variables[name]) for name in wanted if name in variables}

    def _host_variables(self, host_name):
        """A host's variables as ``hostvars[host]`` gives them to a task, templated on access."""
        if self._nw_probe is None:
            self._nw_probe = Templar(loader=self._loader)
        variables = self._variable_manager.get_vars(host=self._inventory.get_host(host_name), include_hostvars=False)
        return _TemplatedVariables(variables, self._loader, self._nw_probe)

    # ------------------------------------------------------------------ run

    def run(self, iterator, play_context):  # type: ignore[override]
        play = iterator._play
        try:
            settings = read_settings(self._play_variables(play))
            if settings.driver == DRIVER_WAVE_RUNNER:
                # bin/nodewright-rollout already limited the run to one wave.
                display.vv("nodewright.fleet.rollout: waves are driven by nodewright-rollout; running as linear")
                return super(StrategyModule, self).run(iterator, play_context)
            check_serial(play.serial, play.get_name())
            policy, source = load_policy(settings)
        except NodeWrightError as exc:
            raise AnsibleError("nodewright.fleet.rollout: %s" % exc)

        hosts = self._inventory.get_hosts(play.hosts, order=play.order)
        by_name = {h.name: h for h in hosts}
        # Hosts that failed or became unreachable in an earlier play are not this rollout's failures.
        earlier = {h.name for h in hosts if iterator.is_failed(h) or h.name in self._tqm._unreachable_hosts}
        names = [h.name for h in hosts if h.name not in earlier]
        try:
            nodes = collect_nodes(names, self._host_variables, settings.k8s_auth)
        except NodeWrightError as exc:
            raise AnsibleError("nodewright.fleet.rollout: %s" % exc)

        record = RolloutRecord(play.get_name(), policy, source, nodes, driver="strategy")
        record.leave_out(sorted(earlier), "failed or unreachable earlier in the playbook")
        rollout = self._start_state(settings, policy, play_context, record)
        self._publish(record, rollout)
        display.banner("NODEWRIGHT ROLLOUT [%s] %d node(s), policy %s" % (play.get_name(), len(nodes), source))

        # A wave starts from a fresh task list, exactly as a new serial batch would.
        original_tasks = list(iterator.all_tasks)
        result = int(self._tqm.RUN_OK)
        try:
            result = self._run_waves(iterator, play_context, settings, nodes, by_name, record, rollout,
                                     original_tasks, source)
        finally:
            self._inventory.restrict_to_hosts(hosts)
            if record.status is None:
                record.finish("interrupted", "the rollout stopped before the policy finished (interrupted or error)")
            self._publish(record, rollout)
            self._save_state(rollout, nodes)
            # For a later play on the controller: publish the outcome, end the playbook non-zero.
            self._variable_manager.set_nonpersistent_facts("localhost", {OUTCOME_FACT: {
                "status": record.status, "reason": record.reason, "resource": settings.state_resource,
                "play": play.get_name()}})
        return result

    def _run_waves(self, iterator, play_context, settings, nodes, by_name, record, rollout, original_tasks,
                   source):
        result = int(self._tqm.RUN_OK)
        progress = {}  # compartment -> {"ok", "failed", "total"}: the per-wave progress line
        while True:
            if self._tqm._terminated:
                record.finish("interrupted", "the run was interrupted")
                return result
            decision = next_wave(rollout, nodes, now=_now())
            record.decision(decision)

            if decision.status == WAVE:
                wave = decision.wave
                record.wave_started(wave)
                display.banner("NODEWRIGHT WAVE %d: %s" % (wave.number, ", ".join(
                    "%s %d" % (name, len(hosts)) for name, hosts in wave.compartments.items())))
                display.display(decision.reason, color=C.COLOR_VERBOSE)
                for host, fact in wave_facts(wave, source).items():
                    self._variable_manager.set_nonpersistent_facts(host, {FACT: fact})
                # The inventory holds only the wave while it runs, as it holds one serial batch
                # under ansible-playbook: the strategy's host cache, ansible_play_batch and meta
                # tasks such as end_batch then see the wave and nothing else. (Hosts of later waves
                # left in the host cache would also skip their first task when a wave ends.)
                self._inventory.restrict_to_hosts([by_name[name] for name in wave.nodes])
                iterator.all_tasks[:] = original_tasks
                iterator.cur_task = 0
                # Every task of the wave forks a worker per host from this process. Frozen
                # objects are left alone by the workers' garbage collector, so their pages
                # stay shared with the controller instead of being copied into each worker.
                gc.collect()
                gc.freeze()
                try:
                    result = super(StrategyModule, self).run(iterator, play_context)
                finally:
                    gc.unfreeze()

                failed = {name for name in wave.nodes
                          if iterator.is_failed(by_name[name]) or name in self._tqm._unreachable_hosts}
                succeeded = [name for name in wave.nodes if name not in failed]
                outcome = record_wave_result(rollout, succeeded=succeeded, failed=failed)
                record.wave_finished(succeeded, failed, outcome)
                self._publish(record, rollout)
                self._save_state(rollout, nodes)
                display.display("NodeWright wave %d: %d succeeded, %d failed%s"
                                % (wave.number, len(succeeded), len(failed),
                                   (" (%s)" % _names(sorted(failed))) if failed else ""),
                                color=C.COLOR_ERROR if failed else C.COLOR_OK)
                for comp, hosts in wave.compartments.items():
                    entry = progress.setdefault(comp, {"ok": 0, "failed": 0, "total": 0})
                    entry["total"] = max(entry["total"], wave.totals.get(comp, 0))
                    entry["failed"] += len([h for h in hosts if h in failed])
                    entry["ok"] += len([h for h in hosts if h not in failed])
                display.display("NodeWright progress: %s" % "; ".join(
                    "%s %d ok, %d failed, %d remaining of %d" % (
                        comp, e["ok"], e["failed"], max(0, e["total"] - e["ok"] - e["failed"]), e["total"])
                    for comp, e in sorted(progress.items())), color=C.COLOR_VERBOSE)

                if result & self._tqm.RUN_FAILED_BREAK_PLAY or iterator.end_play:
                    why = ("max_fail_percentage reached" if result & self._tqm.RUN_FAILED_BREAK_PLAY
                           else "meta: end_play")
                    self._stopped(record, "the play ended the rollout after wave %d (%s)" % (wave.number, why))
                    return result
                if failed and iterator._play.any_errors_fatal:
                    self._stopped(record, "wave %d failed and the play sets any_errors_fatal" % wave.number)
                    return result | self._tqm.RUN_FAILED_BREAK_PLAY
                continue

            if decision.status == WAITING and decision.next_window is not None and settings.wait_for_window:
                self._wait_for(decision.next_window, decision.reason)
                continue

            if decision.status == WAITING:
                record.finish(WAITING, decision.reason)
                display.warning("NodeWright rollout: no wave started: %s" % decision.reason)
                iterator.end_play = True
                return result

            if decision.status == HALTED:
                message = halt_message(decision, record.untouched())
                record.finish(HALTED, message)
                display.error(message, wrap_text=False)
                # End this play only: a later play (publishing the resources' status, say)
                # still runs; the failed nodes make the playbook's exit status non-zero.
                iterator.end_play = True
                return result or self._tqm.RUN_FAILED_HOSTS

            # COMPLETE or INCOMPLETE: nothing more to do in this run.
            record.finish(decision.status, decision.reason)
            if decision.status == INCOMPLETE:
                display.warning("NodeWright rollout: %s" % decision.reason)
            elif decision.status == COMPLETE:
                display.display("NodeWright rollout: %s" % decision.reason, color=C.COLOR_OK)
            return result

    def _start_state(self, settings, policy, play_context, record):
        """The engine's state for this run: fresh, or resumed from the resource's status."""
        if not settings.state_resource:
            return RolloutState(policy)
        state, note, self._nw_keeper = StateKeeper.resume(settings.state_resource, policy, settings.k8s_auth,
                                                          check_mode=bool(play_context.check_mode))
        if note:
            record.note(note)
            display.display("NodeWright rollout: %s" % note, color=C.COLOR_VERBOSE)
        return state

    def _save_state(self, rollout, nodes):
        """Write the batch state into the resource's status (not in check mode)."""
        if self._nw_keeper is not None:
            problem = self._nw_keeper.save(rollout, nodes)
            if problem:
                display.warning("NodeWright rollout: %s" % problem)

    def _stopped(self, record, why):
        untouched = record.untouched()
        if untouched:
            why += "; %d node(s) were never admitted: %s" % (len(untouched), _names(untouched))
        record.finish("stopped", why)
        display.warning("NodeWright rollout stopped: %s" % why)

    def _wait_for(self, moment, reason):
        display.display("NodeWright rollout: %s; waiting" % reason, color=C.COLOR_WARN)
        while not self._tqm._terminated:
            left = seconds_until(moment, _now())
            if left <= 0:
                return
            time.sleep(min(left, _WAIT_SLICE))

    def _publish(self, record, rollout):
        """Keep the rollout's record in the play's custom stats, where the report callback and
        ansible-runner (``artifact_data``) find it."""
        stats = self._tqm._stats
        entries = (getattr(stats, "custom", {}).get("_run") or {}).get(CUSTOM_STAT)
        if not isinstance(entries, list):
            entries = []
        data = record.to_dict(rollout)
        if self._nw_slot is None or self._nw_slot >= len(entries):
            self._nw_slot = len(entries)
            entries.append(data)
        else:
            entries[self._nw_slot] = data
        stats.set_custom_stats(CUSTOM_STAT, entries)
