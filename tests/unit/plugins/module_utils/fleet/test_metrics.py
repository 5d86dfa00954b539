# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Metrics: the text exposition format (rendered, parsed back), the fleet metrics from
node markers, and the names documented in docs/operating.md."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as m
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


def test_render_and_parse_round_trip_with_escaping():
    found = m.MetricSet()
    found.set("nodewright_resource_status", 1, resource='we"ird\\name\nx', status="complete")
    found.set("nodewright_last_run_duration_seconds", 12.5, kind="rollout")
    found.set("nodewright_last_run_success", True, kind="rollout")
    found.inc("nodewright_runs_total", kind="rollout", result="successful")
    found.inc("nodewright_runs_total", kind="rollout", result="successful")
    text = found.render()
    assert "# TYPE nodewright_runs_total counter" in text
    parsed = m.parse(text)
    assert parsed["nodewright_runs_total"] == [({"kind": "rollout", "result": "successful"}, 2.0)]
    assert parsed["nodewright_resource_status"][0][0]["resource"] == 'we"ird\\name\nx'
    assert parsed["nodewright_last_run_duration_seconds"][0][1] == 12.5
    assert parsed["nodewright_last_run_success"][0][1] == 1.0


@pytest.mark.parametrize("bad", [
    "nodewright_x{a=\"1\"} one\n",
    "nodewright_x{a=1} 1\n",
    "# TYPE nodewright_x gauge\nnodewright_x{a=\"1\" 1\n",
    "nodewright_untyped 1\n",
])
def test_parse_rejects_malformed_text(bad):
    with pytest.raises(ValueError):
        m.parse(bad)


def test_unknown_names_and_wrong_labels_are_refused():
    found = m.MetricSet()
    with pytest.raises(KeyError):
        found.set("nodewright_nope", 1)
    with pytest.raises(KeyError):
        found.set("nodewright_resource_status", 1, resource="a")


def test_every_metric_is_documented():
    with open(os.path.join(REPO, "docs", "operating.md")) as fh:
        doc = fh.read()
    for name in m.METRICS:
        assert "`%s`" % name in doc, name


def _node(name, resource, status, packages, raw=None):
    annotations = {markers.state_annotation(resource): raw if raw is not None else json.dumps(
        {"status": status, "packages": packages})}
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:0%dZ" % int(name[-1]),
                         "labels": {markers.status_label(resource): status, "pool": "gpu"},
                         "annotations": annotations}}


def test_resource_metrics_count_nodes_packages_and_compartments():
    pkg = {"tuning": {"name": "tuning", "version": "1.0.0", "stage": "config", "state": "complete"}}
    bad = {"tuning": {"name": "tuning", "version": "1.0.0", "stage": "apply", "state": "erroring"}}
    nodes = [_node("n1", "r", "complete", pkg), _node("n2", "r", "complete", pkg), _node("n3", "r", "erroring", bad),
             _node("n4", "r", "complete", pkg, raw="{broken")]
    described = ResourcePlan("r", parse_policy({"default": {"budget": {"count": 2},
                                                            "strategy": {"fixed": {"initialBatch": 1}}}}),
                             targets=["n1", "n2", "n3", "n4"])
    found = m.resource_metrics(m.MetricSet(), described, nodes, status="erroring")
    parsed = m.parse(found.render())

    def value(name, **labels):
        for got, v in parsed[name]:
            if got == labels:
                return v
        raise AssertionError("%s %s not in %s" % (name, labels, parsed.get(name)))
    assert value("nodewright_node_status_count", resource="r", status="complete") == 2
    assert value("nodewright_node_status_count", resource="r", status="erroring") == 2  # malformed counts too
    assert value("nodewright_package_state_count", resource="r", package="tuning", version="1.0.0",
                 state="complete") == 2
    assert value("nodewright_package_stage_count", resource="r", package="tuning", version="1.0.0",
                 stage="apply") == 1
    assert value("nodewright_resource_status", resource="r", status="erroring") == 1
    assert value("nodewright_rollout_matched_nodes", resource="r", compartment="__default__") == 4
    assert value("nodewright_rollout_ceiling", resource="r", compartment="__default__") == 2
    assert value("nodewright_rollout_completed", resource="r", compartment="__default__") == 2
    assert value("nodewright_rollout_current_batch", resource="r", compartment="__default__") == 1


