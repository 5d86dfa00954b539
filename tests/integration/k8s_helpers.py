"""Small helpers shared by the integration tests (they talk to the real API server)."""

from __future__ import annotations

import time

from kubernetes import client


def wait_for(predicate, timeout=60, interval=0.25, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s" % what)


def running_pods(sim, ns, selector):
    return [p for p in sim.core.list_namespaced_pod(ns, label_selector=selector).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def deployment_on(sim, ns, name, nodes, replicas, labels=None, grace=0, ready_after=None):
    """A Deployment pinned to ``nodes``; waits until all replicas run. ``ready_after``: how
    long each pod takes to start ("3s")."""
    labels = labels or {"app": name}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}}}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": (
                         {"sim.nodewright.io/ready-after": ready_after} if ready_after else {})}, "spec": {
                         "affinity": affinity, "terminationGracePeriodSeconds": grace,
                         "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}}
    sim.apps.create_namespaced_deployment(ns, body)
    sel = ",".join("%s=%s" % kv for kv in labels.items())
    return wait_for(lambda: (lambda pods: pods if len(pods) == replicas else None)(running_pods(sim, ns, sel)),
                    what="%s running" % name)


def pdb(sim, ns, name, **spec):
    spec["selector"] = {"matchLabels": {"app": name}}
    sim.policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": name}, "spec": spec})
    wait_for(lambda: sim.policy.read_namespaced_pod_disruption_budget(name, ns).status.observed_generation,
             what="PDB %s observed by the disruption controller" % name)


def evict(sim, pod):
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace))
    return sim.core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)


def host_result(proc, host, task_name):
    """The result of ``task_name`` for ``host`` from the json callback output."""
    found = None
    for entry in (proc.json or {}).get("tasks", []):
        if entry["task"] == task_name and entry["host"] == host and entry["status"] != "skipped":
            found = dict(entry["result"], failed=entry["status"].startswith("failed"))
    return found


def node_pods(sim, node):
    return [p for p in sim.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items]


def ensure_crds(sim, paths=None):
    """Install deploy/crds/*.yaml (or the CRD files ``paths``) on the simulator
    (idempotent) and wait until Established."""
    import glob
    import os

    import yaml
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ext = client.ApiextensionsV1Api(sim.api)
    names = []
    for path in paths or sorted(glob.glob(os.path.join(repo, "deploy", "crds", "*.yaml"))):
        crd = yaml.safe_load(open(path))
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def established():
        for n in names:
            conds = ext.read_custom_resource_definition(n).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True
    wait_for(established, what="CRDs established")
    return client.CustomObjectsApi(sim.api)
