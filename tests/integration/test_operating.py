# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Operating NodeWright on the simulator: new-node gating (runtimeRequired), the
reconciler as a real process (watching, picking up an edited resource and a new
node, SIGTERM), drift, the status command and actions, the ansible-runner example,
metrics, and bad input (a missing policy, a malformed node state, missing rights).

Every test uses its own pool of fresh nodes (gh200, b300, gb300 are not in the dev
fleet) and its own resources, labelled so that the reconciler it starts manages
only them (--resource-selector)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid

import pytest
import yaml
from k8s_helpers import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_crds_api import install_crds

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
GROUP, VERSION = markers.API_GROUP, markers.API_VERSION
TAINT = {"key": markers.TAINT_RUNTIME_REQUIRED, "value": "true", "effect": "NoSchedule"}
POOLS = ("gh200", "b300", "gb300")
LABEL = "test.nodewright.io/ops"


@pytest.fixture(scope="module")
def crds(sim):
    proc = install_crds(sim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return client.CustomObjectsApi(sim.api)


class Ops(object):
    """One test's resources, nodes and ``nodewright`` invocations."""

    def __init__(self, sim, custom, tmp_path):
        self.sim, self.custom, self.tmp = sim, custom, tmp_path
        self.id = uuid.uuid4().hex[:6]
        self.selector = "%s=%s" % (LABEL, self.id)
        self.resources, self.policies, self.nodes = [], [], []
        self.inventory = str(tmp_path / "ops.k8s_nodes.yml")
        pathlib.Path(self.inventory).write_text(yaml.safe_dump({
            "plugin": "nodewright.fleet.k8s_nodes", "connection": "local",
            "label_selectors": "nodepool in (%s)" % ",".join(POOLS),
            "compose": {"ansible_python_interpreter": repr(sys.executable)}}))

    def env(self, **extra):
        env = self.sim.env()
        env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")])
        env["ANSIBLE_DEPRECATION_WARNINGS"] = "false"
        env["HOME"] = str(self.tmp)
        env.update(extra)
        return env

    def command(self, *args):
        return [sys.executable, "-m", "nodewright_cli"] + [str(a) for a in args]

    def nodewright(self, *args, env=None, kubeconfig=None):
        extra = ["--kubeconfig", kubeconfig] if kubeconfig else []
        return subprocess.run(self.command(*(extra + list(args))), capture_output=True, text=True,
                              env=env or self.env(), cwd=str(self.tmp))

    def once(self, *extra):
        return self.nodewright("reconcile", "--once", "--inventory", self.inventory, "--workdir",
                               self.tmp / "work", "--resource-selector", self.selector, *extra)

    def add_nodes(self, pool, count=1, taint=False):
        names = self.sim.add_nodes(pool, count, taints=[TAINT] if taint else ())
        self.nodes.extend(names)
        return names

    def resource(self, pool, packages, name=None, **spec):
        name = name or "ops-%s-%s" % (pool, self.id)
        body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright",
                "metadata": {"name": name, "labels": {LABEL: self.id}},
                "spec": dict({"nodeSelectors": {"matchLabels": {"nodepool": pool}},
                              "interruptionBudget": {"count": 2}, "packages": packages}, **spec)}
        if "deploymentPolicy" in spec:
            body["spec"].pop("interruptionBudget")
        self.custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)
        self.resources.append(name)
        return name

    def get(self, name):
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)

    def node(self, name):
        return self.sim.api.sanitize_for_serialization(self.sim.core.read_node(name))

    def host_file(self, node, path):
        full = os.path.join(self.sim.host_root(node), path.lstrip("/"))
        return pathlib.Path(full).read_text() if os.path.exists(full) else None

    def cleanup(self):
        for name in self.resources:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
            except ApiException:
                pass
        for name in self.policies:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", name)
            except ApiException:
                pass
        for name in self.nodes:
            forget_node(self.sim, name)


def forget_node(sim, name):
    """Delete a test node and its host root (a later node of the same name starts clean)."""
    try:
        sim.core.delete_node(name)
    except ApiException:
        pass
    shutil.rmtree(sim.host_root(name), ignore_errors=True)


@pytest.fixture
def ops(sim, crds, tmp_path):
    one = Ops(sim, crds, tmp_path)
    # Nodes a crashed earlier run left in the test pools would be targeted too.
    for pool in POOLS:
        for n in sim.core.list_node(label_selector="nodepool=%s" % pool).items:
            forget_node(sim, n.metadata.name)
    wait_for(lambda: not sim.core.list_node(label_selector="nodepool in (%s)" % ",".join(POOLS)).items,
             what="old test nodes gone")
    yield one
    one.cleanup()


