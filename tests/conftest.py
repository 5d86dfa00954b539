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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "sim" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
