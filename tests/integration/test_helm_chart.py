# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The Helm chart in deploy/helm/nodewright: it lints, renders what docs/deploy.md
promises (and refuses values that make no sense), the simulator's API server accepts
all of it, and its ValidatingAdmissionPolicy really decides which package sources a
NodeWright resource may use.

The helpers at the top are shared with test_rbac.py.
"""

from __future__ import annotations

import filecmp
import json
import os
import pathlib
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from k8s_helpers import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "nodewright"
BIN = pathlib.Path(os.environ.get("NODEWRIGHT_CACHE") or os.path.expanduser("~/.cache/nodewright")) / "bin"
GROUP, VERSION = "nodewright.io", "v1alpha1"
DIGEST = "sha256:" + "ab" * 32


def tool(name):
    path = BIN / name
    if not path.exists():
        pytest.fail("%s is missing: run `make binaries` (builds it once into %s)" % (path, BIN))
    return str(path)


def helm(*args, check=True):
    proc = subprocess.run([tool("helm")] + list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError("helm %s failed:\n%s" % (" ".join(args), proc.stderr))
    return proc


def render(release="nw", namespace="nodewright", values=None, *extra):
    """``helm template`` of the chart as a list of objects."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for key, value in (values or {}).items():
        args += ["--set-json", "%s=%s" % (key, json.dumps(value))]
    out = helm(*(args + list(extra))).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def kubectl(sim, *args, stdin=None, check=True):
    proc = subprocess.run([tool("kubectl")] + list(args), input=stdin, capture_output=True, text=True,
                          env=sim.env())
    if check and proc.returncode != 0:
        raise AssertionError("kubectl %s failed:\n%s" % (" ".join(args), proc.stderr))
    return proc


def apply(sim, docs, manager="nodewright-tests"):
    """Server-side apply of rendered objects, as `helm install` would create them."""
    text = yaml.safe_dump_all(docs, sort_keys=False)
    return kubectl(sim, "apply", "--server-side", "--force-conflicts", "--field-manager=" + manager,
                   "-f", "-", stdin=text)


def install_crds(sim):
    crds = [d for d in render("crds", "default", None, "--include-crds")
            if d["kind"] == "CustomResourceDefinition"]
    # The same field manager as playbooks/install_crds.yml: the chart's CRDs are the
    # same files, so the two installers never conflict on a shared simulator.
    apply(sim, crds, manager="nodewright")
    kubectl(sim, "wait", "--for=condition=Established", "--timeout=60s",
            *["crd/" + d["metadata"]["name"] for d in crds])


def delete(sim, docs):
    text = yaml.safe_dump_all(docs, sort_keys=False)
    kubectl(sim, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=text, check=False)


# --- the chart itself -----------------------------------------------------------------

@pytest.mark.unit
def test_chart_crds_are_the_crds_of_deploy_crds():
    source = sorted(p.name for p in (REPO / "deploy" / "crds").glob("*.yaml"))
    copied = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert copied == source, "run deploy/helm/sync-crds.sh"
    for name in source:
        assert filecmp.cmp(REPO / "deploy" / "crds" / name, CHART / "crds" / name, shallow=False), \
            "%s differs from deploy/crds: run deploy/helm/sync-crds.sh" % name


@pytest.mark.integration
@pytest.mark.parametrize("values", [
    {},
    {"admissionPolicy.enabled": True, "admissionPolicy.allowedRegistries": ["nvcr.io/nvidia"]},
    {"connection.type": "ssh", "validationJobs.enabled": False, "reconciler.enabled": False},
])
def test_helm_lint_is_clean(values):
    args = ["lint", "--strict", str(CHART)]
    for key, value in values.items():
        args += ["--set-json", "%s=%s" % (key, json.dumps(value))]
    proc = helm(*args)
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