def shellscript(**scripts):
    """The shipped shellscript package with Skyhook's configMap keys as they are
    (apply.sh, apply_check.sh, ...)."""
    return {"shellscript": {"version": "1.0.0", "configMap": {k + ".sh": v for k, v in scripts.items()}}}


def taints(node):
    return [t["key"] for t in (node["spec"].get("taints") or [])]


def condition(node, ctype):
    for c in node["status"].get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def node_events(sim, node, reason):
    return [e for e in sim.core.list_event_for_all_namespaces(field_selector="involvedObject.name=%s" % node).items
            if e.reason == reason]


def pending_pod(sim, node):
    ns = sim.namespace("ops")
    pod = {"metadata": {"name": "wants-" + node}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}
    sim.core.create_namespaced_pod(ns, pod)
    return ns, pod["metadata"]["name"]


def unschedulable_for_the_taint(sim, ns, name):
    pod = sim.core.read_namespaced_pod(name, ns)
    for c in pod.status.conditions or []:
        # The pod is pinned to the node, so the taint (its only one) is what refuses it.
        # Other nodes of a shared cluster may carry taints too, so the count is not checked.
        if c.type == "PodScheduled" and c.status == "False" and "had untolerated taint" in (c.message or ""):
            return pod
    return None


# --------------------------------------------------------------------------- gating


def test_a_node_that_joins_tainted_gets_its_packages_then_becomes_schedulable(sim, ops):
    (node,) = ops.add_nodes("b300", taint=True)
    ns, pod = pending_pod(sim, node)
    # Before NodeWright is done the scheduler refuses the node, because of the taint.
    wait_for(lambda: unschedulable_for_the_taint(sim, ns, pod), what="the pod refused by the tainted node")
    name = ops.resource("b300", shellscript(apply="echo ready > /etc/ops-runtime\n",
                                            apply_check="test -s /etc/ops-runtime\n",
                                            config_check="test -s /etc/ops-runtime\n"), runtimeRequired=True)
    assert sim.core.read_namespaced_pod(pod, ns).spec.node_name is None

    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops.host_file(node, "/etc/ops-runtime") == "ready\n"
    after = ops.node(node)
    assert markers.TAINT_RUNTIME_REQUIRED not in taints(after)
    assert after["metadata"]["labels"][markers.status_label(name)] == "complete"
    gate = condition(after, markers.CONDITION_BLOCKED)
    assert gate is None or (gate["status"], gate["reason"]) == ("False", "RuntimeReady")
    assert any("taint %s removed" % markers.TAINT_RUNTIME_REQUIRED in e.message
               for e in node_events(sim, node, markers.EVENT_RUNTIME_READY))
    wait_for(lambda: sim.core.read_namespaced_pod(pod, ns).spec.node_name == node, timeout=400,
             what="the pod scheduled once the gate opened")

    # The status command shows the node, its package and that no wave is left.
    shown = ops.nodewright("status", "--resource", name)
    assert shown.returncode == 0, shown.stderr
    assert "NodeWright %s  priority 200  status complete" % name in shown.stdout
    row = [line for line in shown.stdout.splitlines() if line.strip().startswith(node)]
    assert row and "complete" in row[0] and "shellscript 1.0.0 config/complete" in row[0]
    assert "next wave: none" in shown.stdout
    data = json.loads(ops.nodewright("status", "--resource", name, "--json").stdout)
    assert data["resources"][0]["nodes"][0]["packages"][0]["state"] == "complete"


def test_a_failing_package_keeps_the_node_tainted_and_says_why(sim, ops):
    (node,) = ops.add_nodes("gb300", taint=True)
    name = ops.resource("gb300", shellscript(apply="echo 'driver build failed' >&2; exit 3\n",
                                             apply_check="test -e /etc/ops-driver\n"),
                        runtimeRequired=True, priority=50)
    ns, pod = pending_pod(sim, node)
    proc = ops.once()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    after = ops.node(node)
    assert markers.TAINT_RUNTIME_REQUIRED in taints(after)
    gate = condition(after, markers.CONDITION_BLOCKED)
    assert gate["status"] == "True" and gate["reason"] == "RuntimePackageFailed"
    assert "%s (priority 50) package shellscript 1.0.0 failed at stage apply" % name in gate["message"]
    warnings = node_events(sim, node, markers.EVENT_BLOCKED)
    assert any(e.type == "Warning" and "kept" in e.message for e in warnings)
    wait_for(lambda: unschedulable_for_the_taint(sim, ns, pod), what="the pod still refused")
    shown = ops.nodewright("status", "--resource", name).stdout
    assert "erroring" in shown and "tainted %s" % markers.TAINT_RUNTIME_REQUIRED in shown


