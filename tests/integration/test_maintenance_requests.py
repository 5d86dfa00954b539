# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Requestor mode of NVIDIA's maintenance-operator, through the front door: rollout.yml
with ``safe_update_maintenance_request`` over a disruptive package (a containerd
restart), the ``NodeMaintenance`` CRD installed as that operator installs it.

NodeWright never cordons or drains a node itself here: it asks with a NodeMaintenance of
its requestor ID, waits until the request is Ready, does its work, checks the node and
deletes the request. The maintenance-operator is not served by the Go module proxy, so the
test plays its part of the protocol through the API server (``OperatorStandIn``): it
cordons the node of each new request and reports it Ready, and uncordons it once the
request is deleted. Without it, a request that never becomes Ready fails the node, naming
the request's phase, and is withdrawn with nothing done on the node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from fleet_helpers import Fleet, waves_from_report
from k8s_helpers import ensure_crds, wait_for
from test_unavailable_nodes import NODE_MAINTENANCE_CRD

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "maintenance.nvidia.com", "v1alpha1", "nodemaintenances"
SERVICE = {"type": "service", "services": ["containerd"]}
FINALIZER = "maintenance.nvidia.com/finalizer"


class OperatorStandIn(object):
    """The maintenance-operator's side of a request, through the API server: a new request
    of NodeWright's requestor gets its node cordoned and its Ready condition; a deleted one
    gets its node uncordoned before its finalizer goes, as the operator's does. ``seen``: each request as first seen, with whether its node was
    already cordoned then."""

    def __init__(self, sim, custom, ns):
        self.sim, self.custom, self.ns = sim, custom, ns
        self.seen, self.released, self.live = [], [], {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(timeout=30)

    def _run(self):
        while not self.done.is_set():
            for obj in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)["items"]:
                meta, spec = obj["metadata"], obj["spec"]
                name, node = meta["name"], spec["nodeName"]
                if spec.get("requestorID") != "nodewright.io":
                    continue
                if meta.get("deletionTimestamp"):
                    # Released: uncordon, then let the object go (the operator's finalizer).
                    if name in self.live:
                        self.sim.core.patch_node(self.live.pop(name), {"spec": {"unschedulable": False}})
                        self.released.append(name)
                    self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name,
                                                               {"metadata": {"finalizers": None}})
                    continue
                if name in self.live:
                    continue
                cordoned = bool(self.sim.core.read_node(node).spec.unschedulable)
                self.seen.append({"name": name, "spec": spec, "cordoned_before": cordoned})
                self.live[name] = node
                self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name,
                                                           {"metadata": {"finalizers": [FINALIZER]}})
                self.sim.core.patch_node(node, {"spec": {"unschedulable": True}})
                self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.ns, PLURAL, name, {
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                               "lastTransitionTime": "2026-12-05T00:00:00Z"}]}})
            self.done.wait(0.2)


def requests_left(custom, ns):
    return custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]


def node_state(fleet, node, res):
    meta = fleet.sim.core.read_node(node).metadata
    return (meta.labels or {}).get("nodewright.io/status-%s" % res), meta.annotations or {}


def test_a_rollout_asks_the_maintenance_operator_instead_of_cordoning_and_draining(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    custom = ensure_crds(sim, [NODE_MAINTENANCE_CRD])
    ns = sim.namespace("maint-req")
    res = "maint-req-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 1},
        "podNonInterruptLabels": {"matchLabels": {"app": "training-" + fleet.label}},
        "drainConfig": {"force": True, "timeout": "120s"},
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo applied > /etc/maint-req\n", "apply_check.sh": "test -f /etc/maint-req\n"}}}})
    settings = '{"safe_update_maintenance_request": {"namespace": "%s", "timeout": 120}}' % ns
    with OperatorStandIn(sim, custom, ns) as operator:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", settings)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # One request per node, NodeWright's, asking for the resource's drain and wait; the node
    # was not cordoned by NodeWright before it asked.
    assert sorted(r["spec"]["nodeName"] for r in operator.seen) == sorted(fleet.nodes)
    for request in operator.seen:
        node = request["spec"]["nodeName"]
        assert request["name"] == "nodewright-" + node
        assert request["cordoned_before"] is False
        assert request["spec"] == {
            "requestorID": "nodewright.io", "nodeName": node, "cordon": True,
            "drainSpec": {"force": True, "deleteEmptyDir": False, "timeoutSeconds": 120},
            "waitForPodCompletion": {"podSelector": "app=training-" + fleet.label, "timeoutSeconds": 3600}}
    # Released once each node was done: every request deleted, every node back in service,
    # NodeWright's own cordon record never written.
    assert sorted(operator.released) == sorted("nodewright-" + n for n in fleet.nodes)
    assert requests_left(custom, ns) == []
    for node in fleet.nodes:
        status, annotations = node_state(fleet, node, res)
        assert status == "complete"
        assert "nodewright.io/cordoned-by" not in annotations
        assert not sim.core.read_node(node).spec.unschedulable
        assert os.path.exists(os.path.join(sim.host_root(node), "etc", "maint-req"))
        # The run report shows the request and its release in place of the cordon and the drain.
        steps = [e["task"] for e in proc.report["hosts"][node]["timeline"]]
        assert "Ask the maintenance-operator for the node's maintenance" in steps, steps
        assert "Release the node's maintenance request" in steps, steps
        assert not [s for s in steps if s.startswith(("Cordon the node", "Drain the node", "Uncordon"))], steps
    assert "nodes are cordoned and drained by NVIDIA's maintenance-operator" in proc.stdout


def test_a_request_the_operator_never_makes_ready_fails_the_node_and_is_withdrawn(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    (node,) = fleet.nodes
    custom = ensure_crds(sim, [NODE_MAINTENANCE_CRD])
    ns = sim.namespace("maint-none")
    res = "maint-none-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo applied > /etc/maint-none\n", "apply_check.sh": "test -f /etc/maint-none\n"}}}})
    settings = '{"safe_update_maintenance_request": {"namespace": "%s", "timeout": 4}}' % ns
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", settings)
    assert proc.returncode != 0
    status, annotations = node_state(fleet, node, res)
    assert status == "erroring"
    reason = str(annotations.get("nodewright.io/state-%s" % res))
    assert "did not make NodeMaintenance %s/nodewright-%s Ready within 4 s (phase: Pending)" % (ns, node) in reason, \
        reason
    # Withdrawn, and nothing was done: the node was never cordoned, the package never ran.
    assert requests_left(custom, ns) == []
    assert not sim.core.read_node(node).spec.unschedulable
    assert not os.path.exists(os.path.join(sim.host_root(node), "etc", "maint-none"))
    with pytest.raises(ApiException):
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nodewright-" + node)


