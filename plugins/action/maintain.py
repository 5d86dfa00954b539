# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The safe sequence of one node as one task: nodewright.fleet.maintain.

Read the node, check it is healthy, mark it in progress; cordon, wait for the
non-interruptible pods and drain when the work disrupts; run the packages; reboot or
restart services when a package asks for it, wait for the new boot and run the
post-interrupt stages; check the health gates and uncordon; mark it complete. A
failure marks the node erroring (label, condition, Event) and leaves it cordoned for
triage or gives it back to work.

Every Kubernetes step runs here, in the controller's worker, through the same
module_utils the single-purpose modules use (``node_cordon``, ``node_drain``,
``node_wait_pods``, ``node_wait_ready``, ``node_health``, ``node_gate`` run
in-process); the packages run through the ``nodewright.fleet.package`` action, so
they reach the host over the task's connection (the local host root, SSH, or the
k8s connection). One task per node instead of one per step is what keeps a rollout's
per-node cost flat as fleets grow.
"""

from __future__ import annotations

import importlib
import shlex
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import did_you_mean
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import (
    InProcessModule,
    full_argument_spec,
    result_of,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import RunPlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_settings import (
    STAT_BLOCKED,
    STAT_PAUSED,
    VAR_DESIRED,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import AUTH_OPTIONS, get_api_client
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gpu_health
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import waits as node_waits
from ansible_collections.nodewright.fleet.plugins.module_utils.node import maintenance as node_maintenance
from ansible_collections.nodewright.fleet.plugins.module_utils.node.sequence import NodeHandle
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries as package_retries
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.modules import maintain as maintain_module

# The strategy loads this plugin in the controller before it forks a worker per node.
# The package action and the package module it runs in-process for a local host are
# loaded here with it, so that every worker inherits them instead of compiling and
# importing them again for each node (a fifth of a no-op rollout's CPU).
from ansible_collections.nodewright.fleet.plugins.action import package as _package_action  # noqa: F401,E402
from ansible_collections.nodewright.fleet.plugins.modules import package as _package_module  # noqa: F401,E402

LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "ansible.legacy.local")

# option -> default; an option the task does not set falls back to the variable
# ``safe_update_<option>`` (the safe_update role's variables), then to this default.
DEFAULTS = {name: maintain_module.ARGUMENT_SPEC[name].get("default") for name in (
    "wait_timeout", "wait_give_up_after", "drain_timeout", "drain_force", "drain_delete_emptydir_data", "drain_grace_period",
    "drain_skip_namespaces", "drain_ignore_daemonsets", "drain_disable_eviction",
    "maintenance_request", "reboot_timeout", "health_conditions", "health_labels", "health_timeout",
    "validation_job", "on_failure", "allow_controller_root")}
# drainConfig of a resource (desired_state's "drain") -> option
DRAIN_KEYS = {"timeout": "drain_timeout", "force": "drain_force", "delete_emptydir_data": "drain_delete_emptydir_data",
              "grace_period": "drain_grace_period", "skip_namespaces": "drain_skip_namespaces",
              "ignore_daemonsets": "drain_ignore_daemonsets", "disable_eviction": "drain_disable_eviction"}

# podNonInterruptWait of a resource (desired_state's "non_interrupt_wait") -> option
WAIT_KEYS = {"timeout": "wait_timeout", "give_up_after": "wait_give_up_after"}

# What a step stands for in the run report (``step(..., action=)``): the module or action
# whose task it is drawn as; a step that only reads or marks the node is node_state.
CORDON, DRAIN, WAIT_PODS = "nodewright.fleet.node_cordon", "nodewright.fleet.node_drain", "nodewright.fleet.node_wait_pods"
MAINTENANCE = "nodewright.fleet.node_maintenance"
PACKAGE, WAIT_READY, HEALTH = "nodewright.fleet.package", "nodewright.fleet.node_wait_ready", "nodewright.fleet.node_health"
GATE, REBOOT, COMMAND = "nodewright.fleet.node_gate", "ansible.builtin.reboot", "ansible.builtin.command"


class StepFailed(Exception):
    def __init__(self, step, result):
        super(StepFailed, self).__init__(result.get("msg") or "failed")
        self.step = step
        self.result = result


class StillBlocked(StepFailed):
    """Non-interruptible pods outlived the run's wait: the node is left blocked, not failed."""


class _Untouched(NodeWrightError):
    """A refusal before the node was changed: reported, nothing marked."""

    def __init__(self, message, result):
        super(_Untouched, self).__init__(message)
        self.result = result


