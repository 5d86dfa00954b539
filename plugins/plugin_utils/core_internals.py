# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Everything the collection uses of ansible-core beyond its plugin API, in one place.

ansible-core's strategy and executor internals change in every minor release (2.19 moved
task results and templating to ``ansible._internal``; 2.21 replaced ``_RawTaskResult`` and
the ``TaskExecutor`` signature). The rollout strategy keeps to what ``StrategyBase`` and
the ``linear`` strategy offer to subclasses; the two fast paths that reach further live
here, each behind an explicit check of the running version:

* ``read_results_without_debugger_copy``: ``StrategyBase._process_pending_results`` without
  the task debugger's wrapper, which copies the state of every host of the play on each
  call (the wrapper is ``functools.wraps``-decorated on every supported version; without
  ``__wrapped__`` the strategy calls the wrapped method as usual).
* thread workers (``nodewright_rollout_workers=threads``): the maintain task run by
  ansible-core's own ``TaskExecutor`` in a thread of the controller instead of a forked
  worker. Its internals (``_task.TaskContext``, ``_RawTaskResult``, the executor's
  signature) are those of 2.19 and 2.20 only; on any other version the rollout forks
  workers as ``linear`` does, and says so once.

Nothing here imports an internal module when the plugin loads: a version this module does
not know still loads the strategy, runs every task through the public path, and prints one
warning naming the version. ``tests/unit/plugins/plugin_utils/test_core_internals.py`` fails,
naming the version, on an ansible-core release not in ``SUPPORTED``.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading

from ansible import constants as C
from ansible.release import __version__ as CORE_VERSION

# ansible-core minor -> the release the collection's CI runs on it (docs/compatibility.md).
SUPPORTED = {
    (2, 16): "2.16.19",
    (2, 17): "2.17.14",
    (2, 18): "2.18.19",
    (2, 19): "2.19.14",
    (2, 20): "2.20.10",
    (2, 21): "2.21.5",
}
# Minors whose worker plumbing the thread workers are written against.
THREAD_WORKER_MINORS = frozenset(((2, 19), (2, 20)))

WORKERS_THREADS = "threads"
WORKERS_PROCESSES = "processes"
WORKER_MODES = (WORKERS_THREADS, WORKERS_PROCESSES)

THREAD_ACTIONS = frozenset(("nodewright.fleet.maintain",))
THREAD_CONNECTIONS = frozenset(("local", "ansible.builtin.local", "ansible.legacy.local",
                                "ssh", "ansible.builtin.ssh", "ansible.legacy.ssh"))


def core_minor(version=CORE_VERSION):
    """``(major, minor)`` of an ansible-core version string such as ``2.19.14`` or ``2.21.0rc1``."""
    parts = []
    for piece in str(version).split(".")[:2]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts)


def known(version=CORE_VERSION):
    """Whether ``version`` is an ansible-core minor the collection is tested on."""
    return core_minor(version) in SUPPORTED


def unknown_version_warning(version=CORE_VERSION):
    """One line for a run on an ansible-core the collection was not tested on, else None."""
    if known(version):
        return None
    tested = ", ".join("%d.%d" % minor for minor in sorted(SUPPORTED))
    return ("nodewright.fleet: ansible-core %s is not one the collection was tested on (%s); the rollout runs "
            "every task through ansible-core's public worker path" % (version, tested))


def thread_workers_unavailable(version=CORE_VERSION):
    """Why thread workers cannot run on ``version`` (one line), or None when they can."""
    if core_minor(version) in THREAD_WORKER_MINORS:
        return None
    return ("nodewright_rollout_workers=threads needs ansible-core %s; on ansible-core %s every task runs in a "
            "forked worker, as with processes" % (" or ".join("%d.%d" % m for m in sorted(THREAD_WORKER_MINORS)),
                                                  version))


# ---------------------------------------------------------------------- the play, wave by wave
# The strategy runs the play's tasks once per wave through the linear strategy: it starts the
# play iterator's task list over, ends the play, and reads what the task queue manager kept.
# These are fields of PlayIterator and TaskQueueManager, not arguments of a plugin API.

def play_of(iterator):
    """The play a PlayIterator runs."""
    return iterator._play


def play_tasks(iterator):
    """The play's task list as the iterator holds it (a copy)."""
    return list(iterator.all_tasks)


def replay_tasks(iterator, tasks):
    """Start the play's tasks over (``tasks``, as ``play_tasks`` gave them) for the next wave."""
    iterator.all_tasks[:] = tasks
    iterator.cur_task = 0


def end_play(iterator):
    """End the play: a later play still runs."""
    iterator.end_play = True


def play_ended(iterator):
    """Whether a task (``meta: end_play``) or the strategy ended the play."""
    return bool(iterator.end_play)


def terminated(tqm):
    """Whether the run was interrupted (Ctrl-C, a signal)."""
    return bool(tqm._terminated)


def unreachable_hosts(tqm):
    """Names of the hosts that became unreachable in this run."""
    return tqm._unreachable_hosts


def run_stats(tqm):
    """The run's AggregateStats (``set_custom_stats`` publishes what the report reads)."""
    return tqm._stats


def custom_stats(tqm):
    """The run's custom stats (``set_stats``), per host and ``_run``."""
    return getattr(tqm._stats, "custom", None) or {}


# ---------------------------------------------------------------------- results

def read_results_without_debugger_copy(strategy_base):
    """``_process_pending_results`` of ``strategy_base`` without the task debugger's wrapper,
    or None where the wrapper does not expose it."""
    return getattr(strategy_base._process_pending_results, "__wrapped__", None)


