# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The chart's RBAC, proven on the simulator's real API server (RBAC on).

The chart is rendered with ``helm template`` and its CRDs, ServiceAccount and roles
are applied. The playbooks then run with a kubeconfig that holds a token of the
chart's ServiceAccount (a TokenRequest, as a pod of the Deployment would get), so
every call the modules make is authorised as that ServiceAccount: the whole safe
sequence must work, and whatever NodeWright does not need must be refused.

A kubeconfig user with ``as:`` (impersonation) would not do here: the Python
kubernetes client ignores ``as``, so the modules would quietly run as the admin.
People's roles are checked with an admin client that sends Impersonate-User itself.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from k8s_helpers import deployment_on, host_result, pdb, running_pods, wait_for
from test_helm_chart import GROUP, REPO, VERSION, apply, delete, install_crds, render

pytestmark = pytest.mark.integration

RES = "rbac-maint"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


class Installed(object):
    """The chart's RBAC on the simulator, and a way in as its ServiceAccount."""

    def __init__(self, sim, tmp_dir):
        self.sim = sim
        self.tmp_dir = tmp_dir
        self.release = "rbac-" + uuid.uuid4().hex[:6]
        self.fullname = self.release + "-nodewright"
        self.ns = sim.namespace("nwrbac")
        self.validation_ns = sim.namespace("nwval")
        self.docs = [d for d in render(self.release, self.ns, {"validationJobs.namespace": self.validation_ns})
                     if d["kind"] in RBAC_KINDS]
        self.sa = self.fullname
        self.user = "system:serviceaccount:%s:%s" % (self.ns, self.sa)
        self.user_bindings = []

    def service_account_kubeconfig(self, name, namespace=None):
        """A kubeconfig for the simulator that authenticates with a token of ServiceAccount ``name``."""
        namespace = namespace or self.ns
        token = self.sim.core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        admin = yaml.safe_load(pathlib.Path(self.sim.kubeconfig).read_text())
        ctx = {c["name"]: c["context"] for c in admin["contexts"]}[admin["current-context"]]
        cluster = {c["name"]: c["cluster"] for c in admin["clusters"]}[ctx["cluster"]]
        kc = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
              "clusters": [{"name": "sim", "cluster": cluster}],
              "users": [{"name": name, "user": {"token": token}}],
              "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": name}}]}
        path = self.tmp_dir / ("%s-%s.kubeconfig" % (namespace, name))
        path.write_text(yaml.safe_dump(kc))
        path.chmod(0o600)
        return str(path)


@pytest.fixture(scope="module")
def chart(sim, tmp_path_factory):
    install_crds(sim)
    inst = Installed(sim, tmp_path_factory.mktemp("rbac"))
    apply(sim, inst.docs)
    inst.kubeconfig = inst.service_account_kubeconfig(inst.sa)
    inst.api = config.new_client_from_config(config_file=inst.kubeconfig)
    inst.core = client.CoreV1Api(inst.api)
    inst.custom = client.CustomObjectsApi(inst.api)
    wait_for(lambda: allowed(lambda: inst.core.list_node(limit=1)), what="the reconciler's bindings to apply")
    yield inst
    delete(sim, [d for d in inst.docs if d["kind"].startswith("Cluster")])
    for name in inst.user_bindings:
        sim.rbac.delete_cluster_role_binding(name)


def allowed(call):
    """True when the API server lets the call through, False on 403."""
    try:
        call()
    except ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True


def impersonating(sim, user):
    """An admin client that acts as ``user`` (Impersonate-User)."""
    api = config.new_client_from_config(config_file=sim.kubeconfig)
    api.set_default_header("Impersonate-User", user)
    return api


def bind_cluster_role(sim, chart, role, user):
    name = ("%s-%s" % (role, user))[:63]
    chart.user_bindings.append(name)
    sim.rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    return name


def make_nodewright(sim, name, selector=None):
    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": selector or {"nodepool": "none"}},
                     "packages": {"sysctl": {"version": "1.0.0"}}}}
    return client.CustomObjectsApi(sim.api).create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)


