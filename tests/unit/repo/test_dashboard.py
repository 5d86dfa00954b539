# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The Grafana dashboard asks only for metrics NodeWright exports: every query names metrics of
``module_utils/metrics.METRICS`` (histograms through their _bucket/_sum/_count series) that the
reconciler serves from its first scrape on; the chart ships the same dashboard."""

from __future__ import annotations

import json
import os
import re

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_metrics

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "nodewright-dashboard.json")
CHART_COPY = os.path.join(REPO, "deploy", "helm", "nodewright", "dashboards", "nodewright.json")
# PromQL words that look like metric names in an expression.
PROMQL = {"sum", "max", "min", "count", "rate", "increase", "histogram_quantile", "by", "le", "without"}
NAME_RE = re.compile(r"\b(nodewright_[a-z0-9_]+)\b")


def dashboard():
    with open(DASHBOARD) as fh:
        return json.load(fh)


def panels(dash):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels") or []


def queries(dash):
    out = [t["expr"] for p in panels(dash) for t in p.get("targets") or []]
    out += [v["definition"] for v in dash["templating"]["list"] if v.get("definition")]
    return out


def family(series):
    """The metric a series belongs to: a histogram's _bucket/_sum/_count series name it."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = series[:-len(suffix)]
        if series.endswith(suffix) and nw_metrics.METRICS.get(base, ("",))[0] == "histogram":
            return base
    return series


def test_every_query_names_only_metrics_nodewright_exports():
    names = set()
    for expr in queries(dashboard()):
        found = NAME_RE.findall(expr)
        assert found, "query names no NodeWright metric: %s" % expr
        for series in found:
            metric = family(series)
            assert metric in nw_metrics.METRICS, "%s (in %s) is not a NodeWright metric" % (series, expr)
            if nw_metrics.METRICS[metric][0] == "histogram":
                assert series != metric, "a histogram is queried through _bucket/_sum/_count: %s" % expr
            names.add(metric)
    # The panels the dashboard promises: resources, nodes, waves, failures, drains, waits.
    assert {"nodewright_resource_status", "nodewright_node_status_count", "nodewright_rollout_current_batch",
            "nodewright_rollout_waves_total", "nodewright_node_failures_total", "nodewright_rollout_should_stop",
            "nodewright_drain_duration_seconds", "nodewright_non_interruptible_wait_seconds"} <= names


def test_label_filters_use_the_metrics_own_labels():
    for expr in queries(dashboard()):
        for series, body in re.findall(r"\b(nodewright_[a-z0-9_]+)\{([^}]*)\}", expr):
            labels = {m.group(1) for m in re.finditer(r"([a-z_]+)\s*(?:=~|!=|=)", body)}
            allowed = set(nw_metrics.METRICS[family(series)][1]) | ({"le"} if series.endswith("_bucket") else set())
            assert labels <= allowed, (series, labels - allowed)
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} - PROMQL - {
                label for spec in nw_metrics.METRICS.values() for label in spec[1]} == set(), expr


def test_the_reconciler_exports_the_run_metrics_from_its_start():
    """What a reconciler that has run nothing yet serves: the histograms and counters exist at zero."""
    text = report_metrics.add_report_metrics(nw_metrics.MetricSet(), None, "rollout").render()
    parsed = nw_metrics.parse(text)
    for name in ("nodewright_drain_duration_seconds", "nodewright_non_interruptible_wait_seconds"):
        assert parsed[name + "_count"] == [({}, 0.0)]
        assert ({"le": "+Inf"}, 0.0) in parsed[name + "_bucket"]
    assert parsed["nodewright_rollout_waves_total"] == [({"kind": "rollout"}, 0.0)]


def test_report_metrics_count_drains_waits_waves_and_failures():
    report = {"hosts": {
        "localhost": {"outcome": "failed", "results": []},
        "n1": {"outcome": "ok", "results": [{"task": "Wait", "waited_seconds": 42.0, "initially_blocking": []},
                                            {"task": "Drain", "evicted": ["a/b"], "duration": 3.5}]},
        "n2": {"outcome": "failed", "results": [{"task": "Drain", "still_present": ["a/c"], "duration": 700.0}]}},
        "rollout": [{"waves": [{"number": 1}, {"number": 2}]}]}
    found = report_metrics.add_report_metrics(nw_metrics.MetricSet(), report, "rollout")
    parsed = nw_metrics.parse(found.render())
    buckets = {labels["le"]: value for labels, value in parsed["nodewright_drain_duration_seconds_bucket"]}
    assert buckets["5.0"] == 1 and buckets["600.0"] == 1 and buckets["1800.0"] == 2 and buckets["+Inf"] == 2
    assert parsed["nodewright_drain_duration_seconds_sum"] == [({}, 703.5)]
    assert parsed["nodewright_non_interruptible_wait_seconds_count"] == [({}, 1.0)]
    assert parsed["nodewright_rollout_waves_total"] == [({"kind": "rollout"}, 2.0)]
    assert parsed["nodewright_node_failures_total"] == [({"kind": "rollout"}, 1.0)]


def test_the_chart_ships_the_same_dashboard():
    with open(DASHBOARD) as a, open(CHART_COPY) as b:
        assert a.read() == b.read(), "run deploy/helm/sync-crds.sh"


def test_the_dashboard_is_a_grafana_dashboard_with_a_datasource_variable():
    dash = dashboard()
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for panel in panels(dash):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
