# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What every admission writes into a resource: the nodes done, failed and in progress,
from the markers on the nodes. Each admission reads every node of the fleet, so the work
per node must not itself grow with the fleet (a set of the fleet's size made for each
node made this cubic in the fleet's size over a rollout)."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import FleetView, NodeInfo
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import ResourceRollout
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import RunHooks

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.timezone.utc)
STATUSES = ("complete", "erroring", "in_progress", None)


class _Keeper:
    def __init__(self):
        self.saved = []

    def save(self, state, views, done=(), failed=(), in_progress=(), status=None):
        self.saved.append({"done": list(done), "failed": list(failed), "in_progress": list(in_progress),
                           "views": len(views)})


class _Counted(ResourceRollout):
    open_work_calls = 0

    def open_work(self):
        self.open_work_calls += 1
        return super(_Counted, self).open_work()


def _setup(count):
    names = ["n%05d" % i for i in range(count)]
    nodes = [NodeInfo(name=n, labels={}, created="2026-01-01T00:00:00Z", unschedulable=False, cordoned_by=None,
                      statuses={"res": STATUSES[i % 4]} if STATUSES[i % 4] else {}) for i, n in enumerate(names)]
    view = FleetView(nodes, {}, NOW)
    res = _Counted("res", parse_policy({"default": {"budget": {"percent": 100}}}), targets=names,
                   work=names[: count // 2])
    res.state.succeeded.update(names[:8])
    keeper = _Keeper()
    return names, view, res, keeper, RunHooks({}, {"res": keeper})


def test_save_reads_the_open_work_once_whatever_the_fleet_size():
    for count in (40, 4000):
        names, view, res, keeper, hooks = _setup(count)
        hooks.save(res, view, None)
        assert res.open_work_calls == 1, (count, res.open_work_calls)


def test_save_sorts_the_nodes_by_their_markers_and_this_run_s_outcomes():
    names, view, res, keeper, hooks = _setup(16)
    hooks.save(res, view, None)
    (saved,) = keeper.saved
    work = set(names[:8])  # n00000..n00007: work this run, all succeeded here
    complete_marks = [n for i, n in enumerate(names) if i % 4 == 0]
    # Marked complete and not open work here, then what this run finished itself.
    assert saved["done"] == [n for n in complete_marks if n not in work or n in res.state.succeeded] + \
        sorted(res.state.succeeded)
    assert saved["failed"] == [n for i, n in enumerate(names) if i % 4 == 1]
    assert saved["in_progress"] == [n for i, n in enumerate(names) if i % 4 == 2]
    assert saved["views"] == 16