@pytest.mark.integration
def test_reconciler_gets_exactly_the_documented_rules():
    docs = render("nw", "nodewright", {"validationJobs.namespace": "gpu-validation"})
    role = by_kind(docs, "ClusterRole")["nw-nodewright-reconciler"]
    rules = sorted((r["apiGroups"][0], res, tuple(sorted(r["verbs"]))) for r in role["rules"]
                   for res in r["resources"])
    assert rules == sorted([
        ("", "nodes", ("get", "list", "patch", "watch")),
        ("", "nodes/status", ("patch",)),
        ("", "pods", ("list", "watch")),
        ("", "pods/eviction", ("create",)),
        ("", "events", ("create", "patch")),
        ("nodewright.io", "nodewrights", ("get", "list", "patch", "watch")),
        ("nodewright.io", "nodewrights/status", ("get", "patch")),
        ("nodewright.io", "deploymentpolicies", ("get", "list", "watch")),
        ("maintenance.nvidia.com", "nodemaintenances", ("create", "delete", "get", "list")),
    ])
    roles = by_kind(docs, "Role")
    assert roles["nw-nodewright-node-pods"]["metadata"]["namespace"] == "nodewright"
    assert roles["nw-nodewright-node-pods"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]
    assert roles["nw-nodewright-validation-jobs"]["metadata"]["namespace"] == "gpu-validation"
    assert roles["nw-nodewright-validation-jobs"]["rules"] == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
    bindings = by_kind(docs, "ClusterRoleBinding")["nw-nodewright-reconciler"]
    assert bindings["subjects"] == [{"kind": "ServiceAccount", "name": "nw-nodewright", "namespace": "nodewright"}]
    for doc in docs:
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], doc["metadata"]["name"]


@pytest.mark.integration
def test_ssh_connection_grants_no_pod_permissions():
    docs = render("nw", "nodewright", {"connection.type": "ssh", "validationJobs.enabled": False})
    # Only the wave reservations' Lease, nothing on pods.
    assert list(by_kind(docs, "Role")) == ["nw-nodewright-admission"]
    assert list(by_kind(docs, "RoleBinding")) == ["nw-nodewright-admission"]
    rules = by_kind(docs, "Role")["nw-nodewright-admission"]["rules"]
    assert {r for rule in rules for r in rule["resources"]} == {"leases"}
    assert by_kind(docs, "Role")["nw-nodewright-admission"]["metadata"]["namespace"] == "kube-system"
    deploy = by_kind(docs, "Deployment")["nw-nodewright"]
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NODEWRIGHT_CONNECTION"] == "ssh" and "NODEWRIGHT_VALIDATION_NAMESPACE" not in env


@pytest.mark.integration
def test_viewer_and_editor_roles_aggregate_into_view_and_edit():
    roles = by_kind(render(), "ClusterRole")
    viewer, editor = roles["nw-nodewright-viewer"], roles["nw-nodewright-editor"]
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in viewer["rules"])
    assert not any("nodewrights/status" in r["resources"] and set(r["verbs"]) - {"get"} for r in editor["rules"])
    off = by_kind(render("nw", "nodewright", {"rbac.aggregateEditor": False}), "ClusterRole")
    assert "rbac.authorization.k8s.io/aggregate-to-edit" not in off["nw-nodewright-editor"]["metadata"]["labels"]


@pytest.mark.integration
def test_deployment_runs_the_reconciler_with_the_values():
    docs = render("nw", "ops", {"image.repository": "registry.corp/nodewright-ee", "image.digest": DIGEST,
                                "reconciler.interval": "45s", "reconciler.taintKey": "example.com/not-ready",
                                "resources": {"requests": {"cpu": "50m"}}, "namespace": "gpu-ops",
                                "reconciler.extraArgs": ["--once=false"],
                                "reconciler.notify": {"secretName": "fleet-hooks", "events": "halted,complete",
                                                      "batchInterval": "30m"}})
    deploy = by_kind(docs, "Deployment")["nw-nodewright"]
    assert deploy["metadata"]["namespace"] == "gpu-ops"
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "nw-nodewright"
    container = pod["containers"][0]
    assert "command" not in container  # the execution environment's entrypoint stays
    assert container["args"] == ["nodewright", "reconcile", "--once=false"]
    assert container["image"] == "registry.corp/nodewright-ee@" + DIGEST
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NODEWRIGHT_RECONCILE_INTERVAL"] == "45s"
    assert env["NODEWRIGHT_TAINT_KEY"] == "example.com/not-ready"
    assert env["NODEWRIGHT_NODE_POD_IMAGE"] == container["image"]
    assert env["NODEWRIGHT_VALIDATION_NAMESPACE"] == "gpu-ops"
    # Notification URLs come from a Secret: their tokens are not in the pod spec.
    notify = {e["name"]: e for e in container["env"]}["NODEWRIGHT_NOTIFY"]
    assert notify == {"name": "NODEWRIGHT_NOTIFY", "valueFrom": {"secretKeyRef": {"name": "fleet-hooks", "key": "urls"}}}
    assert env["NODEWRIGHT_NOTIFY_EVENTS"] == "halted,complete" and env["NODEWRIGHT_NOTIFY_BATCH_INTERVAL"] == "30m"
    assert "NODEWRIGHT_NOTIFY" not in {e["name"] for e in by_kind(render(), "Deployment")["nw-nodewright"]["spec"][
        "template"]["spec"]["containers"][0]["env"]}
    assert by_kind(docs, "ServiceAccount")["nw-nodewright"]["metadata"]["namespace"] == "gpu-ops"


