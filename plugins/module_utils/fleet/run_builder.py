# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""One run, however it is started: the strategy plugin and ``nodewright rollout`` (over a
playbook under one policy, or over the NodeWright resources of a plan) build its
resources, its fleet and its driver here. The front-ends keep their arguments, their
hooks (how a wave runs: a pass of the ``linear`` strategy, or an ansible-runner run) and
their output.

- ``single_policy_run``: one policy over the given nodes (a playbook of the user's own);
  its batch state resumed from a resource's status when one is named.
- ``resources_from_desired``: every resource of a plan, each resumed from its status.
- ``admission_fleet``: the cluster the driver admits into (reservations in the admission
  Lease) or, without admission, the nodes as given.
- ``build_driver``: the driver over them, tied to the front-end's hooks.
- ``plan_run``: the same driver's dry run, for ``desired_state`` (plan.yml, the plan
  of ``rollout.yml`` and the reconciler's pass) and ``nodewright rollout --dry-run``.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
    FleetView,
    NodeInfo,
    ReservationRecord,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    ClusterFleet,
    ResourceRollout,
    RolloutDriver,
    SimulatedFleet,
    StaticFleet,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import RunPlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import RolloutRecord
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import StateKeeper
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import RolloutState


def single_policy_run(name, policy, source, nodes, play, driver_kind, state_resource=None, auth=None,
                      check_mode=False, say=None):
    """``(resources, records, keepers, view)`` of a run of ``policy`` (from ``source``, in
    words) over ``nodes`` (``run_nodes.collect_nodes`` entries: name, labels,
    creationTimestamp), every one of them with work. With ``state_resource`` the batch state
    is resumed from that resource's status and kept there; ``say(text)`` is told why a
    resumed state starts over."""
    record = RolloutRecord(play, policy, source, nodes, driver=driver_kind, resource=state_resource)
    record.labelled = True
    state, keeper = RolloutState(policy), None
    if state_resource:
        state, note, keeper = StateKeeper.resume(state_resource, policy, auth, check_mode=check_mode)
        if note:
            record.note(note)
            if say is not None:
                say(note)
    names = [n["name"] for n in nodes]
    res = ResourceRollout(name, policy, targets=names, work=list(names), state=state, source=source)
    view = FleetView([NodeInfo(name=n["name"], labels=n["labels"], created=n.get("creationTimestamp"),
                               unschedulable=False, cordoned_by=None, statuses={}) for n in nodes])
    return [res], {name: record}, {name: keeper}, view


def admission_fleet(auth, view=None, admission=True, check_mode=False, run="", ttl=None, namespace=None,
                    threaded=True):
    """What the driver admits into: with ``admission`` the cluster (each wave reserved in the
    admission Lease, renewed in a thread when ``threaded``, else from the caller's loop; a
    check-mode run reserves nothing), else the nodes of ``view`` as they are."""
    if not admission:
        return StaticFleet(view)
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_api_client
    api = get_api_client(auth)
    record = None if check_mode else ReservationRecord(api, namespace=namespace, ttl=ttl, run=run)
    return ClusterFleet(api, record, threaded=threaded)


def build_driver(resources, fleet, hooks, wait_for_window=True, capacity_timeout=0, poll=10.0, notifier=None):
    """The driver of ``resources`` over ``fleet``, holding the fleet's reservations under its
    record's holder ID, its waves run by ``hooks`` (which it is handed to)."""
    record = getattr(fleet, "record", None)
    driver = RolloutDriver(resources, fleet, hooks, holder_id=record.holder_id if record is not None else "",
                           wait_for_window=wait_for_window, capacity_timeout=capacity_timeout, poll=poll,
                           notifier=notifier)
    hooks.driver = driver
    return driver


def resources_from_desired(desired, hosts, settings, play, driver, check_mode=False, say=None):
    """``(ResourceRollout list, {name: RolloutRecord}, {name: StateKeeper})`` for the
    resources of a ``desired_state`` result; only ``hosts`` (the play's) may be picked."""
    say = say or (lambda text, level="info": None)
    rollouts, records, keepers = [], {}, {}
    hosts = set(hosts)
    for entry in RunPlan.from_dict(desired).rollouts:
        if not entry.rollable:
            continue
        name = entry.name
        policy = entry.policy.with_alert_gate(settings.alert_gate)
        source = entry.source
        state, keeper = RolloutState(policy), None
        if entry.from_cluster and entry.generation is not None:
            state, note, keeper = StateKeeper.resume(name, policy, settings.k8s_auth, check_mode=check_mode)
            if note:
                say("NodeWright rollout: %s: %s" % (name, note))
        else:
            note = None
        views = [{"name": t} for t in entry.targets]
        res = ResourceRollout(name, policy, targets=entry.targets, work=entry.work,
                              priority=entry.priority, eligible=hosts & set(entry.work),
                              state=state, source=source, plan=entry, order=entry.node_order)
        record = RolloutRecord(play, policy, source, [v for v in views if v["name"] in res.work], driver,
                               resource=name)
        if note:
            record.note(note)
        missing = sorted(set(entry.work) - hosts)
        if missing:
            record.leave_out(missing, "not in the inventory of this run")
        rollouts.append(res)
        records[name] = record
        keepers[name] = keeper
    return rollouts, records, keepers


def plan_run(resources, view, holder_id="", pods=None):
    """``(driver, status, reason)`` of a dry run over ``view`` (``pods``: see SimulatedFleet):
    the waves the run would make if every node succeeded; nothing is written."""
    driver = RolloutDriver(resources, SimulatedFleet(view, pods), holder_id=holder_id, wait_for_window=False)
    for res in driver.resources:
        res.state.pending = None
    status, reason = driver.simulate()
    return driver, status, reason
