# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A rollout run around the driver: the hooks the strategy plugin and ``nodewright rollout``
share (``RunHooks``: status at every admission, the record, the report) and the status
writer. The run is built in ``run_builder``; its settings, state, nodes and record live
beside it (``run_settings``, ``run_state``, ``run_nodes``, ``run_record``).

Nothing here imports Ansible: the strategy plugin adds only what needs the
controller's internals (running a wave as a ``linear`` pass over the admitted hosts).
"""

from __future__ import annotations


from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import Hooks
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import HALTED
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import (
    fetch_resource,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import (
    _iso,
    _names,
    _now,
    halt_message,
)


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
        plan = res.plan
        packages = plan.packages if plan is not None else []
        pending = res.open_work() - res.state.succeeded
        if res.eligible is not None and pending - res.eligible:
            by_name = {n["metadata"]["name"]: n for n in raw_nodes}
            specs = [spec.to_dict() for spec in packages]  # the package planner's input
            pending = {t for t in pending if t in res.eligible or t not in by_name
                       or still_to_do(res, by_name[t], specs)}
        if plan is None:  # a play's own policy: nothing of a resource's to add
            plan = ResourcePlan(res.name, res.policy)
        if override is None and plan.held and plan.held_work:
            override, message = "waiting", plan.held
        return compute_status(res.name, raw_nodes, res.targets, packages, override=override,
                              message=message, generation=plan.generation, current=current,
                              pending=pending, uninstalling=set(plan.uninstalling) & pending,
                              refused=plan.refused, conversion_warnings=plan.recorded_conversion_warnings,
                              live_generation=live_generation(plan))

    def live_generation(plan):
        """The resource's generation in the cluster now (a spec edited during the run leaves
        the nodes complete for the old one), or None when it cannot be read."""
        if plan.generation is None or not plan.from_cluster:
            return None
        try:
            return (fetch_resource(plan.name, auth).get("metadata") or {}).get("generation")
        except NodeWrightError:
            return None
    return write
