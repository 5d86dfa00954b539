# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The rollout strategy's result polling: the linear strategy asks for results every
millisecond while a wave's workers run. With nothing to read, the answer must not cost
anything that grows with the inventory (ansible-core's wrapper copies the state of every
host of the play before reading)."""

from __future__ import annotations

import collections
import threading

import pytest

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule

from ansible_collections.nodewright.fleet.plugins.strategy.rollout import StrategyModule

pytestmark = pytest.mark.unit


class _Iterator:
    """A play iterator that fails the test if anything reads the play's host states."""

    @property
    def host_states(self):
        raise AssertionError("the host states of the whole play were read")


def _strategy():
    strategy = StrategyModule.__new__(StrategyModule)  # no task queue manager, no results thread
    strategy._nw_fleet = None
    strategy._results = collections.deque()
    strategy._results_lock = threading.Lock()
    return strategy


def test_polling_with_no_result_back_reads_no_host_state(monkeypatch):
    calls = []
    monkeypatch.setattr(LinearStrategyModule, "_process_pending_results",
                        lambda self, iterator, one_pass=False, max_passes=None: calls.append(1) or [])
    assert _strategy()._process_pending_results(_Iterator(), max_passes=2) == []
    assert not calls


def test_a_result_back_is_processed_by_the_linear_strategy(monkeypatch):
    seen = []

    def process(self, iterator, one_pass=False, max_passes=None):
        seen.append((iterator, one_pass, max_passes))
        return [self._results.popleft()]

    monkeypatch.setattr(LinearStrategyModule, "_process_pending_results", process)
    strategy = _strategy()
    strategy._results.append("result")
    iterator = object()
    assert strategy._process_pending_results(iterator, one_pass=True, max_passes=3) == ["result"]
    assert seen == [(iterator, True, 3)]


def test_reservations_are_renewed_on_every_poll(monkeypatch):
    ticks = []

    class Active:
        def tick(self):
            ticks.append(1)

    class Fleet:
        active = Active()

    strategy = _strategy()
    strategy._nw_fleet = Fleet()
    strategy._process_pending_results(_Iterator())
    strategy._process_pending_results(_Iterator())
    assert len(ticks) == 2