def result_key(result):
    """``(host name, task uuid)`` of a queued task's result, as the strategy's
    ``_queued_task_cache`` keys it (``host``/``task`` from 2.19, ``_host``/``_task`` before)."""
    host = getattr(result, "host", None) or result._host
    task = getattr(result, "task", None) or result._task
    return host.name, task._uuid


def callback_result(result):
    """``(host, task, result dict)`` of the task result a callback receives: ``host``, ``task``
    and ``result`` from 2.19 (whose ``_host``/``_task``/``_result`` are marked for deprecation
    in 2.23), ``_host``, ``_task`` and ``_result`` before."""
    host = getattr(result, "host", None) or result._host
    task = getattr(result, "task", None) or result._task
    data = result.result if hasattr(type(result), "result") else result._result
    return host, task, data if isinstance(data, dict) else {}


# ---------------------------------------------------------------------- thread workers

def _plain(value):
    """``value`` when it is a plain string (no template to resolve), else None."""
    if isinstance(value, str) and "{{" not in value and "{%" not in value:
        return value
    return None


def threadable(task, task_vars):
    """Whether ``task`` may run in a thread of the controller for a host with ``task_vars``:
    the maintain action, without a loop, ``async``, ``timeout`` (a signal alarm, main thread
    only), ``delegate_to`` or a debugger, over a connection whose plugin runs commands as
    subprocesses (``local``, ``ssh``)."""
    action = getattr(task, "resolved_action", None) or task.action
    if action not in THREAD_ACTIONS and task.action not in THREAD_ACTIONS:
        return False
    if task.loop or task.loop_with or task.async_val or task.timeout or task.delegate_to:
        return False
    if getattr(task, "debugger", None) not in (None, "", "never"):
        return False
    connection = task_vars.get("ansible_connection", None)
    if connection is None:
        connection = task.connection or C.DEFAULT_TRANSPORT
    return _plain(connection) in THREAD_CONNECTIONS


_THREAD_WORKER = []


def thread_worker_class(version=CORE_VERSION):
    """The ``ThreadWorker`` class for this ansible-core, or None where thread workers cannot run
    (``thread_workers_unavailable`` says why). Built on first use, never at plugin load."""
    if thread_workers_unavailable(version) is not None:
        return None
    if not _THREAD_WORKER:
        try:
            _THREAD_WORKER.append(_build_thread_worker())
        except ImportError:  # a patch release that moved an internal: fork as linear does
            _THREAD_WORKER.append(None)
    return _THREAD_WORKER[0]


@contextlib.contextmanager
def queued_in_thread(worker_class):
    """While this is open, ``StrategyBase._queue_task`` starts a ``worker_class`` instead of a
    forked ``WorkerProcess`` (the strategy module looks the name up at each call)."""
    from ansible.plugins import strategy as strategy_module
    saved = strategy_module.WorkerProcess
    strategy_module.WorkerProcess = worker_class
    try:
        yield
    finally:
        strategy_module.WorkerProcess = saved


def _build_thread_worker():
    # The worker plumbing of ansible-core 2.19 and 2.20 (ansible/executor/process/worker.py).
    from ansible._internal import _task
    from ansible._internal._errors import _error_utils
    from ansible.errors import AnsibleError
    from ansible.executor.task_executor import TaskExecutor
    from ansible.executor.task_result import _RawTaskResult

    class ThreadWorker(object):
        """One task for one host, run by ``TaskExecutor`` in a daemon thread.

        It has what the strategy and the task queue manager use of a ``WorkerProcess``
        (``start``, ``is_alive``, ``close``, ``terminate``, ``pid``, ``exitcode``,
        ``worker_queue``), runs the same ``TaskExecutor`` on the same inputs with its own copy
        of the task and of the loader (the executor writes to both), and sends the result
        through the same queue, pickled, as a worker does: the strategy, the callbacks and the
        run report see no difference. At most ``forks`` run at once."""

        pid = None
        exitcode = None

        def __init__(self, *, final_q, task_vars, host, task, play_context, loader, variable_manager,
                     shared_loader_obj, worker_id, cliargs=None):
            del cliargs  # the controller's own
            self._final_q = final_q
            self._task = task.copy()
            self._task_vars = dict(task_vars)
            self._host = host
            self._play_context = play_context
            self._loader = copy.copy(loader)
            self._loader._tempfiles = set()
            self._variable_manager = variable_manager
            self._shared_loader_obj = shared_loader_obj
            self.worker_id = worker_id
            self.worker_queue = queue.Queue()
            self._thread = threading.Thread(target=self._run, name="nodewright-worker-%s" % host.name, daemon=True)

        def start(self):
            self._thread.start()

        def is_alive(self):
            return self._thread.is_alive()

        def join(self, timeout=None):
            self._thread.join(timeout)

        def close(self):
            """Nothing to release (a process worker closes its handle here)."""

        def terminate(self):
            """A thread cannot be stopped from outside; it ends with the controller."""

        def _run(self):
            task = self._task
            try:
                with _task.TaskContext(task):
                    result = TaskExecutor(self._host, task, self._task_vars, self._play_context, self._loader,
                                          self._shared_loader_obj, self._final_q, self._variable_manager).run()
            except BaseException as exc:  # pylint: disable=broad-except  # the host fails, the run goes on
                result = _error_utils.result_dict_from_exception(exc)
            try:
                self._final_q.send_task_result(_RawTaskResult(host=self._host, task=task, return_data=result,
                                                              task_fields=task.dump_attrs()))
            except Exception as exc:  # pylint: disable=broad-except  # e.g. a result that cannot be pickled
                try:
                    raise AnsibleError("Task result omitted due to queue send failure.") from exc
                except AnsibleError as wrapped:
                    self._final_q.send_task_result(_RawTaskResult(
                        host=self._host, task=task, return_data=_error_utils.result_dict_from_exception(wrapped),
                        task_fields={}))

    return ThreadWorker
