# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one rollout driver: a wave loop over one or more NodeWright resources.

The strategy plugin ``nodewright.fleet.rollout``, ``nodewright rollout`` (the CLI,
wave by wave through ansible-runner), the reconciler (which runs ``rollout.yml``)
and ``plan.yml`` (a dry run) all drive rollouts through ``RolloutDriver``; they
differ only in the hooks that run a wave, wait, and keep state:

* **each resource under its own policy**: every resource in the run has its own
  ``RolloutState`` (batch state resumed from its status) and its own
  DeploymentPolicy;
* **priority order per node** (Skyhook's rule): a node targeted by several resources
  of the run gets them one after the other, lower ``priority`` value first; a
  resource waits on a node while a higher-priority one still has work there;
* **one wave, all resources**: the nodes each resource's engine admits run together,
  in parallel, whatever resource they belong to;
* **one admission truth**: before each wave the cluster is read once
  (``admission.FleetView``): nodes reserved by other runs, cordoned, in progress
  under any resource, or unavailable (a target of the run that is NotReady or under
  the GPU Operator's driver upgrade) count against budget ceilings, topology and
  fleet limits; an unavailable node is not admitted until it is healthy, and the
  decisions name it and say why; the wave is reserved atomically
  (``admission.ReservationRecord``) before any node of it is touched, and released
  when it ends;
* **gates and soak**: a resource whose policy has an ``alertGate`` admits no node
  while a matching alert fires (nodes in flight finish); the run re-checks every
  ``checkInterval`` and, past ``waitTimeout``, stops that resource (``halted``, exit
  status 2, nothing to reset). A compartment's ``soakTime`` holds its next batch
  back after each one; the gate is re-checked while it soaks.

``simulate()`` runs the same loop with every node succeeding and nothing written,
which is how ``plan.yml`` prints exactly the waves a rollout then makes.
"""

from __future__ import annotations

import copy
import datetime
import random
import time
from dataclasses import dataclass, field
from typing import Dict

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, name_list
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import alerts as alerts_mod
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import notify as notify_mod
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import workloads
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
    AdmissionError,
    FleetView,
    Renewer,
    list_node_infos,
    list_node_maintenances,
    node_info,
    policy_digest,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    HALTED,
    INCOMPLETE,
    WAITING,
    WAVE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    WaveDecision,
    next_wave,
    record_wave_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import STATUS_IN_PROGRESS
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

# Overall outcomes of a run, worst first.
_SEVERITY = (HALTED, INCOMPLETE, WAITING, COMPLETE)
INTERRUPTED = "interrupted"
STOPPED = "stopped"


_names = name_list


def _utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def unavailable_note(down):
    """The words for unavailable nodes (name -> why) that hold capacity and wait."""
    names = sorted(down)
    shown = "; ".join("%s: %s" % (n, down[n]) for n in names[:5])
    more = " and %d more" % (len(names) - 5) if len(names) > 5 else ""
    return ("%d node(s) unavailable, counted against the limits and not admitted until healthy (%s%s)"
            % (len(names), shown, more))


class ResourceRollout(object):
    """One NodeWright resource in a run: its policy, its targets, the nodes with work."""

    def __init__(self, name, policy, targets, work, priority=200, eligible=None, state=None, source=None,
                 plan=None, order=None):
        self.name = name
        self.order = dict(order or {})        # node -> its place in status.nodePriority (kept across runs)
        self.policy = policy
        self.targets = list(targets)          # node names, batch order
        self.work = set(work)                 # targets with something to do
        self.priority = priority
        self.eligible = set(eligible) if eligible is not None else None  # hosts this run can reach
        self.state = state if state is not None else RolloutState(policy)
        self.source = source or "DeploymentPolicy"
        self.digest = policy_digest(policy.to_dict())
        self.plan = plan                      # its plan.ResourcePlan (None: a play's own policy), for hooks
        self.decision = None
        self.gate_check = None                # the alert gate's last check (alerts.GateCheck) in this run
        self.gate_changed = False             # it opened or closed at the last admission
        self.stopped = None                   # "paused" / "disabled" since the run began
        self.waves = []                       # this resource's waves in this run

    @property
    def non_interruptible(self):
        """The resource's podNonInterruptLabels (what holds a node under ``nodeOrder: workload``)."""
        return self.plan.non_interruptible if self.plan is not None else {}

    @property
    def done(self):
        return [t for t in self.targets if t not in self.work]

    def open_work(self):
        """Nodes with work this run has not finished (neither succeeded nor failed)."""
        return self.work - self.state.succeeded - self.state.failed

    def sort_key(self):
        return (self.priority, self.name)

    def node_view(self, info):
        """The engine's view of a node, with its stable place in the batch order."""
        view = info.view()
        if info.name in self.order:
            view["nodewrightOrder"] = self.order[info.name]
        return view


@dataclass
class WaveRun(object):
    """One wave of the run: node -> resource, and each resource's engine wave."""

    number: int
    assignment: Dict[str, str]
    waves: Dict[str, object]
    reasons: Dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self):
        return list(self.assignment)

    def of(self, resource):
        return [n for n, r in self.assignment.items() if r == resource]


class Hooks(object):
    """What a driver needs from whoever runs it; override what applies."""

    def run_wave(self, wave):
        """Run ``wave`` (a WaveRun); return node -> ``ok`` | ``failed`` | ``blocked``."""
        raise NotImplementedError

    def decided(self, resources):
        """After each admission: every resource's ``decision``."""

    def wave_started(self, wave):
        pass

    def wave_done(self, wave, outcomes, results):  # results: resource -> record_wave_result()
        pass

    def view_read(self, view, raw_nodes):
        """Every admission reads the cluster; the status of each resource is written from it."""

    def wait(self, seconds, reason):
        """Sleep up to ``seconds``; return False to stop the run instead."""
        time.sleep(seconds)
        return True

    def stopped(self):
        """``(status, reason)`` when the run must end now (interrupted, stopped by the play), else None."""
        return None

    def say(self, text, level="info"):
        pass


class ClusterFleet(object):
    """Admission against a live cluster: reads nodes and the reservation record, writes
    reservations (``record`` is an ``admission.ReservationRecord``; None reads only)."""

    def __init__(self, api, record=None, threaded=True):
        self.api = api
        self.record = record
        self.threaded = threaded
        self.active = None  # the Renewer of the wave that runs now
        self.maintenance_readable = True  # False once NodeMaintenances proved absent or forbidden in this run

    def read(self):
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
        obj, holders, now = (None, {}, _utcnow())
        expired = []
        if self.record is not None:
            obj, holders, now = self.record.read()
            holders, expired = self.record.live(holders, now)
        raw = []
        for page in list_pages(self.api, "/api/v1/nodes", "list nodes for admission"):
            raw.extend(page)
        maintenance = list_node_maintenances(self.api) if self.maintenance_readable else None
        self.maintenance_readable = maintenance is not None
        view = FleetView([node_info(o, maintenance) for o in raw], holders, now, expired)
        return view, raw, obj

    def protected_pods(self, selector):
        """The pods matching the label selector text that have not ended (one LIST)."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
        query = [("labelSelector", selector), ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")]
        return [pod for page in list_pages(self.api, "/api/v1/pods", "list non-interruptible pods", query=query)
                for pod in page]

    def stopped_resources(self):
        """NodeWright resource -> ``paused`` or ``disabled``, as the cluster has them now (one LIST):
        a ``nodewright pause`` during the run stops its admissions at the next one."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import is_disabled, is_paused
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
        out = {}
        for obj in nodewright_api.list_all(self.api, nodewright_api.NODEWRIGHTS):
            name = (obj.get("metadata") or {}).get("name")
            if is_paused(obj):
                out[name] = "paused"
            elif is_disabled(obj):
                out[name] = "disabled"
        return out

    def reserve(self, obj, view, assignment, digests):
        """Add ``assignment`` to this holder's entry; False when another run wrote first."""
        if self.record is None:
            return True
        holders = dict(view.holders)
        mine = self.record.entry(holders, view.now)
        mine.nodes.update(assignment)
        mine.policies.update(digests)
        holders[self.record.holder_id] = mine
        return self.record.write(obj, holders, view.now)

    def release(self, names):
        if self.record is not None and names:
            self.record.release(names)

    def renewing(self, warn=None):
        if self.record is None:
            return _NoRenew()
        self.active = Renewer(self.record, warn=warn, threaded=self.threaded)
        return self.active


class StaticFleet(object):
    """A fleet without a cluster to ask (a play over plain hosts): nothing is ever
    disrupted by anyone else, and nothing is reserved."""

    def __init__(self, view):
        self.view = view
        self.active = None

    def read(self):
        return self.view, None, None

    def protected_pods(self, selector):
        return []

    def reserve(self, obj, view, assignment, digests):
        return True

    def release(self, names):
        pass

    def renewing(self, warn=None):
        return _NoRenew()


class _NoRenew(object):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class SimulatedFleet(object):
    """A dry run's cluster: a fixed view in which every admitted node then completes.
    ``pods``: ``selector text -> pods`` (the protected pods as planning read them), or None."""

    def __init__(self, view, pods=None):
        self.view = view
        self.pods = pods

    def read(self):
        return self.view, None, None

    def protected_pods(self, selector):
        # A node the dry run admitted has finished: its pods no longer hold it.
        done = {name for name, node in self.view.nodes.items() if "complete" in node.statuses.values()}
        return [p for p in (self.pods(selector) if self.pods else [])
                if (p.get("spec") or {}).get("nodeName") not in done]

    def reserve(self, obj, view, assignment, digests):
        # Every admitted node completes, healthy: from the next wave on it is no longer disrupted.
        for name, resource in assignment.items():
            node = self.view.nodes.get(name)
            if node is not None:
                node.statuses[resource] = "complete"
                node.unschedulable = False
                node.ready, node.ready_reason, node.lifecycle_taints = "True", "", []
        return True

    def release(self, names):
        pass

    def renewing(self, warn=None):
        return _NoRenew()


class RolloutDriver(object):
    """Runs waves until every resource is complete, halted or has to wait."""

    def __init__(self, resources, fleet, hooks=None, holder_id="", wait_for_window=True,
                 capacity_timeout=0.0, poll=10.0, now=None, gate_check=None, clock=None, notifier=None):
        self.resources = sorted(resources, key=lambda r: r.sort_key())
        self.fleet = fleet
        self.hooks = hooks or Hooks()
        self.holder_id = holder_id
        self.wait_for_window = wait_for_window
        self.capacity_timeout = capacity_timeout
        self.poll = poll
        self._now = now
        self.waves = []
        self.status = None
        self.reason = None
        self.last_view = None
        self.last_raw = None
        # Unavailable nodes count against the limits when a resource of the run targets them.
        self.watched = set()
        for res in self.resources:
            self.watched.update(res.targets)
        self.unavailable = {}   # name -> why, at the last admission (counted, not admitted)
        self._said = None
        self._told = {}
        self._gate_check = gate_check or alerts_mod.check_gate
        self._clock = clock or time.monotonic
        self._gate_closed_since = {}  # resource -> clock() when its gate closed
        self.simulating = False
        self.notifier = notifier      # notify.Notifier: started, batch, blocked, halted, complete
        self._announced = False
        self._check_same_resource()

    def _check_same_resource(self):
        names = [r.name for r in self.resources]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise NodeWrightError("resource(s) %s are listed twice in one rollout" % ", ".join(twice))

    def now(self):
        return self._now() if callable(self._now) else (self._now or _utcnow())

    # ------------------------------------------------------------------ choosing

    def _choose(self, view, stopped=None):
        """Each resource's decision over ``view``; the combined wave or None. ``stopped``:
        resources paused or disabled since the run began (they admit no node)."""
        assignment, waves, reasons = {}, {}, {}
        blocked_by_priority = {}
        checks = {}  # one GET per alert gate and admission, however many resources share it
        pods = {}  # one LIST of protected pods per selector and admission
        for res in self.resources:
            if res.decision is not None and res.decision.status == HALTED:
                continue
            if (stopped or {}).get(res.name):
                how = stopped[res.name]
                res.stopped = how
                verb = {"paused": "resume", "disabled": "enable"}[how]
                res.decision = WaveDecision(status=WAITING, reason=(
                    "%s during the run: no node is admitted; nodes already in it stop at their next step and "
                    "`nodewright %s %s` goes on from there" % (how, verb, res.name)))
                continue
            res.stopped = None
            # Priority order per node: a node waits while a resource before this one in
            # the run still has work on it (or failed there).
            earlier = [r for r in self.resources if r.sort_key() < res.sort_key()]
            held = {}
            for other in earlier:
                for name in (other.work - other.state.succeeded) & res.work:
                    held.setdefault(name, other.name)
            pickable = (res.open_work() - set(held) - set(assignment))
            if res.eligible is not None:
                pickable &= res.eligible
            busy, resumable = view.split(self.holder_id, res.name, pickable, self.watched)
            for name in assignment:
                node = view.nodes.get(name)
                busy[name] = node.labels if node is not None else {}
            targets = [res.node_view(view.nodes[t]) for t in res.targets if t in view.nodes]
            present = {t["name"] for t in targets}
            decision = next_wave(res.state, targets,
                                 in_progress_elsewhere=[{"name": n, "labels": lbl} for n, lbl in sorted(busy.items())],
                                 now=self.now(), done=[t for t in res.done if t in present],
                                 fleet_size=view.size, ignore_windows=False,
                                 resumable=resumable, eligible=pickable | set(resumable), deferred=set(held),
                                 ignore_soak=self.simulating, order_keys=self._order_keys(res, pods))
            decision = self._gate(res, decision, checks)
            if held and decision.status == COMPLETE:
                waiting = sorted(n for n in held if n in present)
                if waiting:
                    owners = sorted(set(held[n] for n in waiting))
                    decision.status = INCOMPLETE
                    decision.reason = ("%d node(s) wait for %s, which comes first on them (priority order) and "
                                       "has not finished there: %s" % (len(waiting), ", ".join(owners),
                                                                       _names(waiting)))
            self._explain_unavailable(res, decision, busy)
            blocked_by_priority[res.name] = held
            res.decision = decision
            if decision.status == WAVE:
                waves[res.name] = decision.wave
                reasons[res.name] = decision.reason
                for name in decision.wave.nodes:
                    assignment[name] = res.name
        if not assignment:
            return None
        return WaveRun(number=len(self.waves) + 1, assignment=assignment, waves=waves, reasons=reasons)

    def _order_keys(self, res, pods):
        """Under ``nodeOrder: workload``, node -> when what holds it ends (fleet/workloads.py)."""
        if res.policy.node_order != "workload":
            return None
        selector = to_selector(res.non_interruptible, "podNonInterruptLabels")
        if selector.empty:
            return {}
        text = selector.to_string()
        if text not in pods:
            pods[text] = self.fleet.protected_pods(text)
        return workloads.order_keys(workloads.occupancy(pods[text], selector))

    def _gate(self, res, decision, checks):
        """``decision`` under the resource's alert gate: checked when the engine would start a
        wave or a compartment soaks; closed, the wave is taken back (WAITING), and past the
        gate's waitTimeout the resource stops (HALTED)."""
        gate = res.policy.alert_gate
        if gate is None or self.simulating or not (decision.status == WAVE or decision.soak_until is not None):
            return decision
        if gate not in checks:
            checks[gate] = self._gate_check(gate)
        check = checks[gate]
        was_closed = res.gate_check is not None and res.gate_check.closed
        res.gate_changed = res.gate_check is None or was_closed != check.closed or (
            res.gate_check.reason != check.reason)
        res.gate_check = check
        decision.gate = check
        if not check.closed:
            self._gate_closed_since.pop(res.name, None)
            if check.error:
                decision.notes.append("alert gate: %s" % check.message)
                if res.gate_changed:
                    self.hooks.say("NodeWright rollout: %s: %s" % (res.name, check.message), "warn")
            return decision
        if decision.status == WAVE:
            # Taken back before anything was reserved: the engine has not started it.
            res.state.pending = None
            res.state.wave_number -= 1
        since = self._gate_closed_since.setdefault(res.name, self._clock())
        waited = self._clock() - since
        if waited >= gate.wait_timeout:
            return WaveDecision(status=HALTED, notes=decision.notes, gate=check, reason=(
                "alert gate closed for %s (waitTimeout %s): %s; no new node was admitted; the next run checks the "
                "gate again (nothing to reset)" % (_seconds_text(waited), _seconds_text(gate.wait_timeout),
                                                   check.message)))
        return WaveDecision(status=WAITING, notes=decision.notes, gate=check, soak_until=decision.soak_until,
                            reason="alert gate closed: %s; no new node is admitted (nodes in flight finish); the run "
                                   "checks again every %s for up to %s, then stops"
                                   % (check.message, _seconds_text(gate.check_interval),
                                      _seconds_text(gate.wait_timeout)))

    def _explain_unavailable(self, res, decision, busy):
        """Name the unavailable nodes that hold this resource's capacity, and why: in the
        decision's notes, and in its reason when no wave starts."""
        pol = res.policy
        targets = set(res.targets)
        counts_all = pol.fleet_disruption_limit is not None or pol.topology is not None
        down = {n: why for n, why in self.unavailable.items()
                if n in busy and (counts_all or n in targets)}
        if not down:
            return
        note = unavailable_note(down)
        decision.notes.append(note)
        if decision.status in (WAITING, INCOMPLETE):
            decision.reason = "%s; %s" % (decision.reason, note)

    def _tell_unavailable(self, view):
        """Say once per node (and again when its reason changes) that it is unavailable."""
        self.unavailable = view.unavailable_nodes(self.watched)
        resumed = {}
        if self.unavailable:
            for res in self.resources:
                open_work = res.open_work()
                for name in self.unavailable:
                    if name in open_work and view.nodes[name].statuses.get(res.name) == STATUS_IN_PROGRESS:
                        resumed[name] = res.name
        for name, why in sorted(self.unavailable.items()):
            if self._told.get(name) == why:
                continue
            self._told[name] = why
            if name in resumed:
                self.hooks.say("NodeWright rollout: %s is unavailable (%s); %s left it in progress and resumes it"
                               % (name, why, resumed[name]), "warn")
            else:
                # A node Ready again whose taint has yet to be lifted (one this run has just
                # rebooted, most often) is no news worth a warning.
                self.hooks.say("NodeWright rollout: %s is unavailable (%s): it counts against the limits and is not "
                               "admitted until it is healthy" % (name, why),
                               "verbose" if view.nodes[name].recovering() else "warn")
        for name in list(self._told):
            if name not in self.unavailable:
                del self._told[name]

    def _admit(self):
        """Read the cluster, choose, reserve; retried when another run reserved first."""
        for attempt in range(12):
            view, raw, obj = self.fleet.read()
            stopped = self.fleet.stopped_resources() if hasattr(self.fleet, "stopped_resources") else None
            self.last_view, self.last_raw = view, raw
            self._check_policies(view)
            self._tell_unavailable(view)
            self.hooks.view_read(view, raw)
            saved = {r.name: (copy.deepcopy(r.state.batches), r.state.wave_number, r.decision)
                     for r in self.resources}
            wave = self._choose(view, stopped)
            if wave is None:
                return None, view
            digests = {r.name: r.digest for r in self.resources if r.name in wave.waves}
            if self.fleet.reserve(obj, view, wave.assignment, digests):
                return wave, view
            for res in self.resources:  # another run wrote in between: decide again
                res.state.batches, res.state.wave_number, res.decision = saved[res.name]
                res.state.pending = None
            time.sleep(random.uniform(0.05, 0.25) * (attempt + 1))
        raise AdmissionError("could not reserve a wave: 12 attempts in a row lost to other runs",
                             hint="many runs are admitting at the same moment; rerun")

    def _check_policies(self, view):
        for res in self.resources:
            for hid, digest in view.holder_of_resource(res.name, self.holder_id):
                if digest != res.digest:
                    raise AdmissionError(
                        "NodeWright %s is being rolled out right now by another run (%s) under a different "
                        "DeploymentPolicy" % (res.name, view.holders[hid].run or hid),
                        hint="roll a resource out under one policy at a time: wait for that run to end (its "
                             "reservations expire %d s after it stops renewing them), or use the same policy"
                             % view.holders[hid].ttl)

    # ------------------------------------------------------------------ the loop

    def _notify(self, event, title, body):
        if self.notifier is not None and not self.simulating:
            self.notifier.emit(event, title, body)

    def _announce(self):
        if self._announced:
            return
        self._announced = True
        names = ", ".join(r.name for r in self.resources)
        self._notify(notify_mod.STARTED, "rollout started (%s)" % names, "\n".join(
            "%s: %d node(s) with work of %d targeted, policy %s" % (r.name, len(r.work), len(r.targets), r.source)
            for r in self.resources))

    def run(self):
        waited_since = None
        self._announce()
        while True:
            stop = self.hooks.stopped()
            if stop:
                return self._finish(*stop)
            wave, view = self._admit()
            self.hooks.decided(self.resources)
            if wave is not None:
                waited_since = None
                self._run_wave(wave)
                continue
            status, reason = self.overall()
            if status != WAITING:
                return self._finish(status, reason)
            pause = self._gate_or_soak_pause()
            if pause is not None:
                if reason != self._said:
                    self.hooks.say("%s; waiting" % reason, "warn")
                    self._said = reason
                if not self.hooks.wait(pause, reason):
                    return self._finish(INTERRUPTED, "the run was interrupted while waiting: %s" % reason)
                continue
            window = self._next_window()
            if window is not None:
                if not self.wait_for_window:
                    return self._finish(WAITING, reason)
                seconds = max(1.0, (window - self.now()).total_seconds())
                self.hooks.say("%s; waiting" % reason, "warn")
                if not self.hooks.wait(min(seconds, 30.0), reason):
                    return self._finish(INTERRUPTED, "the run was interrupted while waiting: %s" % reason)
                continue
            # Capacity held by other live runs frees up when they end their waves, and a node
            # Ready again loses the node lifecycle controller's taint within seconds: poll. What
            # only the nodes' marks or health hold (a failed node left cordoned, a NotReady
            # node) waits for a person.
            others = [h for h in view.holders if h != self.holder_id]
            recovering = view.recovering(self.watched)
            waited_since = waited_since or time.monotonic()
            if not (others or recovering) or time.monotonic() - waited_since >= self.capacity_timeout:
                return self._finish(WAITING, reason)
            self.hooks.say("%s; waiting for %s" % (reason, "capacity" if others else "the node lifecycle controller "
                                                   "to lift its taint from %s" % _names(recovering)), "warn")
            if not self.hooks.wait(self.poll, reason):
                return self._finish(INTERRUPTED, "the run was interrupted while waiting: %s" % reason)

    def _run_wave(self, wave):
        self.waves.append(wave)
        for res in self.resources:
            if res.name in wave.waves:
                res.waves.append(wave.waves[res.name])
        self.hooks.wave_started(wave)
        try:
            with self.fleet.renewing(warn=lambda text: self.hooks.say(text, "warn")):
                outcomes = self.hooks.run_wave(wave)
        except BaseException:
            # The wave's nodes keep their reservation until it expires: a node the run
            # was working on when it stopped must not be taken by another run at once.
            for res in self.resources:
                if res.name in wave.waves and res.state.pending is not None:
                    record_wave_result(res.state, failed=wave.of(res.name))
            raise
        results = {}
        for res in self.resources:
            if res.name not in wave.waves:
                continue
            mine = wave.of(res.name)
            results[res.name] = record_wave_result(
                res.state, now=self.now(),
                succeeded=[n for n in mine if outcomes.get(n) == "ok"],
                failed=[n for n in mine if outcomes.get(n) in ("failed", None)],
                blocked=[n for n in mine if outcomes.get(n) == "blocked"])
        self.hooks.wave_done(wave, outcomes, results)
        self.fleet.release(wave.nodes)
        number = len(self.waves)
        lines = []
        for res in self.resources:
            if res.name in wave.waves:
                mine = wave.of(res.name)
                counts = [sum(1 for n in mine if outcomes.get(n) == "ok"),
                          sum(1 for n in mine if outcomes.get(n) in ("failed", None)),
                          sum(1 for n in mine if outcomes.get(n) == "blocked")]
                lines.append("%s: %d ok, %d failed, %d blocked; %d of %d node(s) with work done"
                             % (res.name, counts[0], counts[1], counts[2],
                                len(res.state.succeeded & res.work), len(res.work)))
        self._notify(notify_mod.BATCH, "wave %d done (%d node(s))" % (number, len(wave.nodes)), "\n".join(lines))
        blocked = sorted(n for n in wave.nodes if outcomes.get(n) == "blocked")
        if blocked:
            self._notify(notify_mod.BLOCKED,
                         "%d node(s) blocked in wave %d: %s" % (len(blocked), number, _names(blocked)),
                         "held by non-interruptible pods: they stay cordoned, count neither way, and are picked "
                         "up by the next run once the pods end")

    def _gate_or_soak_pause(self):
        """Seconds to wait before the next admission when a resource waits only for its alert
        gate or a soak time (both end by themselves), else None."""
        pauses = []
        for res in self.resources:
            decision = res.decision
            if decision is None or decision.status != WAITING:
                continue
            if decision.gate is not None and decision.gate.closed:
                left = decision.gate.gate.wait_timeout - (self._clock() - self._gate_closed_since.get(
                    res.name, self._clock()))
                pauses.append(max(0.0, min(decision.gate.gate.check_interval, left)))
            if decision.soak_until is not None:
                pauses.append(max(0.0, (decision.soak_until - self.now()).total_seconds()))
                if res.policy.alert_gate is not None:
                    pauses.append(res.policy.alert_gate.check_interval)
        return max(0.2, min(pauses)) if pauses else None

    def _next_window(self):
        windows = [r.decision.next_window for r in self.resources
                   if r.decision is not None and r.decision.status == WAITING and r.decision.next_window]
        return min(windows) if windows else None

    def overall(self):
        """``(status, reason)`` of the run from each resource's last decision."""
        found = {}
        for res in self.resources:
            if res.decision is None:
                continue
            found.setdefault(res.decision.status, []).append(res)
        for status in _SEVERITY:
            if status in found:
                if len(self.resources) == 1:
                    return status, found[status][0].decision.reason
                return status, "; ".join("%s: %s" % (r.name, r.decision.reason)
                                         for r in self.resources if r.decision is not None)
        return COMPLETE, "nothing to do"

    def _finish(self, status, reason):
        self.status, self.reason = status, reason
        if status == HALTED:
            self._notify(notify_mod.HALTED, "rollout halted", reason)
        elif status == COMPLETE:
            self._notify(notify_mod.COMPLETE, "rollout complete", reason)
        return status, reason

    # ------------------------------------------------------------------ dry run

    def simulate(self, max_waves=10000):
        """Waves this run would make if every node succeeded; nothing is written."""
        self.simulating = True
        while len(self.waves) < max_waves:
            wave, view = self._admit()
            if wave is None:
                status, reason = self.overall()
                return self._finish(status, reason)
            self.waves.append(wave)
            for res in self.resources:
                if res.name in wave.waves:
                    res.waves.append(wave.waves[res.name])
                    record_wave_result(res.state, succeeded=wave.of(res.name))
        return self._finish(INCOMPLETE, "stopped after %d simulated waves" % max_waves)


def _seconds_text(seconds):
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join("%d%s" % (n, u) for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def simulated_view(nodes, holders=None, now=None, maintenance=None):
    """A FleetView over Node objects as the API returns them (for ``simulate()``);
    ``maintenance``: see ``admission.node_info``."""
    return FleetView([node_info(n, maintenance) for n in nodes], holders or {}, now)


def read_view(api, record=None):
    """FleetView of the cluster now (reservations included when ``record`` is given)."""
    holders, now, expired = {}, None, []
    if record is not None:
        _obj, holders, now = record.read()
        holders, expired = record.live(holders, now)
    return FleetView(list_node_infos(api), holders, now, expired)


def waves_of(driver):
    """The run's waves as plain data: ``[{number, nodes: {node: resource}, resources: {name: Wave dict}}]``."""
    return [{"number": w.number, "nodes": dict(w.assignment),
             "resources": {name: wv.to_dict() for name, wv in w.waves.items()}} for w in driver.waves]


__all__ = ["RolloutDriver", "ResourceRollout", "WaveRun", "Hooks", "ClusterFleet", "SimulatedFleet",
           "StaticFleet", "read_view", "simulated_view", "waves_of", "INTERRUPTED", "STOPPED",
           "COMPLETE", "HALTED", "INCOMPLETE", "WAITING", "WAVE"]
