# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Waves: the batch state of a rollout, which nodes go next, and the dry run.

Pure functions of the policy, the nodes, the state of earlier waves and the time,
so the rollout driver, ``plan.yml`` and the reconciler all make the same decisions.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError, name_list
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    field_path as _path,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    require_mapping,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    BUDGET_ONLY,
    COMPLETE,
    DEFAULT_COMPARTMENT,
    HALTED,
    INCOMPLETE,
    WAITING,
    WAVE,
    progress_percent,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import workloads
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.windows import (
    _aware,
    in_maintenance_window,
    next_maintenance_window,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import is_ignored
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import LABEL_IGNORE


def _mapping(value, where, what):
    return require_mapping(value, where, what, hint="see docs/deployment-policy.md for the shape")


# --------------------------------------------------------------------------- batch state


@dataclass
class BatchState(object):
    """Per-compartment progress, stored in the CR status as ``batchState``."""

    current_batch: int = 1
    consecutive_failures: int = 0
    completed_nodes: int = 0
    failed_nodes: int = 0
    should_stop: bool = False
    last_batch_size: int = 0
    last_batch_failed: bool = False

    _KEYS = (("current_batch", "currentBatch"), ("consecutive_failures", "consecutiveFailures"),
             ("completed_nodes", "completedNodes"), ("failed_nodes", "failedNodes"),
             ("should_stop", "shouldStop"), ("last_batch_size", "lastBatchSize"),
             ("last_batch_failed", "lastBatchFailed"))

    def to_dict(self):
        return {camel: getattr(self, attr) for attr, camel in self._KEYS}

    @classmethod
    def from_dict(cls, data, where="batchState"):
        data = data or {}
        _mapping(data, where, "batchState")
        state = cls()
        for attr, camel in cls._KEYS:
            if data.get(camel) is None:
                continue
            value = data[camel]
            wanted = bool if isinstance(getattr(state, attr), bool) else int
            if wanted is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValidationError("must be a whole number >= 0, got %r" % (value,), field=_path(where, camel),
                                      hint="reset the rollout's batch state if the status was edited by hand")
            if wanted is bool and not isinstance(value, bool):
                raise ValidationError("must be true or false, got %r" % (value,), field=_path(where, camel))
            setattr(state, attr, value)
        return state


@dataclass
class Wave(object):
    """Nodes to work on together. ``compartments`` maps compartment → its nodes in this
    wave; ``totals`` the compartment sizes when the wave was chosen."""

    number: int
    nodes: List[str]
    compartments: Dict[str, List[str]]
    totals: Dict[str, int]

    def to_dict(self):
        return {"number": self.number, "nodes": list(self.nodes),
                "compartments": {k: list(v) for k, v in self.compartments.items()},
                "totals": dict(self.totals)}

    @classmethod
    def from_dict(cls, data):
        return cls(number=int(data["number"]), nodes=list(data["nodes"]),
                   compartments={k: list(v) for k, v in data["compartments"].items()},
                   totals={k: int(v) for k, v in data.get("totals", {}).items()})


class RolloutState(object):
    """Everything the engine remembers between waves of one NodeWright resource.

    ``batches`` is persisted in the CR status (``compartmentStatuses[*].batchState``);
    the node sets record this rollout's outcomes: a failed node is not picked again,
    a blocked node waits for ``retry_blocked()``.
    """

    def __init__(self, policy, batches=None, succeeded=(), failed=(), blocked=(), wave_number=0,
                 pending=None, version=None, soak_until=None):
        self.policy = policy
        self.batches = dict(batches or {})
        self.succeeded = set(succeeded)
        self.failed = set(failed)
        self.blocked = set(blocked)
        self.wave_number = wave_number
        self.pending = pending
        self.version = version
        # compartment -> when its soakTime after its last batch ends (this run only: a new
        # run does not soak what an earlier one finished)
        self.soak_until = dict(soak_until or {})
        # node -> batches that took nodes behind it in creation order while it waited for its
        # protected pods (``nodeOrder: workload``; this run only)
        self.deferrals = {}

    def batch(self, compartment):
        if compartment not in self.batches:
            self.batches[compartment] = BatchState()
        return self.batches[compartment]

    def reset_batches(self):
        """Start every compartment again from batch 1 (Skyhook's batch-state reset)."""
        self.batches = {}

    def to_dict(self):
        return {"version": self.version, "waveNumber": self.wave_number,
                "succeeded": sorted(self.succeeded), "failed": sorted(self.failed),
                "blocked": sorted(self.blocked),
                "pendingWave": self.pending.to_dict() if self.pending is not None else None,
                "batchStates": {name: b.to_dict() for name, b in sorted(self.batches.items())}}

    @classmethod
    def from_dict(cls, policy, data):
        data = data or {}
        pending = data.get("pendingWave")
        if pending:
            try:
                pending = Wave.from_dict(pending)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ValidationError("the recorded pending wave is malformed", field="rolloutState.pendingWave",
                                      hint="reset the rollout state of this resource, then rerun")
        return cls(policy,
                   batches={name: BatchState.from_dict(b, "batchStates.%s" % name)
                            for name, b in (data.get("batchStates") or {}).items()},
                   succeeded=data.get("succeeded") or (), failed=data.get("failed") or (),
                   blocked=data.get("blocked") or (), wave_number=int(data.get("waveNumber") or 0),
                   pending=pending or None, version=data.get("version"))


# --------------------------------------------------------------------------- nodes


class _Node(object):
    __slots__ = ("name", "labels", "created", "sticky")

    def __init__(self, name, labels, created, sticky=None):
        self.name = name
        self.labels = labels
        self.created = created
        self.sticky = sticky

    def sort_key(self):
        # Nodes a resource already gave work keep their place (its status.nodePriority,
        # in that order); then oldest first; nodes without a creation time go last; then
        # by name.
        if self.sticky is not None:
            return (0, False, self.sticky, self.name)
        return (1, self.created is None, self.created or _EPOCH, self.name)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _parse_timestamp(value, where):
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return _aware(value)
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            return _aware(datetime.datetime.fromisoformat(text))
        except ValueError:
            pass
    raise ValidationError("creationTimestamp %r is not an RFC 3339 time" % (value,), field=where,
                          hint="pass the node's metadata.creationTimestamp as the API returns it")


def _node_view(node, where):
    if isinstance(node, _Node):
        return node
    if isinstance(node, str):
        return _Node(node, {}, None)
    if not isinstance(node, dict):
        raise ValidationError("a node must be a mapping or a name, got %s" % type(node).__name__, field=where)
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else node
    name = meta.get("name")
    if not name or not isinstance(name, str):
        raise ValidationError("a node needs a name", field=where)
    labels = meta.get("labels") or {}
    sticky = node.get("nodewrightOrder")  # the node's place in status.nodePriority
    return _Node(name, labels, _parse_timestamp(meta.get("creationTimestamp"), where),
                 _parse_timestamp(sticky, where) if sticky else None)


def order_nodes(nodes, sticky=None):
    """Node names in batch order: those in ``sticky`` (a resource's
    ``status.nodePriority``: name -> when it first had work) first, in that order, so
    a batch keeps its nodes across runs; then oldest creationTimestamp first; then by
    name. A node joining later never reshuffles the nodes already under way."""
    sticky = sticky or {}
    views = []
    for i, n in enumerate(nodes):
        name = (n.get("name") or (n.get("metadata") or {}).get("name")) if isinstance(n, dict) else None
        if isinstance(n, dict) and name in sticky and "nodewrightOrder" not in n:
            n = dict(n, nodewrightOrder=sticky[name])
        views.append(_node_view(n, "nodes[%d]" % i))
    return [v.name for v in sorted(views, key=_Node.sort_key)]


def _views(nodes):
    views = []
    ignored = []
    seen = set()
    for i, node in enumerate(nodes):
        view = _node_view(node, "nodes[%d]" % i)
        if view.name in seen:
            raise ValidationError("node %r is listed twice" % view.name, field="nodes[%d]" % i)
        seen.add(view.name)
        (ignored if is_ignored(view.labels) else views).append(view)
    views.sort(key=_Node.sort_key)
    return views, sorted(v.name for v in ignored)


def _assign(policy, views):
    """compartment name → member views (batch order), and the ceilings used for the tie-break."""
    matches = {c.name: [v for v in views if c.selector.matches(v.labels)] for c in policy.compartments}
    ceilings = {c.name: c.budget.ceiling(len(matches[c.name])) for c in policy.compartments}
    members = {c.name: [] for c in policy.all_compartments}
    for view in views:
        candidates = [c for c in policy.compartments if c.selector.matches(view.labels)]
        if not candidates:
            members[DEFAULT_COMPARTMENT].append(view)
            continue
        best = min(candidates, key=lambda c: (c.effective_strategy.rank, ceilings[c.name], c.name))
        members[best.name].append(view)
    ceilings = {c.name: c.budget.ceiling(len(members[c.name])) for c in policy.all_compartments}
    return members, ceilings


def assign_nodes(policy, nodes):
    """compartment name → node names in batch order; ignored nodes are left out.

    A node matching several compartments goes to the safest strategy (fixed, then
    linear, then exponential), then the smaller ceiling, then the name; a node that
    matches none goes to ``__default__``.
    """
    views, _ignored = _views(nodes)
    members, _ceilings = _assign(policy, views)
    return {name: [v.name for v in vs] for name, vs in members.items()}


# --------------------------------------------------------------------------- waves


@dataclass
class WaveDecision(object):
    """What ``next_wave`` decided. ``status`` is one of WAVE, COMPLETE, INCOMPLETE,
    HALTED, WAITING; ``reason`` says why in words for the operator."""

    status: str
    reason: str
    wave: Optional[Wave] = None
    notes: List[str] = field(default_factory=list)
    halted: Dict[str, int] = field(default_factory=dict)
    next_window: Optional[datetime.datetime] = None
    soak_until: Optional[datetime.datetime] = None  # WAITING only for a soakTime: when it ends
    gate: Optional[object] = None                   # the alert gate's check (an alerts.GateCheck), when checked

    def to_dict(self):
        out = {"status": self.status, "reason": self.reason,
               "wave": self.wave.to_dict() if self.wave is not None else None,
               "notes": list(self.notes), "halted": dict(self.halted),
               "nextWindow": self.next_window.isoformat() if self.next_window else None}
        if self.soak_until is not None:
            out["soakUntil"] = self.soak_until.isoformat()
        if self.gate is not None:
            out["alertGate"] = self.gate.to_dict()
        return out


def _names(items, limit=5):
    return name_list(sorted(items), limit)


def _elsewhere(in_progress_elsewhere, by_name):
    """name → labels of nodes other NodeWright resources have in progress."""
    result = {}
    for i, item in enumerate(in_progress_elsewhere or ()):
        view = _node_view(item, "in_progress_elsewhere[%d]" % i)
        labels = view.labels or (by_name[view.name].labels if view.name in by_name else {})
        result[view.name] = labels
    return result


def _halt_reason(name, batch, strategy, total):
    label = "default compartment" if name == DEFAULT_COMPARTMENT else "compartment %r" % name
    return ("%s halted after %d consecutive failed batch(es) (failureThreshold %s, progress %d%% below "
            "safetyLimit %d%%)" % (label, batch.consecutive_failures, strategy.failure_threshold,
                                   progress_percent(batch, total), strategy.safety_limit))


def next_wave(state, nodes, in_progress_elsewhere=(), now=None, done=(), fleet_size=None,
              ignore_windows=False, resumable=(), eligible=None, deferred=(), ignore_soak=False,
              order_keys=None):
    """Choose the next wave, or say why none may start.

    ``nodes``: the resource's nodes (mappings with name, labels, creationTimestamp, or
    Node objects as the API returns them). ``in_progress_elsewhere``: disrupted nodes
    this wave may not take - in progress under another NodeWright resource or another
    run, cordoned, reserved, unavailable (names, or mappings with labels so that topology limits
    can count them). ``resumable``: names of this resource's nodes that are already
    disrupted (left in progress by an earlier run, cordoned by someone else) and that
    the wave may take; they count against every limit whether taken or not, and are
    taken first. ``done``: nodes already complete before this run. ``eligible``: when
    given, only these nodes may be picked (the hosts this run can reach); the others
    are left to other runs. ``deferred``: nodes that wait for something else in the
    same run (a resource that comes first on them); neither picked nor counted as held.
    ``now``: for maintenance windows and soak times (default: the current
    time; naive = UTC); a compartment whose ``soakTime`` after its last batch has not
    passed takes no node (``ignore_soak`` for a dry run). ``fleet_size``: the node count a percent
    ``fleetDisruptionLimit`` is taken of (default: every node passed in). ``order_keys``:
    with ``nodeOrder: workload``, node -> ``workloads.Occupancy.sort_key()`` of the nodes
    protected pods hold (the others are free and go first; ``workloads``).

    The chosen wave is remembered in ``state``; report its outcome with
    ``record_wave_result`` before asking for the next.
    """
    policy = state.policy
    if state.pending is not None:
        raise NodeWrightError("wave %d has no recorded result yet" % state.pending.number,
                              hint="call record_wave_result() with the outcome of its nodes first")
    views, ignored = _views(nodes)
    by_name = {v.name: v for v in views}
    elsewhere = _elsewhere(in_progress_elsewhere, by_name)
    members, ceilings = _assign(policy, views)
    finished = set(done) | state.succeeded
    resume = {name for name in resumable if name in by_name and name not in elsewhere and name not in finished}
    deferred = set(deferred)
    reachable = (lambda name: True) if eligible is None else (lambda name, _e=set(eligible): name in _e)
    notes = []
    if ignored:
        notes.append("%d node(s) skipped: labelled %s=true (%s)" % (len(ignored), LABEL_IGNORE, _names(ignored)))

    candidates = {}
    halted = {}
    halted_reasons = []
    elsewhere_runs = []
    for comp in policy.all_compartments:
        group = members[comp.name]
        if not group:
            continue
        batch = state.batch(comp.name)
        # Counts come from the nodes themselves, so nodes finished before this run count
        # towards progress exactly as they do in Skyhook.
        batch.completed_nodes = sum(1 for v in group if v.name in finished)
        batch.failed_nodes = sum(1 for v in group if v.name in state.failed)
        open_nodes = [v for v in group if v.name not in finished and v.name not in state.failed
                      and v.name not in state.blocked and v.name not in elsewhere and v.name not in deferred]
        pickable = [v for v in open_nodes if reachable(v.name)]
        elsewhere_runs.extend(v.name for v in open_nodes if not reachable(v.name))
        if batch.should_stop and any(v.name not in finished for v in group):
            halted[comp.name] = batch.consecutive_failures
            halted_reasons.append(_halt_reason(comp.name, batch, comp.effective_strategy, len(group)))
            continue
        if pickable:
            # Nodes already disrupted are finished first.
            pickable.sort(key=lambda v: v.name not in resume)
            if order_keys is not None:
                pickable.sort(key=lambda v: _workload_rank(v, resume, order_keys, state.deferrals))
            candidates[comp.name] = pickable

    def decision(status, reason, **extra):
        return WaveDecision(status=status, reason=reason, notes=notes + halted_reasons, halted=halted, **extra)

    if not candidates:
        if halted:
            failed_here = state.failed & set(by_name)
            return decision(HALTED, "; ".join(halted_reasons) + "; fix the failed nodes%s, then reset the "
                            "rollout's batch state to resume (nodewright reset-batches NAME, or any change of the "
                            "resource's spec)" % ((" (%s)" % _names(failed_here)) if failed_here else ""))
        held = [v.name for v in views if v.name in elsewhere and v.name not in finished
                and v.name not in state.failed and v.name not in deferred]
        if held:
            return decision(WAITING, "%d node(s) are in progress under other NodeWright resources (%s) (or reserved by "
                            "another run, cordoned, or unavailable); wait for them to finish" % (len(held), _names(held)))
        failed = [v.name for v in views if v.name in state.failed]
        blocked = [v.name for v in views if v.name in state.blocked and v.name not in finished]
        others = sorted(set(elsewhere_runs))
        if not failed and not blocked:
            if others:
                return decision(COMPLETE, "every node this run can reach is complete; %d node(s) are left to "
                                "other runs (%s)" % (len(others), _names(others)))
            if policy.reset_batch_state_on_completion:
                state.reset_batches()
            return decision(COMPLETE, "all %d node(s) are complete" % len(views))
        parts = ["%d complete" % sum(1 for v in views if v.name in finished)]
        if failed:
            parts.append("%d failed (%s)" % (len(failed), _names(failed)))
        if blocked:
            parts.append("%d blocked by non-interruptible pods (%s)" % (len(blocked), _names(blocked)))
        if others:
            parts.append("%d left to other runs (%s)" % (len(others), _names(others)))
        return decision(INCOMPLETE, "nothing left to try in this run: %s; fix or reset the failed nodes "
                        "and rerun to retry them" % ", ".join(parts))

    moment = _aware(now if now is not None else datetime.datetime.now(datetime.timezone.utc))
    if policy.maintenance_windows and not ignore_windows:
        if not in_maintenance_window(policy.maintenance_windows, moment):
            upcoming = next_maintenance_window(policy.maintenance_windows, moment)
            return decision(WAITING, "outside every maintenance window (%s); the next opens at %s"
                            % ("; ".join(w.describe() for w in policy.maintenance_windows),
                               upcoming.isoformat() if upcoming else "never"),
                            next_window=upcoming)

    # Disrupted nodes of this resource count against every limit from the start.
    disrupted = dict(elsewhere)
    for name in resume:
        disrupted[name] = by_name[name].labels

    fleet_room = None
    if policy.fleet_disruption_limit is not None:
        size = fleet_size if fleet_size is not None else len(set(by_name) | set(ignored) | set(elsewhere))
        limit = policy.fleet_disruption_limit.ceiling(size)
        busy = len(disrupted)
        fleet_room = limit - busy
        if fleet_room <= 0 and not resume:
            return decision(WAITING, "fleet disruption limit reached: %d node(s) in progress, cordoned, reserved or "
                            "unavailable (%s), limit %d (%s of %d)"
                            % (busy, _names(disrupted), limit, policy.fleet_disruption_limit.describe(), size))

    topo_busy = {}
    topology = policy.topology
    if topology is not None:
        for labels in disrupted.values():
            value = labels.get(topology.key)
            if value is not None:
                topo_busy[value] = topo_busy.get(value, 0) + 1

    picks = {}
    waits = []
    soaking = []
    for comp in policy.all_compartments:
        if comp.name not in candidates:
            continue
        group = members[comp.name]
        label = "default compartment" if comp.name == DEFAULT_COMPARTMENT else "compartment %r" % comp.name
        until = state.soak_until.get(comp.name)
        if until is not None and not ignore_soak and moment < until:
            soaking.append(until)
            waits.append("%s: soaking until %s (soakTime %s after its last batch)"
                         % (label, until.isoformat(timespec="seconds"), _duration(comp.soak_time)))
            continue
        pickable = candidates[comp.name]
        batch = state.batch(comp.name)
        wanted = comp.effective_strategy.next_batch_size(len(group), len(pickable), batch)
        # The ceiling caps every node in progress in the compartment, whoever works on it.
        room = ceilings[comp.name] - sum(1 for v in group if v.name in disrupted)
        resumed = [v.name for v in pickable if v.name in resume][:wanted]
        if room <= 0 and not resumed:
            waits.append("%s: ceiling %d reached by nodes in progress elsewhere" % (label, ceilings[comp.name]))
            continue
        size = min(wanted, len(resumed) + max(0, room))
        if size < wanted:
            notes.append("%s: batch of %d capped to %d by its ceiling (%s of %d nodes)"
                         % (label, wanted, size, comp.budget.describe(), len(group)))
        chosen = list(resumed)
        topology_skips = 0
        fleet_full = False
        for view in pickable:
            if len(chosen) >= size:
                break
            if view.name in resume:
                continue
            if fleet_room is not None and fleet_room <= 0:
                fleet_full = True
                break
            value = view.labels.get(topology.key) if topology is not None else None
            if value is not None and topo_busy.get(value, 0) >= topology.max_in_progress:
                topology_skips += 1
                continue
            chosen.append(view.name)
            if value is not None:
                topo_busy[value] = topo_busy.get(value, 0) + 1
            if fleet_room is not None:
                fleet_room -= 1
        if fleet_full:
            waits.append("%s: fleet disruption limit reached" % label)
        if topology_skips and len(chosen) < size:
            waits.append("%s: %d node(s) held back, %s already has %d node(s) in progress in their %s"
                         % (label, topology_skips, topology.key, topology.max_in_progress,
                            "group" if topology.max_in_progress == 1 else "groups"))
        if chosen:
            picks[comp.name] = chosen
            if order_keys is not None:
                _note_deferrals(state, group, pickable, chosen, order_keys, label, notes)

    notes.extend(waits)
    if not picks:
        return decision(WAITING, "no node may start now: " + "; ".join(waits),
                        soak_until=min(soaking) if soaking else None)

    state.wave_number += 1
    wave = Wave(number=state.wave_number,
                nodes=[name for comp in policy.all_compartments for name in picks.get(comp.name, ())],
                compartments=picks,
                totals={name: len(members[name]) for name in picks})
    state.pending = wave
    return decision(WAVE, "wave %d: %d node(s) from %s" % (wave.number, len(wave.nodes), ", ".join(
        "%s (%d)" % (name, len(names)) for name, names in picks.items())), wave=wave)


def _workload_rank(view, resume, order_keys, deferrals):
    """Sort key of a pickable node under ``nodeOrder: workload`` (a stable sort keeps the
    creation order among equals): disrupted nodes, nodes with a place in the resource's
    nodePriority and nodes passed over too often first, then free nodes, then by when
    their protected pods end."""
    if view.name in resume:
        return (0, workloads.FREE_KEY)
    if view.sticky is not None or deferrals.get(view.name, 0) >= workloads.MAX_DEFERRALS:
        return (1, workloads.FREE_KEY)
    return (2, order_keys.get(view.name, workloads.FREE_KEY))


def _note_deferrals(state, group, pickable, chosen, order_keys, label, notes):
    """Count a batch against each held node it passed over for a newer one, and say so."""
    position = {v.name: i for i, v in enumerate(group)}
    taken = set(chosen)
    newest = max(position[name] for name in chosen)
    passed = [v.name for v in pickable if v.name not in taken and position[v.name] < newest
              and v.name in order_keys]
    for name in passed:
        state.deferrals[name] = state.deferrals.get(name, 0) + 1
    if passed:
        notes.append("%s: %d node(s) still running protected pods left for later (nodeOrder: workload): %s"
                     % (label, len(passed), _names(passed)))


def _duration(seconds):
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join("%d%s" % (n, u) for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def record_wave_result(state, succeeded=(), failed=(), blocked=(), now=None):
    """Record the outcome of the pending wave and update each compartment's batch state.

    ``blocked``: nodes that could not start (non-interruptible pods past their
    deadline); they count neither way. A node of the wave reported in no list counts
    as failed: losing track of a node is not a success. A compartment with a ``soakTime``
    soaks from ``now`` (default: the current time). Returns compartment →
    {succeeded, failed, blocked, successPercent, batchFailed, shouldStop, evaluated}.
    """
    wave = state.pending
    if wave is None:
        raise NodeWrightError("there is no wave in progress to record a result for",
                              hint="call next_wave() first and record the nodes it returned")
    succeeded, failed, blocked = set(succeeded), set(failed), set(blocked)
    for one, other, what in ((succeeded, failed, "succeeded and failed"),
                             (succeeded, blocked, "succeeded and blocked"),
                             (failed, blocked, "failed and blocked")):
        both = one & other
        if both:
            raise NodeWrightError("node(s) %s reported as both %s" % (_names(both), what),
                                  hint="report each node of the wave exactly once")
    members = set(wave.nodes)
    strangers = (succeeded | failed | blocked) - members
    if strangers:
        raise NodeWrightError("node(s) %s are not in wave %d" % (_names(strangers), wave.number),
                              hint="report only the nodes next_wave() returned for this wave")
    failed |= members - succeeded - failed - blocked

    outcome = {}
    for name, nodes in wave.compartments.items():
        comp = state.policy.compartment(name)
        strategy = comp.effective_strategy if comp is not None else BUDGET_ONLY
        ok = sum(1 for n in nodes if n in succeeded)
        bad = sum(1 for n in nodes if n in failed)
        stuck = sum(1 for n in nodes if n in blocked)
        result = strategy.record_batch(state.batch(name), ok, bad, wave.totals.get(name, len(nodes)))
        result.update({"succeeded": ok, "failed": bad, "blocked": stuck})
        if comp is not None and comp.soak_time:
            moment = _aware(now if now is not None else datetime.datetime.now(datetime.timezone.utc))
            state.soak_until[name] = moment + datetime.timedelta(seconds=comp.soak_time)
            result["soakUntil"] = state.soak_until[name].isoformat(timespec="seconds")
        outcome[name] = result
    state.succeeded |= succeeded
    state.failed |= failed
    state.blocked |= blocked
    state.pending = None
    return outcome


def compartment_statuses(state, nodes, done=(), in_progress=()):
    """compartment → status block for the CR (``compartmentStatuses``): matched, ceiling,
    inProgress, completed, progressPercent, batchState."""
    views, _ignored = _views(nodes)
    members, ceilings = _assign(state.policy, views)
    finished = set(done) | state.succeeded
    busy = set(in_progress) | (set(state.pending.nodes) if state.pending is not None else set())
    result = {}
    for comp in state.policy.all_compartments:
        group = members[comp.name]
        if not group and comp.name not in state.batches:
            continue
        completed = sum(1 for v in group if v.name in finished)
        failed = sum(1 for v in group if v.name in state.failed)
        total = len(group)
        result[comp.name] = {
            "matched": total,
            "ceiling": ceilings[comp.name],
            "inProgress": sum(1 for v in group if v.name in busy),
            "completed": completed,
            "progressPercent": (completed + failed) * 100 // total if total else 0,
            "batchState": state.batch(comp.name).to_dict(),
        }
    return result
