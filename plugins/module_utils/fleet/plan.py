# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run plan as types: what a rollout of the cluster's NodeWright resources needs,
built once by ``desired_state.describe_all`` from the cluster's objects.

``RunPlan`` holds a ``ResourcePlan`` per resource that can be rolled out, with a
``NodePlan`` per targeted node. Each resource's DeploymentPolicy is parsed once, when
its plan is built (or read back): ``ResourcePlan.policy`` is the parsed ``Policy``.

Where the plan crosses into Ansible (the ``nodewright.fleet.desired_state`` module's
result, registered as ``nodewright_desired`` and read by ``playbooks/rollout.yml``, the
strategy plugin and the ``maintain`` action; ``plan.yml``'s plan file) it is a plain
mapping made by ``to_dict()`` that carries ``schema: SCHEMA_VERSION``; readers take it
back with ``RunPlan.from_dict()``, which refuses another schema version and any key
this version does not know (a plan written by another NodeWright release).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError

SCHEMA_VERSION = 1

# Keys of a registered module result that are Ansible's, not the plan's.
_RESULT_KEYS = frozenset(("changed", "failed", "msg", "warnings", "deprecations", "invocation", "skipped",
                          "exception", "ansible_facts", "skip_reason", "diff", "attempts"))


class PlanError(NodeWrightError):
    """A serialized run plan this collection cannot read."""


def _hint():
    return ("plan again with this collection (run nodewright.fleet.desired_state, `nodewright plan` or plan.yml) "
            "instead of passing a plan made by another NodeWright release")


@dataclass
class PackageSpec:
    """One package of a resource as the run asks for it: the ``nodewright.fleet.package``
    module's spec (``to_dict``), its source resolved when the plan was made (a package
    directory, or an image reference pinned to its digest)."""

    name: str
    src: str = ""
    version: str = ""
    config: dict = field(default_factory=dict)        # configMap, with what a resolver derived
    state: str | None = None                          # absent: uninstall.apply
    interrupt: dict | None = None
    config_interrupts: dict | None = None
    depends_on: dict | None = None
    env: dict | None = None                           # literal values
    env_from: list | None = None                      # Secret / ConfigMap references, read when it runs
    stage_timeout: int | None = None
    reapply_on_reboot: bool = False
    stage_retries: int | None = None
    retry_backoff: object = None
    refuse_downgrade: bool = False

    def to_dict(self):
        """The package module's spec: the fields that are set."""
        out = {"name": self.name, "src": self.src, "version": self.version, "config": self.config}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in out and value is not None and value is not False:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data, where="package"):
        if isinstance(data, PackageSpec):
            return data
        if not isinstance(data, dict) or not data.get("name"):
            raise PlanError("%s: a package spec must be a mapping with a name, got %r" % (where, data), hint=_hint())
        where = "%s %s" % (where, data["name"])
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise PlanError("%s: unknown key(s) %s (run plan schema %d)" % (where, ", ".join(unknown), SCHEMA_VERSION),
                            hint=_hint())
        values = dict(data)
        values["config"] = dict(data.get("config") or {})
        return cls(**values)


@dataclass
class NodePlan:
    """What a run would do on one targeted node."""

    actions: dict = field(default_factory=dict)       # package -> apply/upgrade/config/uninstall/...
    interrupt: dict = field(default_factory=lambda: {"type": "noop"})
    changed: bool = False                              # something would run
    disruptive: bool = False                           # its interrupt is not noop
    packages: list = field(default_factory=list)       # the package planner's entries
    malformed: str | None = None                       # why the node's state cannot be read
    resolved: dict = field(default_factory=dict)       # resolver plan key -> what it sets here

    def to_dict(self):
        out = {"actions": self.actions, "interrupt": self.interrupt, "changed": self.changed,
               "disruptive": self.disruptive, "packages": self.packages}
        if self.malformed is not None:
            out["malformed"] = self.malformed
        out.update(self.resolved)
        return out

    @classmethod
    def from_dict(cls, data, where="node plan"):
        from ansible_collections.nodewright.fleet.plugins.module_utils.package import resolvers
        if not isinstance(data, dict):
            raise PlanError("%s: expected a mapping, got %s" % (where, type(data).__name__), hint=_hint())
        known = {f.name for f in fields(cls)} - {"resolved"}
        plan_keys = set(resolvers.plan_keys())
        unknown = sorted(set(data) - known - plan_keys)
        if unknown:
            raise PlanError("%s: unknown key(s) %s (run plan schema %d)" % (where, ", ".join(unknown), SCHEMA_VERSION),
                            hint=_hint())
        values = {k: data[k] for k in known if k in data}
        return cls(resolved={k: data[k] for k in plan_keys if k in data}, **values)