# --------------------------------------------------------------------------- the reconciler


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
        return nw_metrics.parse(resp.read().decode())


def sample(parsed, name, **labels):
    for got, value in parsed.get(name, []):
        if all(got.get(k) == v for k, v in labels.items()):
            return value
    return None


def test_the_reconciler_picks_up_a_new_node_and_an_edited_resource(sim, ops):
    name = ops.resource("gh200", shellscript(apply="echo one > /etc/ops-reconcile\n",
                                            apply_check="test -s /etc/ops-reconcile\n"), runtimeRequired=True,
                        autoTaintNewNodes=True)
    port = free_port()
    log = ops.tmp / "reconcile.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(ops.command("--log-level", "debug", "reconcile", "--inventory", ops.inventory,
                                            "--workdir", ops.tmp / "work", "--resource-selector", ops.selector,
                                            "--debounce", "0.5", "--interval", "2", "--resync", "10m",
                                            "--drift-interval", "0", "--metrics-port", port,
                                            "--metrics-address", "127.0.0.1"),
                                stdout=out, stderr=subprocess.STDOUT, env=ops.env(), cwd=str(ops.tmp))
    try:
        wait_for(lambda: "watching nodes" in log.read_text(), what="the reconciler watching")
        # A node joins without the taint: the reconciler taints it (autoTaintNewNodes),
        # rolls the resource out to it and opens the gate, without a manual run.
        (node,) = ops.add_nodes("gh200")
        wait_for(lambda: any("taint %s added" % markers.TAINT_RUNTIME_REQUIRED in e.message
                             for e in node_events(sim, node, markers.EVENT_BLOCKED)),
                 timeout=120, what="the new node tainted")
        wait_for(lambda: ops.host_file(node, "/etc/ops-reconcile") == "one\n", timeout=300,
                 what="the package applied to the new node")
        wait_for(lambda: markers.TAINT_RUNTIME_REQUIRED not in taints(ops.node(node))
                 and ops.node(node)["metadata"]["labels"].get(markers.status_label(name)) == "complete",
                 timeout=300, what="the new node complete and schedulable")

        # An edited resource is new work.
        ops.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name, {"spec": {"packages": {
            "shellscript": {"version": "1.0.0", "configMap": {"apply.sh": "echo one > /etc/ops-reconcile\n",
                                                              "apply_check.sh": "test -s /etc/ops-reconcile\n",
                                                              "config.sh": "echo two > /etc/ops-edited\n",
                                                              "config_check.sh": "test -s /etc/ops-edited\n"}}}}})
        wait_for(lambda: ops.host_file(node, "/etc/ops-edited") == "two\n", timeout=300,
                 what="the edited config applied")
        wait_for(lambda: (sample(scrape(port), "nodewright_runs_total", kind="rollout", result="successful")
                          or 0) >= 2, timeout=300, what="the second run recorded")
        metrics = scrape(port)
        assert sample(metrics, "nodewright_reconciler_ready") == 1
        assert sample(metrics, "nodewright_node_status_count", resource=name, status="complete") == 1
        assert sample(metrics, "nodewright_package_state_count", resource=name, package="shellscript",
                      state="complete") == 1
        assert sample(metrics, "nodewright_rollout_matched_nodes", resource=name, compartment="__default__") == 1
        assert sample(metrics, "nodewright_last_run_success", kind="rollout") == 1
        assert sample(metrics, "nodewright_runtime_required_tainted_nodes") is not None
        # Every series the Grafana dashboard queries is among what the reconciler serves.
        dashboard = (pathlib.Path(REPO) / "deploy" / "grafana" / "nodewright-dashboard.json").read_text()
        queried = set(re.findall(r"\b(nodewright_[a-z0-9_]+)\b", dashboard))
        assert queried and queried <= set(metrics), sorted(queried - set(metrics))
        assert sample(metrics, "nodewright_rollout_waves_total", kind="rollout") >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=180)
    text = log.read_text()
    assert rc == 0, text
    assert "stopping (SIGTERM)" in text and text.rstrip().endswith("stopped")
    assert "Traceback" not in text


