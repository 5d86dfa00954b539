# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Crashes at random points: the whole rollout process tree (ansible-playbook and its
workers, which call setsid, and the steps they started) is stopped, then killed, while
a package is applied, upgraded and reconfigured with reboots; then the API server
restarts in the middle of a wave. Every rerun must finish the work without repeating a
finished step, running a step twice at once, or rebooting a node once more.

The seed is printed (``NODEWRIGHT_CHAOS_SEED`` replays a run; ``NODEWRIGHT_CHAOS_KILLS``
sets the number of kills, at least 10)."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time

import pytest
from kubernetes import watch

from fleet_helpers import REPO, Fleet, kill_tree
from k8s_helpers import wait_for

pytestmark = pytest.mark.integration

# A step that must run once per version: it says so when a second copy starts while one
# runs, and logs its start and its end.
APPLY = """\
log=/var/log/chaos.log
if [ -f /run/chaos.pid ] && kill -0 "$(cat /run/chaos.pid)" 2>/dev/null; then
  echo "concurrent $VERSION" >> $log
  exit 1
fi
echo $$ > /run/chaos.pid
echo "start $VERSION" >> $log
sleep 5
echo "end $VERSION" >> $log
rm -f /run/chaos.pid
"""
CONFIG = 'echo "config $(cat "$NODEWRIGHT_CONFIG_DIR/setting")" >> /var/log/chaos.log\n'
APPLY_CHECK = 'grep -qx "end $VERSION" /var/log/chaos.log\n'
CONFIG_CHECK = 'grep -qx "config $(cat "$NODEWRIGHT_CONFIG_DIR/setting")" /var/log/chaos.log\n'


@pytest.fixture(scope="module")
def sim():
    """A simulator of this module's own (its API server is restarted)."""
    from conftest import Sim
    from nodewright_sim.cluster import Cluster
    from nodewright_sim.fleet import create_fleet
    cluster = Cluster("chaos-%d" % os.getpid())
    cluster.up(reboot_delay=1.0)
    try:
        create_fleet(cluster, "bare")
        yield Sim(cluster)
    finally:
        cluster.down()


class Reboots(object):
    """Boot IDs seen per node, from a watch."""

    def __init__(self, sim, nodes):
        self.sim = sim
        self.nodes = set(nodes)
        self.boots = {n: [] for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(self.sim.core.list_node, timeout_seconds=5):
                    node = event["object"]
                    name = node.metadata.name
                    if name in self.nodes and node.status and node.status.node_info:
                        boot = node.status.node_info.boot_id
                        if not self.boots[name] or self.boots[name][-1] != boot:
                            self.boots[name].append(boot)
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - the API server restarts in one test
                time.sleep(0.5)

    def count(self):
        return {n: len(b) - 1 for n, b in self.boots.items()}

    def __enter__(self):
        self._thread.start()
        wait_for(lambda: all(self.boots.values()), timeout=120, what="the nodes' boot IDs")
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)
        return False


def package_version(tmp_path, version):
    """The shipped shellscript package at another version (an upgrade to roll out)."""
    dest = tmp_path / ("shellscript-%s" % version)
    shutil.copytree(os.path.join(REPO, "packages", "shellscript"), dest)
    manifest = (dest / "package.json").read_text().replace('"version": "1.0.0"', '"version": "%s"' % version)
    (dest / "package.json").write_text(manifest)
    return str(dest)


def spec(fleet, version, setting, source=None):
    package = {"version": version, "interrupt": {"type": "reboot"},
               "configInterrupts": {"setting": {"type": "reboot"}},
               # An upgrade runs the upgrade stage (Skyhook's order: upgrade, then config):
               # the same once-per-version step as the first apply.
               "configMap": {"apply.sh": APPLY.replace("$VERSION", version),
                             "apply_check.sh": APPLY_CHECK.replace("$VERSION", version),
                             "upgrade.sh": APPLY.replace("$VERSION", version),
                             "upgrade_check.sh": APPLY_CHECK.replace("$VERSION", version),
                             "config.sh": CONFIG, "config_check.sh": CONFIG_CHECK, "setting": setting}}
    if source:
        package["source"] = source
    return {"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": fleet.policy,
            "packages": {"shellscript": package}}


def log_lines(sim, node):
    path = os.path.join(sim.host_root(node), "var/log/chaos.log")
    return open(path).read().splitlines() if os.path.exists(path) else []


def crash_and_rerun(fleet, res, rng, kills, record):
    """Start the rollout and kill its whole tree at a random moment, up to ``kills``
    times; a run that finishes first has done the phase's work, so the phase has no
    more kills. Then one run to the end."""
    done = 0
    attempts = 0
    while done < kills and attempts < kills * 6:
        attempts += 1
        proc = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e",
                           "nodewright_rollout_reservation_ttl=15", name="chaos-%d-%d" % (len(record), attempts))
        delay = rng.uniform(1.0, 10.0)
        deadline = time.time() + delay
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        if proc.poll() is not None:
            break
        kill_tree(proc.pid)
        proc.wait()
        done += 1
        record.append(round(delay, 1))
    final = fleet.finished(fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e",
                                       "nodewright_rollout_capacity_timeout=120", name="final-%d" % len(record)))
    return final


