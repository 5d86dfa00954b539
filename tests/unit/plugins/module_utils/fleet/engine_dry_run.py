# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Test fleets and policies for the engine's table tests, and the engine's waves over a
fleet where every node succeeds (the product's own dry run is ``run_builder.plan_run``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    WAVE,
    RolloutState,
    Wave,
    next_wave,
    record_wave_result,
)


def make_nodes(count, labels=None, prefix="n"):
    """Nodes n00, n01, ... created a minute apart (so batch order is by name too)."""
    nodes = []
    for i in range(count):
        node_labels = dict(labels(i) if callable(labels) else (labels or {}))
        nodes.append({"name": "%s%02d" % (prefix, i), "labels": node_labels,
                      "creationTimestamp": "2025-01-01T00:%02d:00Z" % i})
    return nodes


def policy(strategy=None, budget=None, **extra):
    default = {"budget": budget or {"percent": 100}}
    if strategy is not None:
        default["strategy"] = strategy
    spec = {"default": default}
    spec.update(extra)
    return parse_policy(spec)


@dataclass
class Plan(object):
    """The waves a policy would make if every node succeeded, and why planning stopped."""

    waves: List[Wave]
    status: str
    reason: str

    def __iter__(self):
        return iter(self.waves)

    def __len__(self):
        return len(self.waves)

    @property
    def sizes(self):
        return [len(w.nodes) for w in self.waves]

    def to_dict(self):
        return {"waves": [w.to_dict() for w in self.waves], "status": self.status, "reason": self.reason}


def plan_waves(policy, nodes, done=(), in_progress_elsewhere=(), fleet_size=None):
    """Dry run: the sequence of waves ``policy`` would make over ``nodes``, assuming every
    node succeeds and nodes in progress elsewhere stay so. Maintenance windows are not
    applied (they decide when a wave starts, not which nodes it holds)."""
    state = RolloutState(policy)
    waves = []
    while True:
        result = next_wave(state, nodes, in_progress_elsewhere, done=done, fleet_size=fleet_size,
                           ignore_windows=True)
        if result.status != WAVE:
            return Plan(waves=waves, status=result.status, reason=result.reason)
        waves.append(result.wave)
        record_wave_result(state, succeeded=result.wave.nodes)