@pytest.mark.integration
@pytest.mark.parametrize("values,message", [
    ({"admissionPolicy.enabled": True, "admissionPolicy.allowedRegistries": ["nvcr.io/Nvidia Packages"]},
     "is not a registry or registry/path prefix"),
    ({"admissionPolicy.enabled": True, "admissionPolicy.requireDigest": False}, "checks nothing"),
    ({"image.digest": "latest"}, "/image/digest"),
    ({"connection.type": "telnet"}, "at '/connection/type': value must be one of 'kubernetes', 'ssh'"),
    ({"reconciler.interval": 30}, "/reconciler/interval"),
    ({"admissionPolicies": {"enabled": True}}, "additional properties 'admissionPolicies' not allowed"),
    ({"serviceAccount.create": False}, "serviceAccount.name is needed"),
    ({"reconciler.notify.events": "halted, finished"}, "/reconciler/notify/events"),
])
def test_values_that_make_no_sense_fail_rendering(values, message):
    args = ["template", "nw", str(CHART)]
    for key, value in values.items():
        args += ["--set-json", "%s=%s" % (key, json.dumps(value))]
    proc = helm(*args, check=False)
    assert proc.returncode != 0 and message in proc.stderr


@pytest.mark.integration
def test_everything_the_chart_renders_passes_server_side_dry_run(sim):
    ns = sim.namespace("chart")
    docs = render("dry", ns, {"admissionPolicy.enabled": True,
                              "admissionPolicy.allowedRegistries": ["nvcr.io/nvidia"]}, "--include-crds")
    proc = kubectl(sim, "apply", "--server-side", "--dry-run=server", "-f", "-",
                   stdin=yaml.safe_dump_all(docs, sort_keys=False))
    applied = [line for line in proc.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(docs), proc.stdout
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
            "RoleBinding", "Deployment", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"} <= kinds


# --- the admission policy on the simulator's API server --------------------------------

def nodewright(name, label=None, **packages):
    meta = {"name": name}
    if label:
        meta["labels"] = {"nodewright.io/test-policy": label}
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright", "metadata": meta,
            "spec": {"nodeSelectors": {"matchLabels": {"nodepool": "none"}}, "packages": packages}}


def pkg(image=None, digest=None, source=None):
    out = {"version": "1.0.0"}
    if image:
        out["image"] = image
    if digest:
        out["containerSHA"] = digest
    if source:
        out["source"] = source
    return out


def rejection(call):
    """The API server's message when ``call`` is refused, None when it is accepted."""
    try:
        call()
    except ApiException as exc:
        assert exc.status == 403, exc.body
        return json.loads(exc.body)["message"]
    return None