@dataclass
class ResourcePlan:
    """One NodeWright resource's part of a run (``desired_state.describe``).

    =========================== ==========================================================
    ``name``, ``priority``      the resource and its priority (lower first)
    ``generation``              its ``metadata.generation``
    ``paused``, ``disabled``    its pause / disable annotations
    ``deleting``                it has a ``deletionTimestamp``: no rollout; its nodes are
                                uninstalled (``deletion``, ``playbooks/uninstall.yml``)
    ``policy``, ``policy_name`` the DeploymentPolicy in force (parsed; its spec when
                                serialized) and its name
    ``waves``                   the waves the policy makes (a dry run)
    ``unavailable``             targets that are NotReady or under the GPU Operator's
                                driver upgrade: node -> why, and whether they hold
                                capacity and wait or are resumed (``describe_all``)
    ``targets``                 targeted nodes in batch order: the ones the resource's
                                ``status.nodePriority`` names first (in that order), then
                                oldest ``creationTimestamp`` first
    ``work``                    targets with something to do (not held, not malformed)
    ``nodes``                   per target: ``actions`` per package, ``interrupt``,
                                ``changed``, ``disruptive``, ``packages`` (plan entries)
    ``packages``                ``PackageSpec``: the package module's specs, sources
                                resolved; each with ``stage_timeout`` (seconds) when one applies,
                                ``reapply_on_reboot`` with ``reapplyOnReboot`` and
                                ``state: absent`` for a package with ``uninstall.apply``
    ``images``                  per package from an image index of several platforms:
                                ``{reference, archs}``, the reference pinned to the index
                                and the targets' architectures, each variant already
                                unpacked; a node's run takes its own architecture's
                                variant
    ``non_interruptible``       ``podNonInterruptLabels``
    ``runtime_required``        ``runtimeRequired``
    ``drain``                   ``drainConfig`` as ``nodewright.fleet.node_drain`` options
                                (``timeout``, ``grace_period`` in seconds,
                                ``delete_emptydir_data``, ``force``, ``ignore_daemonsets``,
                                ``disable_eviction``), only those the resource sets; the
                                driver merges: role defaults < ``drain`` < variables the
                                user gave the playbook
    ``non_interrupt_wait``      ``podNonInterruptWait`` in seconds (``timeout``,
                                ``give_up_after``), only those the resource sets
    ``stage_timeout``           ``spec.stageTimeout`` in seconds (None: no bound)
    ``sequencing``              ``node`` or ``all``; ``held`` (a reason) and ``held_by``
                                when an earlier ``sequencing: all`` resource is not
                                complete everywhere yet (``apply_sequencing``): then
                                ``work`` is empty and ``held_work`` what it would be
    ``reapply_on_reboot``       ``reapplyOnReboot``: the package module applies a complete
                                package again when the node's boot id changed since
                                (its specs carry it), and the reconciler re-taints a
                                runtimeRequired node for that (``gating.retaint_after_reboot``)
    ``malformed``               ``[{node, resource, message}]``: targets whose state
                                annotation cannot be parsed; they are left out of ``work``
                                and the rollout marks them (condition ``nodewright.io/
                                Erroring``, reason ``MalformedState``)
    ``repaired``                targets whose ``MalformedState`` mark their state no
                                longer deserves: the rollout clears it
    ``uninstalling``            nodes of ``work`` where a package is to be uninstalled
                                (``uninstall.apply``): status ``UninstallInProgress``
    ``recorded``                nodes that carry a state of this resource (targeted or
                                not): what an uninstall of it must visit
    ``retries``                 ``{stage_retries, retry_backoff, restart_limit}``: the retry
                                budget of a stage and the restart limit of a non-reboot
                                interrupt (``stageRetries``, ``stageRetryBackoff`` in seconds,
                                ``interruptRestartLimit``), defaults filled in
    ``refused``                 ``[{node, resource, kind, message}]``: targets left out of
                                ``work`` although they differ from the spec - ``kind``
                                ``exhausted`` (a stage's retry budget is spent),
                                ``downgrade-refused`` (uninstall first) or ``restart-limit``
                                (``refused_nodes``); the run ends non-zero naming them
    =========================== ==========================================================
    ``from_cluster``, ``conversion_warnings``: read from the cluster (not given to the
    module), and what converting it from upstream's objects changed; ``protected``: node
    -> the non-interruptible pods running there; ``soak``, ``alert_gate``: the policy's
    soak times and alert gate (with a check of it now); ``adoptable``: node -> packages
    upstream NodeWright completed there that ``nodewright adopt`` can record.
    """

    name: str
    policy: object                                    # fleet.policy.DeploymentPolicy, parsed once
    policy_name: str | None = None                    # its DeploymentPolicy, None: the interruptionBudget's
    priority: int = 200
    generation: int | None = None
    paused: bool = False
    disabled: bool = False
    deleting: bool = False                            # a deletionTimestamp: its nodes are uninstalled
    from_cluster: bool = True                         # read from the cluster (not given to the module)
    targets: list = field(default_factory=list)       # targeted nodes in batch order
    work: list = field(default_factory=list)          # targets with something to do
    nodes: dict = field(default_factory=dict)         # target -> NodePlan
    packages: list = field(default_factory=list)      # PackageSpec, sources resolved
    images: dict = field(default_factory=dict)        # package -> {reference, archs} of an image index
    waves: dict = field(default_factory=lambda: {"waves": [], "status": "unplanned", "reason": ""})
    node_order: dict = field(default_factory=dict)    # status.nodePriority
    non_interruptible: dict = field(default_factory=dict)   # podNonInterruptLabels
    runtime_required: bool = False
    drain: dict = field(default_factory=dict)         # drainConfig as node_drain options
    non_interrupt_wait: dict = field(default_factory=dict)  # podNonInterruptWait in seconds
    stage_timeout: int | None = None
    tolerations: list = field(default_factory=list)
    gpu_health: dict | None = None
    sequencing: str = "node"
    held: str | None = None                           # why a sequencing: all resource holds it
    held_by: str | None = None
    held_work: list | None = None                     # its work while held
    uninstalling: list = field(default_factory=list)
    reapply_on_reboot: bool = False
    retries: dict = field(default_factory=dict)       # {stage_retries, retry_backoff, restart_limit}
    malformed: list = field(default_factory=list)     # [{node, resource, message}]
    repaired: list = field(default_factory=list)
    refused: list = field(default_factory=list)       # [{node, resource, kind, message}]
    recorded: list = field(default_factory=list)      # nodes carrying a state of this resource
    adoptable: dict = field(default_factory=dict)     # node -> upstream-completed packages
    unavailable: dict = field(default_factory=dict)   # target -> why it is not admitted now
    protected: dict = field(default_factory=dict)     # node -> non-interruptible pods running there
    soak: dict = field(default_factory=dict)          # compartment -> soakTime
    alert_gate: dict | None = None                    # {gate, describe, now}
    recorded_conversion_warnings: list = field(default_factory=list)
    conversion_warnings: list = field(default_factory=list)

    @property
    def source(self):
        """Where its policy comes from, in words."""
        if self.policy_name:
            return "DeploymentPolicy/%s" % self.policy_name
        return "interruptionBudget of %s" % self.name

    @property
    def rollable(self):
        """Neither paused, disabled nor being deleted."""
        return not (self.paused or self.disabled or self.deleting)

    def node(self, name):
        """The NodePlan of target ``name`` (an empty one for a node it does not target)."""
        return self.nodes.get(name) or NodePlan()

    def to_dict(self):
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "policy":
                value = value.to_dict()
            elif f.name == "nodes":
                value = {n: p.to_dict() for n, p in value.items()}
            elif f.name == "packages":
                value = [spec.to_dict() for spec in value]
            out[f.name] = value
        out["schema"] = SCHEMA_VERSION
        return out

    @classmethod
    def from_dict(cls, data, where="run plan"):
        from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
        if not isinstance(data, dict):
            raise PlanError("%s: a resource's plan must be a mapping, got %s" % (where, type(data).__name__),
                            hint=_hint())
        name = data.get("name")
        where = "%s: resource %s" % (where, name or "?")
        _check_schema(data, where)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"schema"})
        if unknown:
            raise PlanError("%s: unknown key(s) %s (run plan schema %d)" % (where, ", ".join(unknown), SCHEMA_VERSION),
                            hint=_hint())
        missing = [k for k in ("name", "policy") if data.get(k) is None]
        if missing:
            raise PlanError("%s: missing %s" % (where, ", ".join(missing)), hint=_hint())
        values = {k: data[k] for k in known if k in data}
        values["policy"] = parse_policy(data["policy"], "NodeWright %s: policy" % name)
        values["nodes"] = {n: NodePlan.from_dict(p, "%s: node %s" % (where, n))
                           for n, p in (data.get("nodes") or {}).items()}
        values["packages"] = [PackageSpec.from_dict(p, "%s: package" % where) for p in data.get("packages") or []]
        return cls(**values)