def k8s_play(kubeconfig, tasks):
    """A play whose NodeWright modules all use ``kubeconfig``."""
    return {"module_defaults": {"group/nodewright.fleet.k8s": {"kubeconfig": kubeconfig}}, "tasks": tasks}


# --- who the modules are -----------------------------------------------------------------

def test_the_kubeconfig_authenticates_as_the_charts_service_account(chart):
    review = client.AuthenticationV1Api(chart.api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.status.user_info.username == chart.user
    assert "system:masters" not in review.status.user_info.groups


def test_modules_use_the_kubeconfig_they_are_given(sim, chart, tmp_path):
    """A ServiceAccount without any binding gets a clear 403 from the modules, so a
    passing run with the chart's ServiceAccount is that ServiceAccount's doing."""
    nobody = "nobody-" + uuid.uuid4().hex[:6]
    sim.core.create_namespaced_service_account(chart.ns, {"metadata": {"name": nobody}})
    kubeconfig = chart.service_account_kubeconfig(nobody)
    (n1,) = sim.add_nodes("h100", 1)
    proc = sim.playbook(tmp_path, k8s_play(kubeconfig, [
        {"name": "Cordon", "nodewright.fleet.node_cordon": {"name": n1, "state": "cordoned"}}]), hosts=[n1])
    assert proc.returncode != 0
    result = host_result(proc, n1, "Cordon")
    assert result["failed"] and "forbidden (403)" in result["msg"]
    assert "system:serviceaccount:%s:%s" % (chart.ns, nobody) in result["msg"]
    assert not sim.core.read_node(n1).spec.unschedulable


# --- everything the safe sequence does ----------------------------------------------------

def test_safe_sequence_with_pdb_drain_reboot_and_validation_job_runs_as_the_service_account(sim, chart, tmp_path):
    ns = sim.namespace("rbacwl")
    n1, n2 = sim.add_nodes("h200", 2)
    sim.core.patch_node(n2, {"spec": {"unschedulable": True}})
    deployment_on(sim, ns, "svc", [n1, n2], 2)
    sim.core.patch_node(n2, {"spec": {"unschedulable": False}})
    pdb(sim, ns, "svc", maxUnavailable=1)
    before = sim.core.read_node(n1).status.node_info.boot_id
    role_vars = {
        "safe_update_resource": RES, "safe_update_drain_timeout": 60,
        "safe_update_non_interruptible_selector": "app.kubernetes.io/component=training",
        "safe_update_wait_timeout": 60,
        "safe_update_interrupt": {"type": "reboot"}, "safe_update_reboot_timeout": 60,
        "safe_update_health_timeout": 60,
        "safe_update_validation_job": {"namespace": chart.validation_ns, "name": "burn-in", "template": {
            "spec": {"containers": [{"name": "burn", "image": "registry.invalid/burn:1"}]}}},
    }
    proc = sim.playbook(tmp_path, k8s_play(chart.kubeconfig, [
        {"name": "Safe update", "ansible.builtin.include_role": {"name": "nodewright.fleet.safe_update"},
         "vars": role_vars}]), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert host_result(proc, n1, "Cordon the node")["changed"]
    drain = host_result(proc, n1, "Drain the node")
    assert len([e for e in drain["evicted"] if e.startswith(ns + "/")]) == 2
    assert all(p.spec.node_name == n2 for p in running_pods(sim, ns, "app=svc"))
    ready = host_result(proc, n1, "Wait for the node to be Ready with a new boot ID")
    assert ready["rebooted"] and ready["previous_boot_id"] == before
    health = host_result(proc, n1, "Check the health gates before the node returns to work")
    assert health["validation_job"]["succeeded"]
    assert health["validation_job"]["job"].startswith(chart.validation_ns + "/burn-in")
    node = sim.core.read_node(n1)
    assert not node.spec.unschedulable
    assert node.metadata.labels["nodewright.io/status-%s" % RES] == "complete"
    events = sim.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % n1).items
    assert {"NodeWrightCordon", "NodeWrightInterrupt"} <= {e.reason for e in events}


def test_a_failed_drain_is_marked_on_the_node_as_the_service_account(sim, chart, tmp_path):
    """The failure path writes the Erroring condition (nodes/status) and a Warning event."""
    ns = sim.namespace("rbacstrict")
    (n1,) = sim.add_nodes("b200", 1)
    deployment_on(sim, ns, "strict", [n1], 1)
    pdb(sim, ns, "strict", minAvailable=1)
    proc = sim.playbook(tmp_path, k8s_play(chart.kubeconfig, [
        {"name": "Safe update", "ansible.builtin.include_role": {"name": "nodewright.fleet.safe_update"},
         "vars": {"safe_update_resource": RES, "safe_update_drain_timeout": 3}}]), hosts=[n1])
    assert proc.returncode != 0
    assert "PodDisruptionBudget %s/strict" % ns in host_result(proc, n1, "Drain the node")["msg"]
    assert host_result(proc, n1, "Mark the node erroring with the reason")["changed"]
    node = sim.core.read_node(n1)
    assert node.spec.unschedulable and node.metadata.labels["nodewright.io/status-%s" % RES] == "erroring"
    assert [c for c in node.status.conditions if c.type == "nodewright.io/Erroring"][0].status == "True"


def test_inventory_plugin_reads_a_nodewright_and_its_nodes_as_the_service_account(sim, chart, tmp_path):
    mark = uuid.uuid4().hex[:8]
    (n1,) = sim.add_nodes("gb200", 1)
    sim.core.patch_node(n1, {"metadata": {"labels": {"rbac-test": mark}}})
    name = "inv-" + mark
    make_nodewright(sim, name, {"rbac-test": mark})
    source = tmp_path / "fleet.k8s_nodes.yml"
    source.write_text(yaml.safe_dump({"plugin": "nodewright.fleet.k8s_nodes", "kubeconfig": chart.kubeconfig,
                                      "nodewright": name, "pod_counts": True, "connection": "local"}))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i", str(source),
                           "--list"],
                          capture_output=True, text=True, env=sim.env(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    assert list(hostvars) == [n1]
    assert hostvars[n1]["k8s_node"]["pods"]["total"] >= 0


def test_desired_state_and_resource_status_run_as_the_service_account(sim, chart, tmp_path):
    mark = uuid.uuid4().hex[:8]
    (n1,) = sim.add_nodes("h100", 1)
    sim.core.patch_node(n1, {"metadata": {"labels": {"rbac-test": mark}}})
    name = "state-" + mark
    make_nodewright(sim, name, {"rbac-test": mark})
    auth = {"kubeconfig": chart.kubeconfig}
    proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [
        {"name": "Desired", "nodewright.fleet.desired_state": dict(
            auth, name=name, package_dirs=[os.path.join(REPO, "packages")], fail_on_blocked=False),
         "register": "desired"},
        {"name": "Status", "nodewright.fleet.resource_status": dict(auth, name=name, targets=[n1])}]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    status = client.CustomObjectsApi(sim.api).get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)["status"]
    assert status