def _abandon_a_running_step(sim, ops, log_name, *extra):
    """Start the reconciler, send SIGTERM while a package step waits for a file, and check
    that the run was abandoned with the node still in progress; returns (node, resource)."""
    (node,) = ops.add_nodes("gh200")
    # The step waits for a file, so the test decides when it could finish.
    name = ops.resource("gh200", shellscript(
        apply="echo start >> /etc/ops-runs\nwhile [ ! -e /etc/ops-go ]; do sleep 0.2; done\n"
              "echo done > /etc/ops-done\n", apply_check="test -s /etc/ops-done\n"))
    log = ops.tmp / log_name
    with open(log, "w") as out:
        proc = subprocess.Popen(ops.command("reconcile", "--inventory", ops.inventory, "--workdir", ops.tmp / "work",
                                            "--resource-selector", ops.selector, "--debounce", "0.5", "--interval",
                                            "2", "--drift-interval", "0", "--stop-timeout", "1", *extra),
                                stdout=out, stderr=subprocess.STDOUT, env=ops.env(), cwd=str(ops.tmp))
    try:
        wait_for(lambda: ops.host_file(node, "/etc/ops-runs"), timeout=300, what="the step running")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    text = log.read_text()
    assert rc == 0, text
    assert "gets 1.0s to finish, then is abandoned" in text and "rollout run canceled" in text
    assert ops.node(node)["metadata"]["labels"][markers.status_label(name)] == "in_progress"
    return node, name


def test_sigterm_abandons_the_run_and_the_next_start_resumes_it(sim, ops):
    node, name = _abandon_a_running_step(sim, ops, "abandon.log")

    # What already runs on the host is not killed with the playbook (as when an SSH
    # session drops): the package run ends and records itself in the host's state.
    pathlib.Path(sim.host_root(node), "etc/ops-go").write_text("")
    wait_for(lambda: '"status": "complete"' in (ops.host_file(node, "/var/lib/nodewright/state/%s.json" % name)
                                                or ""), what="the abandoned package run recorded on the host")
    resumed = ops.once()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = ops.node(node)
    assert after["metadata"]["labels"][markers.status_label(name)] == "complete"
    assert not after["spec"].get("unschedulable")
    # The next start resumed from the recorded state: the finished step did not run again.
    assert ops.host_file(node, "/etc/ops-runs") == "start\n"


def test_sigterm_with_thread_workers_lets_the_step_finish_and_the_next_start_adopts_it(sim, ops):
    """With ``nodewright_rollout_workers=threads`` the package run's bookkeeping lives in
    the controller and is killed with it; the step itself runs under its own supervisor
    (a session of its own), finishes, and records its outcome on the host. The next
    start adopts that outcome: the step does not run a second time."""
    # The run that was stopped keeps its node reserved for the reservation's lifetime (15 s
    # here, the least there is); the next start waits for it.
    ttl = ("-e", "nodewright_rollout_reservation_ttl=15")
    node, name = _abandon_a_running_step(sim, ops, "abandon-threads.log", "-e", "nodewright_rollout_workers=threads",
                                         *ttl)

    pathlib.Path(sim.host_root(node), "etc/ops-go").write_text("")
    wait_for(lambda: '"status": "finished"' in (ops.host_file(node, "/var/lib/nodewright/step.json") or ""),
             what="the abandoned step's outcome recorded on the host by its supervisor")
    record = json.loads(ops.host_file(node, "/var/lib/nodewright/step.json"))
    assert record["resource"] == name and record["stage"] == "apply" and record["exit_code"] == 0, record
    resumed = ops.once("-e", "nodewright_rollout_workers=threads", *ttl)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = ops.node(node)
    assert after["metadata"]["labels"][markers.status_label(name)] == "complete"
    assert not after["spec"].get("unschedulable")
    assert '"status": "complete"' in ops.host_file(node, "/var/lib/nodewright/state/%s.json" % name)
    # The finished step was adopted, not started again.
    assert ops.host_file(node, "/etc/ops-runs") == "start\n"
    assert ops.host_file(node, "/etc/ops-done") == "done\n"
    assert ops.host_file(node, "/var/lib/nodewright/step.json") is None


# --------------------------------------------------------------------------- drift