def node_packages(packages, images, arch):
    """The resource's package specs for one node: a package from an image index of
    several platforms (``images``, from planning) is taken from the index, so that the
    package action unpacks the variant of the node's architecture ``arch`` (every
    variant the targets need was pulled and checked when the run was planned)."""
    if not packages or not images or not arch:
        return packages
    return [dict(spec, src=images[spec.get("name")]["reference"]) if spec.get("name") in images else spec
            for spec in packages]


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    # ------------------------------------------------------------------ settings

    def _setting(self, name, task_vars, resource_entry=None):
        args = self._args
        if args.get(name) is not None:
            return args[name]
        var = "safe_update_" + name
        if var in task_vars:
            value = self._templar.template(task_vars[var])
            if value is not None:
                return value
        for key, option in DRAIN_KEYS.items():
            if option == name and resource_entry and resource_entry.drain.get(key) is not None:
                return resource_entry.drain[key]
        for key, option in WAIT_KEYS.items():
            if option == name and resource_entry and resource_entry.non_interrupt_wait.get(key):
                return resource_entry.non_interrupt_wait[key]
        return DEFAULTS.get(name)

    def _option_problems(self, validated):
        """The task's option problems, an unknown option with the nearest known name."""
        known = full_argument_spec(maintain_module.ARGUMENT_SPEC)
        problems = []
        for error in validated.errors:
            if isinstance(error, UnsupportedError):
                for name in sorted(validated.unsupported_parameters or ()):
                    name = name[0] if isinstance(name, tuple) else name
                    hint = did_you_mean(name, known)
                    problems.append("Unsupported parameters: %s%s" % (name, " (%s)" % hint if hint else ""))
            else:
                problems.append(str(error))
        return problems or list(validated.error_messages)

    def _var(self, task_vars, name, default=None):
        if name not in task_vars:
            return default
        value = self._templar.template(task_vars[name])
        return default if value is None else value

    def _resource_from_play(self, task_vars, resource):
        """The resource's description when no rollout strategy published the run (rollout.yml's
        play under ``linear``, as ``nodewright rollout --resources`` runs it): published here
        from the play's ``nodewright_rollout_desired``, once per process, as the strategy does."""
        if run_context.names() or VAR_DESIRED not in task_vars:
            return None
        run_context.publish(RunPlan.from_dict(self._var(task_vars, VAR_DESIRED), VAR_DESIRED))
        return run_context.resource(resource)

    def _check_mode(self):
        return bool(self._task.check_mode if self._task.check_mode is not None else self._play_context.check_mode)

    # ------------------------------------------------------------------ run

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        # Every option checked (names, types, choices) before anything is read or changed;
        # the task's own values, coerced, and nothing else: defaults come later, after the
        # safe_update_ variables and the resource's drainConfig.
        validated = ArgumentSpecValidator(full_argument_spec(maintain_module.ARGUMENT_SPEC)).validate(
            dict(self._task.args))
        if validated.error_messages:
            result.update(failed=True, changed=False, msg="nodewright.fleet.maintain: %s (nothing was changed)"
                          % "; ".join(self._option_problems(validated)))
            return result
        self._args = args = {k: validated.validated_parameters[k] for k in self._task.args
                             if validated.validated_parameters.get(k) is not None}
        phase = args.get("phase") or "all"
        rollout_fact = self._var(task_vars, "nodewright_rollout", {}) or {}
        resource = args.get("resource") or rollout_fact.get("resource") or self._var(
            task_vars, "safe_update_resource") or "default"
        entry = run_context.resource(resource)
        if entry is None:
            try:
                entry = self._resource_from_play(task_vars, resource)
            except NodeWrightError as exc:
                result.update(failed=True, changed=False, msg="nodewright.fleet.maintain: %s (nothing was changed)"
                              % exc)
                return result
        node = args.get("name") or self._var(task_vars, "safe_update_node") or task_vars.get("inventory_hostname")
        self._seq = _Sequence(self, task_vars, node, resource, entry)
        try:
            outcome = self._seq.run(phase)
        except NodeWrightError as exc:
            outcome = {"failed": True, "msg": str(exc), "changed": self._seq.changed}
        result.update(outcome)
        result["steps"] = self._seq.steps
        return result

    # ------------------------------------------------------------------ helpers for the sequence

    def in_process(self, module_name, params, check_mode):
        """Run a NodeWright Kubernetes module's logic here; its result dict."""
        module = importlib.import_module("ansible_collections.nodewright.fleet.plugins.modules." + module_name)
        validated = ArgumentSpecValidator(full_argument_spec(module.ARGUMENT_SPEC)).validate(params)
        if validated.error_messages:
            return {"failed": True, "changed": False, "msg": "; ".join(validated.error_messages)}
        shim = InProcessModule(validated.validated_parameters, check_mode)
        return result_of(lambda: module.run(shim))

    def package_action(self, task_vars, module_args):
        task = self._task.copy()
        task.args.clear()
        task.args.update(module_args)
        action = self._shared_loader_obj.action_loader.get(
            "nodewright.fleet.package", task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)

    def reboot_action(self, task_vars, timeout):
        task = self._task.copy()
        task.args.clear()
        task.args.update({"reboot_timeout": int(timeout)})
        action = self._shared_loader_obj.action_loader.get(
            "ansible.builtin.reboot", task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)

    def host_command(self, argv, host_root):
        prefix = [] if host_root == "/" else ["chroot", host_root]
        res = self._low_level_execute_command(shlex.join(prefix + list(argv)))
        out = {"cmd": prefix + list(argv), "rc": res.get("rc"), "stdout": res.get("stdout", ""),
               "stderr": res.get("stderr", ""), "changed": True}
        if res.get("rc") != 0:
            out.update(failed=True, msg="%s exited %s: %s" % (" ".join(argv), res.get("rc"),
                                                              (res.get("stderr") or res.get("stdout") or "")[-500:]))
        return out

    def is_local(self):
        return getattr(self._connection, "transport", None) in LOCAL_CONNECTIONS or \
            getattr(self._connection, "_load_name", None) in LOCAL_CONNECTIONS