# --- what it may do to its own resources --------------------------------------------------

def test_nodewright_resources_are_read_and_status_written_but_not_created_or_deleted(sim, chart):
    name = "rbac-" + uuid.uuid4().hex[:6]
    make_nodewright(sim, name)
    policy = "rbac-" + uuid.uuid4().hex[:6]
    client.CustomObjectsApi(sim.api).create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DeploymentPolicy", "metadata": {"name": policy},
        "spec": {"default": {"budget": {"count": 1}}}})
    c = chart.custom
    assert name in [i["metadata"]["name"] for i in c.list_cluster_custom_object(GROUP, VERSION, "nodewrights")["items"]]
    assert c.get_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", policy)
    assert allowed(lambda: c.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                         {"metadata": {"finalizers": ["nodewright.io/cleanup"]}}))
    assert allowed(lambda: c.patch_cluster_custom_object_status(GROUP, VERSION, "nodewrights", name,
                                                                {"status": {"status": "in_progress"}}))
    assert not allowed(lambda: c.patch_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", policy,
                                                             {"metadata": {"labels": {"x": "y"}}}))
    assert not allowed(lambda: c.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name))
    assert not allowed(lambda: c.create_cluster_custom_object(GROUP, VERSION, "nodewrights", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name + "-x"},
        "spec": {}}))
    client.CustomObjectsApi(sim.api).patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                                 {"metadata": {"finalizers": None}})


