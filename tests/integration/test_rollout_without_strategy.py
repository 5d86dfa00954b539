# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The main job without the strategy plugin: `nodewright rollout --resources` against
`ansible-playbook playbooks/rollout.yml`, the same scenario both ways.

Each way gets a simulator of its own, fresh, with the same nodes (the dev profile)
and the shipped examples applied as bin/nodewright-demo applies them; the two runs
must make the same waves, leave every node with the same outcome, write the same
resource status and end with the same exit status, and the CLI's runs must never
load the strategy plugin."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml
from kubernetes import client, config
from nodewright_sim.cluster import Cluster
from ansible.release import __version__ as ansible_core_version
from nodewright_sim.fleet import create_fleet

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
INVENTORY = os.path.join(REPO, "inventory", "simulator.k8s_nodes.yml")
GROUP, VERSION = markers.API_GROUP, markers.API_VERSION
# ansible-core 2.19 and later print it whenever they load a strategy plugin from a collection.
DEPRECATION = "Use of strategy plugins not included in ansible.builtin are deprecated"
ANSIBLE_CORE = tuple(int(part) for part in ansible_core_version.split(".")[:2])
# Variables of the caller that would point the runs elsewhere.
OUTSIDE = ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "NODEWRIGHT_REPORT_PATH", "NODEWRIGHT_SIM_REUSE",
           "ANSIBLE_CALLBACKS_ENABLED")
# What bin/nodewright-demo passes on the simulator: its nodes carry pods only a forced drain deletes.
DEMO_EXTRA = ("-e", "safe_update_drain_force=true")


@contextlib.contextmanager
def demo_simulator(name):
    """A simulator of its own with the dev fleet, the CRDs and deploy/examples applied; the
    environment to run against it."""
    cluster = Cluster(name)
    cluster.up(reboot_delay=2.0)
    try:
        create_fleet(cluster, "dev")
        env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
        env.update({"KUBECONFIG": cluster.kubeconfig, "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
                    "PATH": BIN + os.pathsep + env.get("PATH", ""), "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
                    "ANSIBLE_DEPRECATION_WARNINGS": "true"})
        applied = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks",
                                                                                      "install_crds.yml"),
                                  "-e", json.dumps({"nodewright_apply_src": [os.path.join(REPO, "deploy",
                                                                                          "examples")]})],
                                 capture_output=True, text=True, env=env)
        assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
        yield cluster, env
    finally:
        cluster.down()


def outcome_in_cluster(kubeconfig):
    """``(each resource's status, each node's NodeWright labels and cordon)`` as the API has them."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        resources = {r["metadata"]["name"]: r.get("status") or {}
                     for r in custom.list_cluster_custom_object(GROUP, VERSION, "nodewrights")["items"]}
        statuses = {name: {k: s.get(k) for k in ("status", "message", "completeNodes", "nodesInProgress",
                                                  "nodeStatus", "nodeState", "packageList", "compartmentStatuses",
                                                  "rolloutState")}
                    for name, s in resources.items()}
        nodes = {n.metadata.name: ({k: v for k, v in (n.metadata.labels or {}).items()
                                    if k.startswith(markers.PREFIX + "/")},
                                   bool(n.spec.unschedulable))
                 for n in core.list_node(label_selector="type=kwok").items}
        return statuses, nodes
    finally:
        api.close()


def waves_of(report):
    """Each resource's waves, in order, from the report's rollout entries: compartments and their
    nodes. The run's wave numbers are left out: a node just back from a reboot counts as unavailable
    until the node lifecycle controller lifts its not-ready taint, and whether that falls before or
    after the next admission is timing, which can shift another resource's batch to the next wave."""
    return {entry["resource"]: [(w["compartments"], w["succeeded"], w["failed"]) for w in entry["waves"]]
            for entry in report["rollout"]}


def node_outcomes(report):
    return {host: (entry["outcome"], entry.get("compartment"))
            for host, entry in report["hosts"].items() if host != "localhost"}