def phases(tmp_path):
    """Apply 1.0.0, then config changes and upgrades in turn, as many as the kills need."""
    yield "apply 1.0.0", "1.0.0", "a", None
    version, source = "1.0.0", None
    for number in range(1, 12):
        setting = chr(ord("a") + (number + 1) // 2)
        if number % 2:
            yield "config change to %s" % setting, version, setting, source
        else:
            version = "%d.0.0" % (number // 2 + 1)
            source = package_version(tmp_path, version)
            yield "upgrade %s" % version, version, chr(ord("a") + number // 2), source


def assert_clean(fleet, res, version, reboots_before, reboots, phase):
    for node in fleet.nodes:
        labels = fleet.node_labels(node)
        assert labels.get("nodewright.io/status-%s" % res) == "complete", (phase, node, labels)
        assert not fleet.sim.core.read_node(node).spec.unschedulable, (phase, node)
        lines = log_lines(fleet.sim, node)
        assert not [line for line in lines if line.startswith("concurrent")], (phase, node, lines)
        assert lines.count("end %s" % version) == 1, (phase, node, lines)
    extra = {n: reboots.count()[n] - reboots_before[n] for n in fleet.nodes}
    # One reboot per node for the phase's interrupt, none more.
    assert set(extra.values()) == {1}, (phase, extra)


def test_random_crashes_never_repeat_a_step_or_a_reboot(sim, tmp_path):
    seed = int(os.environ.get("NODEWRIGHT_CHAOS_SEED") or time.time())
    kills = max(10, int(os.environ.get("NODEWRIGHT_CHAOS_KILLS") or 10))
    print("chaos seed %d, %d kills (NODEWRIGHT_CHAOS_SEED=%d replays it)" % (seed, kills, seed))
    rng = random.Random(seed)
    fleet = Fleet(sim, tmp_path, [("h100", 3)])
    fleet.policy = "chaos-" + fleet.label
    fleet.create("DeploymentPolicy", fleet.policy, {"default": {"budget": {"count": 2},
                                                                "strategy": {"fixed": {"initialBatch": 2}}}})
    res = "chaos-" + fleet.label
    per_phase = -(-kills // 3)
    record = []
    ran = []
    with Reboots(sim, fleet.nodes) as reboots:
        for phase, version, setting, source in phases(tmp_path):
            if len(ran) >= 3 and len(record) >= kills:
                break
            body = spec(fleet, version, setting, source)
            if not ran:
                fleet.create("NodeWright", res, body)
            else:
                fleet.custom.patch_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", res,
                                                         {"spec": body})
            ran.append(phase)
            before = reboots.count()
            final = crash_and_rerun(fleet, res, rng, min(per_phase, max(1, kills - len(record))), record)
            assert final.returncode == 0, (phase, seed, final.output[-4000:])
            wait_for(lambda: all(fleet.sim.core.read_node(n).status.node_info.boot_id == reboots.boots[n][-1]
                                 for n in fleet.nodes), what="the watch caught up", timeout=120)
            assert_clean(fleet, res, version, before, reboots, phase)
    assert len(record) >= kills, "only %d kills landed in %s (seed %d)" % (len(record), ran, seed)
    print("chaos: %d kills at %s s over %s; every node complete, 0 steps run twice, 0 extra reboots"
          % (len(record), record, ran))


def test_the_api_server_restarting_mid_wave_fails_cleanly_and_the_rerun_completes(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("gb200", 2)])
    fleet.policy = "restart-" + fleet.label
    fleet.create("DeploymentPolicy", fleet.policy, {"default": {"budget": {"percent": 100}}})
    res = "restart-" + fleet.label
    body = spec(fleet, "1.0.0", "x")
    body["packages"]["shellscript"]["configMap"]["apply.sh"] = APPLY.replace("$VERSION", "1.0.0").replace(
        "sleep 5", "sleep 8")
    fleet.create("NodeWright", res, body)
    proc = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, name="restart-first")
    wait_for(lambda: all(fleet.node_labels(n).get("nodewright.io/status-%s" % res) == "in_progress"
                         for n in fleet.nodes), what="nodes in progress", timeout=180)
    took = sim.cluster.restart("kube-apiserver", down_seconds=3.0)
    first = fleet.finished(proc)
    # Either way: a clear end, never a success claimed for work not done.
    if first.returncode == 0:
        assert all(fleet.node_labels(n).get("nodewright.io/status-%s" % res) == "complete" for n in fleet.nodes)
    rerun = fleet.finished(fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res,
                                       "-e", "nodewright_rollout_capacity_timeout=120", name="restart-rerun"))
    assert rerun.returncode == 0, rerun.output[-4000:]
    for node in fleet.nodes:
        assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"
        assert not sim.core.read_node(node).spec.unschedulable
        assert log_lines(sim, node).count("end 1.0.0") == 1, log_lines(sim, node)
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete", status
    assert took >= 3.0
