# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What `make demo` runs (bin/nodewright-demo) on a simulator of its own, with the
shipped examples as they are: it starts the simulator, applies the CRDs and
deploy/examples, rolls both resources out in waves - containerd restarted on the x86
nodes, the GB200 trays tuned and rebooted one at a time - and prints the summary; run
again, it finds nothing to do and says so. The simulator and every process the demo
started are stopped at the end, also when the test fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from kubernetes import client, config
from nodewright_sim import hostroot
from nodewright_sim.cluster import Cluster

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(REPO, "bin", "nodewright-demo")
GROUP, VERSION = markers.API_GROUP, markers.API_VERSION
# Variables of the caller that would point the demo elsewhere.
OUTSIDE = ("KUBECONFIG", "NODEWRIGHT_INVENTORY", "NODEWRIGHT_REPORT_PATH", "NODEWRIGHT_DEMO_PROFILE",
           "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "NODEWRIGHT_SIM_REUSE")


def _processes_with(marker):
    """Processes whose environment carries the marker: the demo and all it started."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _stop(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class Demo(object):
    def __init__(self, tmp):
        self.name = "pytest-demo-%d" % os.getpid()
        self.marker = "NODEWRIGHT_DEMO_TEST=%s" % uuid.uuid4().hex
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
        # The demo runs on the ansible-core of this test's own virtualenv (the ansible-core
        # matrix runs this test once per supported release).
        self.env.update({"NODEWRIGHT_SIM_NAME": self.name, "ANSIBLE_NOCOLOR": "1",
                         "NODEWRIGHT_VENV": os.path.dirname(os.path.dirname(sys.executable)),
                         self.marker.split("=")[0]: self.marker.split("=")[1]})

    def run(self, tag):
        """Run the demo; returns (exit status, output, run report)."""
        report = self.tmp / ("%s-report.json" % tag)
        proc = subprocess.Popen([DEMO], cwd=str(self.tmp), env=dict(self.env, NODEWRIGHT_REPORT_PATH=str(report)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=2400)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            output, _ = proc.communicate()
            raise AssertionError("the demo did not finish within 40 minutes:\n" + output[-5000:])
        (self.tmp / ("%s-output.txt" % tag)).write_text(output)
        return proc.returncode, output, json.loads(report.read_text()) if report.exists() else None

    def stop(self):
        Cluster(self.name).down()
        leftovers = _processes_with(self.marker)
        _stop(leftovers, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _processes_with(self.marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        _stop(_processes_with(self.marker), signal.SIGKILL)


@pytest.fixture
def demo(tmp_path):
    d = Demo(tmp_path)
    try:
        yield d
    finally:
        d.stop()
    assert not _processes_with(d.marker)
    assert not os.path.exists(Cluster(d.name).dir)


def _summary(output):
    return output[output.rindex("NodeWright run report:"):].splitlines()


def test_make_demo_rolls_the_examples_out_then_finds_nothing_to_do(demo):
    rc, output, report = demo.run("first")
    assert rc == 0, output[-8000:]
    from ansible.release import __version__ as core_version
    assert "ansible-core %s on Python %d.%d." % ((core_version,) + sys.version_info[:2]) in output
    summary = _summary(output)
    assert summary[0] == "NodeWright run report: %s" % (demo.tmp / "first-report.json")
    assert summary[1].startswith("  rollout.yml: 24 node(s) maintained in ")
    assert summary[2] == "  nodes per outcome: ok 24"
    assert "  NodeWright gpu-host-tuning: complete, 18/18 node(s) complete" in summary
    assert "  NodeWright nvidia-tuning-gb200: complete, 6/6 node(s) complete" in summary
    waves = {where["wave"] for play in report["rollout"] for where in play["assignment"].values()}
    assert len(waves) > 2

    # What the API says: every resource complete, every targeted node complete, none cordoned.
    api = config.new_client_from_config(config_file=Cluster(demo.name).kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = [api.sanitize_for_serialization(n) for n in core.list_node(label_selector="type=kwok").items]
    resources = custom.list_cluster_custom_object(GROUP, VERSION, "nodewrights")["items"]
    assert sorted(r["metadata"]["name"] for r in resources) == ["gpu-host-tuning", "nvidia-tuning-gb200"]
    for resource in resources:
        name = resource["metadata"]["name"]
        assert resource["status"]["status"] == "complete", resource["status"]
        targets = desired_state.targeted_nodes(resource, nodes)
        assert targets
        for node in nodes:
            if node["metadata"]["name"] in targets:
                assert node["metadata"]["labels"].get(markers.status_label(name)) == "complete", \
                    (name, node["metadata"]["name"])
    assert not [n["metadata"]["name"] for n in nodes if (n.get("spec") or {}).get("unschedulable")]
    # The interrupts really happened: containerd restarted, the GB200 trays rebooted into the profile.
    sim_nodes = {n["metadata"]["name"]: n for n in nodes}
    for name, node in sim_nodes.items():
        root = node["metadata"]["annotations"]["sim.nodewright.io/host-root"]
        if name.startswith("gb200"):
            assert "numa_balancing=disable" in hostroot.run(root, "cat /proc/cmdline").stdout, name
            assert hostroot.run(root, "systemctl is-active nodewright-gpu-power-profile").stdout == "active\n"
        else:
            restarts = hostroot.run(root, "cat /run/nodewright-sim/units/containerd.service.restarts").stdout
            assert restarts.strip(), "containerd was not restarted on %s" % name
            assert hostroot.run(root, "sysctl -n vm.max_map_count").stdout == "1048576\n", name
    boot_ids = {name: n["status"]["nodeInfo"]["bootID"] for name, n in sim_nodes.items()}

    again_rc, again, again_report = demo.run("second")
    assert again_rc == 0, again[-5000:]
    summary = _summary(again)
    assert summary[1].startswith("  rollout.yml: nothing to do - no targeted node had work (every one is up to date)")
    assert "  NodeWright gpu-host-tuning: complete, 18/18 node(s) complete" in summary
    assert "  NodeWright nvidia-tuning-gb200: complete, 6/6 node(s) complete" in summary
    assert set(again_report["hosts"]) == {"localhost"}
    assert {n.metadata.name: n.status.node_info.boot_id
            for n in core.list_node(label_selector="type=kwok").items} == boot_ids
