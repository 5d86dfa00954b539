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
* ``maintenanceWindows`` say when a new wave may start.

docs/deployment-policy.md describes the semantics with worked examples.
"""

from __future__ import annotations

import datetime
import difflib
import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

from ansible_collections.nodewright.fleet.plugins.module_utils.errors import (
    NodeWrightError,
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.markers import (
    LABEL_IGNORE,
    SKYHOOK_IGNORE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.selectors import (
    Selector,
    to_selector,
    validate_key,
)

try:  # Python 3.9+
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
except ImportError:  # pragma: no cover - Python 3.8 on a managed host
    try:
        from backports.zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:
        ZoneInfo = None
        ZoneInfoNotFoundError = KeyError

DEFAULT_COMPARTMENT = "__default__"

# Safest first: the index is the rank used by the overlap tie-break.
STRATEGY_KINDS = ("fixed", "linear", "exponential")

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

_COMPARTMENT_NAME_MAX = 63
_HHMM_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")

_SPEC_KEYS = ("default", "compartments", "resetBatchStateOnCompletion", "topology",
              "fleetDisruptionLimit", "maintenanceWindows")
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


# --------------------------------------------------------------------------- parsing helpers


def _path(where, key):
    if isinstance(key, int):
        return "%s[%d]" % (where, key)
    return "%s.%s" % (where, key) if where else key


def _mapping(value, where, what):
    if not isinstance(value, dict):
        raise ValidationError("%s must be a mapping, got %s" % (what, type(value).__name__),
                              field=where, hint="see docs/deployment-policy.md for the shape")
    return value


def _check_keys(mapping, allowed, where):
    for key in mapping:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = "allowed here: %s" % ", ".join(allowed)
            if near:
                hint = "did you mean %r? %s" % (near[0], hint)
            raise ValidationError("unknown field %r" % (key,), field=_path(where, key), hint=hint)


def _read_int(mapping, key, where, minimum, maximum=None, default=None):
    path = _path(where, key)
    value = mapping.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("must be a whole number, got %r" % (value,), field=path,
                              hint=_PARAM_HELP.get(key))
    if value < minimum or (maximum is not None and value > maximum):
        wanted = ("from %d to %d" % (minimum, maximum)) if maximum is not None else (">= %d" % minimum)
        raise ValidationError("must be %s, got %d" % (wanted, value), field=path,
                              hint=_PARAM_HELP.get(key))
    return value


def _read_bool(mapping, key, where, default):
    value = mapping.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("must be true or false, got %r" % (value,), field=_path(where, key))
    return value


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
        return out


@dataclass(frozen=True)
class Topology(object):
    """At most ``max_in_progress`` nodes in progress per value of label ``key``."""

    key: str
    max_in_progress: int = 1

    def to_dict(self):
        return {"key": self.key, "maxInProgress": self.max_in_progress}


@dataclass(frozen=True)
class MaintenanceWindow(object):
    """A weekly window in which new waves may start. ``days`` are the days a window
    opens on (0 = Monday); ``start``/``end`` are minutes after local midnight; a window
    with ``end <= start`` runs past midnight into the next day."""

    days: Tuple[int, ...]
    start: int
    end: int
    time_zone: str = "UTC"

    def _zone(self):
        return _zone(self.time_zone, None)

    def contains(self, now):
        local = _aware(now).astimezone(self._zone())
        minute = local.hour * 60 + local.minute
        weekday = local.weekday()
        if self.start < self.end:
            return weekday in self.days and self.start <= minute < self.end
        return ((weekday in self.days and minute >= self.start)
                or ((weekday - 1) % 7 in self.days and minute < self.end))

    def next_start(self, now):
        """The next moment after ``now`` this window opens."""
        now = _aware(now)
        zone = self._zone()
        local = now.astimezone(zone)
        opening = datetime.time(self.start // 60, self.start % 60)
        for offset in range(0, 8):
            day = local.date() + datetime.timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            candidate = datetime.datetime.combine(day, opening).replace(tzinfo=zone)
            if candidate > now:
                return candidate
        return None  # pragma: no cover - a window has at least one day

    def describe(self):
        days = ",".join(DAYS[d] for d in self.days) if len(self.days) < 7 else "every day"
        return "%s %s-%s %s" % (days, _hhmm(self.start), _hhmm(self.end), self.time_zone)

    def to_dict(self):
        return {"days": [DAYS[d] for d in self.days], "start": _hhmm(self.start),
                "end": _hhmm(self.end), "timeZone": self.time_zone}


def _hhmm(minutes):
    return "%02d:%02d" % (minutes // 60, minutes % 60)


def _aware(moment):
    # A naive time is read as UTC: the controller's local zone is not a fleet's zone.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def _zone(name, where):
    if ZoneInfo is None:
        raise ValidationError("maintenance windows need the zoneinfo module", field=where,
                              hint="run the controller on Python 3.9+ or install backports.zoneinfo")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValidationError("unknown time zone %r" % (name,), field=where,
                              hint="use an IANA name such as UTC, Europe/Berlin or America/Los_Angeles")


def _parse_hhmm(value, where, allow_24=False):
    if allow_24 and value == "24:00":
        return 24 * 60
    match = _HHMM_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise ValidationError("must be a time HH:MM (24-hour), got %r" % (value,), field=where,
                              hint="e.g. \"22:00\"%s" % (", or \"24:00\" for midnight" if allow_24 else ""))
    return int(match.group(1)) * 60 + int(match.group(2))


def parse_maintenance_window(value, where):
    _mapping(value, where, "a maintenance window")
    _check_keys(value, ("days", "start", "end", "timeZone"), where)
    for key in ("start", "end"):
        if value.get(key) is None:
            raise ValidationError("a maintenance window needs %s" % key, field=_path(where, key),
                                  hint="e.g. {days: [Sat, Sun], start: \"01:00\", end: \"05:00\"}")
    days = value.get("days")
    if days is None:
        day_numbers = tuple(range(7))
    else:
        if not isinstance(days, list) or not days:
            raise ValidationError("must be a non-empty list of days", field=_path(where, "days"),
                                  hint="use %s; leave days out for every day" % ", ".join(DAYS))
        numbers = []
        for n, day in enumerate(days):
            number = DAYS.index(day) if day in DAYS else None
            if number is None:
                raise ValidationError("unknown day %r" % (day,), field=_path(_path(where, "days"), n),
                                      hint="use %s" % ", ".join(DAYS))
            if number in numbers:
                raise ValidationError("day %s is listed twice" % DAYS[number],
                                      field=_path(_path(where, "days"), n))
            numbers.append(number)
        day_numbers = tuple(sorted(numbers))
    start = _parse_hhmm(value["start"], _path(where, "start"))
    end = _parse_hhmm(value["end"], _path(where, "end"), allow_24=True)
    if start == end:
        raise ValidationError("start and end are both %s, so the window is empty" % _hhmm(start),
                              field=where, hint="for a whole day use start \"00:00\", end \"24:00\"")
    zone = value.get("timeZone", "UTC")
    if not isinstance(zone, str) or not zone:
        raise ValidationError("must be an IANA time zone name", field=_path(where, "timeZone"),
                              hint="e.g. UTC or Europe/Berlin")
    _zone(zone, _path(where, "timeZone"))
    return MaintenanceWindow(days=day_numbers, start=start, end=end, time_zone=zone)


def _coerce_windows(windows, where="maintenanceWindows"):
    result = []
    for n, window in enumerate(windows or ()):
        if isinstance(window, MaintenanceWindow):
            result.append(window)
        else:
            result.append(parse_maintenance_window(window, _path(where, n)))
    return result


def in_maintenance_window(windows, now):
    """True when a new wave may start at ``now``: no windows at all, or ``now`` inside one.

    ``windows`` are MaintenanceWindow objects or their mappings; a naive ``now`` is UTC.
    """
    windows = _coerce_windows(windows)
    if not windows:
        return True
    return any(w.contains(now) for w in windows)


def next_maintenance_window(windows, now):
    """The next moment a window opens after ``now`` (None without windows)."""
    starts = [w.next_start(now) for w in _coerce_windows(windows)]
    starts = [s for s in starts if s is not None]
    return min(starts) if starts else None


@dataclass(frozen=True)
class DeploymentPolicy(object):
    """A parsed, validated DeploymentPolicy spec."""

    default: Compartment
    compartments: Tuple[Compartment, ...] = ()
    reset_batch_state_on_completion: bool = True
    topology: Optional[Topology] = None
    fleet_disruption_limit: Optional[Budget] = None
    maintenance_windows: Tuple[MaintenanceWindow, ...] = ()

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

    def to_dict(self):
        """The normalised spec, defaults filled in."""
        default = {"budget": self.default.budget.to_dict()}
        if self.default.strategy is not None:
            default["strategy"] = self.default.strategy.to_dict()
        out = {"default": default,
               "compartments": [c.to_dict() for c in self.compartments],
               "resetBatchStateOnCompletion": self.reset_batch_state_on_completion}
        if self.topology is not None:
            out["topology"] = self.topology.to_dict()
        if self.fleet_disruption_limit is not None:
            out["fleetDisruptionLimit"] = self.fleet_disruption_limit.to_dict()
        if self.maintenance_windows:
            out["maintenanceWindows"] = [w.to_dict() for w in self.maintenance_windows]
        return out


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
    _check_keys(default_spec, ("budget", "strategy"), default_path)
    if default_spec.get("budget") is None:
        raise ValidationError("default needs a budget", field=_path(default_path, "budget"),
                              hint="e.g. budget: {percent: 25}")
    default_strategy = None
    if default_spec.get("strategy") is not None:
        default_strategy = parse_strategy(default_spec["strategy"], _path(default_path, "strategy"))
    default = Compartment(name=DEFAULT_COMPARTMENT, selector=Selector(),
                          budget=parse_budget(default_spec["budget"], _path(default_path, "budget")),
                          strategy=default_strategy)

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
        _check_keys(item, ("name", "selector", "budget", "strategy"), here)
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
                                        selector_source=item["selector"]))

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

    return DeploymentPolicy(
        default=default,
        compartments=tuple(compartments),
        reset_batch_state_on_completion=_read_bool(spec, "resetBatchStateOnCompletion", where, True),
        topology=topology,
        fleet_disruption_limit=fleet_limit,
        maintenance_windows=windows,
    )


def policy_from_interruption_budget(budget=None, where="spec.interruptionBudget"):
    """The policy a NodeWright without ``deploymentPolicy`` rolls out with.

    Like Skyhook: every wave fills up to the ceiling; no budget means 100%.
    """
    parsed = Budget(percent=100) if budget is None else parse_budget(budget, where, "interruptionBudget")
    return DeploymentPolicy(default=Compartment(name=DEFAULT_COMPARTMENT, selector=Selector(),
                                                budget=parsed, strategy=None))


# --------------------------------------------------------------------------- batch state


@dataclass
class BatchState(object):
    """Per-compartment progress, stored in the CR status as ``batchState``."""

    current_batch: int = 1
    consecutive_failures: int = 0
    completed_nodes: int = 0
    failed_nodes: int = 0
    should_stop: bool = False
    last_batch_size: int = 0
    last_batch_failed: bool = False

    _KEYS = (("current_batch", "currentBatch"), ("consecutive_failures", "consecutiveFailures"),
             ("completed_nodes", "completedNodes"), ("failed_nodes", "failedNodes"),
             ("should_stop", "shouldStop"), ("last_batch_size", "lastBatchSize"),
             ("last_batch_failed", "lastBatchFailed"))

    def to_dict(self):
        return {camel: getattr(self, attr) for attr, camel in self._KEYS}

    @classmethod
    def from_dict(cls, data, where="batchState"):
        data = data or {}
        _mapping(data, where, "batchState")
        state = cls()
        for attr, camel in cls._KEYS:
            if data.get(camel) is None:
                continue
            value = data[camel]
            wanted = bool if isinstance(getattr(state, attr), bool) else int
            if wanted is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValidationError("must be a whole number >= 0, got %r" % (value,), field=_path(where, camel),
                                      hint="reset the rollout's batch state if the status was edited by hand")
            if wanted is bool and not isinstance(value, bool):
                raise ValidationError("must be true or false, got %r" % (value,), field=_path(where, camel))
            setattr(state, attr, value)
        return state


def progress_percent(state, total):
    """(completed + failed) * 100 / total, floored; 0 for an empty compartment."""
    if total <= 0:
        return 0
    return (state.completed_nodes + state.failed_nodes) * 100 // total


@dataclass
class Wave(object):
    """Nodes to work on together. ``compartments`` maps compartment → its nodes in this
    wave; ``totals`` the compartment sizes when the wave was chosen."""

    number: int
    nodes: List[str]
    compartments: Dict[str, List[str]]
    totals: Dict[str, int]

    def to_dict(self):
        return {"number": self.number, "nodes": list(self.nodes),
                "compartments": {k: list(v) for k, v in self.compartments.items()},
                "totals": dict(self.totals)}

    @classmethod
    def from_dict(cls, data):
        return cls(number=int(data["number"]), nodes=list(data["nodes"]),
                   compartments={k: list(v) for k, v in data["compartments"].items()},
                   totals={k: int(v) for k, v in data.get("totals", {}).items()})


class RolloutState(object):
    """Everything the engine remembers between waves of one NodeWright resource.

    ``batches`` is persisted in the CR status (``compartmentStatuses[*].batchState``);
    the node sets record this rollout's outcomes: a failed node is not picked again,
    a blocked node waits for ``retry_blocked()``.
    """

    def __init__(self, policy, batches=None, succeeded=(), failed=(), blocked=(), wave_number=0,
                 pending=None, version=None):
        self.policy = policy
        self.batches = dict(batches or {})
        self.succeeded = set(succeeded)
        self.failed = set(failed)
        self.blocked = set(blocked)
        self.wave_number = wave_number
        self.pending = pending
        self.version = version

    def batch(self, compartment):
        if compartment not in self.batches:
            self.batches[compartment] = BatchState()
        return self.batches[compartment]

    def reset_batches(self):
        """Start every compartment again from batch 1 (Skyhook's batch-state reset)."""
        self.batches = {}

    def observe_version(self, version):
        """Tell the state which package versions the resource wants now.

        A change starts a new rollout: batch state and node outcomes are cleared, so
        the new version begins with the policy's first, smallest batch. Returns True
        when it reset.
        """
        changed = self.version is not None and version != self.version
        if changed:
            self.reset_batches()
            self.succeeded.clear()
            self.failed.clear()
            self.blocked.clear()
            self.pending = None
        self.version = version
        return changed

    def retry_blocked(self):
        """Make blocked nodes eligible again (e.g. in the next run)."""
        self.blocked.clear()

    def to_dict(self):
        return {"version": self.version, "waveNumber": self.wave_number,
                "succeeded": sorted(self.succeeded), "failed": sorted(self.failed),
                "blocked": sorted(self.blocked),
                "pendingWave": self.pending.to_dict() if self.pending is not None else None,
                "batchStates": {name: b.to_dict() for name, b in sorted(self.batches.items())}}

    @classmethod
    def from_dict(cls, policy, data):
        data = data or {}
        pending = data.get("pendingWave")
        if pending:
            try:
                pending = Wave.from_dict(pending)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ValidationError("the recorded pending wave is malformed", field="rolloutState.pendingWave",
                                      hint="reset the rollout state of this resource, then rerun")
        return cls(policy,
                   batches={name: BatchState.from_dict(b, "batchStates.%s" % name)
                            for name, b in (data.get("batchStates") or {}).items()},
                   succeeded=data.get("succeeded") or (), failed=data.get("failed") or (),
                   blocked=data.get("blocked") or (), wave_number=int(data.get("waveNumber") or 0),
                   pending=pending or None, version=data.get("version"))


# --------------------------------------------------------------------------- nodes


class _Node(object):
    __slots__ = ("name", "labels", "created")

    def __init__(self, name, labels, created):
        self.name = name
        self.labels = labels
        self.created = created

    def sort_key(self):
        # Oldest first; nodes without a creation time go last, then by name.
        return (self.created is None, self.created or _EPOCH, self.name)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _parse_timestamp(value, where):
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return _aware(value)
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            return _aware(datetime.datetime.fromisoformat(text))
        except ValueError:
            pass
    raise ValidationError("creationTimestamp %r is not an RFC 3339 time" % (value,), field=where,
                          hint="pass the node's metadata.creationTimestamp as the API returns it")


def _node_view(node, where):
    if isinstance(node, _Node):
        return node
    if isinstance(node, str):
        return _Node(node, {}, None)
    if not isinstance(node, dict):
        raise ValidationError("a node must be a mapping or a name, got %s" % type(node).__name__, field=where)
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else node
    name = meta.get("name")
    if not name or not isinstance(name, str):
        raise ValidationError("a node needs a name", field=where)
    labels = meta.get("labels") or {}
    return _Node(name, labels, _parse_timestamp(meta.get("creationTimestamp"), where))


def is_ignored(labels):
    """Nodes labelled ``nodewright.io/ignore=true`` (or Skyhook's ignore label) are left alone."""
    labels = labels or {}
    return labels.get(LABEL_IGNORE) == "true" or labels.get(SKYHOOK_IGNORE) == "true"


def order_nodes(nodes):
    """Node names in batch order: oldest creationTimestamp first, then by name."""
    views = [_node_view(n, "nodes[%d]" % i) for i, n in enumerate(nodes)]
    return [v.name for v in sorted(views, key=_Node.sort_key)]


def _views(nodes):
    views = []
    ignored = []
    seen = set()
    for i, node in enumerate(nodes):
        view = _node_view(node, "nodes[%d]" % i)
        if view.name in seen:
            raise ValidationError("node %r is listed twice" % view.name, field="nodes[%d]" % i)
        seen.add(view.name)
        (ignored if is_ignored(view.labels) else views).append(view)
    views.sort(key=_Node.sort_key)
    return views, sorted(v.name for v in ignored)


def _assign(policy, views):
    """compartment name → member views (batch order), and the ceilings used for the tie-break."""
    matches = {c.name: [v for v in views if c.selector.matches(v.labels)] for c in policy.compartments}
    ceilings = {c.name: c.budget.ceiling(len(matches[c.name])) for c in policy.compartments}
    members = {c.name: [] for c in policy.all_compartments}
    for view in views:
        candidates = [c for c in policy.compartments if c.selector.matches(view.labels)]
        if not candidates:
            members[DEFAULT_COMPARTMENT].append(view)
            continue
        best = min(candidates, key=lambda c: (c.effective_strategy.rank, ceilings[c.name], c.name))
        members[best.name].append(view)
    ceilings = {c.name: c.budget.ceiling(len(members[c.name])) for c in policy.all_compartments}
    return members, ceilings


def assign_nodes(policy, nodes):
    """compartment name → node names in batch order; ignored nodes are left out.

    A node matching several compartments goes to the safest strategy (fixed, then
    linear, then exponential), then the smaller ceiling, then the name; a node that
    matches none goes to ``__default__``.
    """
    views, _ignored = _views(nodes)
    members, _ceilings = _assign(policy, views)
    return {name: [v.name for v in vs] for name, vs in members.items()}


# --------------------------------------------------------------------------- waves


@dataclass
class WaveDecision(object):
    """What ``next_wave`` decided. ``status`` is one of WAVE, COMPLETE, INCOMPLETE,
    HALTED, WAITING; ``reason`` says why in words for the operator."""

    status: str
    reason: str
    wave: Optional[Wave] = None
    notes: List[str] = field(default_factory=list)
    halted: Dict[str, int] = field(default_factory=dict)
    next_window: Optional[datetime.datetime] = None

    def to_dict(self):
        return {"status": self.status, "reason": self.reason,
                "wave": self.wave.to_dict() if self.wave is not None else None,
                "notes": list(self.notes), "halted": dict(self.halted),
                "nextWindow": self.next_window.isoformat() if self.next_window else None}


def _names(items, limit=5):
    items = sorted(items)
    shown = ", ".join(items[:limit])
    return shown + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def _elsewhere(in_progress_elsewhere, by_name):
    """name → labels of nodes other NodeWright resources have in progress."""
    result = {}
    for i, item in enumerate(in_progress_elsewhere or ()):
        view = _node_view(item, "in_progress_elsewhere[%d]" % i)
        labels = view.labels or (by_name[view.name].labels if view.name in by_name else {})
        result[view.name] = labels
    return result


def _halt_reason(name, batch, strategy, total):
    label = "default compartment" if name == DEFAULT_COMPARTMENT else "compartment %r" % name
    return ("%s halted after %d consecutive failed batch(es) (failureThreshold %s, progress %d%% below "
            "safetyLimit %d%%)" % (label, batch.consecutive_failures, strategy.failure_threshold,
                                   progress_percent(batch, total), strategy.safety_limit))


def next_wave(state, nodes, in_progress_elsewhere=(), now=None, done=(), fleet_size=None,
              ignore_windows=False):
    """Choose the next wave, or say why none may start.

    ``nodes``: the resource's nodes (mappings with name, labels, creationTimestamp, or
    Node objects as the API returns them). ``in_progress_elsewhere``: nodes any other
    NodeWright resource has in progress or cordoned (names, or mappings with labels so
    that topology limits can count them). ``done``: nodes already complete before this
    run. ``now``: for maintenance windows (default: the current time; naive = UTC).
    ``fleet_size``: the node count a percent ``fleetDisruptionLimit`` is taken of
    (default: every node passed in).

    The chosen wave is remembered in ``state``; report its outcome with
    ``record_wave_result`` before asking for the next.
    """
    policy = state.policy
    if state.pending is not None:
        raise NodeWrightError("wave %d has no recorded result yet" % state.pending.number,
                              hint="call record_wave_result() with the outcome of its nodes first")
    views, ignored = _views(nodes)
    by_name = {v.name: v for v in views}
    elsewhere = _elsewhere(in_progress_elsewhere, by_name)
    members, ceilings = _assign(policy, views)
    finished = set(done) | state.succeeded
    notes = []
    if ignored:
        notes.append("%d node(s) skipped: labelled %s=true (%s)" % (len(ignored), LABEL_IGNORE, _names(ignored)))

    candidates = {}
    halted = {}
    halted_reasons = []
    for comp in policy.all_compartments:
        group = members[comp.name]
        if not group:
            continue
        batch = state.batch(comp.name)
        # Counts come from the nodes themselves, so nodes finished before this run count
        # towards progress exactly as they do in Skyhook.
        batch.completed_nodes = sum(1 for v in group if v.name in finished)
        batch.failed_nodes = sum(1 for v in group if v.name in state.failed)
        pickable = [v for v in group if v.name not in finished and v.name not in state.failed
                    and v.name not in state.blocked and v.name not in elsewhere]
        if batch.should_stop and any(v.name not in finished for v in group):
            halted[comp.name] = batch.consecutive_failures
            halted_reasons.append(_halt_reason(comp.name, batch, comp.effective_strategy, len(group)))
            continue
        if pickable:
            candidates[comp.name] = pickable

    def decision(status, reason, **extra):
        return WaveDecision(status=status, reason=reason, notes=notes + halted_reasons, halted=halted, **extra)

    if not candidates:
        if halted:
            failed_here = state.failed & set(by_name)
            return decision(HALTED, "; ".join(halted_reasons) + "; fix the failed nodes%s, then reset the "
                            "rollout's batch state to resume (nodewright reset-batches NAME, or any change of the "
                            "resource's spec)" % ((" (%s)" % _names(failed_here)) if failed_here else ""))
        held = [v.name for v in views if v.name in elsewhere and v.name not in finished]
        if held:
            return decision(WAITING, "%d node(s) are in progress under other NodeWright resources (%s); "
                            "wait for them to finish" % (len(held), _names(held)))
        failed = [v.name for v in views if v.name in state.failed]
        blocked = [v.name for v in views if v.name in state.blocked and v.name not in finished]
        if not failed and not blocked:
            if policy.reset_batch_state_on_completion:
                state.reset_batches()
            return decision(COMPLETE, "all %d node(s) are complete" % len(views))
        parts = ["%d complete" % sum(1 for v in views if v.name in finished)]
        if failed:
            parts.append("%d failed (%s)" % (len(failed), _names(failed)))
        if blocked:
            parts.append("%d blocked by non-interruptible pods (%s)" % (len(blocked), _names(blocked)))
        return decision(INCOMPLETE, "nothing left to try in this run: %s; fix or reset the failed nodes "
                        "and rerun to retry them" % ", ".join(parts))

    if policy.maintenance_windows and not ignore_windows:
        moment = _aware(now if now is not None else datetime.datetime.now(datetime.timezone.utc))
        if not in_maintenance_window(policy.maintenance_windows, moment):
            upcoming = next_maintenance_window(policy.maintenance_windows, moment)
            return decision(WAITING, "outside every maintenance window (%s); the next opens at %s"
                            % ("; ".join(w.describe() for w in policy.maintenance_windows),
                               upcoming.isoformat() if upcoming else "never"),
                            next_window=upcoming)

    fleet_room = None
    if policy.fleet_disruption_limit is not None:
        size = fleet_size if fleet_size is not None else len(set(by_name) | set(ignored) | set(elsewhere))
        limit = policy.fleet_disruption_limit.ceiling(size)
        busy = len(elsewhere)
        fleet_room = limit - busy
        if fleet_room <= 0:
            return decision(WAITING, "fleet disruption limit reached: %d node(s) in progress across NodeWright "
                            "resources (%s), limit %d (%s of %d)"
                            % (busy, _names(elsewhere), limit, policy.fleet_disruption_limit.describe(), size))

    topo_busy = {}
    topology = policy.topology
    if topology is not None:
        for labels in elsewhere.values():
            value = labels.get(topology.key)
            if value is not None:
                topo_busy[value] = topo_busy.get(value, 0) + 1

    picks = {}
    waits = []
    for comp in policy.all_compartments:
        if comp.name not in candidates:
            continue
        group = members[comp.name]
        label = "default compartment" if comp.name == DEFAULT_COMPARTMENT else "compartment %r" % comp.name
        pickable = candidates[comp.name]
        batch = state.batch(comp.name)
        wanted = comp.effective_strategy.next_batch_size(len(group), len(pickable), batch)
        # The ceiling caps every node in progress in the compartment, whoever works on it.
        room = ceilings[comp.name] - sum(1 for v in group if v.name in elsewhere)
        if room <= 0:
            waits.append("%s: ceiling %d reached by nodes in progress elsewhere" % (label, ceilings[comp.name]))
            continue
        size = min(wanted, room)
        if size < wanted:
            notes.append("%s: batch of %d capped to %d by its ceiling (%s of %d nodes)"
                         % (label, wanted, size, comp.budget.describe(), len(group)))
        chosen = []
        topology_skips = 0
        for view in pickable:
            if len(chosen) >= size:
                break
            if fleet_room is not None and fleet_room <= 0:
                waits.append("%s: fleet disruption limit reached" % label)
                break
            value = view.labels.get(topology.key) if topology is not None else None
            if value is not None and topo_busy.get(value, 0) >= topology.max_in_progress:
                topology_skips += 1
                continue
            chosen.append(view.name)
            if value is not None:
                topo_busy[value] = topo_busy.get(value, 0) + 1
            if fleet_room is not None:
                fleet_room -= 1
        if topology_skips and len(chosen) < size:
            waits.append("%s: %d node(s) held back, %s already has %d node(s) in progress in their %s"
                         % (label, topology_skips, topology.key, topology.max_in_progress,
                            "group" if topology.max_in_progress == 1 else "groups"))
        if chosen:
            picks[comp.name] = chosen

    notes.extend(waits)
    if not picks:
        return decision(WAITING, "no node may start now: " + "; ".join(waits))

    state.wave_number += 1
    wave = Wave(number=state.wave_number,
                nodes=[name for comp in policy.all_compartments for name in picks.get(comp.name, ())],
                compartments=picks,
                totals={name: len(members[name]) for name in picks})
    state.pending = wave
    return decision(WAVE, "wave %d: %d node(s) from %s" % (wave.number, len(wave.nodes), ", ".join(
        "%s (%d)" % (name, len(names)) for name, names in picks.items())), wave=wave)


def record_wave_result(state, succeeded=(), failed=(), blocked=()):
    """Record the outcome of the pending wave and update each compartment's batch state.

    ``blocked``: nodes that could not start (non-interruptible pods past their
    deadline); they count neither way. A node of the wave reported in no list counts
    as failed: losing track of a node is not a success. Returns compartment →
    {succeeded, failed, blocked, successPercent, batchFailed, shouldStop, evaluated}.
    """
    wave = state.pending
    if wave is None:
        raise NodeWrightError("there is no wave in progress to record a result for",
                              hint="call next_wave() first and record the nodes it returned")
    succeeded, failed, blocked = set(succeeded), set(failed), set(blocked)
    for one, other, what in ((succeeded, failed, "succeeded and failed"),
                             (succeeded, blocked, "succeeded and blocked"),
                             (failed, blocked, "failed and blocked")):
        both = one & other
        if both:
            raise NodeWrightError("node(s) %s reported as both %s" % (_names(both), what),
                                  hint="report each node of the wave exactly once")
    members = set(wave.nodes)
    strangers = (succeeded | failed | blocked) - members
    if strangers:
        raise NodeWrightError("node(s) %s are not in wave %d" % (_names(strangers), wave.number),
                              hint="report only the nodes next_wave() returned for this wave")
    failed |= members - succeeded - failed - blocked

    outcome = {}
    for name, nodes in wave.compartments.items():
        comp = state.policy.compartment(name)
        strategy = comp.effective_strategy if comp is not None else BUDGET_ONLY
        ok = sum(1 for n in nodes if n in succeeded)
        bad = sum(1 for n in nodes if n in failed)
        stuck = sum(1 for n in nodes if n in blocked)
        result = strategy.record_batch(state.batch(name), ok, bad, wave.totals.get(name, len(nodes)))
        result.update({"succeeded": ok, "failed": bad, "blocked": stuck})
        outcome[name] = result
    state.succeeded |= succeeded
    state.failed |= failed
    state.blocked |= blocked
    state.pending = None
    return outcome


def compartment_statuses(state, nodes, done=(), in_progress=()):
    """compartment → status block for the CR (``compartmentStatuses``): matched, ceiling,
    inProgress, completed, progressPercent, batchState."""
    views, _ignored = _views(nodes)
    members, ceilings = _assign(state.policy, views)
    finished = set(done) | state.succeeded
    busy = set(in_progress) | (set(state.pending.nodes) if state.pending is not None else set())
    result = {}
    for comp in state.policy.all_compartments:
        group = members[comp.name]
        if not group and comp.name not in state.batches:
            continue
        completed = sum(1 for v in group if v.name in finished)
        failed = sum(1 for v in group if v.name in state.failed)
        total = len(group)
        result[comp.name] = {
            "matched": total,
            "ceiling": ceilings[comp.name],
            "inProgress": sum(1 for v in group if v.name in busy),
            "completed": completed,
            "progressPercent": (completed + failed) * 100 // total if total else 0,
            "batchState": state.batch(comp.name).to_dict(),
        }
    return result


# --------------------------------------------------------------------------- dry run


@dataclass
class Plan(object):
    """The waves a policy would make if every node succeeded, and why planning stopped."""

    waves: List[Wave]
    status: str
    reason: str

    def __iter__(self):
        return iter(self.waves)

    def __len__(self):
        return len(self.waves)

    @property
    def sizes(self):
        return [len(w.nodes) for w in self.waves]

    def to_dict(self):
        return {"waves": [w.to_dict() for w in self.waves], "status": self.status, "reason": self.reason}


def plan_waves(policy, nodes, done=(), in_progress_elsewhere=(), fleet_size=None):
    """Dry run: the sequence of waves ``policy`` would make over ``nodes``, assuming every
    node succeeds and nodes in progress elsewhere stay so. Maintenance windows are not
    applied (they decide when a wave starts, not which nodes it holds)."""
    state = RolloutState(policy)
    waves = []
    while True:
        result = next_wave(state, nodes, in_progress_elsewhere, done=done, fleet_size=fleet_size,
                           ignore_windows=True)
        if result.status != WAVE:
            return Plan(waves=waves, status=result.status, reason=result.reason)
        waves.append(result.wave)
        record_wave_result(state, succeeded=result.wave.nodes)
