# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodewright.fleet.node connection against the simulator's real API server.

No kubelet runs there (kwok plays the nodes), so a command never runs: what is
proven is that the API server accepts the node pod as the chart's ServiceAccount
creates it, that the chart's Role grants exactly what the connection calls
(exec included: the request reaches the node instead of being refused), that
refusals come back with their fix, and that a play through the connection
leaves no pod behind. test_real_nodes.py runs the connection end to end on the
simulator's real kubelet nodes; docs/connection.md has the run on a real cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml
from kubernetes import config
from kubernetes.client.rest import ApiException

from ansible_collections.nodewright.fleet.plugins.connection.node import NodePod
from ansible_collections.nodewright.fleet.plugins.module_utils.node import pod as node_pod
from ansible_collections.nodewright.fleet.plugins.module_utils.node.pod import NodePodError
from k8s_helpers import wait_for
from test_helm_chart import apply, by_kind, delete, render
from test_rbac import Installed

pytestmark = pytest.mark.integration

IMAGE = "registry.invalid/mirror/busybox:1.37"
LABEL = "%s=true" % node_pod.NODE_POD_LABEL


@pytest.fixture(scope="module")
def chart(sim, tmp_path_factory):
    inst = Installed(sim, tmp_path_factory.mktemp("nodepods"))
    apply(sim, inst.docs)
    inst.kubeconfig = inst.service_account_kubeconfig(inst.sa)
    inst.api = config.new_client_from_config(config_file=inst.kubeconfig)
    yield inst
    delete(sim, [d for d in inst.docs if d["kind"].startswith("Cluster")])


@pytest.fixture(scope="module")
def node(sim):
    (name,) = sim.add_nodes("h100", 1)
    return name


def node_pods(sim, namespace):
    return [p for p in sim.core.list_namespaced_pod(namespace, label_selector=LABEL).items
            if not p.metadata.deletion_timestamp]