def test_recorded_compartment_statuses_win():
    described = ResourcePlan("r", parse_policy({"default": {"budget": {"count": 1}}}))
    resource = {"status": {"compartmentStatuses": {"h100": {"matched": 5, "ceiling": 1, "inProgress": 1,
                                                            "completed": 2, "progressPercent": 40,
                                                            "batchState": {"currentBatch": 3, "shouldStop": True}}}}}
    parsed = m.parse(m.resource_metrics(m.MetricSet(), described, [], resource).render())
    assert parsed["nodewright_rollout_current_batch"] == [({"resource": "r", "compartment": "h100"}, 3.0)]
    assert parsed["nodewright_rollout_should_stop"] == [({"resource": "r", "compartment": "h100"}, 1.0)]


def test_run_and_package_state_metrics():
    found = m.run_metrics(m.MetricSet(), "rollout", 3.5, False, 1700000000.0, {"ok": 2, "failed": 1})
    m.package_state_metrics(found, {("r", "n1"): {"packages": {"p": {"version": "1.0.0", "stage": "config",
                                                                    "state": "complete"}}}})
    parsed = m.parse(found.render())
    assert ({"kind": "rollout", "outcome": "failed"}, 1.0) in parsed["nodewright_last_run_nodes"]
    assert ({"kind": "rollout", "outcome": "unreachable"}, 0.0) in parsed["nodewright_last_run_nodes"]
    assert parsed["nodewright_last_run_success"] == [({"kind": "rollout"}, 0.0)]
    assert parsed["nodewright_package_state_count"][0][1] == 1.0


def test_check_packages_reruns_only_checks_and_finds_drift(tmp_path):
    from nodewright_sim import hostroot

    from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import (
        check_packages,
        run_packages,
    )
    base = hostroot.BaseImage(str(tmp_path / "img")).prepare()
    root = str(tmp_path / "node")
    hostroot.create(root, base, {"name": "n1", "arch": "amd64", "gpu_name": "NVIDIA H100 80GB HBM3",
                                 "compute_cap": "9.0", "gpu_count": 8, "gpu_memory_mib": 81559})
    spec = {"name": "shellscript", "src": os.path.join(REPO, "packages", "shellscript"), "version": "1.0.0",
            "config": {"apply.sh": "n=$(cat /etc/applied 2>/dev/null || echo 0); echo $((n + 1)) > /etc/applied\n",
                       "apply_check.sh": "test -s /etc/applied\n",
                       "config.sh": "echo on > /etc/wanted\n",
                       "config-check.sh": "test \"$(cat /etc/wanted)\" = on\n"}}
    run_packages([spec], host_root=root, resource="r")
    before = json.load(open(os.path.join(root, "var/lib/nodewright/state/r.json")))
    clean = check_packages(host_root=root, resource="r")
    assert clean["checked"] == ["shellscript"] and clean["drifted"] == []
    with open(os.path.join(root, "etc/wanted"), "w") as fh:
        fh.write("off\n")
    found = check_packages(host_root=root, resource="r")
    assert [(d["name"], d["stage"]) for d in found["drifted"]] == [("shellscript", "config-check")]
    assert found["drifted"][0]["log"]
    # Only checks ran: apply did not run again, the state is as it was.
    assert open(os.path.join(root, "etc/applied")).read().strip() == "1"
    assert open(os.path.join(root, "etc/wanted")).read().strip() == "off"
    assert json.load(open(os.path.join(root, "var/lib/nodewright/state/r.json"))) == before
    # With reapply the host's record marks the package, and the next run repairs it.
    marked = check_packages(host_root=root, resource="r", reapply=True)
    assert marked["reapply"] == ["shellscript"] and marked["state"]["status"] == "in_progress"
    again = run_packages([spec], host_root=root, resource="r")
    assert [p["action"] for p in again["plan"]["packages"]] == ["resume"]
    assert open(os.path.join(root, "etc/wanted")).read().strip() == "on"
    assert open(os.path.join(root, "etc/applied")).read().strip() == "1"
    assert check_packages(host_root=root, resource="r")["drifted"] == []
