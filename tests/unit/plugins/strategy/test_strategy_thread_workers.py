# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which tasks of a rollout run in a thread of the controller instead of a forked worker:
only the maintain action, and only when nothing about the task needs a process of its own
(a loop, async, a timeout's signal alarm, delegate_to, the debugger) and its connection
runs commands as subprocesses."""

from __future__ import annotations

import pytest

from ansible.playbook.task import Task
from ansible.plugins import strategy as strategy_base

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals
from ansible_collections.nodewright.fleet.plugins.strategy import rollout

pytestmark = pytest.mark.unit


def _task(action="nodewright.fleet.maintain", **keywords):
    task = Task()
    task.action = action
    for name, value in keywords.items():
        setattr(task, {"async": "async_val"}.get(name, name), value)
    return task


LOCAL = {"ansible_connection": "local"}


def test_the_maintain_task_over_a_local_or_ssh_connection_runs_in_a_thread():
    assert core_internals.threadable(_task(), LOCAL)
    assert core_internals.threadable(_task(), {"ansible_connection": "ansible.builtin.ssh"})
    assert core_internals.threadable(_task(), {})  # the default transport, ssh


@pytest.mark.parametrize("keywords", [
    {"loop": [1, 2]},
    {"loop_with": "items"},
    {"async": 60, "poll": 5},
    {"timeout": 30},
    {"delegate_to": "other"},
    {"debugger": "on_failed"},
], ids=["loop", "with_items", "async", "timeout", "delegate_to", "debugger"])
def test_a_maintain_task_that_needs_a_process_forks(keywords):
    assert not core_internals.threadable(_task(**keywords), LOCAL)


def test_other_actions_and_connections_fork():
    assert not core_internals.threadable(_task("ansible.builtin.command"), LOCAL)
    # the node connection installs signal handlers and streams over the shared API client
    assert not core_internals.threadable(_task(), {"ansible_connection": "nodewright.fleet.node"})
    # a connection chosen by a template is not known before the task runs
    assert not core_internals.threadable(_task(), {"ansible_connection": "{{ conn }}"})
    assert not core_internals.threadable(_task(connection="nodewright.fleet.node"), {})


class _Worker(object):
    """Stands for the thread worker class in the swap."""


def test_the_worker_class_is_swapped_only_while_queueing():
    saved = strategy_base.WorkerProcess
    with core_internals.queued_in_thread(_Worker):
        assert strategy_base.WorkerProcess is _Worker
    assert strategy_base.WorkerProcess is saved
    with pytest.raises(RuntimeError):
        with core_internals.queued_in_thread(_Worker):
            raise RuntimeError("queueing failed")
    assert strategy_base.WorkerProcess is saved


def test_the_play_chooses_threads_or_processes():
    assert rollout._worker_mode(None) == "processes"
    assert rollout._worker_mode("") == "processes"
    assert rollout._worker_mode("threads") == "threads"
    assert rollout._worker_mode("processes") == "processes"
    with pytest.raises(NodeWrightError, match="nodewright_rollout_workers must be one of threads, processes, got 'fork'"):
        rollout._worker_mode("fork")
