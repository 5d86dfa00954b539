"""Test wiring: one simulator for the whole run, started on first use.

Integration tests talk to the simulator's real kube-apiserver. Set
``NODEWRIGHT_SIM_REUSE=NAME`` to use an already running simulator of that name
instead of starting one (it is then left running), or ``KUBECONFIG_UNDER_TEST`` to
point the tests at another cluster.
"""

from __future__ import annotations

import os
import uuid

import pytest

try:
    from kubernetes import client, config
    from nodewright_sim.cluster import Cluster
    from nodewright_sim.fleet import Fleet, create_fleet
except ImportError:  # unit tests still run without the simulator package
    Cluster = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Sim(object):
    """Handle on the running simulator for tests."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.kubeconfig = cluster.kubeconfig
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.fleet = Fleet(cluster)

    def add_nodes(self, pool="h100", count=1, **kw):
        return self.fleet.add_nodes(pool, count, **kw)

    def host_root(self, node):
        return self.fleet.host_root(node)

    def namespace(self, prefix="t"):
        name = "%s-%s" % (prefix, uuid.uuid4().hex[:6])
        self.fleet._ensure_namespace(name)
        return name

    def playbook(self, tmp_path, play, hosts=None, extra_args=(), check=False):
        """Run one play with ansible-playbook against simulator nodes (local connection,
        each node's host root as ``nodewright_host_root``). Returns the CompletedProcess."""
        import json
        import subprocess
        import sys

        import yaml
        inv = {"all": {"hosts": {}, "vars": {"ansible_connection": "local",
                                             "ansible_python_interpreter": sys.executable}}}
        for h in hosts or []:
            inv["all"]["hosts"][h] = {"nodewright_host_root": self.host_root(h)}
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
        play = dict(play)
        play.setdefault("hosts", "all")
        play.setdefault("gather_facts", False)
        (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
               str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")] + list(extra_args)
        if check:
            cmd.append("--check")
        env = self.env()
        env["ANSIBLE_CALLBACKS_ENABLED"] = "nodewright.fleet.report"
        env["NODEWRIGHT_REPORT_PATH"] = str(tmp_path / "report.json")
        env["NODEWRIGHT_REPORT_TASKS"] = "1"
        env["ANSIBLE_LOCALHOST_WARNING"] = "false"
        env["ANSIBLE_DEPRECATION_WARNINGS"] = "false"
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path))
        try:
            proc.json = json.loads((tmp_path / "report.json").read_text())
        except (OSError, ValueError):
            proc.json = None
        return proc

    def env(self):
        env = dict(os.environ)
        env["KUBECONFIG"] = self.kubeconfig
        env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(REPO, ".collections")
        return env


@pytest.fixture(scope="session")
def sim():
    if Cluster is None:
        pytest.fail("the simulator package is not installed: run `make setup`")
    reuse = os.environ.get("NODEWRIGHT_SIM_REUSE")
    if reuse:
        cluster = Cluster(reuse)
        if not cluster.running():
            pytest.fail("NODEWRIGHT_SIM_REUSE=%s but that simulator is not running" % reuse)
        yield Sim(cluster)
        return
    cluster = Cluster("pytest-%d" % os.getpid())
    cluster.up(reboot_delay=2.0)
    try:
        create_fleet(cluster, "dev")
        yield Sim(cluster)
    finally:
        cluster.down()


H100_NODE = {"name": "n1", "arch": "amd64", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0",
             "gpu_count": 8, "gpu_memory_mib": 81559, "memory_mib": 2097152, "nvswitch_count": 4}
GB200_NODE = {"name": "g1", "arch": "arm64", "gpu_name": "NVIDIA GB200", "compute_cap": "10.0",
              "gpu_count": 4, "gpu_memory_mib": 189471, "memory_mib": 983040}


@pytest.fixture(scope="session")
def base_image(tmp_path_factory):
    """The simulator's host-root userland, prepared once for tests that need no cluster."""
    from nodewright_sim import hostroot
    return hostroot.BaseImage(str(tmp_path_factory.mktemp("base") / "img")).prepare()


@pytest.fixture
def root(tmp_path, base_image):
    """A fresh host root of an H100 node (busybox userland and the simulator's stand-ins)."""
    from nodewright_sim import hostroot
    path = str(tmp_path / "node")
    hostroot.create(path, base_image, H100_NODE)
    return path


@pytest.fixture
def gb200_root(tmp_path, base_image):
    """A fresh host root of a GB200 compute tray (arm64, Blackwell, no NVSwitch on the tray)."""
    from nodewright_sim import hostroot
    path = str(tmp_path / "gb200")
    hostroot.create(path, base_image, GB200_NODE)
    return path


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "sim" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
