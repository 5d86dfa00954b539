# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The engine's waves over a fleet where every node succeeds, for table tests of the
policy math (the product's own dry run is ``driver.plan_run``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    WAVE,
    RolloutState,
    Wave,
    next_wave,
    record_wave_result,
)


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
