# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""DeploymentPolicy: which nodes go next, how many, and when a rollout must stop.

Everything here is a pure function of its inputs (the policy, the nodes, the state
of earlier waves, the time), so the rollout strategy plugin, ``plan.yml`` and any
automation driving waves through ansible-runner all make the same decisions.

Vocabulary and batch math follow Skyhook's DeploymentPolicy (``default`` and
``compartments`` with a ``budget`` and a ``fixed`` / ``linear`` / ``exponential``
``strategy``). NodeWright differs where Skyhook leaves a gap:

* the budget ceiling is a hard cap on nodes in progress in a compartment, under
  every strategy, and counts nodes that other NodeWright resources have in progress;
* ``topology`` caps nodes in progress per value of a label (an NVLink clique, a
  rack, a zone), across all NodeWright resources;
* ``fleetDisruptionLimit`` caps nodes in progress across the whole fleet;
* ``maintenanceWindows`` say when a new wave may start;
* ``alertGate`` admits no node while a matching Prometheus/Alertmanager alert fires,
  and a compartment's ``soakTime`` waits between its batches.

docs/deployment-policy.md describes the semantics with worked examples.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    check_keys as _check_keys,
    field_path as _path,
    parse_duration,
    read_bool as _read_bool,
    read_int,
    require_mapping,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.alerts import AlertGate, parse_alert_gate
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.windows import (
    MaintenanceWindow,
    _coerce_windows,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import (
    Selector,
    to_selector,
    validate_key,
)


DEFAULT_COMPARTMENT = "__default__"

# Safest first: the index is the rank used by the overlap tie-break.
STRATEGY_KINDS = ("fixed", "linear", "exponential")

_COMPARTMENT_NAME_MAX = 63

_SPEC_KEYS = ("default", "compartments", "resetBatchStateOnCompletion", "topology",
              "fleetDisruptionLimit", "maintenanceWindows", "alertGate", "nodeOrder")
# Order of the nodes a batch may take (fleet/workloads.py): creation time (upstream's), or
# the nodes with nothing protected running first.
NODE_ORDERS = ("creation", "workload")
_COMMON_PARAMS = ("initialBatch", "batchThreshold", "failureThreshold", "safetyLimit")
_EXTRA_PARAMS = {"fixed": (), "linear": ("delta",), "exponential": ("growthFactor",)}

# What each number means, told to whoever set it wrong.
_PARAM_HELP = {
    "initialBatch": "initialBatch is the size of the first batch; use 1 or more (default 1)",
    "batchThreshold": "batchThreshold is the percent of a batch's nodes that must succeed for the "
                      "batch to count as good; use 1-100 (default 100)",
    "failureThreshold": "failureThreshold is how many failed batches in a row stop the rollout; use 1 "
                        "or more, or leave it out to never stop",
    "safetyLimit": "safetyLimit is the progress percent below which failures slow and stop the "
                   "rollout; use 1-100 (default 50)",
    "delta": "delta is how many nodes each good batch adds (and a failed one removes); use 1 or more "
             "(default 1)",
    "growthFactor": "growthFactor multiplies the batch after a good batch (and divides it after a "
                    "failed one); use 2 or more (default 2)",
    "percent": "percent of the compartment's nodes that may be in progress at once; use 1-100",
    "count": "count of nodes that may be in progress at once; use 1 or more",
    "maxInProgress": "maxInProgress is how many nodes sharing one topology label value may be in "
                     "progress at once; use 1 or more (default 1)",
}

# Wave decision statuses.
WAVE = "wave"              # a wave was chosen
COMPLETE = "complete"      # every node is done
INCOMPLETE = "incomplete"  # nothing left to try in this run, but some nodes failed or are blocked
HALTED = "halted"          # a compartment's failureThreshold stopped the rollout
WAITING = "waiting"        # work remains but may not start now (window, limits, other resources)


def _mapping(value, where, what):
    return require_mapping(value, where, what, hint="see docs/deployment-policy.md for the shape")


def _read_int(mapping, key, where, minimum, maximum=None, default=None):
    return read_int(mapping, key, where, minimum, maximum, default, hint=_PARAM_HELP.get(key))


def progress_percent(state, total):
    """(completed + failed) * 100 / total, floored; 0 for an empty compartment."""
    if total <= 0:
        return 0
    return (state.completed_nodes + state.failed_nodes) * 100 // total


# --------------------------------------------------------------------------- policy model


@dataclass(frozen=True)
class Budget(object):
    """How many nodes may be in progress at once: a percent of the matched nodes or a count."""

    percent: Optional[int] = None
    count: Optional[int] = None

    def ceiling(self, matched):
        """Skyhook's ceiling: the count, or max(1, floor(matched * percent / 100)); 0 if none match."""
        if matched <= 0:
            return 0
        if self.count is not None:
            return self.count
        return max(1, matched * self.percent // 100)

    def to_dict(self):
        return {"count": self.count} if self.count is not None else {"percent": self.percent}

    def describe(self):
        return ("%d nodes" % self.count) if self.count is not None else ("%d%%" % self.percent)


def parse_budget(value, where, what="budget"):
    """Parse ``{percent: 1-100}`` or ``{count: >=1}`` (exactly one)."""
    _mapping(value, where, what)
    _check_keys(value, ("percent", "count"), where)
    has_percent = value.get("percent") is not None
    has_count = value.get("count") is not None
    if has_percent and has_count:
        raise ValidationError("sets both percent and count", field=where,
                              hint="keep one: percent scales with the number of nodes, count is fixed")
    if not has_percent and not has_count:
        raise ValidationError("%s needs percent (1-100) or count (>= 1)" % what, field=where,
                              hint="e.g. {percent: 25} or {count: 2}")
    return Budget(percent=_read_int(value, "percent", where, 1, 100),
                  count=_read_int(value, "count", where, 1))


@dataclass(frozen=True)
class Strategy(object):
    """Batch growth and the failure rules. ``initial_batch=None`` means "fill to the ceiling"
    (a budget without a strategy, as with a plain ``interruptionBudget``)."""

    kind: str = "fixed"
    initial_batch: Optional[int] = 1
    batch_threshold: int = 100
    failure_threshold: Optional[int] = None
    safety_limit: int = 50
    delta: int = 1
    growth_factor: int = 2

    @property
    def rank(self):
        return STRATEGY_KINDS.index(self.kind)

    @property
    def fills_ceiling(self):
        return self.initial_batch is None

    def next_batch_size(self, total, remaining, state):
        """Nodes the strategy asks for next, before the ceiling and the fleet limits.

        ``total`` is the compartment's node count, ``remaining`` how many of them may
        still be picked, ``state`` the compartment's BatchState.
        """
        if total <= 0 or remaining <= 0:
            return 0
        if self.fills_ceiling:
            return remaining
        last = state.last_batch_size
        if self.kind == "fixed" or last <= 0:
            size = self.initial_batch
        else:
            slow_down = state.last_batch_failed and progress_percent(state, total) < self.safety_limit
            if self.kind == "linear":
                size = max(1, last - self.delta) if slow_down else last + self.delta
            else:
                size = max(1, last // self.growth_factor) if slow_down else last * self.growth_factor
                size = min(size, total)
        return min(size, remaining)

    def record_batch(self, state, succeeded, failed, total):
        """Fold one finished batch into ``state``; return what was decided, for the report.

        Only nodes with an outcome count: a batch whose nodes were all blocked (waiting
        on non-interruptible pods) leaves the state untouched.
        """
        decided = succeeded + failed
        if decided == 0:
            return {"evaluated": False, "successPercent": None, "batchFailed": False,
                    "shouldStop": state.should_stop}
        success_percent = succeeded * 100 // decided
        batch_failed = success_percent < self.batch_threshold
        state.completed_nodes += succeeded
        state.failed_nodes += failed
        state.last_batch_size = decided
        state.last_batch_failed = batch_failed
        if batch_failed:
            state.consecutive_failures += 1
            if (self.failure_threshold is not None
                    and progress_percent(state, total) < self.safety_limit
                    and state.consecutive_failures >= self.failure_threshold):
                state.should_stop = True
        else:
            state.consecutive_failures = 0
        state.current_batch += 1
        return {"evaluated": True, "successPercent": success_percent, "batchFailed": batch_failed,
                "shouldStop": state.should_stop}

    def to_dict(self):
        if self.fills_ceiling:
            return None
        params = {"initialBatch": self.initial_batch, "batchThreshold": self.batch_threshold,
                  "safetyLimit": self.safety_limit}
        if self.failure_threshold is not None:
            params["failureThreshold"] = self.failure_threshold
        if self.kind == "linear":
            params["delta"] = self.delta
        elif self.kind == "exponential":
            params["growthFactor"] = self.growth_factor
        return {self.kind: params}


# A budget with no strategy: every wave fills the compartment up to its ceiling and
# failed batches never stop the rollout (the behaviour of Skyhook's interruptionBudget).
BUDGET_ONLY = Strategy(kind="fixed", initial_batch=None)


def parse_strategy(value, where):
    """Parse ``{fixed|linear|exponential: {...}}`` with defaults filled in."""
    _mapping(value, where, "strategy")
    if not value:
        raise ValidationError("names no strategy", field=where,
                              hint="set exactly one of: %s" % ", ".join(STRATEGY_KINDS))
    for key in value:
        if key not in STRATEGY_KINDS:
            near = difflib.get_close_matches(str(key), STRATEGY_KINDS, n=1)
            hint = "valid strategies: %s" % ", ".join(STRATEGY_KINDS)
            if near:
                hint = "did you mean %r? %s" % (near[0], hint)
            raise ValidationError("unknown strategy %r" % (key,), field=_path(where, key), hint=hint)
    if len(value) > 1:
        raise ValidationError("sets %s; a strategy is exactly one of them" % " and ".join(sorted(value)),
                              field=where, hint="keep one of: %s" % ", ".join(STRATEGY_KINDS))
    kind = next(iter(value))
    where = _path(where, kind)
    params = value[kind]
    if params is None:
        raise ValidationError("strategy %s has no settings" % kind, field=where,
                              hint="write %s: {} to take the defaults" % kind)
    _mapping(params, where, "strategy %s" % kind)
    _check_keys(params, _COMMON_PARAMS + _EXTRA_PARAMS[kind], where)
    return Strategy(
        kind=kind,
        initial_batch=_read_int(params, "initialBatch", where, 1, default=1),
        batch_threshold=_read_int(params, "batchThreshold", where, 1, 100, default=100),
        failure_threshold=_read_int(params, "failureThreshold", where, 1),
        safety_limit=_read_int(params, "safetyLimit", where, 1, 100, default=50),
        delta=_read_int(params, "delta", where, 1, default=1),
        growth_factor=_read_int(params, "growthFactor", where, 2, default=2),
    )


@dataclass(frozen=True)
class Compartment(object):
    """A named group of nodes with its own budget and strategy."""

    name: str
    selector: Selector
    budget: Budget
    strategy: Optional[Strategy] = None  # None: fill to the ceiling
    selector_source: object = None       # as written, for to_dict()
    soak_time: float = 0                 # seconds to wait after each batch before the next one

    @property
    def effective_strategy(self):
        return self.strategy if self.strategy is not None else BUDGET_ONLY

    def to_dict(self):
        out = {"name": self.name, "budget": self.budget.to_dict()}
        if self.name != DEFAULT_COMPARTMENT:
            source = self.selector_source
            if isinstance(source, Selector):
                source = source.to_string()
            out["selector"] = source if source is not None else {}
        strategy = self.strategy.to_dict() if self.strategy is not None else None
        if strategy is not None:
            out["strategy"] = strategy
        if self.soak_time:
            out["soakTime"] = _duration_text(self.soak_time)
        return out


@dataclass(frozen=True)
class Topology(object):
    """At most ``max_in_progress`` nodes in progress per value of label ``key``."""

    key: str
    max_in_progress: int = 1

    def to_dict(self):
        return {"key": self.key, "maxInProgress": self.max_in_progress}


@dataclass(frozen=True)
class DeploymentPolicy(object):
    """A parsed, validated DeploymentPolicy spec."""

    default: Compartment
    compartments: Tuple[Compartment, ...] = ()
    reset_batch_state_on_completion: bool = True
    topology: Optional[Topology] = None
    fleet_disruption_limit: Optional[Budget] = None
    maintenance_windows: Tuple[MaintenanceWindow, ...] = ()
    alert_gate: Optional[AlertGate] = None
    node_order: str = "creation"

    @property
    def all_compartments(self):
        """Named compartments in spec order, then the default one."""
        return self.compartments + (self.default,)

    def compartment(self, name):
        for comp in self.all_compartments:
            if comp.name == name:
                return comp
        return None

    def with_options(self, options):
        """Apply a NodeWright's ``deploymentPolicyOptions`` (they win over the policy)."""
        if not options:
            return self
        _mapping(options, "spec.deploymentPolicyOptions", "deploymentPolicyOptions")
        _check_keys(options, ("resetBatchStateOnCompletion",), "spec.deploymentPolicyOptions")
        reset = _read_bool(options, "resetBatchStateOnCompletion", "spec.deploymentPolicyOptions",
                           self.reset_batch_state_on_completion)
        return replace(self, reset_batch_state_on_completion=reset)

    def with_alert_gate(self, gate):
        """The policy under the run's own ``alertGate`` (an AlertGate; it replaces the policy's)."""
        return self if gate is None else replace(self, alert_gate=gate)

    def to_dict(self):
        """The normalised spec, defaults filled in."""
        default = {"budget": self.default.budget.to_dict()}
        if self.default.strategy is not None:
            default["strategy"] = self.default.strategy.to_dict()
        if self.default.soak_time:
            default["soakTime"] = _duration_text(self.default.soak_time)
        compartments = [c.to_dict() for c in self.compartments]
        if self.default.soak_time:
            # A compartment without its own takes the default's: say 0s where it has none.
            for comp, data in zip(self.compartments, compartments):
                data["soakTime"] = _duration_text(comp.soak_time)
        out = {"default": default,
               "compartments": compartments,
               "resetBatchStateOnCompletion": self.reset_batch_state_on_completion}
        if self.node_order != "creation":
            out["nodeOrder"] = self.node_order
        if self.topology is not None:
            out["topology"] = self.topology.to_dict()
        if self.fleet_disruption_limit is not None:
            out["fleetDisruptionLimit"] = self.fleet_disruption_limit.to_dict()
        if self.maintenance_windows:
            out["maintenanceWindows"] = [w.to_dict() for w in self.maintenance_windows]
        if self.alert_gate is not None:
            out["alertGate"] = self.alert_gate.to_dict()
        return out


def _duration_text(seconds):
    return "%ss" % (int(seconds) if seconds == int(seconds) else seconds)


def _soak_time(item, where, default=0):
    """``soakTime``: how long a compartment waits after each batch (a duration; 0 or unset: none)."""
    seconds = parse_duration(item.get("soakTime"), _path(where, "soakTime"), "soakTime")
    return default if seconds is None else seconds


def parse_policy(spec, where="spec"):
    """Validate a DeploymentPolicy ``spec`` and return a DeploymentPolicy.

    Raises ValidationError naming the field (``spec.compartments[1].strategy.linear.delta``)
    and how to fix it.
    """
    _mapping(spec, where, "a DeploymentPolicy spec")
    _check_keys(spec, _SPEC_KEYS, where)

    default_path = _path(where, "default")
    if spec.get("default") is None:
        raise ValidationError("a DeploymentPolicy needs a default", field=default_path,
                              hint="e.g. default: {budget: {percent: 25}, strategy: {fixed: {initialBatch: 1}}}")
    default_spec = _mapping(spec["default"], default_path, "default")
    _check_keys(default_spec, ("budget", "strategy", "soakTime"), default_path)
    if default_spec.get("budget") is None:
        raise ValidationError("default needs a budget", field=_path(default_path, "budget"),
                              hint="e.g. budget: {percent: 25}")
    default_strategy = None
    if default_spec.get("strategy") is not None:
        default_strategy = parse_strategy(default_spec["strategy"], _path(default_path, "strategy"))
    default = Compartment(name=DEFAULT_COMPARTMENT, selector=Selector(),
                          budget=parse_budget(default_spec["budget"], _path(default_path, "budget")),
                          strategy=default_strategy, soak_time=_soak_time(default_spec, default_path))

    compartments = []
    raw = spec.get("compartments")
    raw = [] if raw is None else raw
    comps_path = _path(where, "compartments")
    if not isinstance(raw, list):
        raise ValidationError("must be a list of compartments", field=comps_path)
    seen_names = {}
    seen_selectors = {}
    for n, item in enumerate(raw):
        here = _path(comps_path, n)
        _mapping(item, here, "a compartment")
        _check_keys(item, ("name", "selector", "budget", "strategy", "soakTime"), here)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError("a compartment needs a name", field=_path(here, "name"),
                                  hint="a short unique name such as 'canary' or 'h100-rack-a'")
        if len(name) > _COMPARTMENT_NAME_MAX:
            raise ValidationError("name is %d characters; the limit is %d" % (len(name), _COMPARTMENT_NAME_MAX),
                                  field=_path(here, "name"))
        if name == DEFAULT_COMPARTMENT:
            raise ValidationError("%r is reserved for nodes that match no compartment" % DEFAULT_COMPARTMENT,
                                  field=_path(here, "name"),
                                  hint="pick another name; configure those nodes under spec.default")
        if name in seen_names:
            raise ValidationError("duplicate compartment name %r (also %s)" % (name, seen_names[name]),
                                  field=_path(here, "name"), hint="compartment names must be unique")
        seen_names[name] = here
        if "selector" not in item or item["selector"] is None:
            raise ValidationError("a compartment needs a selector", field=_path(here, "selector"),
                                  hint="e.g. selector: {matchLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}")
        selector = to_selector(item["selector"], _path(here, "selector"))
        if selector in seen_selectors:
            other_name, other_path = seen_selectors[selector]
            raise ValidationError("selects exactly the same nodes as compartment %r (%s.selector)"
                                  % (other_name, other_path), field=_path(here, "selector"),
                                  hint="merge the two compartments or make their selectors differ")
        seen_selectors[selector] = (name, here)
        if item.get("budget") is None:
            raise ValidationError("a compartment needs a budget", field=_path(here, "budget"),
                                  hint="e.g. budget: {count: 1}")
        budget = parse_budget(item["budget"], _path(here, "budget"))
        strategy = default_strategy
        if item.get("strategy") is not None:
            strategy = parse_strategy(item["strategy"], _path(here, "strategy"))
        compartments.append(Compartment(name=name, selector=selector, budget=budget, strategy=strategy,
                                        selector_source=item["selector"],
                                        soak_time=_soak_time(item, here, default.soak_time)))

    topology = None
    if spec.get("topology") is not None:
        topo_path = _path(where, "topology")
        topo = _mapping(spec["topology"], topo_path, "topology")
        _check_keys(topo, ("key", "maxInProgress"), topo_path)
        if not topo.get("key"):
            raise ValidationError("topology needs a label key", field=_path(topo_path, "key"),
                                  hint="e.g. nvidia.com/gpu.clique, topology.kubernetes.io/zone or a rack label")
        topology = Topology(key=validate_key(topo["key"], _path(topo_path, "key")),
                            max_in_progress=_read_int(topo, "maxInProgress", topo_path, 1, default=1))

    fleet_limit = None
    if spec.get("fleetDisruptionLimit") is not None:
        fleet_limit = parse_budget(spec["fleetDisruptionLimit"], _path(where, "fleetDisruptionLimit"),
                                   what="fleetDisruptionLimit")

    windows = ()
    if spec.get("maintenanceWindows") is not None:
        win_path = _path(where, "maintenanceWindows")
        if not isinstance(spec["maintenanceWindows"], list):
            raise ValidationError("must be a list of windows", field=win_path,
                                  hint="e.g. [{days: [Sat], start: \"22:00\", end: \"04:00\", timeZone: UTC}]")
        windows = tuple(_coerce_windows(spec["maintenanceWindows"], win_path))

    gate = None
    if spec.get("alertGate") is not None:
        gate = parse_alert_gate(spec["alertGate"], _path(where, "alertGate"))

    node_order = spec.get("nodeOrder", "creation")
    if node_order not in NODE_ORDERS:
        raise ValidationError("nodeOrder must be one of %s, got %r" % (", ".join(NODE_ORDERS), node_order),
                              field=_path(where, "nodeOrder"),
                              hint="workload: nodes with no non-interruptible pod running first, then those whose "
                                   "pods end soonest; creation: oldest node first (the default)")

    return DeploymentPolicy(
        default=default,
        compartments=tuple(compartments),
        reset_batch_state_on_completion=_read_bool(spec, "resetBatchStateOnCompletion", where, True),
        topology=topology,
        fleet_disruption_limit=fleet_limit,
        maintenance_windows=windows,
        alert_gate=gate,
        node_order=node_order,
    )


def policy_from_interruption_budget(budget=None, where="spec.interruptionBudget"):
    """The policy a NodeWright without ``deploymentPolicy`` rolls out with.

    Like Skyhook: every wave fills up to the ceiling; no budget means 100%.
    """
    parsed = Budget(percent=100) if budget is None else parse_budget(budget, where, "interruptionBudget")
    return DeploymentPolicy(default=Compartment(name=DEFAULT_COMPARTMENT, selector=Selector(),
                                                budget=parsed, strategy=None))