def test_drift_is_found_reported_and_reapplied(sim, ops):
    (node,) = ops.add_nodes("b300")
    ops.resource("b300", shellscript(config="echo on > /etc/ops-drift\n",
                                     config_check='test "$(cat /etc/ops-drift)" = on\n'))
    first = ops.once()
    assert first.returncode == 0, first.stdout + first.stderr
    args = ("drift", "--inventory", ops.inventory, "--workdir", ops.tmp / "work", "--resource-selector",
            ops.selector)
    clean = ops.nodewright(*args)
    assert clean.returncode == 0 and "%s: no drift" % node in clean.stdout, clean.stdout + clean.stderr

    pathlib.Path(sim.host_root(node), "etc/ops-drift").write_text("off\n")
    found = ops.nodewright(*args)
    assert found.returncode == 2, found.stdout + found.stderr
    assert "%s: drifted" % node in found.stdout and "config-check failed" in found.stdout
    drifted = condition(ops.node(node), markers.CONDITION_DRIFT)
    assert drifted["status"] == "True" and drifted["reason"] == "HostDrift"
    assert "shellscript 1.0.0: config-check failed" in drifted["message"]
    assert any("host drifted" in e.message and e.type == "Warning"
               for e in node_events(sim, node, markers.EVENT_DRIFT))
    assert ops.host_file(node, "/etc/ops-drift") == "off\n"  # a check changes nothing

    again = ops.nodewright(*(args + ("--reapply",)))
    assert again.returncode == 2
    repaired = ops.once()
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert ops.host_file(node, "/etc/ops-drift") == "on\n"
    resolved = ops.nodewright(*args)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert condition(ops.node(node), markers.CONDITION_DRIFT)["status"] == "False"


# --------------------------------------------------------------------------- the runner example


def test_runner_example_prints_per_node_outcomes_and_the_run_writes_metrics(sim, ops):
    good, bad = ops.add_nodes("b300", 2)
    pathlib.Path(sim.host_root(bad), "etc/ops-fail").write_text("fail here\n")
    name = ops.resource("b300", shellscript(apply="[ ! -e /etc/ops-fail ] || exit 7\n", apply_check="true\n"))
    textfile = ops.tmp / "nodewright.prom"
    proc = subprocess.run([sys.executable, os.path.join(REPO, "examples", "runner_rollout.py"), "-i",
                           ops.inventory, "-e", "nodewright_resource=%s" % name,
                           "--private-data-dir", str(ops.tmp / "runner")],
                          capture_output=True, text=True, env=ops.env(NODEWRIGHT_METRICS_TEXTFILE=str(textfile)),
                          cwd=str(ops.tmp))
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()}
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert lines[good].split()[1] == "ok", proc.stdout
    assert lines[bad].split()[1] == "failed" and "maintenance of node %s failed" % bad in lines[bad], proc.stdout
    assert "! %s failed at" % bad in proc.stderr
    # The run report and its page are in the run's artifacts directory, beside ansible-runner's own files.
    (artifacts,) = [p for p in (ops.tmp / "runner" / "artifacts").iterdir() if p.is_dir()]
    assert (artifacts / "stdout").is_file() and (artifacts / "job_events").is_dir()
    report = json.loads((artifacts / "nodewright-report.json").read_text())
    assert report["hosts"][bad]["outcome"] == "failed" and report["hosts"][good]["outcome"] == "ok"
    page = (artifacts / "nodewright-report.html").read_text()
    assert 'data-node="%s" data-outcome="failed"' % bad in page and 'data-node="%s" data-outcome="ok"' % good in page
    assert not (ops.tmp / "runner" / "nodewright-report.json").exists()
    parsed = nw_metrics.parse(textfile.read_text())
    assert sample(parsed, "nodewright_last_run_nodes", kind="rollout", outcome="failed") == 1
    assert sample(parsed, "nodewright_last_run_success", kind="rollout") == 0
    assert sample(parsed, "nodewright_package_state_count", resource=name, package="shellscript",
                  state="complete") == 1
    assert sample(parsed, "nodewright_package_state_count", resource=name, package="shellscript",
                  state="erroring") == 1


# --------------------------------------------------------------------------- actions


