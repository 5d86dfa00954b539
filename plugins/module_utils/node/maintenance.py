# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Requestor mode of NVIDIA's maintenance-operator (``maintenance.nvidia.com/v1alpha1``).

Where the maintenance-operator coordinates who may take GPU nodes down (the Network
Operator and the GPU Operator ask it too), NodeWright asks it as well instead of
cordoning and draining on its own: a ``NodeMaintenance`` of NodeWright's requestor ID
for the node, waited on until the operator reports it ``Ready`` (it has cordoned the
node, waited for the pods named in ``waitForPodCompletion`` and drained it under its
own ``maxParallelOperations`` / ``maxUnavailable``), and deleted once NodeWright's work
on the node is done and checked (the operator uncordons when no requestor is left).
"""

from __future__ import annotations

import hashlib
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_json, request_json
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

DEFAULT_NAMESPACE = "default"
DEFAULT_TIMEOUT = 3600
PENDING = "Pending"
_POLL = 2.0


def settings(value, field="maintenance_request"):
    """Requestor mode's settings (namespace, timeout) from M(maintain)'s ``maintenance_request``
    (a mapping, or true for the defaults; a string as a play variable gives it), else None.
    A value that is none of these, an unknown key, a bad namespace or a timeout that is not a
    positive number of seconds is refused, naming ``field``."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "0", "false", "no", "off", "none"):
            return None
        if text not in ("1", "true", "yes", "on"):
            raise NodeWrightError("%s must be a mapping (namespace, timeout) or true/false, got %r" % (field, value))
        value = {}
    elif not isinstance(value, dict):
        value = {} if value else None
    if value is None:
        return None
    unknown = sorted(set(value) - {"namespace", "timeout"})
    if unknown:
        raise NodeWrightError("%s: unknown key(s) %s (it takes namespace and timeout)" % (field, ", ".join(unknown)))
    namespace = value.get("namespace") or DEFAULT_NAMESPACE
    names.namespace(namespace, "%s.namespace" % field)
    timeout = value.get("timeout")
    if timeout is None or timeout == "":
        timeout = DEFAULT_TIMEOUT
    try:
        timeout = int(timeout)
    except (TypeError, ValueError):
        timeout = None
    if timeout is None or timeout <= 0 or isinstance(value.get("timeout"), bool):
        raise NodeWrightError("%s.timeout must be a positive number of seconds, got %r" % (field, value.get("timeout")))
    return {"namespace": namespace, "timeout": timeout}


def served(api):
    """Refuse a cluster that does not serve the maintenance-operator's NodeMaintenance
    (API discovery, which every authenticated client may read), before any node is asked for."""
    group_version = "%s/%s" % (markers.NODE_MAINTENANCE_GROUP, markers.NODE_MAINTENANCE_VERSION)
    try:
        found = get_json(api, "/apis/" + group_version, "discover " + group_version)
    except ClusterError as exc:
        raise _not_installed(exc)
    if not any(r.get("name") == markers.NODE_MAINTENANCE_PLURAL for r in (found or {}).get("resources") or []):
        raise _not_served()


def object_name(node):
    """The NodeMaintenance NodeWright asks with for ``node`` (one per requestor and node)."""
    name = "%s-%s" % (markers.NODE_MAINTENANCE_NAME_PREFIX, node)
    if len(name) > 253:
        name = "%s-%s" % (markers.NODE_MAINTENANCE_NAME_PREFIX, hashlib.sha256(node.encode()).hexdigest()[:20])
    return name


def _path(namespace, name=None):
    path = "/apis/%s/%s/namespaces/%s/%s" % (markers.NODE_MAINTENANCE_GROUP, markers.NODE_MAINTENANCE_VERSION,
                                             namespace, markers.NODE_MAINTENANCE_PLURAL)
    return path + ("/" + name if name else "")


def request_body(node, namespace, drain=None, wait_for_pods=None, cordon=True):
    """The NodeMaintenance for ``node``. ``drain``: mapping with force, timeout,
    delete_emptydir_data, pod_selector (None: the operator does not drain). ``wait_for_pods``:
    mapping with pod_selector (a selector string or LabelSelector mapping, or a list of them)
    and timeout: the pods the operator waits for before it drains."""
    spec = {"requestorID": markers.NODE_MAINTENANCE_REQUESTOR, "nodeName": node, "cordon": bool(cordon)}
    selector = to_selector(wait_for_pods.get("pod_selector"), "wait_for_pods.pod_selector") \
        if wait_for_pods and wait_for_pods.get("pod_selector") else None
    if selector is not None and not selector.empty:
        spec["waitForPodCompletion"] = {"podSelector": selector.to_string()}
        if wait_for_pods.get("timeout") is not None:
            spec["waitForPodCompletion"]["timeoutSeconds"] = int(wait_for_pods["timeout"])
    if drain is not None:
        spec["drainSpec"] = {"force": bool(drain.get("force")),
                             "deleteEmptyDir": bool(drain.get("delete_emptydir_data"))}
        if drain.get("timeout") is not None:
            spec["drainSpec"]["timeoutSeconds"] = int(drain["timeout"])
        if drain.get("pod_selector"):
            spec["drainSpec"]["podSelector"] = drain["pod_selector"]
    return {"apiVersion": "%s/%s" % (markers.NODE_MAINTENANCE_GROUP, markers.NODE_MAINTENANCE_VERSION),
            "kind": "NodeMaintenance", "metadata": {"name": object_name(node), "namespace": namespace},
            "spec": spec}