@pytest.fixture(scope="module")
def policy(sim):
    """The chart's policy, bound only to NodeWright objects with this module's label
    (other tests share the simulator), with nvcr.io/nvidia and registry.corp:5000/gpu allowed."""
    install_crds(sim)
    label = uuid.uuid4().hex[:8]
    docs = [d for d in render("pol-" + label, "default", {
        "admissionPolicy.enabled": True, "admissionPolicy.allowSourcePackages": False,
        "admissionPolicy.allowedRegistries": ["nvcr.io/nvidia", "registry.corp:5000/gpu/"],
        "admissionPolicy.objectSelector": {"matchLabels": {"nodewright.io/test-policy": label}}})
        if d["kind"].startswith("ValidatingAdmissionPolicy")]
    apply(sim, docs)
    custom = client.CustomObjectsApi(sim.api)
    probe = nodewright("probe-" + label, label, bad=pkg("docker.io/x/y", DIGEST))
    wait_for(lambda: rejection(lambda: custom.create_cluster_custom_object(
        GROUP, VERSION, "nodewrights", probe, dry_run="All")), timeout=60, what="the policy to be enforced")
    created = []

    def create(body):
        created.append(body["metadata"]["name"])
        return custom.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)

    yield label, custom, create
    for name in created:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)
        except ApiException:
            pass
    delete(sim, docs)


@pytest.mark.integration
@pytest.mark.parametrize("packages,message", [
    ({"kernel": pkg("docker.io/someone/kernel", DIGEST), "ok": pkg("nvcr.io/nvidia/ok", DIGEST)},
     "must come from an allowed registry (nvcr.io/nvidia, registry.corp:5000/gpu); "
     "not allowed: kernel (docker.io/someone/kernel)"),
    ({"lookalike": pkg("nvcr.io/nvidia-mirror/kernel", DIGEST)}, "not allowed: lookalike"),
    ({"port": pkg("registry.corp/gpu/kernel", DIGEST)}, "not allowed: port (registry.corp/gpu/kernel)"),
    ({"kernel": pkg("nvcr.io/nvidia/kernel"), "tuned": pkg("registry.corp:5000/gpu/tuned"),
      "pinned": pkg("nvcr.io/nvidia/pinned", DIGEST)},
     ["must be pinned by digest (containerSHA: sha256:...); not pinned: ", "kernel (nvcr.io/nvidia/kernel)",
      "tuned (registry.corp:5000/gpu/tuned)"]),
    ({"local": pkg(source="/srv/packages/local")}, "not source directories; not allowed: local"),
])
def test_policy_rejects_disallowed_package_sources_with_its_message(policy, packages, message):
    label, custom, create = policy
    body = nodewright("deny-" + uuid.uuid4().hex[:6], label, **packages)
    got = rejection(lambda: create(body))
    assert got is not None, "the API server accepted %s" % packages
    assert "ValidatingAdmissionPolicy 'pol-%s-nodewright-package-sources'" % label in got
    for part in message if isinstance(message, list) else [message]:  # packages come in map order
        assert part in got
    assert "pinned (" not in got


@pytest.mark.integration
def test_policy_accepts_pinned_images_from_allowed_registries(policy):
    label, custom, create = policy
    body = nodewright("allow-" + uuid.uuid4().hex[:6], label, kernel=pkg("nvcr.io/nvidia/kernel", DIGEST),
                      tuned=pkg("registry.corp:5000/gpu/tuned", "sha256:" + "0" * 64),
                      shipped=pkg())  # one of the collection's own packages: no image, no source
    assert rejection(lambda: create(body)) is None
    stored = custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", body["metadata"]["name"])
    assert stored["spec"]["packages"]["kernel"]["containerSHA"] == DIGEST


@pytest.mark.integration
def test_policy_checks_only_packages_a_change_adds_or_changes(policy):
    """An object from before the policy (here: before it carried the policy's label)
    can still be labelled, annotated and deleted; its packages change only into
    compliant ones."""
    label, custom, create = policy
    name = "old-" + uuid.uuid4().hex[:6]
    create(nodewright(name, None, legacy=pkg("docker.io/someone/legacy")))

    def patch(body):
        return lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", name, body)

    assert rejection(patch({"metadata": {"labels": {"nodewright.io/test-policy": label},
                                         "annotations": {"note": "adopted"}}})) is None
    assert "not allowed: legacy" in rejection(patch({"spec": {"packages": {"legacy": {"version": "1.0.1"}}}}))
    assert "not allowed: extra" in rejection(patch({"spec": {"packages": {"extra": pkg("quay.io/x/extra", DIGEST)}}}))
    assert rejection(patch({"spec": {"packages": {"legacy": {"image": "nvcr.io/nvidia/legacy",
                                                             "containerSHA": DIGEST}}}})) is None