def test_actions_only_change_marks(sim, ops):
    (node,) = ops.add_nodes("b300")
    name = ops.resource("b300", shellscript())
    paused = ops.nodewright("pause", name)
    assert paused.returncode == 0 and "paused NodeWright %s" % name in paused.stdout, paused.stderr
    assert ops.get(name)["metadata"]["annotations"][markers.ANNOTATION_PAUSE] == "true"
    assert "already paused" in ops.nodewright("pause", name).stdout
    proc = ops.once()  # paused: nothing runs, the status says so
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops.get(name)["status"]["status"] == "paused"
    assert markers.status_label(name) not in ops.node(node)["metadata"]["labels"]
    assert ops.nodewright("resume", name).returncode == 0
    assert markers.ANNOTATION_PAUSE not in (ops.get(name)["metadata"].get("annotations") or {})
    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops.node(node)["metadata"]["labels"][markers.status_label(name)] == "complete"

    assert "ignored" in ops.nodewright("ignore", node).stdout
    assert ops.node(node)["metadata"]["labels"][markers.LABEL_IGNORE] == "true"
    assert ops.nodewright("ignore", node, "--undo").returncode == 0
    assert markers.LABEL_IGNORE not in ops.node(node)["metadata"]["labels"]
    dry = ops.nodewright("reset", node, "--resource", name, "--dry-run")
    assert markers.state_annotation(name) in dry.stdout
    assert markers.state_annotation(name) in ops.node(node)["metadata"]["annotations"]
    reset = ops.nodewright("reset", node, "--resource", name)
    assert reset.returncode == 0, reset.stderr
    meta = ops.node(node)["metadata"]
    assert markers.state_annotation(name) not in meta["annotations"]
    assert markers.status_label(name) not in meta["labels"]


# --------------------------------------------------------------------------- bad input


def test_a_missing_policy_blocks_the_resource_with_a_reason(sim, ops):
    (node,) = ops.add_nodes("gb300")
    policy = "ops-missing-%s" % ops.id
    name = ops.resource("gb300", shellscript(), deploymentPolicy=policy)
    proc = ops.once()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    status = ops.get(name)["status"]
    assert status["status"] == "blocked"
    assert "DeploymentPolicy %r does not exist" % policy in status["message"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Blocked"] == "True"
    assert markers.status_label(name) not in ops.node(node)["metadata"]["labels"]  # nothing else changed
    assert "status blocked" in ops.nodewright("status", "--resource", name).stdout

    ops.custom.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DeploymentPolicy", "metadata": {"name": policy},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}}})
    ops.policies.append(policy)
    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops.get(name)["status"]["status"] == "complete"


def test_a_malformed_node_state_is_reported_and_the_node_left_alone(sim, ops):
    (node,) = ops.add_nodes("gb300")
    name = ops.resource("gb300", shellscript(apply="echo x > /etc/ops-malformed\n",
                                             apply_check="test -s /etc/ops-malformed\n"))
    key = markers.state_annotation(name)
    sim.core.patch_node(node, {"metadata": {"annotations": {key: "{hand edited"}}})
    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = ops.node(node)
    cond = condition(after, markers.CONDITION_ERRORING)
    assert cond["status"] == "True" and cond["reason"] == "MalformedState"
    assert key in cond["message"] and "nodewright reset %s" % node in cond["message"]
    assert after["metadata"]["annotations"][key] == "{hand edited"
    assert not after["spec"].get("unschedulable") and markers.status_label(name) not in after["metadata"]["labels"]
    assert ops.host_file(node, "/etc/ops-malformed") is None
    assert ops.nodewright("reset", node, "--resource", name).returncode == 0
    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops.host_file(node, "/etc/ops-malformed") == "x\n"


def service_account_kubeconfig(sim, tmp_path, namespace, name):
    sim.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    token = sim.core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    admin = yaml.safe_load(pathlib.Path(sim.kubeconfig).read_text())
    context = {c["name"]: c["context"] for c in admin["contexts"]}[admin["current-context"]]
    cluster = {c["name"]: c["cluster"] for c in admin["clusters"]}[context["cluster"]]
    path = tmp_path / ("%s.kubeconfig" % name)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "sim", "cluster": cluster}], "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": name}}]}))
    return str(path)


def test_a_reconciler_without_rights_says_which_and_keeps_running(sim, ops):
    kubeconfig = service_account_kubeconfig(sim, ops.tmp, sim.namespace("ops"), "nobody")
    once = ops.nodewright("reconcile", "--once", "--inventory", ops.inventory, kubeconfig=kubeconfig)
    assert once.returncode == 3, once.stdout + once.stderr
    assert "lacks permission(s)" in once.stderr
    assert "list nodes (to read the fleet)" in once.stderr
    assert "watch nodewrights.nodewright.io" in once.stderr
    assert "Traceback" not in once.stderr

    log = ops.tmp / "denied.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(ops.command("--kubeconfig", kubeconfig, "reconcile", "--inventory", ops.inventory,
                                            "--workdir", ops.tmp / "work"),
                                stdout=out, stderr=subprocess.STDOUT, env=ops.env(), cwd=str(ops.tmp))
    try:
        wait_for(lambda: "lacks permission(s)" in log.read_text(), what="the permission error logged")
        assert proc.poll() is None  # no crash loop: it waits for the rights
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0, log.read_text()


