# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The alert gate's pure parts (matchers, the setting, the two APIs' answers, fail closed or
open) and how the driver and the engine use it and soak times, with no cluster and no HTTP."""

from __future__ import annotations

import datetime
import io
import json
import urllib.error

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import alerts
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import FleetView, NodeInfo
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    COMPLETE,
    HALTED,
    Hooks,
    ResourceRollout,
    RolloutDriver,
    StaticFleet,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import WAITING, WAVE, parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import plan_run
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    RolloutState,
    next_wave,
    record_wave_result,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)
URL = "http://alertmanager.monitoring:9093"


@pytest.mark.parametrize("text,labels,matches", [
    ('severity="critical"', {"severity": "critical"}, True),
    ("severity=critical", {"severity": "warning"}, False),
    ('severity!="info"', {"severity": "critical"}, True),
    ('severity!="info"', {}, True),
    ('team=~"gpu|infra"', {"team": "infra"}, True),
    ('team=~"gpu"', {"team": "gpu-2"}, False),          # whole value, as in PromQL
    ("team!~'gpu.*'", {"team": "gpu-2"}, False),
    ('node=""', {}, True),                               # an absent label is the empty string
])
def test_matchers(text, labels, matches):
    assert alerts.parse_matcher(text, "m").matches(labels) is matches


@pytest.mark.parametrize("text", ["severity", "=x", "9x=y", 'a=~"("', 3])
def test_bad_matchers_name_the_field(text):
    with pytest.raises(ValidationError) as err:
        alerts.parse_alert_gate({"url": URL, "matchers": [text]})
    assert err.value.field == "spec.alertGate.matchers[0]"


@pytest.mark.parametrize("gate,field,words", [
    ({}, "spec.alertGate.url", "needs the url"),
    ({"url": "alertmanager:9093"}, "spec.alertGate.url", "not an http(s) URL"),
    ({"url": URL, "api": "thanos"}, "spec.alertGate.api", "one of alertmanager, prometheus"),
    ({"url": URL, "waitTimeout": "-1m"}, "spec.alertGate.waitTimeout", "must not be negative"),
    ({"url": URL, "checkInterval": "0s"}, "spec.alertGate.checkInterval", "at least 1s"),
    ({"url": URL, "requestTimeout": "0"}, "spec.alertGate.requestTimeout", "more than 0"),
    ({"url": URL, "alertNames": "("}, "spec.alertGate.alertNames", "not a regular expression"),
    ({"url": URL, "ignore": "Watchdog"}, "spec.alertGate.ignore", "a list of alert names"),
    ({"url": URL, "failOpen": "maybe"}, "spec.alertGate.failOpen", "true or false"),
    ({"url": URL, "silenced": True}, "spec.alertGate", "silenced"),
])
def test_bad_settings_are_refused_with_the_field(gate, field, words):
    with pytest.raises(ValidationError) as err:
        parse_policy({"default": {"budget": {"count": 1}}, "alertGate": gate})
    assert err.value.field.startswith(field) and words in str(err.value)


def test_defaults_and_round_trip():
    policy = parse_policy({"default": {"budget": {"count": 1}, "soakTime": "10m"},
                           "compartments": [{"name": "canary", "selector": "pool=canary", "budget": {"count": 1},
                                             "soakTime": "0"}],
                           "alertGate": {"url": URL + "/", "matchers": ["severity=critical"]}})
    gate = policy.alert_gate
    assert (gate.api, gate.fail_open, gate.wait_timeout, gate.check_interval, gate.request_timeout) == \
        ("alertmanager", False, 3600, 30, 10)
    assert gate.ignore == ("Watchdog", "InfoInhibitor")
    assert gate.endpoint == URL + "/api/v2/alerts?active=true&silenced=false&inhibited=false"
    assert policy.default.soak_time == 600 and policy.compartment("canary").soak_time == 0
    again = parse_policy(policy.to_dict())
    assert again == policy
    assert policy.to_dict()["default"]["soakTime"] == "600s"
    prom = alerts.parse_alert_gate({"url": "https://prom:9090/prometheus", "api": "prometheus", "ignore": []})
    assert prom.endpoint == "https://prom:9090/prometheus/api/v1/alerts" and prom.ignore == ()


def am(name, state="active", **labels):
    return {"labels": dict(labels, alertname=name), "status": {"state": state, "silencedBy": [], "inhibitedBy": []}}


def test_alertmanager_answers():
    payload = [am("GPUDown", severity="critical"), am("Muted", state="suppressed"), am("New", state="unprocessed")]
    assert [a.name for a in alerts.parse_alerts(payload, "alertmanager")] == ["GPUDown", "New"]


def test_prometheus_answers_count_firing_not_pending():
    payload = {"status": "success", "data": {"alerts": [
        {"labels": {"alertname": "NodeDown"}, "state": "firing"},
        {"labels": {"alertname": "Soon"}, "state": "pending"}]}}
    assert [a.name for a in alerts.parse_alerts(payload, "prometheus")] == ["NodeDown"]


@pytest.mark.parametrize("payload,api", [
    ({"status": "success"}, "alertmanager"),
    ([{"labels": "x"}], "alertmanager"),
    ([], "prometheus"),
    ({"status": "error", "data": {}}, "prometheus"),
])
def test_malformed_answers(payload, api):
    with pytest.raises(alerts.MalformedAlerts):
        alerts.parse_alerts(payload, api)


def test_which_alerts_count():
    gate = alerts.parse_alert_gate({"url": URL, "matchers": ['severity=~"critical|page"'], "alertNames": "GPU.*",
                                    "ignore": ["GPUNoise"]})
    counted = [name for name, sev in (("GPUDown", "critical"), ("GPUDown", "info"), ("GPUNoise", "critical"),
                                      ("DiskFull", "page"), ("GPUXid", "page"))
               if gate.counts(alerts.Alert(name, {"alertname": name, "severity": sev}))]
    assert counted == ["GPUDown", "GPUXid"]
    assert not alerts.parse_alert_gate({"url": URL}).counts(alerts.Alert("Watchdog", {"alertname": "Watchdog"}))


class Answer(object):
    def __init__(self, body):
        self.body = body

    def __call__(self, request, timeout=None, context=None):
        self.request, self.timeout = request, timeout
        if isinstance(self.body, Exception):
            raise self.body
        return io.BytesIO(self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode())


def test_check_gate_fails_closed_and_open(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    gate = alerts.parse_alert_gate({"url": URL, "bearerTokenFile": str(token), "requestTimeout": "3s"})
    answer = Answer([am("GPUDown", severity="critical", node="gpu-1")])
    check = alerts.check_gate(gate, answer)
    assert check.closed and check.reason == "AlertsFiring"
    assert check.message == "1 alert(s) firing at %s: GPUDown (node=gpu-1, severity=critical)" % URL
    assert answer.request.get_header("Authorization") == "Bearer s3cret" and answer.timeout == 3
    assert alerts.check_gate(gate, Answer([])).reason == "NoAlerts"
    for body, words in ((b"<html>", "malformed answer: the answer is not JSON"),
                        (urllib.error.URLError("Connection refused"), "Connection refused"),
                        (urllib.error.HTTPError(URL, 503, "Service Unavailable", {}, None), "HTTP 503")):
        check = alerts.check_gate(gate, Answer(body))
        assert check.closed and check.reason == "SourceUnavailable" and words in check.message
        assert "counted as firing (fail closed" in check.message
    opened = alerts.parse_alert_gate({"url": URL, "failOpen": True})
    check = alerts.check_gate(opened, Answer(b"{}"))
    assert not check.closed and check.reason == "SourceUnavailableFailOpen"
    assert "nodes are admitted anyway (failOpen: true)" in check.message


# --------------------------------------------------------------------------- soak in the engine


def nodes(count):
    return [{"name": "n%d" % i, "labels": {}} for i in range(count)]


def test_a_compartment_soaks_after_each_batch():
    policy = parse_policy({"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}, "soakTime": "5m"}})
    state = RolloutState(policy)
    first = next_wave(state, nodes(2), now=NOW)
    assert first.status == WAVE and first.soak_until is None
    outcome = record_wave_result(state, succeeded=first.wave.nodes, now=NOW)
    assert outcome["__default__"]["soakUntil"] == "2026-12-01T12:05:00+00:00"
    soaking = next_wave(state, nodes(2), now=NOW + datetime.timedelta(minutes=4))
    assert soaking.status == WAITING and soaking.soak_until == NOW + datetime.timedelta(minutes=5)
    assert "soaking until 2026-12-01T12:05:00+00:00 (soakTime 5m after its last batch)" in soaking.reason
    assert next_wave(state, nodes(2), now=NOW + datetime.timedelta(minutes=5)).status == WAVE


# --------------------------------------------------------------------------- the gate in the driver


class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Waits(Hooks):
    def __init__(self, clock, on_wait=None):
        self.clock, self.on_wait, self.waves, self.said = clock, on_wait, [], []

    def run_wave(self, wave):
        self.waves.append(list(wave.nodes))
        return {n: "ok" for n in wave.nodes}

    def wait(self, seconds, reason):
        self.clock.t += seconds
        if self.on_wait:
            self.on_wait(self.clock.t)
        return True

    def say(self, text, level="info"):
        self.said.append(text)


def gated_run(spec, checks, on_wait=None, count=2):
    policy = parse_policy(spec)
    res = ResourceRollout("r", policy, targets=[n["name"] for n in nodes(count)],
                          work=[n["name"] for n in nodes(count)])
    view = FleetView([NodeInfo(name=n["name"], labels={}, created=None, unschedulable=False, cordoned_by=None,
                               statuses={}) for n in nodes(count)])
    clock = Clock()
    hooks = Waits(clock, on_wait)
    gate_calls = []

    def check(gate):
        gate_calls.append(clock.t)
        return checks(gate, clock.t)

    driver = RolloutDriver([res], StaticFleet(view), hooks, now=lambda: NOW + datetime.timedelta(seconds=clock.t),
                           gate_check=check, clock=clock)
    status, reason = driver.run()
    return status, reason, hooks, res, gate_calls


def firing(gate, name="GPUDown"):
    return alerts.GateCheck(gate, closed=True, firing=[alerts.Alert(name, {"alertname": name})])


GATED = {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
         "alertGate": {"url": URL, "waitTimeout": "10s", "checkInterval": "2s"}}


def test_a_gate_that_stays_closed_stops_the_resource_at_its_deadline():
    status, reason, hooks, res, calls = gated_run(GATED, lambda gate, t: firing(gate))
    assert status == HALTED and hooks.waves == []
    assert reason.startswith("alert gate closed for 10s (waitTimeout 10s): 1 alert(s) firing at %s: GPUDown" % URL)
    assert calls == [0, 2, 4, 6, 8, 10]
    assert res.state.wave_number == 0 and res.state.pending is None  # the wave taken back was never started
    assert res.gate_check.reason == "AlertsFiring"


def test_a_gate_that_opens_lets_the_waves_go_on():
    status, _reason, hooks, res, calls = gated_run(
        GATED, lambda gate, t: firing(gate) if t < 4 else alerts.GateCheck(gate, closed=False))
    assert status == COMPLETE and hooks.waves == [["n0"], ["n1"]]
    assert calls[:3] == [0, 2, 4]
    assert any(s.startswith("alert gate closed: 1 alert(s) firing") for s in hooks.said)
    assert res.gate_check.reason == "NoAlerts"


def test_the_gate_is_rechecked_while_a_compartment_soaks():
    spec = dict(GATED, default=dict(GATED["default"], soakTime="6s"))
    seen = []

    def checks(gate, t):
        seen.append(t)
        return firing(gate) if 1 <= t < 9 else alerts.GateCheck(gate, closed=False)

    status, _reason, hooks, _res, calls = gated_run(spec, checks)
    assert status == COMPLETE and hooks.waves == [["n0"], ["n1"]]
    # Checked before wave 1, during the soak (every 2s) and until the alert cleared at 9s.
    assert calls[0] == 0 and len([t for t in calls if 0 < t < 6]) >= 2 and calls[-1] >= 9
    assert any("alert gate closed: 1 alert(s) firing" in s for s in hooks.said)


def test_zero_wait_stops_at_once_and_the_dry_run_never_checks():
    spec = dict(GATED, alertGate=dict(GATED["alertGate"], waitTimeout="0s"))
    status, _reason, _hooks, _res, calls = gated_run(spec, lambda gate, t: firing(gate))
    assert status == HALTED and calls == [0]
    policy = parse_policy(dict(spec, default=dict(spec["default"], soakTime="1h")))
    res = ResourceRollout("r", policy, targets=["n0", "n1"], work=["n0", "n1"])
    view = FleetView([NodeInfo(name=n, labels={}, created=None, unschedulable=False, cordoned_by=None, statuses={})
                      for n in ("n0", "n1")])
    driver, status, _reason = plan_run([res], view)
    assert status == COMPLETE and [w.nodes for w in driver.waves] == [["n0"], ["n1"]]
