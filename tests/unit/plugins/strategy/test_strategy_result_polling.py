# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The rollout strategy's result polling: the linear strategy asks for results every
millisecond while a wave's workers run. Unless the task debugger can start, neither a poll
with nothing to read nor the reading of results may cost anything that grows with the
inventory (ansible-core's debugger wrapper copies the state of every host of the play
before reading)."""

from __future__ import annotations

import collections
import threading

import pytest

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule

from ansible_collections.nodewright.fleet.plugins.strategy import rollout
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
    strategy._queued_task_cache = {}
    strategy.debugger_active = False
    return strategy


class _Named:
    def __init__(self, name):
        self.name = name


class _Task:
    def __init__(self, uuid, debugger=None):
        self._uuid = uuid
        self.debugger = debugger


class _Result:
    def __init__(self, host, task):
        self.host = _Named(host)
        self.task = task


def _queue(strategy, host, task):
    strategy._queued_task_cache[(host, task._uuid)] = {"host": _Named(host), "task": task, "task_vars": {},
                                                        "play_context": None}
    strategy._results.append(_Result(host, task))


def _drain(strategy):
    out = list(strategy._results)
    strategy._results.clear()
    return out


def _read_with(monkeypatch):
    """The base method without its debugger wrapper: hands back what came in."""
    monkeypatch.setattr(rollout, "_READ_RESULTS", lambda self, iterator, one_pass=False, max_passes=None: _drain(self))


def _wrapped_with(monkeypatch, calls):
    """The base method with its debugger wrapper: records each call, hands back what came in."""
    def process(self, iterator, one_pass=False, max_passes=None):
        calls.append((iterator, one_pass, max_passes))
        return _drain(self)
    monkeypatch.setattr(LinearStrategyModule, "_process_pending_results", process)


def test_polling_with_no_result_back_reads_no_host_state(monkeypatch):
    calls = []
    monkeypatch.setattr(LinearStrategyModule, "_process_pending_results",
                        lambda self, iterator, one_pass=False, max_passes=None: calls.append(1) or [])
    assert _strategy()._process_pending_results(_Iterator(), max_passes=2) == []
    assert not calls


def test_results_are_read_without_copying_every_host_state_when_no_debugger_can_start(monkeypatch):
    calls = []
    _read_with(monkeypatch)
    _wrapped_with(monkeypatch, calls)
    strategy = _strategy()
    task = _Task("u1")
    _queue(strategy, "node-1", task)
    _queue(strategy, "node-2", task)
    results = strategy._process_pending_results(_Iterator(), max_passes=2)
    assert [r.host.name for r in results] == ["node-1", "node-2"]
    assert not calls
    assert strategy._queued_task_cache == {}  # each result's queued task is forgotten, as the wrapper does


def test_a_task_that_never_starts_the_debugger_is_read_the_short_way(monkeypatch):
    calls = []
    _read_with(monkeypatch)
    _wrapped_with(monkeypatch, calls)
    strategy = _strategy()
    _queue(strategy, "node-1", _Task("u1", debugger="never"))
    assert len(strategy._process_pending_results(_Iterator())) == 1
    assert not calls


@pytest.mark.parametrize("debugger", ["on_failed", "always", "on_unreachable", "on_skipped", "{{ dbg }}"])
def test_a_task_that_can_start_the_debugger_keeps_ansible_cores_wrapper(monkeypatch, debugger):
    calls = []
    _read_with(monkeypatch)
    _wrapped_with(monkeypatch, calls)
    strategy = _strategy()
    _queue(strategy, "node-1", _Task("u1"))
    _queue(strategy, "node-2", _Task("u2", debugger=debugger))
    iterator = object()
    assert len(strategy._process_pending_results(iterator, one_pass=True, max_passes=3)) == 2
    assert calls == [(iterator, True, 3)]


def test_the_debugger_enabled_for_every_task_keeps_ansible_cores_wrapper(monkeypatch):
    calls = []
    _read_with(monkeypatch)
    _wrapped_with(monkeypatch, calls)
    strategy = _strategy()
    strategy.debugger_active = True
    _queue(strategy, "node-1", _Task("u1"))
    strategy._process_pending_results(_Iterator())
    assert len(calls) == 1


def test_the_debugger_wrapper_is_what_ansible_core_wraps():
    """The short way reads results with the very method the debugger wrapper wraps."""
    from ansible.plugins.strategy import StrategyBase
    assert rollout._READ_RESULTS is StrategyBase._process_pending_results.__wrapped__


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