# --- what it must not do --------------------------------------------------------------------

@pytest.fixture(scope="module")
def workload(sim):
    ns = sim.namespace("rbacdeny")
    (n1,) = sim.add_nodes("h100", 1)
    (pod,) = deployment_on(sim, ns, "keep", [n1], 1)
    sim.core.create_namespaced_secret(ns, {"metadata": {"name": "creds"}, "stringData": {"k": "v"}})
    return {"ns": ns, "node": n1, "pod": pod.metadata.name}


DENIED = {
    "list secrets in all namespaces": lambda a, w, c: a.core.list_secret_for_all_namespaces(),
    "read a secret": lambda a, w, c: a.core.read_namespaced_secret("creds", w["ns"]),
    "list secrets of its own namespace": lambda a, w, c: a.core.list_namespaced_secret(c.ns),
    "delete a node": lambda a, w, c: a.core.delete_node(w["node"]),
    "create a node": lambda a, w, c: a.core.create_node({"metadata": {"name": "rbac-fake-node"}}),
    "patch a deployment": lambda a, w, c: a.apps.patch_namespaced_deployment(
        "keep", w["ns"], {"spec": {"replicas": 0}}),
    "delete a deployment": lambda a, w, c: a.apps.delete_namespaced_deployment("keep", w["ns"]),
    "delete a pod": lambda a, w, c: a.core.delete_namespaced_pod(w["pod"], w["ns"]),
    "patch a pod": lambda a, w, c: a.core.patch_namespaced_pod(w["pod"], w["ns"], {"metadata": {"labels": {"x": "y"}}}),
    "create a pod outside its namespace": lambda a, w, c: a.core.create_namespaced_pod(w["ns"], {
        "metadata": {"name": "rbac-intruder"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    "create a job outside the validation namespace": lambda a, w, c: a.batch.create_namespaced_job(w["ns"], {
        "metadata": {"name": "rbac-intruder"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
    "list configmaps": lambda a, w, c: a.core.list_config_map_for_all_namespaces(),
    "patch a PodDisruptionBudget": lambda a, w, c: a.policy.patch_namespaced_pod_disruption_budget(
        "keep", w["ns"], {"spec": {"maxUnavailable": 5}}),
    "bind itself a role": lambda a, w, c: a.rbac.create_cluster_role_binding({
        "metadata": {"name": "rbac-escalate"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                          "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": c.sa, "namespace": c.ns}]}),
}


class Apis(object):
    def __init__(self, api):
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)


@pytest.mark.parametrize("what", sorted(DENIED))
def test_service_account_is_denied_what_nodewright_does_not_need(sim, chart, workload, what):
    with pytest.raises(ApiException) as err:
        DENIED[what](Apis(chart.api), workload, chart)
    assert err.value.status == 403, err.value.body
    assert chart.user in json.loads(err.value.body)["message"]
    assert sim.core.read_node(workload["node"]) and sim.apps.read_namespaced_deployment("keep", workload["ns"])


def test_node_pods_only_in_the_charts_namespace(sim, chart, workload):
    apis = Apis(chart.api)
    pod = {"metadata": {"name": "nodewright-node-" + uuid.uuid4().hex[:6]},
           "spec": {"nodeName": workload["node"], "containers": [{"name": "c", "image": "registry.invalid/x"}]}}
    created = apis.core.create_namespaced_pod(chart.ns, pod)
    assert apis.core.read_namespaced_pod(created.metadata.name, chart.ns).spec.node_name == workload["node"]
    apis.core.delete_namespaced_pod(created.metadata.name, chart.ns, grace_period_seconds=0)
    review = client.AuthorizationV1Api(sim.api)

    def can(verb, resource, namespace, subresource="", group=""):
        attrs = {"group": group, "verb": verb, "resource": resource, "namespace": namespace,
                 "subresource": subresource}
        return review.create_subject_access_review({"spec": {
            "user": chart.user, "groups": ["system:serviceaccounts", "system:serviceaccounts:" + chart.ns,
                                           "system:authenticated"],
            "resourceAttributes": attrs}}).status.allowed

    assert can("create", "pods", chart.ns, "exec")
    assert not can("create", "pods", workload["ns"], "exec")
    assert not can("create", "pods", "kube-system")
    assert can("create", "jobs", chart.validation_ns, group="batch")
    assert not can("create", "jobs", chart.ns, group="batch")
    assert not can("delete", "jobs", chart.validation_ns, group="batch")


def test_finished_pods_on_a_node_are_drained_without_delete_permission(sim, chart, tmp_path):
    (n1,) = sim.add_nodes("h100", 1)
    ns = sim.namespace("rbacdone")
    sim.fleet.create_training_job("done", run_for="1s", gpus=1, namespace=ns, node_name=n1)
    # Finished, and counted by the Job controller (which then lifts the pod's tracking finalizer).
    wait_for(lambda: [p for p in sim.core.list_namespaced_pod(ns).items if p.status.phase == "Succeeded"]
             and (sim.fleet.batch.read_namespaced_job("done", ns).status.succeeded or 0) == 1,
             timeout=120, what="the job's pod to finish")
    proc = sim.playbook(tmp_path, k8s_play(chart.kubeconfig, [
        {"name": "Drain", "nodewright.fleet.node_drain": {"name": n1, "timeout": 60}}]), hosts=[n1])
    assert proc.returncode == 0, host_result(proc, n1, "Drain")["msg"]
    assert not sim.core.list_namespaced_pod(ns).items


# --- people ---------------------------------------------------------------------------------

def test_viewer_lists_nodewrights_but_cannot_change_them(sim, chart):
    name = "view-" + uuid.uuid4().hex[:6]
    make_nodewright(sim, name)
    user = "viewer-" + uuid.uuid4().hex[:6]
    bind_cluster_role(sim, chart, chart.fullname + "-viewer", user)
    custom = client.CustomObjectsApi(impersonating(sim, user))
    wait_for(lambda: allowed(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "nodewrights")),
             what="the viewer binding to apply")
    assert allowed(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "deploymentpolicies"))
    assert allowed(lambda: custom.get_cluster_custom_object_status(GROUP, VERSION, "nodewrights", name))
    assert not allowed(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                                  {"metadata": {"labels": {"x": "y"}}}))
    assert not allowed(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name))
    assert not allowed(lambda: client.CoreV1Api(impersonating(sim, user)).list_node())


