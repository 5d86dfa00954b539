"""A forked worker never shares the controller's connection to the API server."""

import json
import os

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import client as k8s_client

pytestmark = pytest.mark.integration


def _open_connections(api):
    pools = api.rest_client.pool_manager.pools
    return sum(pools[key].pool.qsize() - list(pools[key].pool.queue).count(None) for key in pools.keys())


def test_a_forked_child_drops_the_parents_pooled_connections(sim):
    api = k8s_client.get_api_client({"kubeconfig": sim.kubeconfig})
    k8s_client.get_json(api, "/version", "read version")
    assert _open_connections(api) == 1  # the parent keeps its connection for reuse
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it inherited, then use the API itself
        try:
            inherited = _open_connections(api)
            same = k8s_client.get_api_client({"kubeconfig": sim.kubeconfig}) is api
            nodes = len(k8s_client.get_json(api, "/api/v1/nodes", "list nodes")["items"])
            os.write(write, json.dumps([inherited, same, nodes]).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    inherited, same, nodes = json.loads(os.read(read, 1000))
    os.close(read)
    assert inherited == 0 and same and nodes > 0
    # The parent's own connection is still good.
    assert k8s_client.get_json(api, "/version", "read version")["major"] == "1"
    assert _open_connections(api) == 1
