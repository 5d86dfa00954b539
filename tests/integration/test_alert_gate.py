# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The alert gate and soak times (issue 30, items 1 and 2) against a real Alertmanager.

Alertmanager v0.35.0 (built once by simulator/build-binaries.sh, cached beside the
control plane's binaries) runs as a local process with a receiver that does nothing;
the tests post and clear alerts through its API v2, as Prometheus would. Each test
uses alert names of its own, so alerts of one test never gate another."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
import yaml

from fleet_helpers import REPO, Fleet, waves_from_report
from k8s_helpers import wait_for

pytestmark = pytest.mark.integration

BIN = os.path.dirname(sys.executable)
CACHE = os.environ.get("NODEWRIGHT_CACHE") or os.path.expanduser("~/.cache/nodewright")
ALERTMANAGER = os.path.join(CACHE, "bin", "alertmanager")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Alertmanager(object):
    def __init__(self, url):
        self.url = url

    def _post(self, alerts):
        request = urllib.request.Request(self.url + "/api/v2/alerts", data=json.dumps(alerts).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def fire(self, name, **labels):
        self._post([{"labels": dict(labels, alertname=name)}])
        wait_for(lambda: name in self.active(), timeout=30, what="alert %s active" % name)

    def clear(self, name, **labels):
        """Resolve the alert: the same labels with an end in the past."""
        now = datetime.datetime.now(datetime.timezone.utc)
        self._post([{"labels": dict(labels, alertname=name),
                     "startsAt": (now - datetime.timedelta(hours=1)).isoformat(),
                     "endsAt": (now - datetime.timedelta(seconds=1)).isoformat()}])
        wait_for(lambda: name not in self.active(), timeout=30, what="alert %s resolved" % name)

    def active(self):
        with urllib.request.urlopen(self.url + "/api/v2/alerts?active=true", timeout=10) as response:
            return [a["labels"].get("alertname") for a in json.loads(response.read())]


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    """A real Alertmanager on a free loopback port; its one receiver sends nothing anywhere."""
    if not os.access(ALERTMANAGER, os.X_OK):
        pytest.fail("%s is missing: run `make binaries` (simulator/build-binaries.sh builds it)" % ALERTMANAGER)
    tmp = tmp_path_factory.mktemp("alertmanager")
    (tmp / "alertmanager.yml").write_text('route: {receiver: "null"}\nreceivers: [{name: "null"}]\n')
    port = free_port()
    log = open(str(tmp / "alertmanager.log"), "w")
    proc = subprocess.Popen([ALERTMANAGER, "--config.file=%s" % (tmp / "alertmanager.yml"),
                             "--storage.path=%s" % (tmp / "data"), "--web.listen-address=127.0.0.1:%d" % port,
                             "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port

    def ready():
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return proc.poll() is not None  # died: stop waiting, say so below

    try:
        wait_for(ready, timeout=60, what="Alertmanager ready")
        assert proc.poll() is None, (tmp / "alertmanager.log").read_text()[-2000:]
        yield Alertmanager(url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def resource(fleet, name, policy_spec):
    """A resource with a package that needs no interrupt (cheap: no drain, no reboot)."""
    fleet.create("DeploymentPolicy", name, policy_spec)
    fleet.create("NodeWright", name, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": name,
        "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}})


def one_by_one(gate=None, soak=None):
    spec = {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}}
    if soak:
        spec["default"]["soakTime"] = soak
    if gate:
        spec["alertGate"] = gate
    return spec


def node_status(fleet, res):
    return {n: fleet.node_labels(n).get("nodewright.io/status-%s" % res) for n in fleet.nodes}


def gate_condition(fleet, res):
    conditions = fleet.resource(res)["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "AlertGate")


def gate_decisions(report):
    return [d for r in report["rollout"] for d in r["decisions"] if "alertGate" in d]


def text(proc):
    return " ".join((proc.stdout + proc.stderr).split())


def test_an_alert_firing_before_the_rollout_admits_no_node_and_stops_the_run(sim, alertmanager, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    res = "gate-before-" + fleet.label
    resource(fleet, res, one_by_one(gate={"url": alertmanager.url, "matchers": ['severity="critical"'],
                                          "alertNames": "GateBefore.*", "waitTimeout": "3s",
                                          "checkInterval": "1s"}))
    alertmanager.fire("GateBeforeGPUDown", severity="critical", node=fleet.nodes[0])
    alertmanager.fire("GateBeforeNoise", severity="info")  # another severity: does not count
    try:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    finally:
        alertmanager.clear("GateBeforeGPUDown", severity="critical", node=fleet.nodes[0])
        alertmanager.clear("GateBeforeNoise", severity="info")
    # Stopped at the deadline, like a halted rollout: exit status 2, the alert named.
    assert proc.returncode == 2, proc.stdout[-4000:] + proc.stderr[-2000:]
    output = text(proc)
    assert "alert gate closed: 1 alert(s) firing at %s: GateBeforeGPUDown (node=%s, severity=critical); no new " \
           "node is admitted" % (alertmanager.url, fleet.nodes[0]) in output, output[-4000:]
    assert "alert gate closed for 3s (waitTimeout 3s)" in output
    assert "GateBeforeNoise" not in output
    (record,) = proc.report["rollout"]
    assert record["status"] == "halted" and "GateBeforeGPUDown" in record["reason"]
    assert waves_from_report(proc.report) == [] and sorted(record["untouched"]) == sorted(fleet.nodes)
    assert {d["alertGate"]["reason"] for d in gate_decisions(proc.report)} == {"AlertsFiring"}
    # Nothing was touched; the resource says why.
    assert node_status(fleet, res) == {n: None for n in fleet.nodes}
    assert not any(sim.core.read_node(n).spec.unschedulable for n in fleet.nodes)
    condition = gate_condition(fleet, res)
    assert (condition["status"], condition["reason"]) == ("True", "AlertsFiring")
    assert "GateBeforeGPUDown" in condition["message"]
    assert fleet.resource(res)["status"]["status"] == "halted"

    # Cleared: the next run rolls out (nothing to reset), and the condition says so.
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert node_status(fleet, res) == {n: "complete" for n in fleet.nodes}
    condition = gate_condition(fleet, res)
    assert (condition["status"], condition["reason"]) == ("False", "NoAlerts")


def test_an_alert_firing_during_a_soak_stops_admissions_until_it_clears(sim, alertmanager, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    first, second = sorted(fleet.nodes)  # same creation second: batch order is by name
    res = "gate-soak-" + fleet.label
    resource(fleet, res, one_by_one(soak="8s", gate={"url": alertmanager.url, "alertNames": "GateSoak.*",
                                                     "waitTimeout": "5m", "checkInterval": "1s"}))

    # The plan shows the soak after each batch and the gate, checked now.
    plan = fleet.plan(res)
    assert plan["soak"] == {"__default__": "8s"}
    assert plan["alert_gate"]["now"]["reason"] == "NoAlerts" and not plan["alert_gate"]["now"]["closed"]
    assert [w["nodes"] for w in plan["waves"]["waves"]] == [[first], [second]]

    run = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res)
    try:
        # The first batch is done; the alert fires while it soaks.
        wait_for(lambda: node_status(fleet, res)[first] == "complete", timeout=180, what="first node complete")
        alertmanager.fire("GateSoakXid", severity="critical")
        out = tmp_path / "run.out"
        wait_for(lambda: "alert gate closed: 1 alert(s) firing" in " ".join(out.read_text().split()),
                 timeout=120, what="the run to see the alert")
        assert run.poll() is None
        assert node_status(fleet, res)[second] is None and not sim.core.read_node(second).spec.unschedulable
        wait_for(lambda: gate_condition(fleet, res)["status"] == "True", timeout=30, what="AlertGate condition")
        assert "GateSoakXid" in gate_condition(fleet, res)["message"]
    finally:
        alertmanager.clear("GateSoakXid", severity="critical")
    run = fleet.finished(run)
    assert run.returncode == 0, run.output[-4000:]
    assert waves_from_report(run.report) == [[first], [second]]
    (record,) = run.report["rollout"]
    assert record["status"] == "complete"
    # The report shows the soak after each batch, the wait and why, and the gate opening again.
    assert "soakUntil" in record["waves"][0]["batches"]["__default__"]
    assert any("soaking until" in d["reason"] and "soakUntil" in d for d in record["decisions"])
    reasons = [d["alertGate"]["reason"] for d in gate_decisions(run.report)]
    assert "AlertsFiring" in reasons and reasons[-1] == "NoAlerts", reasons
    assert node_status(fleet, res) == {n: "complete" for n in fleet.nodes}
    assert (gate_condition(fleet, res)["status"], gate_condition(fleet, res)["reason"]) == ("False", "NoAlerts")


def test_an_ignored_alert_does_not_gate(sim, alertmanager, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    res = "gate-ignore-" + fleet.label
    resource(fleet, res, one_by_one(gate={"url": alertmanager.url, "alertNames": "GateIgnore.*",
                                          "ignore": ["GateIgnoreBenign"], "waitTimeout": "0s"}))
    alertmanager.fire("GateIgnoreBenign", severity="critical")
    try:
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    finally:
        alertmanager.clear("GateIgnoreBenign", severity="critical")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert node_status(fleet, res) == {fleet.nodes[0]: "complete"}
    assert [d["alertGate"]["reason"] for d in gate_decisions(proc.report)] == ["NoAlerts"]


def test_an_unreachable_source_fails_closed_unless_the_gate_fails_open(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    res = "gate-down-" + fleet.label
    nowhere = "http://127.0.0.1:%d" % free_port()
    resource(fleet, res, one_by_one(gate={"url": nowhere, "waitTimeout": "0s", "requestTimeout": "2s"}))
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 2, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "counted as firing (fail closed; failOpen: true admits nodes when it cannot be read)" in text(proc)
    assert node_status(fleet, res) == {fleet.nodes[0]: None}
    condition = gate_condition(fleet, res)
    assert (condition["status"], condition["reason"]) == ("True", "SourceUnavailable")
    assert nowhere + "/api/v2/alerts" in condition["message"]

    # The same through `nodewright rollout --resources`, with the run's own gate, failing open.
    env = sim.env()
    env.update({"ANSIBLE_DEPRECATION_WARNINGS": "false", "ANSIBLE_LOCALHOST_WARNING": "false"})
    cli = subprocess.run(
        [os.path.join(BIN, "nodewright"), "rollout", "--resources", "--resource", res, "-i",
         str(tmp_path / "fleet.k8s_nodes.yml"), "--report", str(tmp_path / "cli.json"),
         "--alert-gate", json.dumps({"url": nowhere, "failOpen": True, "requestTimeout": "2s"})],
        capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert cli.returncode == 0, cli.stdout[-4000:] + cli.stderr[-3000:]
    assert "nodes are admitted anyway (failOpen: true)" in text(cli)
    assert node_status(fleet, res) == {fleet.nodes[0]: "complete"}
    report = json.loads((tmp_path / "cli.json").read_text())
    assert [d["alertGate"]["reason"] for d in gate_decisions(report)] == ["SourceUnavailableFailOpen"]
    condition = gate_condition(fleet, res)
    assert (condition["status"], condition["reason"]) == ("False", "SourceUnavailableFailOpen")


def test_bad_gate_and_soak_settings_are_refused_before_any_node_is_touched(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    name = "gate-bad-" + fleet.label
    # The API server refuses what the CRD can check ...
    with pytest.raises(Exception) as refused:
        fleet.create("DeploymentPolicy", name, dict(one_by_one(soak="-5m")))
    assert "soakTime is a duration such as 10m" in str(refused.value)
    # ... and the run what only NodeWright checks: the run's own gate, before planning.
    proc = subprocess.run(
        [os.path.join(BIN, "nodewright"), "rollout", "--resources", "-i", str(tmp_path / "fleet.k8s_nodes.yml"),
         "--alert-gate", "{url: http://127.0.0.1:9, matchers: ['severity=~\"(\"']}"],
        capture_output=True, text=True, cwd=str(tmp_path), env=sim.env())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--alert-gate.matchers[0]" in proc.stderr and "is not a regular expression" in proc.stderr
    assert node_status(fleet, name) == {fleet.nodes[0]: None}


def plain_play_env(tmp_path):
    env = dict(os.environ)
    env.update({"ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
                "ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
                "NODEWRIGHT_REPORT_PATH": str(tmp_path / "report.json"), "ANSIBLE_LOCALHOST_WARNING": "false",
                "ANSIBLE_DEPRECATION_WARNINGS": "false", "ANSIBLE_NOCOLOR": "1"})
    return env


def test_the_runs_own_gate_and_soak_in_a_play_over_plain_hosts(alertmanager, tmp_path):
    """No cluster: the strategy (play variable nodewright_rollout_alert_gate) and the wave runner
    (--alert-gate, --dry-run) over two hosts of a static inventory."""
    hosts = {"n01": {"nodewright_node_labels": {}}, "n02": {"nodewright_node_labels": {}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, "hosts": hosts}}))
    policy = {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}, "soakTime": "2s"}}
    (tmp_path / "policy.yml").write_text(yaml.safe_dump(policy))
    task = {"name": "patch", "ansible.builtin.debug": {"msg": "patched"}}
    (tmp_path / "site.yml").write_text(yaml.safe_dump([{
        "name": "patch", "hosts": "all", "gather_facts": False,
        "strategy": "{{ nodewright_rollout_strategy | default('nodewright.fleet.rollout') }}",
        "vars": {"nodewright_rollout_policy": policy}, "tasks": [task]}], sort_keys=False))
    gate = {"url": alertmanager.url, "alertNames": "PlainGate.*", "waitTimeout": "0s"}
    env = plain_play_env(tmp_path)

    alertmanager.fire("PlainGateDown", severity="critical")
    try:
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                               str(tmp_path / "site.yml"), "-e", json.dumps({"nodewright_rollout_alert_gate": gate})],
                              capture_output=True, text=True, env=env, cwd=str(tmp_path))
    finally:
        alertmanager.clear("PlainGateDown", severity="critical")
    assert proc.returncode == 2, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "NodeWright rollout halted: alert gate closed for 0s (waitTimeout 0s): 1 alert(s) firing" in text(proc)
    assert "PlainGateDown" in text(proc) and "patched" not in proc.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rollout"][0]["status"] == "halted" and report["rollout"][0]["untouched"] == ["n01", "n02"]

    runner = [os.path.join(BIN, "nodewright"), "rollout", str(tmp_path / "site.yml"), "-i", str(tmp_path / "hosts.yml"),
              "--policy", str(tmp_path / "policy.yml"), "--report", str(tmp_path / "runner.json"),
              "--alert-gate", json.dumps(gate)]
    plan = subprocess.run(runner + ["--dry-run"], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "alert gate: alertmanager %s (alertname =~ PlainGate.*; ignoring Watchdog, InfoInhibitor)" \
        % alertmanager.url in plan.stdout
    assert "wave 1: __default__ [n01]; then soak __default__ 2s" in plan.stdout

    run = subprocess.run(runner, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    (record,) = json.loads((tmp_path / "runner.json").read_text())["rollout"]
    assert record["status"] == "complete" and [w["nodes"] for w in record["waves"]] == [["n01"], ["n02"]]
    assert any("soaking until" in d["reason"] for d in record["decisions"])
    assert [d["alertGate"]["reason"] for d in record["decisions"] if "alertGate" in d][0] == "NoAlerts"