def gone(sim, namespace, name):
    try:
        sim.core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_the_charts_role_grants_exactly_what_the_connection_calls():
    role = by_kind(render("nw", "nodewright"), "Role")["nw-nodewright-node-pods"]
    granted = {(res, verb) for rule in role["rules"] if rule["apiGroups"] == [""]
               for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == set(node_pod.REQUIRED_PERMISSIONS)


def test_the_node_pod_runs_as_the_charts_service_account_and_is_deleted(sim, chart, node):
    pod = NodePod(chart.api, node, namespace=chart.ns, image=IMAGE, timeout=60)
    pod.start()
    try:
        seen = sim.core.read_namespaced_pod(pod.name, chart.ns)
        assert seen.spec.node_name == node and seen.status.phase == "Running"
        assert seen.spec.host_pid and seen.spec.host_network
        assert seen.spec.containers[0].security_context.privileged
        assert seen.spec.volumes[0].host_path.path == "/"
        assert seen.metadata.labels[node_pod.NODE_POD_LABEL] == "true"
        assert seen.metadata.annotations[node_pod.NODE_ANNOTATION] == node
        # The simulator's nodes cannot run commands; the request must get that far, not be refused.
        with pytest.raises(NodePodError) as caught:
            pod.exec(["true"])
        assert "not allowed" not in str(caught.value), "the Role must grant get and create on pods/exec"
        assert "cannot exec in %s" % pod.where in str(caught.value)
    finally:
        pod.delete()
    wait_for(lambda: gone(sim, chart.ns, pod.name), what="the node pod to be deleted")


def test_the_pod_spec_passes_server_side_dry_run_on_a_cordoned_tainted_node(sim, node):
    ns = sim.namespace("nwdry")
    sim.core.patch_node(node, {"spec": {"unschedulable": True, "taints": [
        {"key": "nodewright.io/runtime-required", "value": "true", "effect": "NoSchedule"}]}})
    try:
        body = node_pod.node_pod_manifest(node, node_pod.pod_name(node, "dry"), namespace=ns, image=IMAGE,
                                          image_pull_secrets=["mirror"])
        created = sim.core.create_namespaced_pod(ns, body, dry_run="All")
        assert created.spec.node_name == node and created.spec.tolerations[0].operator == "Exists"
        assert node_pods(sim, ns) == [], "a dry run creates nothing"
    finally:
        sim.core.patch_node(node, {"spec": {"unschedulable": False, "taints": None}})


def test_a_namespace_that_forbids_privileged_pods_is_named_with_the_fix(sim, node):
    ns = sim.namespace("nwbaseline")
    sim.core.patch_namespace(ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    with pytest.raises(NodePodError) as caught:
        NodePod(sim.api, node, namespace=ns, image=IMAGE, timeout=30).start()
    assert "does not allow the privileged node pod" in str(caught.value)
    assert "kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged" % ns in str(caught.value)
    assert node_pods(sim, ns) == []


def test_a_missing_namespace_or_node_is_named(sim, node):
    with pytest.raises(NodePodError) as caught:
        NodePod(sim.api, node, namespace="no-such-namespace", image=IMAGE, timeout=30).start()
    assert "namespace no-such-namespace does not exist" in str(caught.value)
    with pytest.raises(NodePodError) as caught:
        NodePod(sim.api, "no-such-node", namespace=sim.namespace("nwx"), image=IMAGE, timeout=30).start()
    assert "node no-such-node does not exist" in str(caught.value)


def test_outside_its_namespace_the_service_account_gets_the_rbac_hint(sim, chart, node):
    other = sim.namespace("nwother")
    with pytest.raises(NodePodError) as caught:
        NodePod(chart.api, node, namespace=other, image=IMAGE, timeout=30).start()
    assert "not allowed to create pods in namespace %s" % other in str(caught.value)
    assert "node-pods Role" in str(caught.value)


def test_a_play_through_the_connection_leaves_no_pod_behind(sim, chart, node, tmp_path):
    inventory = {"all": {"hosts": {"gpu": {
        "ansible_connection": "nodewright.fleet.node", "ansible_host": node,
        "nodewright_node_pod_namespace": chart.ns, "nodewright_node_pod_image": IMAGE,
        "nodewright_k8s_kubeconfig": chart.kubeconfig, "nodewright_node_pod_timeout": 60}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "all", "gather_facts": False, "tasks": [{"name": "Kernel", "ansible.builtin.raw": "uname -r"}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(sim.env(), ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_DEPRECATION_WARNINGS="false")
    env.pop("KUBECONFIG", None)  # the connection must use the kubeconfig it was given
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path))
    out = proc.stdout + proc.stderr
    # The pod was created and ran (the kubelet is simulated); the exec itself is what cannot work here.
    assert proc.returncode != 0 and "UNREACHABLE" in out, out[-3000:]
    assert "cannot exec in pod %s/nodewright-" % chart.ns in out and "on node %s" % node in out, out[-3000:]
    assert "not allowed" not in out
    wait_for(lambda: node_pods(sim, chart.ns) == [], what="the connection to delete its pod")


# A worker of ansible-playbook, between the controller's exit and its own: the node pod
# is running, the controller (which wrote the kubeconfig's embedded credentials to
# temporary files when it loaded the inventory) has exited and removed them, and the
# worker's pooled connection is gone (the API server closes idle ones after 90 s, so any
# task that runs longer has none). Then Ansible's SIGINT or SIGTERM reaches the worker.
_INTERRUPTED_WORKER = r'''
import os, signal, sys, time
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader, init_plugin_loader
from kubernetes.config import kube_config
init_plugin_loader()  # as ansible-playbook does: ANSIBLE_COLLECTIONS_PATH
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import client as k8s_client

node, namespace, image, kubeconfig, signum = sys.argv[1:6]
conn = connection_loader.get("nodewright.fleet.node", PlayContext(), None)
conn.set_options(direct={"node": node, "namespace": namespace, "pod_image": image, "kubeconfig": kubeconfig,
                         "timeout": 60})
conn._connect()
print(conn._pod.name, flush=True)
assert kube_config._temp_files, "the kubeconfig's credentials were not written to files"
kube_config._cleanup_temp_files()  # what the exiting controller's atexit does
for api in k8s_client._CLIENT_CACHE.values():
    api.rest_client.pool_manager.clear()
os.kill(os.getpid(), int(signum))
time.sleep(60)
sys.exit(3)
'''


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_worker_deletes_its_pod_after_the_controller_removed_the_credential_files(
        sim, chart, node, signum):
    # The simulator's kubeconfig embeds its CA, client certificate and key.
    assert "client-key-data" in open(sim.kubeconfig).read()
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_WORKER, node, chart.ns, IMAGE, sim.kubeconfig,
                           str(int(signum))], capture_output=True, text=True, env=sim.env(), timeout=120)
    assert proc.returncode == -signum, proc.stdout + proc.stderr  # ended by the signal itself
    name = proc.stdout.strip().splitlines()[-1]
    assert name.startswith("nodewright-%s-" % node)
    assert "could not delete" not in proc.stderr
    assert gone(sim, chart.ns, name), "pod %s/%s was left running" % (chart.ns, name)