def test_a_run_resumes_from_its_own_request_which_never_counts_as_another_controllers(sim, tmp_path):
    """A request of NodeWright's left by a run that died (here made as that run made it):
    the plan does not count it as another controller's maintenance, and the next run takes
    the node first, goes on from the request and releases it."""
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    left, other = fleet.nodes
    custom = ensure_crds(sim, [NODE_MAINTENANCE_CRD])
    ns = sim.namespace("maint-resume")
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeMaintenance",
        "metadata": {"name": "nodewright-" + left, "namespace": ns},
        "spec": {"requestorID": "nodewright.io", "nodeName": left, "cordon": True}})
    res = "maint-resume-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 1},
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo applied > /etc/maint-resume\n", "apply_check.sh": "test -f /etc/maint-resume\n"}}}})
    path = tmp_path / "plan.json"
    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res, "-e", "nodewright_plan_path=%s" % path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    (entry,) = json.loads(path.read_text())["rollouts"]
    assert left not in (entry.get("unavailable") or {}), entry.get("unavailable")

    settings = '{"safe_update_maintenance_request": {"namespace": "%s", "timeout": 120}}' % ns
    with OperatorStandIn(sim, custom, ns) as operator:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", settings)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert waves_from_report(proc.report) == [[left], [other]]
    assert [r["spec"] for r in operator.seen if r["name"] == "nodewright-" + left] == [
        {"requestorID": "nodewright.io", "nodeName": left, "cordon": True}], "the request left was kept as it was"
    assert sorted(operator.released) == sorted("nodewright-" + n for n in fleet.nodes)
    assert requests_left(custom, ns) == []
    assert all(node_state(fleet, n, res)[0] == "complete" for n in fleet.nodes)


def test_a_cluster_without_the_maintenance_operator_is_refused_before_any_node(sim, tmp_path):
    """Requestor mode where NodeMaintenance is not served (the operator not installed): the
    plan refuses it before any node is cordoned, asked for or marked, as it refuses a
    malformed value; a check-mode request says the same instead of a change it could not make."""
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    res = "maint-absent-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
            "apply.sh": "echo applied > /etc/maint-absent\n", "apply_check.sh": "test -f /etc/maint-absent\n"}}}})
    bad = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res,
                         "-e", '{"safe_update_maintenance_request": {"timeout": "an hour"}}')
    assert bad.returncode != 0
    assert "maintenance_request.timeout must be a positive number of seconds, got 'an hour'" in bad.stdout
    ext = client.ApiextensionsV1Api(sim.api)
    crd = "%s.%s" % (PLURAL, GROUP)
    try:
        try:
            ext.delete_custom_resource_definition(crd)
        except ApiException as exc:
            assert exc.status == 404
        wait_for(lambda: GROUP not in [g.name for g in client.ApisApi(sim.api).get_api_versions().groups],
                 what="the NodeMaintenance API gone")
        refused = "the maintenance-operator's NodeMaintenance (maintenance.nvidia.com/v1alpha1) is not served by " \
                  "this cluster"
        hint = "install NVIDIA's maintenance-operator, or leave maintenance requests off"
        for playbook in ("plan.yml", "rollout.yml"):
            proc = fleet.playbook(playbook, "-e", "nodewright_resource=%s" % res,
                                  "-e", "safe_update_maintenance_request=true")
            assert proc.returncode != 0, playbook
            assert refused in proc.stdout and hint in proc.stdout, proc.stdout[-3000:]
        check = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "--check",
                                "-m", "nodewright.fleet.node_maintenance", "-a", "name=%s" % fleet.nodes[0]],
                               capture_output=True, text=True, env=dict(sim.env(), ANSIBLE_LOCALHOST_WARNING="false"))
        assert check.returncode != 0 and refused in check.stdout, check.stdout[-2000:]
    finally:
        ensure_crds(sim, [NODE_MAINTENANCE_CRD])
    # Nothing was touched: no node cordoned, marked or worked on.
    for node in fleet.nodes:
        status, annotations = node_state(fleet, node, res)
        assert status is None and not [k for k in annotations if k.startswith("nodewright.io/")], annotations
        assert not sim.core.read_node(node).spec.unschedulable
        assert not os.path.exists(os.path.join(sim.host_root(node), "etc", "maint-absent"))
