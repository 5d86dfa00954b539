# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A rollout's notifications reach a webhook as Apprise sends them (a local HTTP
receiver stands for Slack, Teams or a team's own endpoint), a target that cannot be
reached never fails the rollout, the report lists every notification with its
outcome, and no URL token is printed."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from fleet_helpers import GROUP, REPO, VERSION, Fleet

pytestmark = pytest.mark.integration

TOKEN = "hook-s3cr3t"


class Receiver(object):
    """An HTTP server on 127.0.0.1 that keeps every JSON body POSTed to it."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append({"path": self.path, "body": json.loads(body or b"{}")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port():
    """A local port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_a_rollout_tells_a_webhook_each_event_and_a_dead_target_does_not_stop_it(sim, tmp_path, receiver):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    policy = "notify-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"count": 1},
                                                          "strategy": {"fixed": {"initialBatch": 1}}}})
    res = "notify-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": policy,
        "packages": {"shellscript": {"version": "1.0.0", "configMap": {
            "apply.sh": "echo notified > /etc/notify-test\n", "apply_check.sh": "test -s /etc/notify-test\n"}}}})
    # A token as a query parameter of the webhook (Apprise: "-name=value" in its URL).
    hook = "json://127.0.0.1:%d/hooks/nodewright?-token=%s" % (receiver.port, TOKEN)
    dead = "json://127.0.0.1:%d/refused" % closed_port()
    setting = json.dumps({"nodewright_rollout_notify": [hook, dead]})

    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res, "-e", setting)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-2000:]
    assert ("notifications: started, batch, blocked, halted, complete to json://127.0.0.1:%d/hooks/nodewright"
            % receiver.port) in plan.stdout
    assert receiver.received == [], "a plan sends nothing"

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", setting)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert {fleet.node_labels(n)["nodewright.io/status-%s" % res] for n in fleet.nodes} == {"complete"}

    # The webhook got the events in order, as Apprise's JSON: started, one batch per
    # wave of one node, complete.
    assert {r["path"] for r in receiver.received} == {"/hooks/nodewright?token=%s" % TOKEN}
    bodies = [r["body"] for r in receiver.received]
    assert [b["title"] for b in bodies] == [
        "NodeWright: rollout started (%s)" % res, "NodeWright: wave 1 done (1 node(s))",
        "NodeWright: wave 2 done (1 node(s))", "NodeWright: rollout complete"]
    assert [b["type"] for b in bodies] == ["info", "info", "info", "success"]
    assert "%s: 2 node(s) with work of 2 targeted" % res in bodies[0]["message"]
    assert "%s: 1 ok, 0 failed, 0 blocked; 2 of 2 node(s) with work done" % res in bodies[2]["message"]

    # The dead target failed each time, was warned about, and the report says so.
    assert "the rollout goes on" in output
    assert "4 notification(s) sent, 4 failed" in output
    sent = proc.report["rollout"][0]["notifications"]
    assert [(n["event"], n["ok"]) for n in sent] == [
        ("started", True), ("started", False), ("batch", True), ("batch", False), ("batch", True),
        ("batch", False), ("complete", True), ("complete", False)]
    assert all(n["error"] for n in sent if not n["ok"])
    # The URL's token is never printed nor reported.
    assert TOKEN not in output and TOKEN not in json.dumps(proc.report)


def test_a_bad_notification_setting_is_refused_before_any_node_is_touched(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    res = "notify-bad-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 1},
        "packages": {"shellscript": {"version": "1.0.0", "configMap": {
            "apply.sh": "true\n", "apply_check.sh": "true\n"}}}})
    before = {n: fleet.node_labels(n) for n in fleet.nodes}
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e",
                          json.dumps({"nodewright_rollout_notify": {"urls": ["json://127.0.0.1:9/x"],
                                                                    "events": ["finished"]}}))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "unknown event(s) finished" in output, output[-3000:]
    assert {n: fleet.node_labels(n) for n in fleet.nodes} == before


def test_the_reconciler_notifies_from_its_environment_and_keeps_the_token_out_of_sight(sim, tmp_path, receiver):
    """``nodewright reconcile`` takes its targets from NODEWRIGHT_NOTIFY (the chart sets it
    from a Secret) and every rollout it starts sends its events there; with a batch
    interval the second wave's notification is held back and counted into the last one."""
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    selector = "test.nodewright.io/notify=%s" % fleet.label
    res = "reconcile-notify-" + fleet.label
    fleet.custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright",
        "metadata": {"name": res, "labels": {"test.nodewright.io/notify": fleet.label}},
        "spec": {"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 1},
                 "packages": {"shellscript": {"version": "1.0.0", "configMap": {
                     "apply.sh": "echo notified > /etc/notify-test\n",
                     "apply_check.sh": "test -s /etc/notify-test\n"}}}}})
    env = sim.env()
    env.update({"PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""), "HOME": str(tmp_path),
                "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")]),
                "ANSIBLE_DEPRECATION_WARNINGS": "false",
                "NODEWRIGHT_NOTIFY": "json://127.0.0.1:%d/hooks/nodewright?-token=%s" % (receiver.port, TOKEN),
                "NODEWRIGHT_NOTIFY_EVENTS": "started,batch,complete", "NODEWRIGHT_NOTIFY_BATCH_INTERVAL": "1h"})
    proc = subprocess.run([sys.executable, "-m", "nodewright_cli", "reconcile", "--once", "--inventory",
                           str(tmp_path / "fleet.k8s_nodes.yml"), "--workdir", str(tmp_path / "work"),
                           "--resource-selector", selector], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert {fleet.node_labels(n)["nodewright.io/status-%s" % res] for n in fleet.nodes} == {"complete"}
    assert [r["body"]["title"] for r in receiver.received] == [
        "NodeWright: rollout started (%s)" % res, "NodeWright: wave 1 done (1 node(s))", "NodeWright: rollout complete"]
    assert "1 batch notification(s) held back by batchInterval since the last one: wave 2 done (1 node(s))" in \
        receiver.received[-1]["body"]["message"]
    assert {r["path"] for r in receiver.received} == {"/hooks/nodewright?token=%s" % TOKEN}
    assert TOKEN not in output