@dataclass
class RunPlan:
    """Every resource of a run (``desired_state.describe_all``)."""

    rollouts: list = field(default_factory=list)      # ResourcePlan, in priority order
    blocked: list = field(default_factory=list)       # [{name, reason, conflict?}] not described
    waves: list = field(default_factory=list)         # the run's waves (a dry run of the driver)
    conflicts: list = field(default_factory=list)
    status: str = "complete"
    reason: str = ""

    def resource(self, name):
        """The ResourcePlan of ``name``, or None."""
        for plan in self.rollouts:
            if plan.name == name:
                return plan
        return None

    def to_dict(self):
        return {"schema": SCHEMA_VERSION, "rollouts": [r.to_dict() for r in self.rollouts], "blocked": self.blocked,
                "waves": self.waves, "conflicts": self.conflicts, "status": self.status, "reason": self.reason}

    @classmethod
    def from_dict(cls, data, where="run plan"):
        """A RunPlan from its mapping (or from the registered result of
        ``nodewright.fleet.desired_state``, whose Ansible keys are left aside)."""
        if isinstance(data, RunPlan):
            return data
        if not isinstance(data, dict) or not isinstance(data.get("rollouts"), list):
            raise PlanError("%s must be the result of nodewright.fleet.desired_state (with rollouts), got %s"
                            % (where, type(data).__name__), hint=_hint())
        _check_schema(data, where)
        unknown = sorted(k for k in set(data) - {f.name for f in fields(cls)} - {"schema"} - _RESULT_KEYS
                         if not str(k).startswith("_ansible"))
        if unknown:
            raise PlanError("%s: unknown key(s) %s (run plan schema %d)" % (where, ", ".join(unknown), SCHEMA_VERSION),
                            hint=_hint())
        return cls(rollouts=[ResourcePlan.from_dict(r, where) for r in data["rollouts"]],
                   blocked=list(data.get("blocked") or []), waves=list(data.get("waves") or []),
                   conflicts=list(data.get("conflicts") or []), status=data.get("status") or "complete",
                   reason=data.get("reason") or "")


def _check_schema(data, where):
    version = data.get("schema")
    if version != SCHEMA_VERSION:
        raise PlanError("%s: written with run plan schema %s; this collection reads schema %d"
                        % (where, "(none)" if version is None else version, SCHEMA_VERSION), hint=_hint())
