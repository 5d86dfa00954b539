# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A rollout run around the driver: its settings, the batch state kept in each
resource's status, the nodes' labels, the run's record for the report, and the hooks
the strategy plugin and ``nodewright rollout`` share (``RunHooks``).

Nothing here imports Ansible: the strategy plugin adds only what needs the
controller's internals (running a wave as a ``linear`` pass over the admitted hosts).
"""

from __future__ import annotations

import datetime

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import Hooks, ResourceRollout
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import HALTED, parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
    compartment_statuses,
    order_nodes,
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
        if not isinstance(desired, dict) or not isinstance(desired.get("rollouts"), list):
            raise NodeWrightError("%s must be the result of nodewright.fleet.desired_state (with rollouts), got %s"
                                  % (VAR_DESIRED, type(desired).__name__))
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


def _api(auth):
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_api_client
    return get_api_client(auth)


def fetch_deployment_policy(name, auth=None):
    """The spec of the cluster-scoped DeploymentPolicy ``name``, parsed (ClusterError/ValidationError)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
    obj = nodewright_api.get(_api(auth), nodewright_api.DEPLOYMENT_POLICIES, name, field=VAR_POLICY_NAME)
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


def state_patch(state, nodes, previous_status=None, done=(), failed=(), in_progress=()):
    """Merge patch of a NodeWright's status that records ``state``: ``rolloutState``
    (spec key, wave count, batch states) and ``compartmentStatuses``; compartments no
    longer in the policy are removed. ``done``/``failed``/``in_progress``: what the
    nodes' own markers say (complete, erroring and in progress for this resource), so
    that progress counts nodes finished or failed in earlier runs too."""
    previous_status = previous_status or {}
    compartments = compartment_statuses(state, nodes, done=done, in_progress=in_progress)
    if failed:
        failed = set(failed) | state.failed
        members = _members(state, nodes)
        for name, entry in compartments.items():
            group = members.get(name, [])
            bad = sum(1 for n in group if n in failed)
            entry["batchState"]["failedNodes"] = max(entry["batchState"].get("failedNodes", 0), bad)
            total = entry["matched"]
            entry["progressPercent"] = (entry["completed"] + bad) * 100 // total if total else 0
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
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
    return nodewright_api.get(_api(auth), nodewright_api.NODEWRIGHTS, name, field=VAR_STATE_RESOURCE)


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

    def save(self, state, nodes, done=(), failed=(), in_progress=(), status=None):
        """Write ``state`` (and the resource ``status`` fields, when given) in one patch;
        returns None, or the reason it could not be written."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
        patch = state_patch(state, nodes, self.status, done=done, failed=failed, in_progress=in_progress)
        if status:
            status = dict(status)
            if status.get("conditions") is not None:
                status["conditions"] = nodewright_api.merge_conditions(self.status.get("conditions"),
                                                                       status["conditions"])
            patch["status"].update(status)
        try:
            nodewright_api.patch_status(_api(self.auth), self.name, patch["status"],
                                        "write the rollout state of NodeWright %s" % self.name)
        except NodeWrightError as exc:
            return "could not record the batch state of %s: %s" % (self.name, exc)
        merged = dict(self.status)
        merged.update(dict(patch["status"]))
        self.status = merged
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
        for page in list_pages(api, "/api/v1/nodes", "list nodes"):
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


def wave_facts(wave, records):
    """host -> its ``nodewright_rollout`` fact for ``wave`` (a driver ``WaveRun``): the wave,
    compartment, wave size and policy, and ``resource`` where the run rolls out NodeWright
    resources. The strategy sets it on each admitted host; the wave runner hands it over as a
    host variable."""
    facts = {}
    for name, engine_wave in wave.waves.items():
        record = records[name]
        for compartment, hosts in engine_wave.compartments.items():
            for host in hosts:
                fact = {"wave": wave.number, "compartment": compartment, "wave_size": len(wave.nodes),
                        "policy": record.source}
                if record.resource:
                    fact["resource"] = name
                facts[host] = fact
    return facts


def _members(state, nodes):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import assign_nodes
    return {name: list(group) for name, group in assign_nodes(state.policy, nodes).items()}


class RolloutRecord(object):
    """What one resource's rollout decided and what each wave did, for the run report.

    ``to_dict()`` is one entry of the report's ``rollout`` list; every driver writes
    the same shape. Wave numbers are the run's (the waves all resources share)."""

    def __init__(self, play, policy, source, nodes, driver, resource=None):
        self.play = play
        self.policy = policy
        self.source = source
        self.nodes = nodes
        self.driver = driver
        self.resource = resource
        self.decisions = []
        self.waves = []
        self.assignment = {}
        self.left_out = {}
        self.status = None
        self.reason = None
        self.started = _now()
        self.finished = None
        self.notes = []
        self.notifications = []  # what the run's notifier sent (notify.Notifier.log)
        self._last = None
        self.labelled = False  # whether ``nodes`` carry their labels (read from the cluster)

    def note(self, text):
        self.notes.append(text)

    def leave_out(self, hosts, why):
        for host in hosts:
            self.left_out[host] = why

    def decision(self, decision, number=None, now=None):
        """Record a decision; the same decision twice in a row (a poll while waiting) once."""
        key = (decision.status, decision.reason)
        if key == self._last and decision.wave is None:
            return None
        self._last = key
        entry = {"at": _iso(now or _now()), "status": decision.status, "reason": decision.reason,
                 "notes": list(decision.notes)}
        if decision.wave is not None:
            entry["wave"] = number if number is not None else decision.wave.number
        if decision.halted:
            entry["halted"] = dict(decision.halted)
        if decision.next_window is not None:
            entry["nextWindow"] = _iso(decision.next_window)
        if decision.soak_until is not None:
            entry["soakUntil"] = _iso(decision.soak_until)
        if decision.gate is not None:
            entry["alertGate"] = decision.gate.to_dict()
        self.decisions.append(entry)
        return entry

    def wave_started(self, wave, number=None):
        number = number if number is not None else wave.number
        for compartment, hosts in wave.compartments.items():
            for host in hosts:
                self.assignment[host] = {"wave": number, "compartment": compartment}
                if self.resource:
                    self.assignment[host]["resource"] = self.resource
        entry = {"number": number, "nodes": list(wave.nodes),
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

    def to_dict(self, state=None, done=()):
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
        if self.resource:
            out["resource"] = self.resource
        if self.notes:
            out["notes"] = list(self.notes)
        if self.notifications:
            out["notifications"] = [dict(n) for n in self.notifications]
        if state is not None:
            out["compartments"] = compartment_statuses(state, self.nodes, done=done)
            out["failed"] = sorted(state.failed)
        return out


def halt_message(decision, untouched, resource=None):
    """The words that end a halted rollout."""
    text = "NodeWright rollout halted: %s%s" % (("%s: " % resource) if resource else "", decision.reason)
    if untouched:
        text += ". %d node(s) were never admitted and are untouched: %s" % (len(untouched), _names(untouched))
    return text


# --------------------------------------------------------------------------- resources of a run


def resources_from_desired(desired, hosts, settings, play, driver, check_mode=False, say=None):
    """``(ResourceRollout list, {name: RolloutRecord}, {name: StateKeeper})`` for the
    resources of a ``desired_state`` result; only ``hosts`` (the play's) may be picked."""
    say = say or (lambda text, level="info": None)
    rollouts, records, keepers = [], {}, {}
    hosts = set(hosts)
    for entry in desired.get("rollouts") or []:
        if entry.get("paused") or entry.get("disabled") or entry.get("deleting"):
            continue
        name = entry["name"]
        policy = parse_policy(entry.get("policy") or {}, "NodeWright %s: policy" % name).with_alert_gate(
            settings.alert_gate)
        source = ("DeploymentPolicy/%s" % entry["policy_name"]) if entry.get("policy_name") else \
            "interruptionBudget of %s" % name
        state, keeper = RolloutState(policy), None
        if entry.get("from_cluster", True) and entry.get("generation") is not None:
            state, note, keeper = StateKeeper.resume(name, policy, settings.k8s_auth, check_mode=check_mode)
            if note:
                say("NodeWright rollout: %s: %s" % (name, note))
        else:
            note = None
        views = entry.get("node_views") or [{"name": t} for t in entry.get("targets") or []]
        res = ResourceRollout(name, policy, targets=entry.get("targets") or [], work=entry.get("work") or [],
                              priority=entry.get("priority", 200), eligible=hosts & set(entry.get("work") or []),
                              state=state, source=source, data=entry, order=entry.get("node_order"))
        record = RolloutRecord(play, policy, source, [v for v in views if v["name"] in res.work], driver,
                               resource=name)
        if note:
            record.note(note)
        missing = sorted(set(entry.get("work") or []) - hosts)
        if missing:
            record.leave_out(missing, "not in the inventory of this run")
        rollouts.append(res)
        records[name] = record
        keepers[name] = keeper
    return rollouts, records, keepers


class RunHooks(Hooks):
    """The driver hooks every runner shares: the run's records, the batch state and
    status kept in each resource, and progress lines. Subclasses run the waves."""

    def __init__(self, records, keepers, status_writer=None, say=None):
        self.records = records
        self.keepers = keepers
        self.status_writer = status_writer
        self._say = say or (lambda text, level="info": None)
        self.driver = None
        self.progress = {}

    def say(self, text, level="info"):
        self._say(text, level)

    def decided(self, resources):
        for res in resources:
            record = self.records.get(res.name)
            if record is not None and res.decision is not None:
                record.decision(res.decision, number=(len(self.driver.waves) + 1) if self.driver else None)
            if getattr(res, "gate_changed", False) and self.driver is not None and self.driver.last_view is not None:
                # The alert gate opened or closed: the resource's condition says so now.
                res.gate_changed = False
                self.save(res, self.driver.last_view, self.driver.last_raw)

    def wave_started(self, wave):
        for name, engine_wave in wave.waves.items():
            self.records[name].wave_started(engine_wave, number=wave.number)
        self.say("NODEWRIGHT WAVE %d: %s" % (wave.number, "; ".join(
            "%s: %s" % (name, ", ".join("%s %d" % (c, len(h)) for c, h in engine_wave.compartments.items()))
            for name, engine_wave in wave.waves.items())), "banner")
        for name, reason in wave.reasons.items():
            self.say("%s: %s" % (name, reason), "verbose")

    def wave_done(self, wave, outcomes, results):
        failed_all = []
        for name, engine_wave in wave.waves.items():
            mine = list(engine_wave.nodes)
            ok = [n for n in mine if outcomes.get(n) == "ok"]
            bad = [n for n in mine if n not in ok]
            failed_all.extend(bad)
            self.records[name].wave_finished(ok, bad, results.get(name))
            for comp, hosts in engine_wave.compartments.items():
                entry = self.progress.setdefault((name, comp), {"ok": 0, "failed": 0, "total": 0})
                entry["total"] = max(entry["total"], engine_wave.totals.get(comp, 0))
                entry["failed"] += len([h for h in hosts if h in bad])
                entry["ok"] += len([h for h in hosts if h not in bad])
        self.say("NodeWright wave %d: %d succeeded, %d failed%s" % (
            wave.number, len(wave.nodes) - len(failed_all), len(failed_all),
            (" (%s)" % _names(sorted(failed_all))) if failed_all else ""), "error" if failed_all else "ok")
        self.say("NodeWright progress: %s" % "; ".join(
            "%s%s %d ok, %d failed, %d remaining of %d" % (
                ("%s/" % name) if len(self.records) > 1 else "", comp, e["ok"], e["failed"],
                max(0, e["total"] - e["ok"] - e["failed"]), e["total"])
            for (name, comp), e in sorted(self.progress.items())), "verbose")

    def view_read(self, view, raw_nodes):
        """At every admission: the batch state and status of each resource, from the nodes now."""
        if self.driver is None:
            return
        for res in self.driver.resources:
            record = self.records.get(res.name)
            if record is not None and not record.labelled:
                record.nodes = [view.nodes[n].view() for n in res.targets if n in res.work and n in view.nodes]
                record.labelled = True
            self.save(res, view, raw_nodes)

    def save(self, res, view, raw_nodes, override=None, message=None):
        keeper = self.keepers.get(res.name)
        if keeper is None:
            return
        marks = {}
        for name in res.targets:
            node = view.nodes.get(name)
            if node is not None:
                marks[name] = node.statuses.get(res.name)
        open_work = res.open_work()  # a set of the fleet's size: made once, not once per node
        done = [n for n, s in marks.items() if s == "complete" and n not in open_work] + \
            sorted(res.state.succeeded)
        failed = [n for n, s in marks.items() if s == "erroring"]
        in_progress = [n for n, s in marks.items() if s == "in_progress"]
        status = None
        if self.status_writer is not None and raw_nodes is not None:
            status = self.status_writer(res, raw_nodes, keeper.status, override, message)
            condition = alert_gate_condition(getattr(res, "gate_check", None))
            if status is not None and condition is not None:
                status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]]
                status["conditions"].append(condition)
        views = [view.nodes[t].view() for t in res.targets if t in view.nodes]
        problem = keeper.save(res.state, views, done=done, failed=failed, in_progress=in_progress, status=status)
        if problem:
            self.say("NodeWright rollout: %s" % problem, "warn")

    def finish(self, status, reason):
        """Close every record; the last status write says how the run ended."""
        driver = self.driver
        for res in driver.resources if driver else ():
            record = self.records.get(res.name)
            decision = res.decision
            if record is None:
                continue
            if status in ("interrupted", "error"):
                record.finish(status, reason)
            elif decision is None:
                record.finish("complete", "nothing to do")
            elif decision.status == HALTED:
                record.finish(HALTED, halt_message(decision, record.untouched(), res.name if len(
                    self.records) > 1 else None))
            else:
                record.finish(decision.status, decision.reason)
        if driver is not None and driver.last_view is not None:
            for res in driver.resources:
                record = self.records.get(res.name)
                halted = record is not None and record.status == HALTED
                # Paused or disabled during the run: the status says so, as for a resource paused before it.
                override = "halted" if halted else getattr(res, "stopped", None)
                self.save(res, driver.last_view, driver.last_raw, override=override,
                          message=record.reason if halted or override else None)