def test_built_in_view_role_includes_nodewrights_by_aggregation(sim, chart):
    name = "agg-" + uuid.uuid4().hex[:6]
    make_nodewright(sim, name)
    user = "view-user-" + uuid.uuid4().hex[:6]
    bind_cluster_role(sim, chart, "view", user)
    custom = client.CustomObjectsApi(impersonating(sim, user))
    wait_for(lambda: allowed(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "nodewrights")),
             what="the view ClusterRole to aggregate the NodeWright viewer rules")
    assert not allowed(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                                  {"metadata": {"labels": {"x": "y"}}}))


def test_editor_changes_nodewrights_but_not_their_status(sim, chart):
    user = "editor-" + uuid.uuid4().hex[:6]
    bind_cluster_role(sim, chart, chart.fullname + "-editor", user)
    custom = client.CustomObjectsApi(impersonating(sim, user))
    name = "edit-" + uuid.uuid4().hex[:6]
    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": {"name": name},
            "spec": {"nodeSelectors": {"matchLabels": {"nodepool": "none"}}}}
    wait_for(lambda: allowed(lambda: custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)),
             what="the editor binding to apply")
    assert allowed(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name,
                                                              {"spec": {"priority": 10}}))
    assert not allowed(lambda: custom.patch_cluster_custom_object_status(GROUP, VERSION, "nodewrights", name,
                                                                         {"status": {"status": "complete"}}))
    assert allowed(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name))
