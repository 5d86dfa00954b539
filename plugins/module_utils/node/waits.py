# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Waits of the safe sequence: for non-interruptible pods to finish, for a node to
come back after an interrupt, and the health gates before a node returns to work."""

from __future__ import annotations

import datetime
import json
import re
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node.drain import list_node_pods, pod_key
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    TimeoutExceeded,
    ValidationError,
    carry_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems, check_keys
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

ACTIVE_PHASES = ("Pending", "Running", "Unknown")
CONDITION_NON_INTERRUPT = markers.CONDITION_NON_INTERRUPT


def validate_timeout(value, field="timeout", maximum=14 * 86400):
    if value is None or value <= 0 or value > maximum:
        raise ValidationError("%s must be between 1 second and %d days, got %s" % (field, maximum // 86400, value),
                              field=field, hint="give the longest wait in seconds, e.g. 600")
    return value


def _age(pod, now=None):
    created = pod["metadata"].get("creationTimestamp")
    if not created:
        return None
    t = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return int((now - t).total_seconds())


def blocking_pods(pods, selector):
    """Pods matching the non-interruptible selector that still run (or may run) on the node."""
    out = []
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") != "Running":
            continue
        if (pod.get("status") or {}).get("phase", "Pending") not in ACTIVE_PHASES:
            continue
        if selector.matches(pod["metadata"].get("labels") or {}):
            out.append({"pod": pod_key(pod), "phase": pod["status"].get("phase"), "age_seconds": _age(pod)})
    return sorted(out, key=lambda p: p["pod"])


def protected_by_node(pods, selector, nodes):
    """``{node: [namespace/pod, ...]}``: the pods matching the non-interruptible ``selector``
    that run (or may run) on each of ``nodes`` (what a run would wait for there)."""
    wanted = set(nodes)
    grouped = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in wanted:
            grouped.setdefault(node, []).append(pod)
    out = {}
    for node, on_node in grouped.items():
        found = [p["pod"] for p in blocking_pods(on_node, selector)]
        if found:
            out[node] = found
    return out


def wait_for_critical_pods(core, node, selectors, timeout, poll=2.0, resource=None, check_mode=False,
                           clock=time.monotonic, sleep=time.sleep):
    """Wait until no non-interruptible pod runs on ``node``. Never evicts anything.

    While waiting, the node carries ``nodewright.io/blocked-by`` naming the pods (and, with
    a resource, its status label says blocked), so ``kubectl get node`` explains the wait.
    """
    selector = to_selector(selectors, "selectors")
    if selector.empty:
        raise ValidationError("the non-interruptible selector is empty and would match every pod",
                              field="selectors", hint="e.g. app.kubernetes.io/component=training")
    validate_timeout(timeout)
    node_ops.get_node(core, node)
    start = clock()
    deadline = start + timeout
    first = blocking_pods(list_node_pods(core, node), selector)
    result = {"node": node, "selector": selector.to_string(), "initially_blocking": first, "blocking": first,
              "waited_seconds": 0.0, "changed": False}
    if check_mode or not first:
        return result
    with carry_result(result):
        return _wait_marked(core, node, selector, timeout, poll, resource, result, first, start, deadline, clock,
                            sleep)


def _wait_marked(core, node, selector, timeout, poll, resource, result, first, start, deadline, clock, sleep):
    """The wait itself, the node marked blocked meanwhile; ``result["changed"]`` is true
    from the first mark on, so a timeout says that the node was marked."""
    marked = None
    blockers = first
    while blockers:
        text = ", ".join(p["pod"] for p in blockers)
        if text != marked:
            patch = {"metadata": {"annotations": {markers.ANNOTATION_BLOCKED_BY: text}}}
            if resource:
                state = node_ops.state_patch(node_ops.get_node(core, node), resource, status=markers.STATUS_BLOCKED,
                                             state={"blockedBy": [p["pod"] for p in blockers]})
                patch["metadata"].update({k: dict(v, **patch["metadata"].get(k, {}))
                                          for k, v in state["metadata"].items()})
            node_ops.patch_node(core, node, patch)
            result["changed"] = True
            if marked is None:
                node_ops.emit_event(core, node, markers.EVENT_BLOCKED,
                                    "waiting for non-interruptible pods to finish: %s" % text)
            if resource:
                words = "node %s waits for non-interruptible pods to finish (nothing is evicted): %s" % (node, text)
                node_ops.set_resource_condition(core, resource, {
                    "type": CONDITION_NON_INTERRUPT, "status": "True", "reason": CONDITION_NON_INTERRUPT,
                    "message": words})
                node_ops.emit_event(core, node, CONDITION_NON_INTERRUPT, words, "Normal",
                                    involved=node_ops.resource_ref(resource))
            marked = text
        if clock() >= deadline:
            result.update(blocking=blockers, waited_seconds=round(clock() - start, 1))
            raise TimeoutExceeded(
                "node %s: non-interruptible pods still running after %ss: %s; nothing was evicted"
                % (node, timeout, ", ".join("%s (%s, age %ss)" % (p["pod"], p["phase"], p["age_seconds"])
                                            for p in blockers)),
                hint="raise the timeout, or wait until these jobs finish", result=result)
        sleep(min(poll, max(0.1, deadline - clock())))
        blockers = blocking_pods(list_node_pods(core, node), selector)
    node_ops.patch_node(core, node, {"metadata": {"annotations": {markers.ANNOTATION_BLOCKED_BY: None}}})
    if resource:
        node_ops.set_resource_condition(core, resource, {
            "type": CONDITION_NON_INTERRUPT, "status": "False", "reason": "NoneRunning",
            "message": "node %s: the non-interruptible pods finished" % node})
    result.update(blocking=[], waited_seconds=round(clock() - start, 1), changed=True)
    return result


def wait_ready(core, node, timeout, previous_boot_id=None, poll=1.0, clock=time.monotonic, sleep=time.sleep):
    """Wait for Ready, and for a new bootID when ``previous_boot_id`` is given."""
    validate_timeout(timeout)
    start = clock()
    deadline = start + timeout
    seen_not_ready = False
    while True:
        n = node_ops.get_node(core, node)
        ready = node_ops.is_ready(n)
        seen_not_ready = seen_not_ready or not ready
        bid = node_ops.boot_id(n)
        rebooted = previous_boot_id is None or (bid and bid != previous_boot_id)
        if ready and rebooted:
            return {"node": node, "ready": True, "boot_id": bid, "previous_boot_id": previous_boot_id,
                    "rebooted": previous_boot_id is not None, "seen_not_ready": seen_not_ready,
                    "waited_seconds": round(clock() - start, 1)}
        if clock() >= deadline:
            why = "still NotReady" if not ready else "bootID unchanged (%s): the reboot did not happen" % bid
            raise TimeoutExceeded("node %s did not come back within %ss: %s" % (node, timeout, why),
                                  hint="check the node's console / kubelet; it stays cordoned")
        sleep(poll)


# --- health gates ------------------------------------------------------------------------

def evaluate_health(node, conditions=(), labels=None):
    """Pure: which gates fail on this node. ``conditions`` are {type, status} with the
    healthy status expected (Ready -> True; problem conditions -> False)."""
    failures = []
    current = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
    for gate in conditions:
        ctype = gate["type"]
        want = gate.get("status") or ("True" if ctype == "Ready" else "False")
        have = current.get(ctype)
        if have is None:
            if gate.get("required", False):
                failures.append({"gate": "condition", "type": ctype, "expected": want, "actual": None,
                                 "message": "condition %s is not reported on the node" % ctype})
            continue
        if have.get("status") != want:
            failures.append({"gate": "condition", "type": ctype, "expected": want, "actual": have.get("status"),
                             "message": "%s is %s (%s: %s)" % (ctype, have.get("status"), have.get("reason"),
                                                               have.get("message"))})
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    for key, want in sorted((labels or {}).items()):
        have = node_labels.get(key)
        if have != want:
            failures.append({"gate": "label", "key": key, "expected": want, "actual": have,
                             "message": "label %s is %r, expected %r" % (key, have, want)})
    return failures


VALIDATION_JOB_KEYS = ("name", "namespace", "template", "backoff_limit")


def check_validation_job(spec, field="validation_job"):
    """The validation Job spec (``name``, ``namespace``, ``template``, ``backoff_limit``),
    checked before anything is created."""
    problems = Problems()
    with problems.collect():
        check_keys(spec, VALIDATION_JOB_KEYS, field)
    with problems.collect():
        names.namespace(spec.get("namespace", "default"), field + ".namespace")
    with problems.collect():
        # The Job's name is this, the node's name and a time stamp; its pods' job-name label
        # must hold it, so it is a DNS-1123 label of at most 30 characters here.
        prefix = spec.get("name", "nodewright-validate")
        names.dns_label(prefix, field + ".name", "validation Job name")
        if len(prefix) > 30:
            raise ValidationError("is %d characters long; at most 30 (the node's name and a time stamp follow)"
                                  % len(prefix), field=field + ".name")
    if not isinstance(spec.get("template"), dict):
        problems.add(ValidationError("needs a pod template (a mapping with spec.containers)",
                                     field=field + ".template"))
    limit = spec.get("backoff_limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        problems.add(ValidationError("must be a whole number >= 0, got %r" % (limit,), field=field + ".backoff_limit"))
    problems.raise_if_any()
    return spec


def validation_job_name(prefix, node, now):
    """``<prefix>-<node>-<time>``, a DNS-1123 label (the Job's pods carry it in a label)."""
    part = re.sub(r"[^a-z0-9-]+", "-", node.lower())[:20].strip("-") or "node"
    return "%s-%s-%d" % (prefix[:30].rstrip("-"), part, int(now))


def validation_job_manifest(node, spec, now, tolerations=()):
    """The Job ``spec`` asks for, pinned to ``node``: its pods tolerate the cordon, the
    runtime-required taints and ``tolerations`` (a resource's additionalTolerations)."""
    ns = spec.get("namespace", "default")
    template = json.loads(json.dumps(spec["template"]))
    pod_spec = template.setdefault("spec", {})
    pod_spec["nodeName"] = node
    pod_spec.setdefault("restartPolicy", "Never")
    pod_tolerations = pod_spec.setdefault("tolerations", [])
    pod_tolerations.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
    for key in (markers.TAINT_RUNTIME_REQUIRED,) + markers.UPSTREAM_RUNTIME_TAINT_KEYS:
        pod_tolerations.append({"key": key, "operator": "Exists"})
    for toleration in tolerations or ():
        if toleration not in pod_tolerations:
            pod_tolerations.append(dict(toleration))
    name = validation_job_name(spec.get("name", "nodewright-validate"), node, now)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "nodewright"}},
            "spec": {"backoffLimit": spec.get("backoff_limit", 0), "ttlSecondsAfterFinished": 3600,
                     "template": template}}


def run_validation_job(api_client, node, spec, timeout, clock=time.monotonic, sleep=time.sleep, tolerations=()):
    """Run an operator-supplied validation Job pinned to ``node`` (``validation_job_manifest``);
    wait for success."""
    from kubernetes import client as k8s_client
    batch = k8s_client.BatchV1Api(api_client)
    job = validation_job_manifest(node, spec, time.time(), tolerations)
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    call("create validation job on %s" % node, batch.create_namespaced_job, ns, job)
    deadline = clock() + timeout
    while clock() < deadline:
        st = call("read validation job", batch.read_namespaced_job, name, ns).status
        if st.succeeded:
            return {"job": "%s/%s" % (ns, name), "succeeded": True}
        if st.failed and st.failed > spec.get("backoff_limit", 0):
            return {"job": "%s/%s" % (ns, name), "succeeded": False, "message": "validation job failed"}
        sleep(1.0)
    return {"job": "%s/%s" % (ns, name), "succeeded": False, "message": "validation job did not finish in %ss" % timeout}