# --------------------------------------------------------------------------- lifecycle parity

FINALIZER = "nodewright.io/uninstall"


def removable(marker, uninstall=None):
    pkg = shellscript(apply="echo on > /etc/%s\n" % marker, apply_check="test -s /etc/%s\n" % marker,
                      uninstall=uninstall or "rm -f /etc/%s\n" % marker,
                      uninstall_check="test ! -e /etc/%s\n" % marker)
    pkg["shellscript"]["uninstall"] = {"enabled": True}
    return pkg


def gone(ops, name):
    try:
        ops.get(name)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_a_resource_uninstalls_its_packages_in_waves(sim, ops):
    from test_rollout_playbook import waves_from_report
    nodes = ops.add_nodes("b300", 3)
    name = ops.resource("b300", removable("ops-removable"), interruptionBudget={"count": 1})
    first = ops.once()
    assert first.returncode == 0, first.stdout + first.stderr
    assert FINALIZER in ops.get(name)["metadata"]["finalizers"]
    assert all(ops.host_file(n, "/etc/ops-removable") == "on\n" for n in nodes)

    ops.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
    assert ops.get(name)["metadata"]["deletionTimestamp"], "the finalizer holds it"
    second = ops.once()
    assert second.returncode == 0, second.stdout + second.stderr
    assert all(ops.host_file(n, "/etc/ops-removable") is None for n in nodes), "uninstalled everywhere"
    report = json.loads((ops.tmp / "work" / "uninstall" / "report.json").read_text())
    assert [len(w) for w in waves_from_report(report)] == [1, 1, 1], "one node at a time, as the budget says"
    assert all(markers.state_annotation(name) not in (ops.node(n)["metadata"].get("annotations") or {})
               for n in nodes)
    conditions = {c["type"]: c for c in ops.get(name)["status"]["conditions"]}
    assert conditions["Deleting"]["reason"] == "Uninstalling"

    third = ops.once()
    assert third.returncode == 0, third.stdout + third.stderr
    assert gone(ops, name), "the finalizer was removed once nothing was left to uninstall"


def test_a_failed_uninstall_keeps_the_resource_with_the_reason_and_never_deadlocks(sim, ops):
    (node,) = ops.add_nodes("gh200")
    name = ops.resource("gh200", removable("ops-stuck", uninstall="true\n"))
    assert ops.once().returncode == 0
    ops.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
    failed = ops.once()
    assert failed.returncode == 2, failed.stdout + failed.stderr
    cond = {c["type"]: c for c in ops.get(name)["status"]["conditions"]}["Deleting"]
    assert (cond["status"], cond["reason"]) == ("True", "UninstallFailed")
    assert "uninstall-check" in cond["message"] and "skip-uninstall" in cond["message"]
    again = ops.once()
    assert again.returncode == 2 and not gone(ops, name), "still there, tried again"
    assert {c["type"]: c for c in ops.get(name)["status"]["conditions"]}["Deleting"]["reason"] == "UninstallFailed"
    ops.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name, {
        "metadata": {"annotations": {"nodewright.io/skip-uninstall": "true"}}})
    released = ops.once()
    assert released.returncode == 0, released.stdout + released.stderr
    assert gone(ops, name)
    assert ops.host_file(node, "/etc/ops-stuck") == "on\n", "its package stays on the node"
    assert markers.state_annotation(name) not in (ops.node(node)["metadata"].get("annotations") or {})


def test_a_rebooted_runtime_required_node_is_tainted_again_until_reapplied(sim, ops):
    from test_rollout_playbook import reboot
    (node,) = ops.add_nodes("gb300", taint=True)
    name = ops.resource("gb300", shellscript(apply="echo run >> /var/lib/ops-boot-runs\n",
                                             apply_check="test -s /var/lib/ops-boot-runs\n"),
                        runtimeRequired=True, reapplyOnReboot=True)
    assert ops.once().returncode == 0
    assert markers.TAINT_RUNTIME_REQUIRED not in taints(ops.node(node))
    reboot(sim, node)
    proc = ops.once()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (event,) = node_events(sim, node, markers.EVENT_REAPPLY)
    assert "rebooted; %s applies shellscript again (reapplyOnReboot)" % name in event.message
    assert ops.host_file(node, "/var/lib/ops-boot-runs") == "run\nrun\n"
    assert len(node_events(sim, node, markers.EVENT_RUNTIME_READY)) == 2, "the gate closed and opened again"
    assert markers.TAINT_RUNTIME_REQUIRED not in taints(ops.node(node))
    assert ops.node(node)["metadata"]["labels"][markers.status_label(name)] == "complete"


