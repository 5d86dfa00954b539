# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A task of the rollout run in a thread of the controller instead of a forked worker.

Ansible forks a worker process per host and task. For ``nodewright.fleet.maintain``
the worker does little besides waiting: API calls and one command on the host per
step. The fork is the expensive part: it copies the page tables of a controller that
holds a fleet-sized inventory, and every page either side then writes is copied again.
At a thousand nodes the forks were most of a no-op rollout's controller time.

``ThreadWorker`` has what the strategy and the task queue manager use of a
``WorkerProcess`` (``start``, ``is_alive``, ``close``, ``terminate``, ``pid``,
``exitcode``, ``worker_queue``). It runs the same ``TaskExecutor`` on the same
inputs, with its own copy of the task and of the loader (the executor writes to
both), and sends the result through the same queue, pickled, as a worker does, so
the strategy, the callbacks and the run report see no difference. The number of
tasks running at once is still ``forks``.

Only tasks that are known to be safe in a thread run there (``threadable``): the
maintain action, without a loop, ``async``, ``timeout`` (a signal alarm, main thread
only), ``delegate_to`` or a debugger, over a connection whose plugin runs commands
as subprocesses (``local``, ``ssh``). Everything else forks as before.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading

from ansible import constants as C
from ansible._internal import _task
from ansible._internal._errors import _error_utils
from ansible.errors import AnsibleError
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins import strategy as _strategy_base

THREAD_ACTIONS = frozenset(("nodewright.fleet.maintain",))
THREAD_CONNECTIONS = frozenset(("local", "ansible.builtin.local", "ansible.legacy.local",
                                "ssh", "ansible.builtin.ssh", "ansible.legacy.ssh"))
WORKERS_THREADS = "threads"
WORKERS_PROCESSES = "processes"
WORKER_MODES = (WORKERS_THREADS, WORKERS_PROCESSES)


def _plain(value):
    """``value`` when it is a plain string (no template to resolve), else None."""
    if isinstance(value, str) and "{{" not in value and "{%" not in value:
        return value
    return None


def threadable(task, task_vars):
    """Whether ``task`` may run in a thread of the controller for a host with ``task_vars``."""
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


@contextlib.contextmanager
def queued_in_thread():
    """While this is open, the strategy's ``_queue_task`` starts a ``ThreadWorker``."""
    saved = _strategy_base.WorkerProcess
    _strategy_base.WorkerProcess = ThreadWorker
    try:
        yield
    finally:
        _strategy_base.WorkerProcess = saved


class ThreadWorker(object):
    """One task for one host, run by ``TaskExecutor`` in a daemon thread."""

    pid = None
    exitcode = None

    def __init__(self, *, final_q, task_vars, host, task, play_context, loader, variable_manager,
                 shared_loader_obj, worker_id, cliargs=None):
        del cliargs  # the controller's own
        self._final_q = final_q
        # A forked worker gets copies of everything; the executor post-validates the task
        # and writes to the variables and the loader's temporary files, so this thread
        # gets its own task, variables and loader.
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
