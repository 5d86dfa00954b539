# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A rollout run's record for the report (``RolloutRecord``: decisions, waves, outcomes), the
facts each admitted host gets (``wave_facts``) and the words a halted run ends with."""

from __future__ import annotations

import datetime

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import name_list
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    compartment_statuses,
    order_nodes,
)


_names = name_list


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