def test_rollout_resources_without_the_strategy_matches_the_playbook(tmp_path):
    pid = os.getpid()
    with demo_simulator("pytest-nostrat-pb-%d" % pid) as (cluster, env):
        playbook = subprocess.run(
            [os.path.join(BIN, "ansible-playbook"), "-i", INVENTORY, os.path.join(REPO, "playbooks", "rollout.yml")]
            + list(DEMO_EXTRA), capture_output=True, text=True, cwd=str(tmp_path),
            env=dict(env, ANSIBLE_CALLBACKS_ENABLED="nodewright.fleet.report",
                     NODEWRIGHT_REPORT_PATH=str(tmp_path / "playbook.json")))
        assert playbook.returncode == 0, playbook.stdout[-6000:] + playbook.stderr[-3000:]
        if ANSIBLE_CORE >= (2, 19):
            # The notice shows that the strategy was loaded: its absence below means something.
            assert DEPRECATION in " ".join((playbook.stdout + playbook.stderr).split())
        by_playbook = json.loads((tmp_path / "playbook.json").read_text())
        cluster_by_playbook = outcome_in_cluster(cluster.kubeconfig)

    with demo_simulator("pytest-nostrat-cli-%d" % pid) as (cluster, env):
        artifacts = tmp_path / "artifacts"
        cli = subprocess.run(
            [os.path.join(BIN, "nodewright"), "rollout", "--resources", "-i", INVENTORY, "--report",
             str(tmp_path / "cli.json"), "--private-data-dir", str(artifacts)] + list(DEMO_EXTRA),
            capture_output=True, text=True, cwd=str(tmp_path), env=env)
        assert cli.returncode == 0, cli.stdout[-6000:] + cli.stderr[-3000:]
        by_cli = json.loads((tmp_path / "cli.json").read_text())
        cluster_by_cli = outcome_in_cluster(cluster.kubeconfig)

        again = subprocess.run(
            [os.path.join(BIN, "nodewright"), "rollout", "--resources", "-i", INVENTORY, "--report",
             str(tmp_path / "again.json")] + list(DEMO_EXTRA), capture_output=True, text=True, cwd=str(tmp_path),
            env=env)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "nothing to do" in again.stdout
        assert set(json.loads((tmp_path / "again.json").read_text())["hosts"]) == {"localhost"}

    # The same waves, the same outcome per node, the same status of each resource.
    assert sorted(waves_of(by_cli)) == ["gpu-host-tuning", "nvidia-tuning-gb200"]
    assert waves_of(by_cli) == waves_of(by_playbook)
    assert len({w["number"] for entry in by_cli["rollout"] for w in entry["waves"]}) > 2
    assert node_outcomes(by_cli) == node_outcomes(by_playbook)
    assert set(o for o, _ in node_outcomes(by_cli).values()) == {"ok"} and len(node_outcomes(by_cli)) == 6
    assert {e["resource"]: e["status"] for e in by_cli["rollout"]} == \
        {e["resource"]: e["status"] for e in by_playbook["rollout"]} == \
        {"gpu-host-tuning": "complete", "nvidia-tuning-gb200": "complete"}
    assert {e["driver"] for e in by_cli["rollout"]} == {"wave_runner"}
    assert cluster_by_cli == cluster_by_playbook
    statuses, nodes = cluster_by_cli
    assert {name: s["status"] for name, s in statuses.items()} == {"gpu-host-tuning": "complete",
                                                                   "nvidia-tuning-gb200": "complete"}
    assert not [name for name, (_labels, cordoned) in nodes.items() if cordoned]

    # The strategy plugin was never loaded: every wave ran rollout.yml's play under linear.
    waves = sorted(p for p in glob.glob(str(artifacts / "wave-*" / "wave-*")) if os.path.isdir(p))
    assert len(waves) == len({w["number"] for entry in by_cli["rollout"] for w in entry["waves"]})
    for run in waves + [str(artifacts / "plan")]:
        for stdout in glob.glob(os.path.join(run, "artifacts", "*", "stdout")):
            with open(stdout) as fh:
                text = " ".join(fh.read().split())
            assert DEPRECATION not in text and "NODEWRIGHT ROLLOUT" not in text, stdout
    for run in waves:
        with open(os.path.join(run, "env", "extravars")) as fh:
            assert yaml.safe_load(fh)["nodewright_rollout_strategy"] == "ansible.builtin.linear"
    assert DEPRECATION not in " ".join((cli.stdout + cli.stderr + again.stdout + again.stderr).split())
