# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright's Prometheus metrics: names, the text exposition format, and the
metrics of a fleet computed from its node markers and resources.

The reconciler serves them (``nodewright reconcile --metrics-port``); a playbook run
writes the run's own as a textfile for node_exporter's textfile collector (the
``nodewright.fleet.report`` callback, ``NODEWRIGHT_METRICS_TEXTFILE``). Names mirror
Skyhook's (``skyhook_*`` becomes ``nodewright_*``) where the concept is the same.
Stdlib only; ``parse`` reads the format back (tests, and ``nodewright status``).
"""

from __future__ import annotations

import math
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node.ops import read_state
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    compartment_statuses,
)

# name: (type, labels, help). docs/operating.md has the same table.
METRICS = {
    "nodewright_resource_status": (
        "gauge", ("resource", "status"), "1 for the current status of each NodeWright resource (skyhook_status)"),
    "nodewright_node_status_count": (
        "gauge", ("resource", "status"), "Targeted nodes per NodeWright status of the resource "
                                         "(skyhook_node_status_count)"),
    "nodewright_package_state_count": (
        "gauge", ("resource", "package", "version", "state"), "Nodes per package state "
                                                              "(skyhook_package_state_count)"),
    "nodewright_package_stage_count": (
        "gauge", ("resource", "package", "version", "stage"), "Nodes per package lifecycle stage"),
    "nodewright_rollout_matched_nodes": (
        "gauge", ("resource", "compartment"), "Nodes of the compartment (skyhook_rollout_matched_nodes)"),
    "nodewright_rollout_ceiling": (
        "gauge", ("resource", "compartment"), "Budget ceiling of the compartment (skyhook_rollout_ceiling)"),
    "nodewright_rollout_in_progress": (
        "gauge", ("resource", "compartment"), "Nodes in progress (skyhook_rollout_in_progress)"),
    "nodewright_rollout_completed": (
        "gauge", ("resource", "compartment"), "Nodes complete (skyhook_rollout_completed)"),
    "nodewright_rollout_progress_percent": (
        "gauge", ("resource", "compartment"), "(completed + failed) * 100 / matched "
                                              "(skyhook_rollout_progress_percent)"),
    "nodewright_rollout_current_batch": (
        "gauge", ("resource", "compartment"), "Current batch number (skyhook_rollout_current_batch)"),
    "nodewright_rollout_consecutive_failures": (
        "gauge", ("resource", "compartment"), "Consecutive failed batches "
                                              "(skyhook_rollout_consecutive_failures)"),
    "nodewright_rollout_should_stop": (
        "gauge", ("resource", "compartment"), "1 when the failure threshold halted the compartment "
                                              "(skyhook_rollout_should_stop)"),
    "nodewright_runtime_required_tainted_nodes": (
        "gauge", (), "Nodes carrying the runtime-required taint (workloads wait)"),
    "nodewright_drift_nodes": (
        "gauge", ("resource",), "Nodes whose last drift check found the host drifted"),
    "nodewright_last_run_duration_seconds": (
        "gauge", ("kind",), "Duration of the last run (rollout, drift)"),
    "nodewright_last_run_success": (
        "gauge", ("kind",), "1 when the last run succeeded, 0 when it failed or was abandoned"),
    "nodewright_last_run_timestamp_seconds": (
        "gauge", ("kind",), "Unix time the last run finished"),
    "nodewright_last_run_nodes": (
        "gauge", ("kind", "outcome"), "Nodes of the last run per outcome (ok, failed, unreachable)"),
    "nodewright_runs_total": (
        "counter", ("kind", "result"), "Runs started by this reconciler, per result"),
    "nodewright_reconciler_ready": (
        "gauge", (), "1 when the reconciler has the permissions it needs and watches the cluster"),
    "nodewright_drain_duration_seconds": (
        "histogram", (), "How long each node's drain took (evictions until the pods were gone)"),
    "nodewright_non_interruptible_wait_seconds": (
        "histogram", (), "How long each node waited for its non-interruptible pods (training jobs) to finish"),
    "nodewright_rollout_waves_total": (
        "counter", ("kind",), "Waves the rollouts of this reconciler started"),
    "nodewright_node_failures_total": (
        "counter", ("kind",), "Nodes whose maintenance failed or that were unreachable, over all runs"),
}
# Buckets of the duration histograms, in seconds: a drain takes seconds to an hour, a wait for a
# training job minutes to days.
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0,
                    24 * 3600.0, float("inf"))

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return str(int(value))


class MetricSet(object):
    """Samples grouped by metric family, rendered in the Prometheus text format (0.0.4)."""

    def __init__(self):
        self._samples = {}

    def set(self, name, value, **labels):
        """Set one sample (the same labels again replace it)."""
        if name not in METRICS:
            raise KeyError("unknown metric %s (add it to metrics.METRICS and docs/operating.md)" % name)
        wanted = METRICS[name][1]
        if set(labels) != set(wanted):
            raise KeyError("metric %s takes labels %s, got %s"
                           % (name, ", ".join(wanted) or "none", ", ".join(sorted(labels)) or "none"))
        key = tuple((k, str(labels[k])) for k in wanted)
        self._samples.setdefault(name, {})[key] = value

    def observe(self, name, value, **labels):
        """Add one observation to a histogram (``observe(name, None)`` only makes it exist)."""
        if METRICS.get(name, ("",))[0] != "histogram":
            raise KeyError("%s is not a histogram in metrics.METRICS" % name)
        key = tuple((k, str(labels[k])) for k in METRICS[name][1])
        hist = self._samples.setdefault(name, {}).setdefault(
            key, {"buckets": [0] * len(DURATION_BUCKETS), "sum": 0.0, "count": 0})
        if value is not None:
            for i, bound in enumerate(DURATION_BUCKETS):
                if value <= bound:
                    hist["buckets"][i] += 1
            hist["sum"] += float(value)
            hist["count"] += 1

    def inc(self, name, amount=1, **labels):
        key = tuple((k, str(labels[k])) for k in METRICS[name][1])
        self.set(name, self._samples.get(name, {}).get(key, 0) + amount, **labels)

    def get(self, name, **labels):
        key = tuple((k, str(labels[k])) for k in METRICS[name][1])
        return self._samples.get(name, {}).get(key)

    def update(self, other):
        for name, samples in other._samples.items():
            self._samples.setdefault(name, {}).update(samples)

    def render(self):
        lines = []
        for name in sorted(self._samples):
            kind, _labels, text = METRICS[name]
            lines.append("# HELP %s %s" % (name, text.replace("\\", "\\\\").replace("\n", "\\n")))
            lines.append("# TYPE %s %s" % (name, kind))
            for key, value in sorted(self._samples[name].items()):
                label_text = ",".join('%s="%s"' % (k, _escape(v)) for k, v in key)
                if kind == "histogram":
                    lines.extend(_histogram_lines(name, label_text, value))
                    continue
                lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", _number(value)))
        return "\n".join(lines) + "\n" if lines else ""


def _histogram_lines(name, label_text, hist):
    prefix = label_text + "," if label_text else ""
    for bound, count in zip(DURATION_BUCKETS, hist["buckets"]):
        le = "+Inf" if math.isinf(bound) else repr(bound)
        yield '%s_bucket{%sle="%s"} %d' % (name, prefix, le, count)
    yield "%s_sum%s %s" % (name, "{%s}" % label_text if label_text else "", _number(float(hist["sum"])))
    yield "%s_count%s %d" % (name, "{%s}" % label_text if label_text else "", hist["count"])


_SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?[0-9]+)?$')
_PAIR_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse(text):
    """Read the text format back: ``{name: [(labels, value)]}``. Raises ValueError with
    the line number on anything malformed."""
    out = {}
    types = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if len(parts) != 4 or parts[3] not in ("gauge", "counter", "untyped", "histogram", "summary"):
                    raise ValueError("line %d: bad TYPE line: %s" % (number, line))
                types[parts[2]] = parts[3]
            continue
        match = _SAMPLE_RE.match(line)
        if not match:
            raise ValueError("line %d: not a sample: %s" % (number, line))
        name, _braces, body, raw, _ts = match.groups()
        labels = {}
        rest = body or ""
        while rest.strip():
            pair = _PAIR_RE.match(rest)
            if not pair:
                raise ValueError("line %d: bad labels: %s" % (number, body))
            labels[pair.group(1)] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1),
                                           pair.group(2))
            rest = rest[pair.end():]
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("line %d: bad value %r" % (number, raw))
        out.setdefault(name, []).append((labels, value))
    for name in out:
        if name not in types and not any(name.startswith(t) for t in types):
            raise ValueError("metric %s has no TYPE line" % name)
    return out


# --------------------------------------------------------------------------- fleet metrics


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def resource_metrics(metrics, described, nodes, resource=None, status=None):
    """Metrics of one rollable resource (its ``plan.ResourcePlan``) from the
    markers on its targeted nodes. ``resource`` (the object, for its recorded status:
    compartmentStatuses or rolloutState) and ``status`` (its overall status) are optional."""
    name = described.name
    by_name = {_meta(n).get("name"): n for n in nodes}
    counts, pkg_states, pkg_stages = {}, {}, {}
    done, busy = [], []
    for target in described.targets:
        node = by_name.get(target)
        if node is None:
            continue
        state = read_state(node, name)
        st = markers.STATUS_ERRORING if "error" in state else (
            (_meta(node).get("labels") or {}).get(markers.status_label(name)) or markers.STATUS_UNKNOWN)
        counts[st] = counts.get(st, 0) + 1
        if st == markers.STATUS_COMPLETE:
            done.append(target)
        elif st in (markers.STATUS_IN_PROGRESS, markers.STATUS_BLOCKED):
            busy.append(target)
        for pkg, entry in sorted((state.get("packages") or {}).items()):
            if not isinstance(entry, dict):
                continue
            key = (pkg, str(entry.get("version", "")))
            pkg_states[key + (str(entry.get("state", "unknown")),)] = \
                pkg_states.get(key + (str(entry.get("state", "unknown")),), 0) + 1
            pkg_stages[key + (str(entry.get("stage", "unknown")),)] = \
                pkg_stages.get(key + (str(entry.get("stage", "unknown")),), 0) + 1
    for st in markers.STATUSES:
        metrics.set("nodewright_node_status_count", counts.get(st, 0), resource=name, status=st)
    for (pkg, version, state), n in pkg_states.items():
        metrics.set("nodewright_package_state_count", n, resource=name, package=pkg, version=version, state=state)
    for (pkg, version, stage), n in pkg_stages.items():
        metrics.set("nodewright_package_stage_count", n, resource=name, package=pkg, version=version, stage=stage)
    if status:
        metrics.set("nodewright_resource_status", 1, resource=name, status=status)
    for comp, block in sorted(compartments(described, nodes, resource, done, busy).items()):
        batch = block.get("batchState") or {}
        for metric, value in (("nodewright_rollout_matched_nodes", block.get("matched", 0)),
                              ("nodewright_rollout_ceiling", block.get("ceiling", 0)),
                              ("nodewright_rollout_in_progress", block.get("inProgress", 0)),
                              ("nodewright_rollout_completed", block.get("completed", 0)),
                              ("nodewright_rollout_progress_percent", block.get("progressPercent", 0)),
                              ("nodewright_rollout_current_batch", batch.get("currentBatch", 0)),
                              ("nodewright_rollout_consecutive_failures", batch.get("consecutiveFailures", 0)),
                              ("nodewright_rollout_should_stop", bool(batch.get("shouldStop")))):
            metrics.set(metric, value, resource=name, compartment=comp)
    return metrics


def compartments(described, nodes, resource=None, done=(), in_progress=()):
    """Per-compartment status blocks: the resource's recorded ``compartmentStatuses``
    when the rollout wrote them, else computed from the policy, the recorded
    ``rolloutState`` (batch state) if any, and the nodes' markers."""
    recorded = ((resource or {}).get("status") or {}).get("compartmentStatuses")
    if isinstance(recorded, dict) and recorded:
        return recorded
    if isinstance(recorded, list) and recorded:
        return {c.get("name", "?"): c for c in recorded if isinstance(c, dict)}
    policy = described.policy
    try:
        state = RolloutState.from_dict(policy, ((resource or {}).get("status") or {}).get("rolloutState"))
    except Exception:  # noqa: BLE001 - a hand-edited rollout state only loses its batch numbers here
        state = RolloutState(policy)
    targets = set(described.targets)
    chosen = [n for n in nodes if _meta(n).get("name") in targets]
    return compartment_statuses(state, chosen, done=done, in_progress=in_progress)


