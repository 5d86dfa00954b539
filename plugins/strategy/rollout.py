# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Strategy ``nodewright.fleet.rollout``: progressive waves decided by DeploymentPolicies.

One play, one batch: the strategy admits the play's hosts into the iteration wave by
wave. The rollout driver (``module_utils/fleet/driver.py``) decides each wave for
every resource of the run and reserves it in the cluster; the wave runs the play's
whole task list (handlers included) under the ``linear`` strategy; failed and
unreachable hosts are reported back to the driver, which decides the next wave or
halts. Everything but running a wave lives in ``module_utils/fleet/`` and is shared
with ``nodewright rollout`` (the CLI), the reconciler and ``plan.yml``.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout
short_description: Roll a play out over nodes in waves decided by a NodeWright DeploymentPolicy
version_added: "0.1.0"
author:
  - NodeWright maintainers (@nodewright)
description:
  - Admits the play's hosts in waves chosen by NodeWright's DeploymentPolicy engine (compartments by label
    selector, budget ceiling, fixed / linear / exponential batch growth, batchThreshold, failureThreshold,
    safetyLimit, maintenance windows) while the play runs.
  - Each wave runs the play's full task list on its hosts in parallel (up to C(forks)), exactly as the
    C(linear) strategy runs one C(serial) batch, handlers included; C(ansible_play_batch) is the wave.
  - At the end of a wave its failed and unreachable hosts count as failed nodes. When the policy halts a
    compartment the play ends with a message naming the compartment and its consecutive failed batches;
    nodes that were never admitted are untouched and absent from the recap.
  - "The policy comes from play variables: C(nodewright_rollout_policy) (an inline DeploymentPolicy spec) or
    C(nodewright_rollout_policy_name) (a cluster-scoped C(DeploymentPolicy) resource, read with NodeWright's
    Kubernetes client)."
  - "Node labels come from each host's C(k8s_node.labels) (the C(nodewright.fleet.k8s_nodes) inventory), else
    its C(nodewright_node_labels) variable, else the Node of that name read from the Kubernetes API."
  - "With C(nodewright_rollout_desired) (the result of M(nodewright.fleet.desired_state), which
    C(playbooks/rollout.yml) passes) the play rolls out every NodeWright resource in it, each under its own
    DeploymentPolicy and batch state; a node targeted by several resources gets them in priority order; the nodes
    that all resources admit run together, in one wave. Before each wave the cluster is read once: nodes cordoned,
    in progress under any resource, or reserved by another run count against budget ceilings, topology and fleet
    limits, and the wave is reserved atomically in the Lease C(kube-system/nodewright-admission) before any node
    of it is touched (docs/rollout.md, Admission). After each wave each resource's status is written."
  - "With C(nodewright_rollout_state_resource) (the name of a NodeWright resource; C(playbooks/rollout.yml) sets
    it) the policy engine's batch state is kept in that resource's status: C(status.rolloutState) and
    C(status.compartmentStatuses) are written after every wave, and the next run resumes from them (a halted
    compartment stays halted). A change of the resource's spec (package version, config, policy) starts a new
    rollout from the first batch; C(nodewright reset-batches NAME) does the same without a change."
  - When the rollout play ends, C(localhost) gets the fact C(nodewright_rollout_outcome) (C(status) complete,
    incomplete, halted, waiting or interrupted; C(reason); C(resource); C(play)) for a later play to publish or
    act on.
  - Each admitted host gets the fact C(nodewright_rollout) with C(wave), C(compartment), C(wave_size) and
    C(policy); the wave decisions go into the run report of the C(nodewright.fleet.report) callback and into
    the custom stats (C(nodewright_rollout)) that ansible-runner reports as C(artifact_data).