CONDITION_ALERT_GATE = "AlertGate"


def alert_gate_condition(check):
    """The resource's ``AlertGate`` condition from the gate's last check (None when the run never
    checked one): True while it keeps nodes out (reason AlertsFiring, or SourceUnavailable when
    the source cannot be read and the gate fails closed); False when it lets them in (NoAlerts,
    or SourceUnavailableFailOpen)."""
    if check is None:
        return None
    return {"type": CONDITION_ALERT_GATE, "status": "True" if check.closed else "False", "reason": check.reason,
            "message": check.message[:32000], "lastTransitionTime": _iso(_now())}


def status_writer(auth):
    """The resource status written at every admission, from the nodes' markers.

    A node this run cannot reach (another job slice's, another run's) counts as still to
    do only while its markers say so: once another run has finished it, it is complete
    here too, so that every slice writes the one combined status."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
    cache, desired, judged = {}, {}, {}

    def still_to_do(res, node, specs):
        meta = node.get("metadata") or {}
        key = (res.name, meta.get("name"), meta.get("resourceVersion"))
        if key not in judged:
            if res.name not in desired:
                desired[res.name] = desired_state.desired_packages(specs, cache)
            judged[key] = desired_state.has_work(specs, node, res.name, desired=desired[res.name], cache=cache)
        return judged[key]

    def write(res, raw_nodes, current, override, message):
        entry = res.data or {}
        pending = res.open_work() - res.state.succeeded
        if res.eligible is not None and pending - res.eligible:
            by_name = {n["metadata"]["name"]: n for n in raw_nodes}
            specs = entry.get("packages") or []
            pending = {t for t in pending if t in res.eligible or t not in by_name
                       or still_to_do(res, by_name[t], specs)}
        if override is None and entry.get("held") and entry.get("held_work"):
            override, message = "waiting", entry["held"]
        return compute_status(res.name, raw_nodes, res.targets, entry.get("packages") or [], override=override,
                              message=message, generation=entry.get("generation"), current=current,
                              pending=pending, uninstalling=set(entry.get("uninstalling") or ()) & pending,
                              refused=entry.get("refused") or (),
                              conversion_warnings=entry.get("recorded_conversion_warnings") or ())
    return write