def run_metrics(metrics, kind, duration, success, finished, outcomes=None):
    """The last run's metrics; ``outcomes`` maps outcome (ok, failed, ...) to a node count."""
    metrics.set("nodewright_last_run_duration_seconds", float(duration), kind=kind)
    metrics.set("nodewright_last_run_success", bool(success), kind=kind)
    metrics.set("nodewright_last_run_timestamp_seconds", float(finished), kind=kind)
    for outcome in sorted(set(outcomes or {}) | {"ok", "failed", "unreachable"}):
        metrics.set("nodewright_last_run_nodes", (outcomes or {}).get(outcome, 0), kind=kind, outcome=outcome)
    return metrics


def package_state_metrics(metrics, states):
    """Package state and stage counts from ``{(resource, node): state}`` (the state a
    package run returned) - what a playbook run knows without reading the cluster."""
    counts, stages = {}, {}
    for (resource, _node), state in sorted(states.items()):
        for pkg, entry in sorted(((state or {}).get("packages") or {}).items()):
            if not isinstance(entry, dict):
                continue
            base = (resource, pkg, str(entry.get("version", "")))
            k = base + (str(entry.get("state", "unknown")),)
            counts[k] = counts.get(k, 0) + 1
            k = base + (str(entry.get("stage", "unknown")),)
            stages[k] = stages.get(k, 0) + 1
    for (resource, pkg, version, state), n in counts.items():
        metrics.set("nodewright_package_state_count", n, resource=resource, package=pkg, version=version,
                    state=state)
    for (resource, pkg, version, stage), n in stages.items():
        metrics.set("nodewright_package_stage_count", n, resource=resource, package=pkg, version=version,
                    stage=stage)
    return metrics