notes:
  - The play must not set C(serial); the policy sizes the waves.
  - ansible-core 2.19 prints a deprecation notice for every strategy plugin outside C(ansible.builtin); see
    docs/rollout.md for what it means, how to silence it, and C(nodewright rollout), which runs the same
    driver without this plugin.
  - "Play variables: C(nodewright_rollout_policy) or C(nodewright_rollout_policy_name);
    C(nodewright_rollout_state_resource) (optional, see above); C(nodewright_rollout_desired) (see above);
    C(nodewright_rollout_admission) (reserve waves in the cluster; default true with C(nodewright_rollout_desired),
    false otherwise); C(nodewright_rollout_reservation_ttl) (seconds a reservation lives without renewal, default
    90); C(nodewright_rollout_capacity_timeout) (seconds to wait while other runs hold the capacity, default
    3600); C(nodewright_rollout_lock_namespace) (default C(kube-system), or C(NODEWRIGHT_LOCK_NAMESPACE));
    C(nodewright_rollout_wait_for_window) (default true: outside every maintenance window wait for the next
    one; false: end the play and say when it opens); C(nodewright_rollout_alert_gate) (an C(alertGate)
    mapping that replaces every policy's for this run, see docs/deployment-policy.md);
    C(nodewright_rollout_notify) (Apprise URLs, a list of them, or a mapping with C(urls), C(events) (of
    C(started), C(batch), C(blocked), C(halted), C(complete)) and C(batchInterval) (at most one batch
    notification this often, the others counted into the next); a failed notification never fails the rollout;
    see docs/rollout.md); C(nodewright_rollout_k8s_auth) (a mapping of the C(nodewright.fleet.k8s_auth) options, for the policy and
    Node reads); C(nodewright_rollout_workers)
    (C(processes), the default, forks a worker for every task, as the linear strategy does; C(threads) runs each
    node's M(nodewright.fleet.maintain) task in a thread of the controller when it has no loop, async, timeout,
    delegate_to or debugger and uses the local or ssh connection)."
  - "With C(nodewright_rollout_workers=threads) each node's M(nodewright.fleet.maintain) task runs in a thread of
    the controller instead of a forked worker: at a thousand nodes the forks of a controller holding the inventory
    cost more than the work; the result reaches the callbacks as a worker's would, and at most C(forks) run at
    once. Over the local connection the package run's bookkeeping then ends with the controller when the
    controller is killed (a forked worker outlives it); the running step finishes under its own supervisor and
    the next start adopts its recorded outcome without running it again. Threads are not the default."
  - "Thread workers use ansible-core's worker internals of 2.19 and 2.20. On any other supported release
    (2.16 to 2.21) C(nodewright_rollout_workers=threads) prints one warning line and every task runs in a forked
    worker, as with C(processes); docs/compatibility.md lists what the collection uses of ansible-core per release."
"""

EXAMPLES = r"""
- name: Patch the fleet in waves under a DeploymentPolicy from the cluster
  hosts: gpu
  gather_facts: false
  strategy: nodewright.fleet.rollout
  vars:
    nodewright_rollout_policy_name: gpu-canary
  tasks:
    - name: Maintain the node
      nodewright.fleet.maintain:
        resource: kernel-tuning
        packages: [{name: sysctl, version: 1.0.0, config: {vm.swappiness: "10"}}]

- name: The same with an inline policy, reserving each wave in the cluster
  hosts: gpu
  gather_facts: false
  strategy: nodewright.fleet.rollout
  vars:
    nodewright_rollout_admission: true
    nodewright_rollout_policy:
      default:
        budget: {percent: 25}
        strategy: {exponential: {initialBatch: 1, growthFactor: 2, failureThreshold: 1}}
  tasks:
    - name: Do the work
      ansible.builtin.debug:
        msg: "wave {{ nodewright_rollout.wave }}"
"""

import gc
import os
import socket
import time

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.plugins.strategy import StrategyBase
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.template import Templar
from ansible.utils.display import Display

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    INTERRUPTED,
    STOPPED,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.notify import Notifier
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    COMPLETE,
    HALTED,
    INCOMPLETE,
    WAITING,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_settings import (
    CUSTOM_STAT,
    DRIVER_WAVE_RUNNER,
    FACT,
    OUTCOME_FACT,
    VAR_ADMISSION,
    VAR_ALERT_GATE,
    VAR_NOTIFY,
    VAR_CAPACITY_TIMEOUT,
    VAR_DESIRED,
    VAR_DRIVER,
    VAR_K8S_AUTH,
    VAR_LOCK_NAMESPACE,
    VAR_POLICY,
    VAR_POLICY_NAME,
    VAR_RESERVATION_TTL,
    VAR_STATE_RESOURCE,
    VAR_WAIT_FOR_WINDOW,
    STAT_BLOCKED,
    STAT_PAUSED,
    check_serial,
    read_settings,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import (
    load_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import (
    admission_fleet,
    build_driver,
    resources_from_desired,
    single_policy_run,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_nodes import collect_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import (
    wave_facts,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import (
    RunHooks,
    status_writer,
)
from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals

display = Display()

DEFAULT_CAPACITY_TIMEOUT = 3600
VAR_WORKERS = "nodewright_rollout_workers"
_WAIT_SLICE = 1.0


def _warning_line(text):
    """A warning on one line on every ansible-core (before 2.19 ``warning()`` wraps it)."""
    display.display("[WARNING]: %s" % text, color=C.COLOR_WARN, stderr=True)


def _worker_mode(value):
    """The play's ``nodewright_rollout_workers``: ``processes`` (default) or ``threads``."""
    if value is None or value == "":
        return core_internals.WORKERS_PROCESSES
    if value not in core_internals.WORKER_MODES:
        raise NodeWrightError("%s must be one of %s, got %r"
                              % (VAR_WORKERS, ", ".join(core_internals.WORKER_MODES), value))
    return value


class _TemplatedVariables(object):
    """``get(name)`` templates only values that hold a template (most labels are plain text,
    and values read from the API are never trusted as templates)."""

    def __init__(self, variables, loader, probe):
        self._variables = variables
        self._loader = loader
        self._probe = probe

    def get(self, name, default=None):
        value = self._variables.get(name, default)
        if value is not None and self._probe.is_template(value):
            value = Templar(loader=self._loader, variables=self._variables).template(value)
        return value


class StrategyHooks(RunHooks):
    """Runs each wave as one pass of the ``linear`` strategy over the admitted hosts."""

    def __init__(self, strategy, iterator, play_context, by_name, original_tasks, records, keepers,
                 writer=None):
        super(StrategyHooks, self).__init__(records, keepers, status_writer=writer, say=self._display)
        self.strategy = strategy
        self.iterator = iterator
        self.play_context = play_context
        self.by_name = by_name
        self.original_tasks = original_tasks
        self.result = int(strategy._tqm.RUN_OK)
        self.stop = None

    @staticmethod
    def _display(text, level="info"):
        if level == "banner":
            display.banner(text)
        elif level == "warn":
            display.warning(text)
        elif level == "error":
            display.display(text, color=C.COLOR_ERROR)
        elif level == "ok":
            display.display(text, color=C.COLOR_OK)
        else:
            display.display(text, color=C.COLOR_VERBOSE)

    def stopped(self):
        if core_internals.terminated(self.strategy._tqm):
            return INTERRUPTED, "the run was interrupted"
        return self.stop

    def wait(self, seconds, reason):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if core_internals.terminated(self.strategy._tqm):
                return False
            time.sleep(min(_WAIT_SLICE, max(0.0, deadline - time.monotonic())))
        return True

    def run_wave(self, wave):
        strategy, iterator = self.strategy, self.iterator
        hosts = [self.by_name[name] for name in wave.nodes]
        for host, fact in wave_facts(wave, self.records).items():
            strategy._variable_manager.set_nonpersistent_facts(host, {FACT: fact})
        # The inventory holds only the wave while it runs, as it holds one serial batch
        # under ansible-playbook: the strategy's host cache, ansible_play_batch and meta
        # tasks such as end_batch then see the wave and nothing else. (Hosts of later waves
        # left in the host cache would also skip their first task when a wave ends.)
        strategy._inventory.restrict_to_hosts(hosts)
        core_internals.replay_tasks(iterator, self.original_tasks)
        # Every task of the wave but a threaded maintain task forks a worker per host
        # from this process. Frozen objects are left alone by the workers' garbage
        # collector, so their pages stay shared with the controller instead of being
        # copied into each worker.
        gc.collect()
        gc.freeze()
        try:
            result = LinearStrategyModule.run(strategy, iterator, self.play_context)
        finally:
            gc.unfreeze()
        self.result = result
        tqm = strategy._tqm
        # Nodes the maintain task left blocked by non-interruptible pods, or stopped because their
        # resource was paused, count neither way.
        custom = core_internals.custom_stats(tqm).get("_run") or {}
        blocked = set(custom.get(STAT_BLOCKED) or {}) | set(custom.get(STAT_PAUSED) or {})
        outcomes = {}
        for name in wave.nodes:
            host = self.by_name[name]
            failed = iterator.is_failed(host) or name in core_internals.unreachable_hosts(tqm)
            outcomes[name] = "failed" if failed else ("blocked" if name in blocked else "ok")
        if result & tqm.RUN_FAILED_BREAK_PLAY or core_internals.play_ended(iterator):
            why = "max_fail_percentage reached" if result & tqm.RUN_FAILED_BREAK_PLAY else "meta: end_play"
            self.stop = (STOPPED, "the play ended the rollout after wave %d (%s)" % (wave.number, why))
        elif any(v == "failed" for v in outcomes.values()) and core_internals.play_of(iterator).any_errors_fatal:
            self.stop = (STOPPED, "wave %d failed and the play sets any_errors_fatal" % wave.number)
            self.result = result | tqm.RUN_FAILED_BREAK_PLAY
        return outcomes


# ansible-core wraps StrategyBase._process_pending_results for the task debugger; the wrapper
# first copies the state of every host of the play, so that a debugger "redo" can roll a host back.
_READ_RESULTS = core_internals.read_results_without_debugger_copy(StrategyBase)


def _packed(names, copies):
    """``names`` as copies of their own, allocated one after the other and kept in
    ``copies`` (a copy is made once per name, so every later list reuses the same ones).

    Every task of every host gets ``ansible_play_hosts_all``: a copy of the strategy's list of
    the play's host names, which takes a reference to each name. The names the inventory made
    lie one or two to a page among the rest of the inventory, so after each fork of a worker
    that copy wrote to as many pages as the play has hosts, each then copied for the worker
    still sharing it: work per host that grew with the fleet. Copied together, the names of a
    thousand hosts fill a few dozen pages; made again for every wave, they would land in the
    gaps that earlier objects left and spread out again."""
    for name in names:
        if name.__class__ is str and name not in copies:
            copy = name.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
            copies[copy] = copy
    return [copies.get(name, name) for name in names]


class StrategyModule(LinearStrategyModule):
    """The ``linear`` strategy, run once per wave over the hosts the driver admits."""

    def __init__(self, tqm):
        super(StrategyModule, self).__init__(tqm)
        # Where this play's records sit in the custom stat (entries of one rollout play).
        self._nw_slot = None
        self._nw_count = 0
        self._nw_probe = None  # a Templar that only tells templates from plain values
        self._nw_fleet = None
        self._nw_threads = None  # the ThreadWorker class when this play runs maintain tasks in threads
        self._nw_names = {}  # host name -> the strategy's own copy of it (_packed)

    # ------------------------------------------------------------------ workers

    def _set_hosts_cache(self, play, refresh=True):
        before, before_all = self._hosts_cache, self._hosts_cache_all
        super(StrategyModule, self)._set_hosts_cache(play, refresh=refresh)
        # Rebuilt (not kept, as refresh=False keeps lists already made): pack the new lists.
        if self._hosts_cache_all is not before_all:
            self._hosts_cache_all = _packed(self._hosts_cache_all, self._nw_names)
        if self._hosts_cache is not before:
            self._hosts_cache = _packed(self._hosts_cache, self._nw_names)

    def _queue_task(self, host, task, task_vars, play_context):
        # The maintain task of a node runs in a thread of this process instead of a
        # forked worker (plugin_utils/core_internals.py); every other task forks.
        if self._nw_threads is not None and not self.debugger_active and core_internals.threadable(task, task_vars):
            with core_internals.queued_in_thread(self._nw_threads):
                return super(StrategyModule, self)._queue_task(host, task, task_vars, play_context)
        return super(StrategyModule, self)._queue_task(host, task, task_vars, play_context)

    # ------------------------------------------------------------------ inputs

    def _play_variables(self, play):
        variables = self._variable_manager.get_vars(play=play)
        templar = Templar(loader=self._loader, variables=variables)
        wanted = (VAR_POLICY, VAR_POLICY_NAME, VAR_WAIT_FOR_WINDOW, VAR_K8S_AUTH, VAR_DRIVER, VAR_STATE_RESOURCE,
                  VAR_DESIRED, VAR_ADMISSION, VAR_RESERVATION_TTL, VAR_CAPACITY_TIMEOUT, VAR_LOCK_NAMESPACE,
                  VAR_WORKERS, VAR_ALERT_GATE, VAR_NOTIFY)
        return {name: templar.template(variables[name]) for name in wanted if name in variables}

    def _host_variables(self, host_name):
        """A host's variables as ``hostvars[host]`` gives them to a task, templated on access."""
        if self._nw_probe is None:
            self._nw_probe = Templar(loader=self._loader)
        variables = self._variable_manager.get_vars(host=self._inventory.get_host(host_name), include_hostvars=False)
        return _TemplatedVariables(variables, self._loader, self._nw_probe)

    def _process_pending_results(self, iterator, one_pass=False, max_passes=None):
        # The controller's main loop: renew this run's reservations here, between forks.
        fleet = self._nw_fleet
        if fleet is not None and fleet.active is not None:
            fleet.active.tick()
        if not self._results:
            # Nothing has come back yet. The base method (wrapped for the task debugger) would first
            # copy the state of every host of the play, then find nothing to read; the linear
            # strategy polls it every millisecond while a wave's workers run, so with thousands of
            # hosts that copy grew into the controller's largest cost.
            return []
        if _READ_RESULTS is None or self._nw_debugger_possible():
            return super(StrategyModule, self)._process_pending_results(iterator, one_pass=one_pass,
                                                                        max_passes=max_passes)
        # No task waiting for its result can start the task debugger, so nothing needs the copy
        # of every host's state that the debugger's wrapper takes first: at thousands of hosts
        # that copy cost the controller more than processing the results did. What else the
        # wrapper does is done here: each result's queued task is forgotten.
        results = _READ_RESULTS(self, iterator, one_pass=one_pass, max_passes=max_passes)
        for result in results:
            self._queued_task_cache.pop(core_internals.result_key(result), None)
        return results

    def _nw_debugger_possible(self):
        """Whether a result now awaited could start the task debugger (enabled for every task,
        or a ``debugger`` keyword other than ``never`` on a task waiting for its result)."""
        if self.debugger_active:
            return True
        for queued in self._queued_task_cache.values():
            task = queued.get("task")
            if task is not None and getattr(task, "debugger", None) not in (None, "", "never"):
                return True
        return False

    # ------------------------------------------------------------------ run

    def run(self, iterator, play_context):  # type: ignore[override]
        play = core_internals.play_of(iterator)
        try:
            variables = self._play_variables(play)
            self._nw_threads = self._thread_workers(_worker_mode(variables.get(VAR_WORKERS)))
            settings = read_settings(variables)
            if settings.desired is not None:
                run_context.publish(settings.desired)
            if settings.driver == DRIVER_WAVE_RUNNER:
                # `nodewright rollout` already limited the run to one wave.
                display.vv("nodewright.fleet.rollout: waves are driven by nodewright rollout; running as linear")
                return super(StrategyModule, self).run(iterator, play_context)
            check_serial(play.serial, play.get_name())
        except NodeWrightError as exc:
            raise AnsibleError("nodewright.fleet.rollout: %s" % exc)

        hosts = self._inventory.get_hosts(play.hosts, order=play.order)
        by_name = {h.name: h for h in hosts}
        # Hosts that failed or became unreachable in an earlier play are not this rollout's failures.
        earlier = {h.name for h in hosts
                   if iterator.is_failed(h) or h.name in core_internals.unreachable_hosts(self._tqm)}
        names = [h.name for h in hosts if h.name not in earlier]
        check_mode = bool(play_context.check_mode)
        try:
            resources, records, keepers, view = self._resources(settings, play, names, check_mode)
            fleet = self._fleet(settings, view, check_mode)
        except NodeWrightError as exc:
            raise AnsibleError("nodewright.fleet.rollout: %s" % exc)
        if settings.desired is not None and not any(r.eligible for r in resources):
            # No node of this inventory has work: the play is skipped, as a play whose hosts
            # matched nothing (the status play after it writes each resource's status).
            display.display("skipping: no node of the inventory has work", color=C.COLOR_SKIP)
            return self._tqm.RUN_OK
        for res in resources:
            left = sorted(earlier & set(res.work))
            if left:
                records[res.name].leave_out(left, "failed or unreachable earlier in the playbook")
        original_tasks = core_internals.play_tasks(iterator)
        writer = status_writer(settings.k8s_auth) if settings.desired is not None else None
        hooks = StrategyHooks(self, iterator, play_context, by_name, original_tasks, records, keepers, writer)
        notifier = Notifier(settings.notify, warn=display.warning) if settings.notify is not None else None
        driver = build_driver(resources, fleet, hooks, wait_for_window=settings.wait_for_window,
                              capacity_timeout=(settings.capacity_timeout if settings.capacity_timeout is not None
                                                else DEFAULT_CAPACITY_TIMEOUT), poll=5.0, notifier=notifier)
        self._publish(records, resources)
        display.banner("NODEWRIGHT ROLLOUT [%s] %s" % (play.get_name(), "; ".join(
            "%s: %d node(s) with work, policy %s" % (r.name, len(r.work), records[r.name].source)
            for r in driver.resources)))
        status, reason = "interrupted", "the rollout stopped before the policy finished (interrupted or error)"
        try:
            status, reason = driver.run()
        except NodeWrightError as exc:
            status, reason = "error", str(exc)
        finally:
            self._inventory.restrict_to_hosts(hosts)
            self._nw_fleet = None
            hooks.finish(status, reason)
            if notifier is not None:
                for rec in records.values():
                    rec.notifications = list(notifier.log)
                display.display("NodeWright notifications: %s (%s)" % (notifier.summary(), settings.notify.describe()))
            self._publish(records, resources)
            halted = [r.name for r in driver.resources if records[r.name].status == HALTED]
            if halted:
                reason = "; ".join(records[name].reason for name in halted)
            # For a later play on the controller: publish the outcome, end the playbook non-zero.
            self._variable_manager.set_nonpersistent_facts("localhost", {OUTCOME_FACT: {
                "status": HALTED if halted else status, "reason": reason,
                "resource": halted[0] if halted else (settings.state_resource or ""),
                "halted": halted, "play": play.get_name()}})
        return self._end(iterator, hooks, status, reason, halted)

    @staticmethod
    def _thread_workers(mode):
        """The ThreadWorker class for ``mode`` on this ansible-core, else None (one line says why)."""
        unknown = core_internals.unknown_version_warning()
        if unknown:
            _warning_line(unknown)
        if mode != core_internals.WORKERS_THREADS:
            return None
        worker = core_internals.thread_worker_class()
        if worker is None:
            _warning_line(core_internals.thread_workers_unavailable()
                          or "nodewright_rollout_workers=threads: this ansible-core's worker plumbing could not be "
                             "loaded; every task runs in a forked worker")
        return worker

    def _end(self, iterator, hooks, status, reason, halted):
        result = hooks.result
        if status == "error":
            # The records and statuses are written; the playbook ends here, non-zero.
            raise AnsibleError("nodewright.fleet.rollout: %s" % reason)
        if halted:
            display.error(reason, wrap_text=False)
            # End this play only: a later play still runs; the exit status is non-zero.
            core_internals.end_play(iterator)
            return result or self._tqm.RUN_FAILED_HOSTS
        if status == STOPPED:
            display.warning("NodeWright rollout stopped: %s" % reason)
        elif status == WAITING:
            display.warning("NodeWright rollout: no wave started: %s" % reason)
            core_internals.end_play(iterator)
        elif status == INCOMPLETE:
            display.warning("NodeWright rollout: %s" % reason)
        elif status == COMPLETE:
            display.display("NodeWright rollout: %s" % reason, color=C.COLOR_OK)
        return result

    def _resources(self, settings, play, names, check_mode):
        """The run's resources and records, and (for a play over plain hosts) its fixed view."""
        if settings.desired is not None:
            resources, records, keepers = resources_from_desired(
                settings.desired, names, settings, play.get_name(), "strategy", check_mode=check_mode,
                say=StrategyHooks._display)
            return resources, records, keepers, None
        policy, source = load_policy(settings)
        policy = policy.with_alert_gate(settings.alert_gate)
        nodes = collect_nodes(names, self._host_variables, settings.k8s_auth)
        return single_policy_run(
            settings.state_resource or play.get_name() or "rollout", policy, source, nodes, play.get_name(),
            "strategy", state_resource=settings.state_resource, auth=settings.k8s_auth, check_mode=check_mode,
            say=lambda note: display.display("NodeWright rollout: %s" % note, color=C.COLOR_VERBOSE))

    def _fleet(self, settings, view, check_mode):
        fleet = admission_fleet(settings.k8s_auth, view, admission=settings.admission, check_mode=check_mode,
                                run="ansible-playbook on %s pid %d" % (socket.gethostname(), os.getpid()),
                                ttl=settings.reservation_ttl, namespace=settings.lock_namespace, threaded=False)
        # Renewed from the controller's loop (_process_pending_results), between forks.
        self._nw_fleet = fleet if settings.admission else None
        return fleet

    def _publish(self, records, resources):
        """Keep the rollout's records in the play's custom stats, where the report callback and
        ansible-runner (``artifact_data``) find them."""
        stats = core_internals.run_stats(self._tqm)
        entries = (core_internals.custom_stats(self._tqm).get("_run") or {}).get(CUSTOM_STAT)
        if not isinstance(entries, list):
            entries = []
        data = []
        for res in resources:
            record = records[res.name]
            data.append(record.to_dict(res.state, done=res.done))
        if self._nw_slot is None or self._nw_slot > len(entries):
            self._nw_slot = len(entries)
        entries[self._nw_slot:self._nw_slot + self._nw_count] = data
        self._nw_count = len(data)
        stats.set_custom_stats(CUSTOM_STAT, entries)