def phase(obj):
    """``(ready, phase)`` of a NodeMaintenance: its Ready condition, and that condition's
    reason (the operator's phase: Pending, Scheduled, Cordon, WaitForPodCompletion,
    Draining, Ready, ...)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True", cond.get("reason") or PENDING
    return False, PENDING


def describe(obj):
    meta = obj.get("metadata") or {}
    return "NodeMaintenance %s/%s" % (meta.get("namespace", "?"), meta.get("name", "?"))


def _read(api, namespace, name):
    try:
        return get_json(api, _path(namespace, name), "read NodeMaintenance %s/%s" % (namespace, name))
    except ClusterError as exc:
        if (exc.details or {}).get("status") == 404:
            return None
        raise


def _not_served():
    return NodeWrightError("the maintenance-operator's NodeMaintenance (%s/%s) is not served by this cluster"
                           % (markers.NODE_MAINTENANCE_GROUP, markers.NODE_MAINTENANCE_VERSION),
                           hint="install NVIDIA's maintenance-operator, or leave maintenance requests off so "
                                "that NodeWright cordons and drains the node itself")


def _not_installed(exc):
    """A 404 of the NodeMaintenance API in words; any other error as it is."""
    return _not_served() if (exc.details or {}).get("status") == 404 else exc


def request(api, node, namespace=DEFAULT_NAMESPACE, drain=None, wait_for_pods=None, cordon=True, check_mode=False):
    """Ask for ``node``'s maintenance; ``(changed, object)``. An object of that name already
    there is NodeWright's earlier request (a run resumed after a crash) and is kept."""
    body = request_body(node, namespace, drain=drain, wait_for_pods=wait_for_pods, cordon=cordon)
    name = body["metadata"]["name"]
    current = _read(api, namespace, name)
    if current is not None:
        owner = (current.get("spec") or {}).get("requestorID")
        if owner != markers.NODE_MAINTENANCE_REQUESTOR:
            raise NodeWrightError("%s belongs to requestor %s, not NodeWright (%s)"
                                  % (describe(current), owner, markers.NODE_MAINTENANCE_REQUESTOR),
                                  hint="NodeWright names its requests %s-<node>; rename or delete the other object"
                                       % markers.NODE_MAINTENANCE_NAME_PREFIX)
        return False, current
    if check_mode:
        served(api)  # what the real run would find: no request can be made where none is served
        return True, body
    try:
        created, _headers = request_json(api, "POST", _path(namespace), "create %s" % describe(body), body=body)
    except ClusterError as exc:
        raise _not_installed(exc)
    return True, created or body


def wait_ready(api, node, namespace=DEFAULT_NAMESPACE, timeout=DEFAULT_TIMEOUT, clock=time.monotonic,
               sleep=time.sleep):
    """The request once the operator reports it Ready; NodeWrightError past ``timeout``
    seconds (naming the phase it is in) or when it is deleted meanwhile."""
    name = object_name(node)
    deadline = clock() + timeout
    while True:
        obj = _read(api, namespace, name)
        if obj is None:
            raise NodeWrightError("NodeMaintenance %s/%s was deleted before the maintenance-operator made it Ready"
                                  % (namespace, name), hint="nothing was done on node %s; rerun" % node)
        ready, where = phase(obj)
        if ready:
            return obj
        if clock() >= deadline:
            raise NodeWrightError("the maintenance-operator did not make %s Ready within %d s (phase: %s)"
                                  % (describe(obj), timeout, where),
                                  hint="check the maintenance-operator (its maxParallelOperations and "
                                       "maxUnavailable may hold the request back, or it is not running)")
        sleep(min(_POLL, max(0.0, deadline - clock())))


def release(api, node, namespace=DEFAULT_NAMESPACE, timeout=DEFAULT_TIMEOUT, check_mode=False, wait=True,
            clock=time.monotonic, sleep=time.sleep):
    """Delete NodeWright's request for ``node`` and, with ``wait``, wait until it is gone (the
    operator's finalizer holds it until it has uncordoned the node); True when it existed."""
    name = object_name(node)
    if _read(api, namespace, name) is None:
        return False
    if check_mode:
        return True
    try:
        request_json(api, "DELETE", _path(namespace, name), "delete NodeMaintenance %s/%s" % (namespace, name))
    except ClusterError as exc:
        if (exc.details or {}).get("status") != 404:
            raise
    deadline = clock() + timeout
    while wait and _read(api, namespace, name) is not None:
        if clock() >= deadline:
            raise NodeWrightError("NodeMaintenance %s/%s is still there %d s after NodeWright deleted it"
                                  % (namespace, name, timeout),
                                  hint="the maintenance-operator removes it once it has uncordoned the node; "
                                       "check that it runs")
        sleep(min(_POLL, max(0.0, deadline - clock())))
    return True