class _Sequence(object):
    """The steps of the safe sequence for one node and one resource."""

    def __init__(self, action, task_vars, node, resource, entry):
        self.action = action
        self.task_vars = task_vars
        self.name = node
        self.resource = resource
        self.entry = entry  # its plan.ResourcePlan, or None: the task's arguments say it all
        self.check_mode = action._check_mode()
        args = action._args
        self.auth = {k: args[k] for k in AUTH_OPTIONS if args.get(k) is not None}
        self.steps = []
        self.phase = None
        # Admitted by a rollout (the strategy or the wave runner set this fact): a node whose protected
        # pods outlive the wait is left blocked for the next run rather than failed.
        self.in_rollout = bool(task_vars.get("nodewright_rollout"))
        self.changed = False
        self.took_out = bool(args.get("took_out"))
        self.interrupted = False
        self.pending_state = {}
        self.packages_result = None
        self.before_cordon = args.get("before_cordon")
        self.left_cordoned = False
        disruptive = args.get("disruptive")
        if disruptive is None:
            disruptive = entry.node(node).disruptive if entry and node in entry.nodes else action._var(
                task_vars, "safe_update_disruptive", True)
        self.disruptive = _truthy(disruptive)
        selector = args.get("non_interruptible_selector")
        if selector is None:
            selector = entry.non_interruptible if entry else action._var(
                task_vars, "safe_update_non_interruptible_selector", "")
        self.selector = selector or ""
        packages = args.get("packages")
        self.images = None
        if packages is None and entry:
            packages = [spec.to_dict() for spec in entry.packages]  # the package module's specs
            self.images = entry.images
        self.packages = packages
        self.interrupt = args.get("interrupt") or {"type": "noop"}
        self.host_root = args.get("host_root") or action._var(task_vars, "safe_update_host_root") or \
            action._var(task_vars, "nodewright_host_root", "/")
        self.runtime_required = args.get("runtime_required")
        if self.runtime_required is None:
            self.runtime_required = bool(run_context.setting("runtime_required"))
        self.opt = {name: action._setting(name, task_vars, self.entry) for name in DEFAULTS}
        self.node = NodeHandle(get_api_client(self.auth), node, check_mode=self.check_mode)

    # ------------------------------------------------------------------ recording

    def step(self, name, fn, action="nodewright.fleet.node_state"):
        """Run one step of the sequence and record it; ``action`` is the module or action the
        step stands for (the run report draws the step as a task of it)."""
        started = time.monotonic()
        try:
            result = fn()
        except _Untouched as exc:
            result = dict(exc.result, failed=True, msg=exc.message, _untouched=True)
        except NodeWrightError as exc:
            result = {"failed": True, "msg": str(exc), "changed": bool((exc.details or {}).get("changed"))}
        result = result if isinstance(result, dict) else {}
        entry = {"name": name, "action": action, "changed": bool(result.get("changed")),
                 "failed": bool(result.get("failed")), "seconds": round(time.monotonic() - started, 3),
                 "result": result}
        if result.get("msg"):
            entry["msg"] = result["msg"]
        self.steps.append(entry)
        self.changed = self.changed or entry["changed"]
        if entry["failed"]:
            raise StepFailed(name, result)
        return result

    def module(self, module_name, **params):
        params.setdefault("name", self.name)
        params.update(self.auth)
        return self.action.in_process(module_name, params, self.check_mode)

    # ------------------------------------------------------------------ phases

    def run(self, phase):
        self.phase = phase
        self.refuse_controller_root()
        if phase == "fail":
            return self.fail_phase()
        if phase == "all":
            stopped = self.stopped()
            if stopped:
                # Paused before this node started: nothing on it was touched.
                self.node.read()
                return self.paused(stopped, "start")
        if phase in ("all", "take_out"):
            self.start()
        else:
            self.node.read()
        try:
            if phase in ("all", "take_out"):
                if self.disruptive:
                    self.take_out()
            if phase == "take_out":
                self.flush_state()
                return self.outcome(phase)
            if phase == "all":
                stopped = self.stopped()
                if stopped:
                    # Paused while the node was taken out: it waits, cordoned and drained, for the resume.
                    self.step("Record where the pause stopped the node", lambda: self.mark(
                        None, {"pausedAt": "packages"}))
                    return self.paused(stopped, "packages")
                self.run_packages("main")
            if phase in ("all", "interrupt") and (self.interrupt or {}).get("type", "noop") != "noop":
                self.do_interrupt(run_post=phase == "all")
            if phase == "interrupt":
                self.flush_state()
                return self.outcome(phase)
            self.give_back()
            return self.outcome(phase)
        except StillBlocked as still:
            return self.blocked(still.step, still.result)
        except StepFailed as failure:
            return self.failed(failure.step, failure.result)
        finally:
            if phase in ("all", "give_back", "fail") and self.runtime_required:
                self.gate()

    def refuse_controller_root(self):
        if self.host_root == "/" and self.action.is_local() and not _truthy(self.opt["allow_controller_root"]):
            raise NodeWrightError(
                "node %s would be maintained on this controller's own root filesystem (connection local, host root "
                "/). Reach the node over SSH or the k8s connection, give its host root (nodewright_host_root), or "
                "set safe_update_allow_controller_root when the controller really is the node" % self.name)

    def start(self):
        node = self.step("Read the node before maintenance", self.read)
        self.before_cordon = node["cordon"]
        # Cordoned by this resource's own earlier run that never finished (a crash between
        # its cordon and its uncordon): this run returns the node to work, whatever its plan.
        record = node_ops.cordon_record(self.node.node) or {}
        self.left_cordoned = self.before_cordon == "cordoned_by_nodewright" and \
            record.get("resource") in (None, self.resource)
        if self.before_cordon != "cordoned_by_nodewright":
            self.step("Check the node is healthy before touching it", self.pre_health, action=HEALTH)
        state = self.node.state(self.resource)
        if "error" in state:
            # Never overwrite what cannot be read: the operator's edit, or a bug, needs a look.
            self.step("Refuse a state annotation that cannot be read", lambda: self.refuse_state(state["error"]))
        # The GPUs the node has now: the GPU health gate expects as many after maintenance (a
        # run resumed after a crash keeps the count its first run recorded).
        gpus = state.get("gpusBefore") if isinstance(state.get("gpusBefore"), int) else \
            gpu_health.allocatable_gpus(self.node.node) or None
        self.step("Mark the node in progress", lambda: self.mark(
            markers.STATUS_IN_PROGRESS, {"step": "cordon", "bootIdBefore": self.node.boot_id(), "pausedAt": None,
                                         "gpusBefore": gpus},
            clear_error=True))

    def read(self):
        self.node.read()
        return {"changed": False, "cordon": self.node.cordon(), "boot_id": self.node.boot_id(),
                "status": self.node.status(self.resource)}

    def pre_health(self):
        node = self.node.node
        failures = node_waits.evaluate_health(node, self.opt["health_conditions"], self.opt["health_labels"])
        upgrade = ((node.get("metadata") or {}).get("labels") or {}).get(markers.GPU_OPERATOR_UPGRADE_STATE)
        if upgrade and upgrade not in ("upgrade-done", ""):
            failures.append({"gate": "gpu-operator", "actual": upgrade,
                             "message": "GPU Operator driver upgrade in progress (%s)" % upgrade})
        result = {"changed": False, "healthy": not failures, "failures": failures,
                  "preexisting_fault": bool(failures)}
        if failures:
            # Nothing was changed: the node is left to its owners, not marked.
            raise _Untouched("node %s is already unhealthy before maintenance: %s; left to its owners, nothing was "
                             "changed" % (self.name, "; ".join(f["message"] for f in failures)), result)
        return result

    def refuse_state(self, problem):
        message = ("%s; NodeWright will not overwrite it. Fix or remove the annotation %s (kubectl annotate node %s "
                   "%s-), then rerun" % (problem, markers.state_annotation(self.resource), self.name,
                                         markers.state_annotation(self.resource)))
        self.node.sync_error(self.resource, {"reason": "MalformedState", "message": message})
        raise _Untouched("node %s skipped: %s" % (self.name, message), {"changed": not self.check_mode})

    def mark(self, status, state, clear_error=False, error=None, event=None):
        state = dict(self.pending_state, **(state or {}))
        self.pending_state = {}
        changed = self.node.mark(self.resource, status=status, state=state)
        if clear_error or error:
            err = {"reason": error[0], "message": error[1]} if error else None
            changed = self.node.sync_error(self.resource, err) or changed
        if event:
            self.node.event(*event)
            changed = True
        return {"changed": changed, "status": status}

    def flush_state(self):
        if self.pending_state:
            self.step("Record the packages' state on the node", lambda: self.mark(None, {}))

    def take_out(self, why=None):
        self.took_out = True
        if self.maintenance_options():
            return self.request_maintenance()
        reason = why or "maintenance by NodeWright resource %s" % self.resource
        # Before an interrupt the plan did not foresee, the steps say so.
        cordon, wait, drain = (("Cordon the node before the interrupt", "Wait for non-interruptible pods before the "
                                "interrupt", "Drain the node before the interrupt") if why else
                               ("Cordon the node", "Wait for non-interruptible pods to finish", "Drain the node"))
        self.step(cordon, lambda: self.module("node_cordon", state="cordoned", reason=reason,
                                              resource=self.resource), action=CORDON)
        if self.selector:
            self.wait_for_protected_pods(wait)
        self.step(drain, lambda: self.module(
            "node_drain", cordon=False, timeout=self.opt["drain_timeout"], force=_truthy(self.opt["drain_force"]),
            delete_emptydir_data=_truthy(self.opt["drain_delete_emptydir_data"]),
            ignore_daemonsets=_truthy(self.opt["drain_ignore_daemonsets"]),
            disable_eviction=_truthy(self.opt["drain_disable_eviction"]),
            grace_period=self.opt["drain_grace_period"], skip_namespaces=self.opt["drain_skip_namespaces"] or [],
            non_interruptible_selector=self.selector or None, resource=self.resource), action=DRAIN)
        self.node.read()

    def request_maintenance(self):
        """Requestor mode: the maintenance-operator cordons, waits for the protected pods and drains."""
        drain = {"force": _truthy(self.opt["drain_force"]), "timeout": self.opt["drain_timeout"],
                 "delete_emptydir_data": _truthy(self.opt["drain_delete_emptydir_data"])}
        pods = {"pod_selector": self.selector, "timeout": self.opt["wait_timeout"]} if self.selector else None
        try:
            self.step("Ask the maintenance-operator for the node's maintenance", lambda: self.module(
                "node_maintenance", drain=drain, wait_for_pods=pods, **self.maintenance_options()), action=MAINTENANCE)
        except StepFailed:
            self.release_maintenance(wait=False)  # not made ready: nothing was done on the node
            raise
        self.node.read()

    def maintenance_options(self):
        return node_maintenance.settings(self.opt["maintenance_request"])

    def release_maintenance(self, wait=True):
        self.step("Release the node's maintenance request", lambda: self.module(
            "node_maintenance", state="absent", wait=wait, **self.maintenance_options()), action=MAINTENANCE)

    def wait_for_protected_pods(self, step):
        """Wait for the non-interruptible pods; past the wait (or, over several runs, past the give-up
        deadline) raise StillBlocked (the node is left blocked) or StepFailed (it is erroring)."""
        state = self.node.state(self.resource)
        since = state.get("blockedSince")
        give_up = int(self.opt["wait_give_up_after"] or 0)
        timeout = int(self.opt["wait_timeout"])
        if give_up and isinstance(since, str):
            # Blocked in an earlier run: wait no longer than what is left before giving up.
            left = give_up - node_ops.seconds_since(since)
            timeout = max(1, min(timeout, int(left))) if left > 0 else 1
        try:
            self.step(step, lambda: self.module(
                "node_wait_pods", selectors=self.selector, timeout=timeout, resource=self.resource), action=WAIT_PODS)
        except StepFailed as failure:
            pods = [p["pod"] for p in failure.result.get("blocking") or [] if isinstance(p, dict) and p.get("pod")]
            if not pods or self.phase != "all" or not self.in_rollout:
                raise
            if give_up and isinstance(since, str) and node_ops.seconds_since(since) >= give_up:
                raise StepFailed(failure.step, dict(failure.result, msg=(
                    "non-interruptible pods have held the node since %s, longer than its giveUpAfter (%ss): %s; "
                    "nothing was evicted" % (since, give_up, ", ".join(pods)))))
            raise StillBlocked(failure.step, dict(failure.result, blocked=pods, blocked_since=since))
        if since or state.get("blockedBy"):
            # No longer blocked (an earlier run left the node so): a later block counts its time
            # afresh, and nothing on the node says it is still held.
            self.pending_state.update({"blockedSince": None, "blockedBy": None})
            self.node.read()
            self.step("Clear what said the node was blocked", lambda: {"changed": any([
                self.node.remove_annotation(markers.ANNOTATION_BLOCKED_BY),
                node_ops.current_condition(self.node.node, markers.CONDITION_NODE_NON_INTERRUPT) is not None and
                self.node.condition(markers.CONDITION_NODE_NON_INTERRUPT, "False", "NoneRunning",
                                    "the non-interruptible pods finished")])})

    def stopped(self):
        """``paused`` or ``disabled`` when the resource is so now (``nodewright pause``/``disable``
        during the run), else None. Read at the step boundaries of a rollout's node: before the
        node is touched and before its packages run; a stage or interrupt that started finishes."""
        if not self.entry or self.check_mode:
            return None
        from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
            is_disabled,
            is_paused,
        )
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
        try:
            obj = nodewright_api.get(self.node.api, nodewright_api.NODEWRIGHTS, self.resource, field="resource")
        except NodeWrightError:
            return None  # not a NodeWright resource of this cluster (inline), or not readable: go on
        return "paused" if is_paused(obj) else "disabled" if is_disabled(obj) else None

    def paused(self, how, where):
        """The node stops here because its resource was paused or disabled; the next run after the
        resume takes it up again where it stopped (the rollout counts it as neither done nor failed)."""
        before = "it was touched" if where == "start" else "its packages"
        verb = {"paused": "resume", "disabled": "enable"}[how]
        words = ("node %s stopped before %s: NodeWright %s was %s during the run; `nodewright %s %s` and the "
                 "next run go on from there" % (self.name, before, self.resource, how, verb, self.resource))
        out = self.outcome(self.phase)
        out.update(paused=where, msg=words,
                   ansible_stats={"data": {STAT_PAUSED: {self.name: where}}, "per_host": False, "aggregate": True})
        return out

    def blocked(self, step, result):
        """The node's non-interruptible pods outlived this run's wait: leave it cordoned (nothing new
        lands there while the job ends by itself) and marked blocked, for the next run to take up."""
        pods = result["blocked"]
        since = result.get("blocked_since") or node_ops.now_iso()
        text = ", ".join(pods)
        words = ("node %s stays cordoned: non-interruptible pods still run after %ss (nothing was evicted): %s; the "
                 "next run takes the node up again once they end" % (self.name, self.opt["wait_timeout"], text))
        self.step("Leave the node blocked by its non-interruptible pods", lambda: self.mark(
            markers.STATUS_BLOCKED, {"step": step, "blockedBy": pods, "blockedSince": since},
            event=(markers.EVENT_BLOCKED, words[:900], "Warning")))
        self.step("Say why on the node", lambda: {"changed": self.node.condition(
            markers.CONDITION_NODE_NON_INTERRUPT, "True", "NonInterruptPodsRunning",
            "blocked since %s by %d non-interruptible pod(s): %s" % (since, len(pods), text))})
        out = self.outcome(self.phase)
        out.update(changed=True, blocked=pods, blocked_since=since, msg=words,
                   ansible_stats={"data": {STAT_BLOCKED: {self.name: pods}}, "per_host": False, "aggregate": True})
        return out

    def run_packages(self, phase):
        if self.packages is None:
            return None
        arch = package_sources.node_architecture(self.node.node)
        packages = node_packages(self.packages, self.images, arch)
        if any(spec.get("env_from") for spec in packages):
            resolved = []
            self.step("Read the packages' Secrets and ConfigMaps", lambda: self.packages_with_env(packages, resolved))
            packages = resolved
        args = {"packages": packages, "host_root": self.host_root, "resource": self.resource, "phase": phase,
                "prune": bool(self.action._var(self.task_vars, "packages_prune", False)),
                "keep_logs": int(self.action._var(self.task_vars, "packages_keep_logs", 5))}
        # What `nodewright adopt` took over from upstream NodeWright is recorded in the node's
        # annotation only: the host's own state learns it here, so nothing of it runs again.
        adopted = {name: entry for name, entry in (self.node.state(self.resource).get("packages") or {}).items()
                   if isinstance(entry, dict) and entry.get("adoptedFrom")}
        if adopted:
            args["adopted"] = adopted
        task_vars = dict(self.task_vars, nodewright_node_architecture=arch) if arch else self.task_vars
        name = "Run the packages" if phase == "main" else "Run the packages' post-interrupt stages"
        try:
            result = self.step(name, lambda: self.action.package_action(task_vars, args), action=PACKAGE)
        except StepFailed as failure:
            self.remember_packages(failure.result)
            raise
        self.remember_packages(result)
        if phase == "main":
            # The packages say which interrupt they need (the task's own interrupt applies
            # only when there are no packages to run).
            self.interrupt = result.get("interrupt") or {"type": "noop"}
        return result

    def packages_with_env(self, packages, out):
        """``env_from`` resolved into ``env`` now, on the controller, into ``out``: a
        Secret's value reaches the steps' environment only, never the plan, a status,
        this step's result or a log."""
        lookup = desired_state.env_lookup_for(self.node.api)
        try:
            for spec in packages:
                spec = dict(spec)
                refs = spec.pop("env_from", None)
                if refs:
                    where = "spec.packages.%s.env" % spec.get("name")
                    spec["env"] = dict(spec.get("env") or {}, **desired_state.resolve_env_from(refs, lookup, where))
                out.append(spec)
        except NodeWrightError as exc:
            return {"failed": True, "changed": False, "msg": str(exc)}
        return {"changed": False}

    def remember_packages(self, result):
        self.packages_result = result
        state = result.get("state") if isinstance(result, dict) else None
        if isinstance(state, dict):
            self.pending_state.update({"packages": state.get("packages") or {},
                                       "interrupt": result.get("interrupt") or {"type": "noop"}})

    def do_interrupt(self, run_post=True):
        kind = self.interrupt.get("type", "noop")
        self.interrupted = True
        if not self.took_out:
            # The plan called the work non-disruptive, a package asked for an interrupt at
            # run time (a new kernel installed): drain first all the same.
            self.take_out("interrupt %s requested by a package" % kind)
        services = self.interrupt.get("services") or []
        self.step("Record the interrupt", lambda: self.mark(
            None, {"step": "interrupt", "interrupt": self.interrupt},
            event=(markers.EVENT_INTERRUPT, "interrupt %s %s" % (kind, ",".join(services)))))
        if kind == "reboot":
            previous = self.node.read() and self.node.boot_id()
            if self.host_root != "/" or self.action.is_local():
                self.step("Reboot through the host root", lambda: self.command(["reboot"]), action=REBOOT)
            else:
                self.step("Reboot over SSH", lambda: self.skip_in_check(
                    lambda: self.action.reboot_action(self.task_vars, self.opt["reboot_timeout"])), action=REBOOT)
            self.step("Wait for the node to be Ready with a new boot ID", lambda: self.module(
                "node_wait_ready", previous_boot_id=previous, timeout=self.opt["reboot_timeout"]), action=WAIT_READY)
        elif kind == "service" and services:
            self.restart("Restart the services the packages asked for", ["systemctl", "restart"] + list(services))
        elif kind == "restartAllServices":
            self.restart("Reload kernel settings and restart services (restartAllServices)", ["sysctl", "--system"])
        if run_post:
            self.run_packages("post-interrupt")

    def restart(self, name, argv):
        """A non-reboot interrupt, restarted after a failure up to the resource's interruptRestartLimit
        times with the stage retries' backoff (package/retries.py). The restarts are recorded in the
        node state (``restarts``); past the limit ``restartLimitReached`` keeps later runs off the
        node until its packages change."""
        limits = self.entry.retries if self.entry else {}
        limit = int(limits.get("restart_limit", package_retries.DEFAULT_RESTART_LIMIT))
        backoff = float(limits.get("retry_backoff", package_retries.DEFAULT_RETRY_BACKOFF))
        restarts = 0
        while True:
            label = name if not restarts else "%s (restart %d of %d)" % (name, restarts, limit)
            try:
                result = self.step(label, lambda: self.command(argv), action=COMMAND)
            except StepFailed as failure:
                if restarts >= limit:
                    self.pending_state.update({"restarts": restarts, "restartLimitReached": True})
                    raise StepFailed(failure.step, dict(failure.result, msg=(
                        "%s; it failed %d time(s), its whole restart limit (interruptRestartLimit %d): the node is "
                        "not interrupted again until its packages change or `nodewright reset %s` forgets its record"
                        % (failure.result.get("msg") or "failed", restarts + 1, limit, self.name))))
                restarts += 1
                time.sleep(package_retries.backoff_delay(restarts, backoff))
                continue
            self.pending_state.update({"restarts": restarts or None, "restartLimitReached": None})
            return result

    def command(self, argv):
        return self.skip_in_check(lambda: self.action.host_command(argv, self.host_root))

    def gpu_check(self):
        """The resource's GPU health gate (node/gpu_health.py) on the node's host."""
        if self.check_mode:
            return {"changed": False, "skipped": True, "msg": "skipped in check mode"}
        gate = self.entry.gpu_health
        recorded = self.node.state(self.resource).get("gpusBefore")
        expected = recorded if isinstance(recorded, int) else gpu_health.allocatable_gpus(self.node.node)
        if not expected:
            return {"changed": False, "msg": "the node has no GPU: nothing to check"}

        def run(argv):
            out = self.action.host_command(argv, self.host_root)
            return out.get("rc"), (out.get("stdout") or "") + (out.get("stderr") or "")
        return gpu_health.check(run, gate, expected, self.name)

    def skip_in_check(self, fn):
        if self.check_mode:
            return {"changed": True, "skipped": True, "msg": "skipped in check mode"}
        return fn()

    def give_back(self):
        if self.took_out or self.interrupted or self.left_cordoned:
            self.step("Check the health gates before the node returns to work", lambda: self.module(
                "node_health", phase="post", conditions=self.opt["health_conditions"],
                labels=self.opt["health_labels"], validation_job=self.opt["validation_job"] or None,
                tolerations=self.entry.tolerations if self.entry else [],
                timeout=self.opt["health_timeout"]), action=HEALTH)
            if self.entry and self.entry.gpu_health:
                self.step("Check the GPUs before the node returns to work", self.gpu_check)
            if self.maintenance_options():
                self.release_maintenance()
            elif self.before_cordon != "cordoned_by_other":
                self.step("Uncordon the node (only NodeWright's own cordon)",
                          lambda: self.module("node_cordon", state="uncordoned"), action=CORDON)
            self.node.read()
        self.step("Mark the node complete", lambda: self.mark(
            markers.STATUS_COMPLETE, {"step": "done", "reason": "", "restartLimitReached": None, "gpusBefore": None},
            clear_error=True))

    def gate(self):
        params = {"taint_key": self.action._var(self.task_vars, "nodewright_taint_key",
                                                markers.TAINT_RUNTIME_REQUIRED)}
        resources = self.action._args.get("gate_resources")
        if resources is not None:
            params["resources"] = resources
        try:
            self.step("Open the runtime-required gate, or record why it stays closed",
                      lambda: self.module("node_gate", **params), action=GATE)
        except StepFailed:
            pass  # recorded in steps; the node's own outcome stands

    # ------------------------------------------------------------------ failure

    def failed(self, step, result):
        msg = result.get("msg") or "unknown failure"
        if isinstance(result, dict) and result.get("_untouched"):
            return {"failed": True, "changed": self.changed, "msg": msg, "failed_step": step}
        text = "%s: %s" % (step, msg)
        try:
            self.step("Mark the node erroring with the reason", lambda: self.mark(
                markers.STATUS_ERRORING, {"step": step, "reason": msg[:900]},
                error=("MaintenanceFailed", text[:900]), event=(markers.EVENT_FAILED, text[:900], "Warning")))
        except StepFailed:
            pass
        cordoned = self.node.node is not None and bool((self.node.node.get("spec") or {}).get("unschedulable"))
        given_back, own = False, self.before_cordon != "cordoned_by_other" and not self.maintenance_options()
        if self.opt["on_failure"] == "uncordon" and own and cordoned:
            try:
                self.step("Give the node back to work despite the failure",
                          lambda: self.module("node_cordon", state="uncordoned"), action=CORDON)
                given_back = True
            except StepFailed:
                pass
        # The message says what is so: a node never taken out of work is not "left cordoned".
        if given_back:
            where = "uncordoned"
        elif cordoned and self.before_cordon == "cordoned_by_other":
            where = "left cordoned (someone else cordoned it; NodeWright does not uncordon it)"
        elif cordoned:
            where = "left cordoned for triage"
        else:
            where = "not cordoned (it was never taken out of work)"
        return {"failed": True, "changed": self.changed, "failed_step": step,
                "msg": "maintenance of node %s failed at '%s': %s. The node is %s and marked erroring (label "
                       "nodewright.io/status-%s, condition nodewright.io/Erroring)."
                       % (self.name, step, msg, where, self.resource)}

    def fail_phase(self):
        """The safe_update role's rescue: mark a failure that happened in the user's tasks."""
        args = self.action._args
        self.node.read()
        self.before_cordon = args.get("before_cordon") or self.before_cordon
        return self.failed(args.get("failed_step") or "unknown", {"msg": args.get("failure") or "unknown failure"})

    def outcome(self, phase):
        out = {"changed": self.changed, "node": self.name, "resource": self.resource, "phase": phase,
               "cordon_before": self.before_cordon, "took_out": self.took_out, "interrupted": self.interrupted,
               "interrupt": self.interrupt, "status": self.node.status(self.resource) if self.node.node else None,
               "boot_id": self.node.boot_id() if self.node.node else None}
        if self.packages_result is not None:
            for key in ("packages", "plan", "state"):
                if key in self.packages_result:
                    out[key] = self.packages_result[key]
        return out