def test_triage_shows_checks_and_logs_and_reruns_a_stage(sim, ops):
    (node,) = ops.add_nodes("b300")
    name = ops.resource("b300", shellscript(apply="echo run >> /var/lib/ops-triage\n",
                                            apply_check="test -e /etc/ops-triage-ok\n"))
    assert ops.once().returncode == 2
    status = ops.nodewright("node", "status", node)
    assert status.returncode == 0, status.stderr
    assert "shellscript 1.0.0: apply/erroring" in status.stdout
    assert "checks: apply-check failed (exit 1)" in status.stdout
    listed = ops.nodewright("node", "list", "--resource", name, "--json")
    (row,) = json.loads(listed.stdout)
    assert row["node"] == node and row["resources"][name]["status"] == "erroring"
    logs = ops.nodewright("package", "logs", node, "shellscript", "--stage", "apply-check",
                          "--inventory", ops.inventory, "--workdir", ops.tmp / "triage")
    assert logs.returncode == 0, logs.stdout + logs.stderr
    assert "==> apply-check apply-check (/var/log/nodewright/%s/shellscript/1.0.0/" % name in logs.stdout
    assert "--- exit code 1" in logs.stdout
    hostroot_file = os.path.join(sim.host_root(node), "etc/ops-triage-ok")
    pathlib.Path(hostroot_file).write_text("")
    rerun = ops.nodewright("package", "rerun", node, "shellscript", "--stage", "apply",
                           "--inventory", ops.inventory, "--workdir", ops.tmp / "triage")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "apply of shellscript marked to run again" in rerun.stdout
    assert ops.once().returncode == 0
    assert ops.host_file(node, "/var/lib/ops-triage") == "run\nrun\n", "the finished apply ran again"
    done = json.loads(ops.nodewright("node", "status", node, "--json").stdout)
    (pkg,) = done["resources"][name]["packages"]
    assert (pkg["state"], pkg["checks"]["apply-check"]["result"]) == ("complete", "passed")
    version = ops.nodewright("version")
    assert version.returncode == 0 and "collection nodewright.fleet" in version.stdout


# --------------------------------------------------------------------------- kubectl plugin

def test_kubectl_finds_the_plugin_and_it_speaks_kubectls_conventions(sim, ops):
    kubectl = os.path.join(os.environ.get("NODEWRIGHT_CACHE") or os.path.expanduser("~/.cache/nodewright"),
                           "bin", "kubectl")
    (node,) = ops.add_nodes("b300")
    name = ops.resource("b300", shellscript())
    assert ops.once().returncode == 0
    env = ops.env()
    env.pop("KUBECONFIG")  # given the kubectl way, after the plugin's name

    def kubectl_nw(*args):
        return subprocess.run([kubectl, "nodewright", "--kubeconfig", sim.kubeconfig] + list(args),
                              capture_output=True, text=True, env=env, cwd=str(ops.tmp))
    found = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, env=env)
    assert "kubectl-nodewright" in found.stdout, found.stdout + found.stderr
    as_json = kubectl_nw("node", "status", node, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["resources"][name]["status"] == "complete"
    as_yaml = kubectl_nw("node", "status", node, "-o", "yaml")
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    listed = yaml.safe_load(kubectl_nw("node", "list", "-l", name, "-o", "yaml").stdout)
    assert [n["node"] for n in listed] == [node]
    assert name in kubectl_nw("status", name, "-o", "wide").stdout
    assert kubectl_nw("pause", name).returncode == 0
    assert ops.get(name)["metadata"]["annotations"][markers.ANNOTATION_PAUSE] == "true"
    assert kubectl_nw("resume", name).returncode == 0
    assert markers.ANNOTATION_PAUSE not in (ops.get(name)["metadata"].get("annotations") or {})
    refused = kubectl_nw("-n", "default", "pause", name)
    assert refused.returncode != 0 and "cluster-scoped" in refused.stderr
