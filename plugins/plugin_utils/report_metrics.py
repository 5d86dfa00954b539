# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Metrics from a run report of the ``nodewright.fleet.report`` callback: how long drains took,
how long nodes waited for their non-interruptible pods, the waves the rollout made and the nodes
that failed. The reconciler adds them after each run; the callback writes them to its textfile."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.plugin_utils.report_html import CONTROLLER, rollouts_of

DRAIN = "nodewright_drain_duration_seconds"
WAIT = "nodewright_non_interruptible_wait_seconds"
WAVES = "nodewright_rollout_waves_total"
FAILURES = "nodewright_node_failures_total"


def add_report_metrics(metrics, report, kind):
    """Add one run's observations to ``metrics`` (a ``module_utils.fleet.metrics.MetricSet``). An empty report only makes the
    metrics exist (at zero), as a scraper expects from the start."""
    metrics.observe(DRAIN, None)
    metrics.observe(WAIT, None)
    metrics.inc(WAVES, 0, kind=kind)
    metrics.inc(FAILURES, 0, kind=kind)
    report = report or {}
    for host, entry in sorted((report.get("hosts") or {}).items()):
        if host == CONTROLLER:
            continue
        for result in entry.get("results") or []:
            if "waited_seconds" in result:
                metrics.observe(WAIT, float(result["waited_seconds"] or 0))
            elif "duration" in result and ("evicted" in result or "still_present" in result):
                metrics.observe(DRAIN, float(result["duration"] or 0))
        if entry.get("outcome") in ("failed", "unreachable"):
            metrics.inc(FAILURES, 1, kind=kind)
    for run in rollouts_of(report):
        metrics.inc(WAVES, len(run.get("waves") or []), kind=kind)
    return metrics
