# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Operations on one Node: read, cordon/uncordon with ownership, NodeWright markers
(status labels, state annotations, conditions) and Events.

Ownership: NodeWright records its own cordon in ``nodewright.io/cordoned-by`` so it
never uncordons a node somebody else cordoned, and a re-run after a crash knows
the cordon is its own.
"""

from __future__ import annotations

import datetime
import json
import socket
import uuid

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call, require_kubernetes
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
except ImportError:
    k8s_client = None
    ApiException = Exception

OWNER = "nodewright"


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_since(iso, now=None):
    """Seconds from the time ``iso`` (as ``now_iso`` writes it) to ``now`` (default: now); 0 when unreadable."""
    try:
        then = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return 0.0
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return max(0.0, (now - then).total_seconds())


class NodeNotFound(NodeWrightError):
    pass


def core_api(api_client):
    require_kubernetes()
    return k8s_client.CoreV1Api(api_client)


def read_node(core, name):
    """The node as a plain dict (API field names), or NodeNotFound."""
    names.node_name(name, "node")
    try:
        resp = core.read_node(name, _preload_content=False)
    except ApiException as exc:
        if getattr(exc, "status", None) == 404:
            raise NodeNotFound("node %s does not exist" % name,
                               hint="check the name with `kubectl get nodes`; the inventory may be stale")
        raise
    return json.loads(resp.data)


def get_node(core, name):
    return call("read node %s" % name, read_node, core, name)


def is_ready(node):
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def boot_id(node):
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")


def cordon_record(node):
    """NodeWright's cordon record on this node, or None."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(markers.ANNOTATION_CORDONED_BY)
    if not raw:
        return None
    try:
        record = json.loads(raw)
        return record if isinstance(record, dict) else {"owner": OWNER, "raw": raw}
    except ValueError:
        return {"owner": OWNER, "raw": raw}


def cordon_state(node):
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    record = cordon_record(node)
    if not unschedulable:
        return "uncordoned"
    return "cordoned_by_nodewright" if record else "cordoned_by_other"


def plan_cordon(node, state, force=False):
    """Decide what a cordon/uncordon request does. Returns (action, patch, message).

    action: none | cordon | adopt | uncordon | refuse
    """
    current = cordon_state(node)
    if state == "cordoned":
        if current == "uncordoned":
            return "cordon", None, "cordoned"
        if current == "cordoned_by_nodewright":
            return "none", None, "already cordoned by NodeWright"
        return "none", None, "already cordoned by someone else; NodeWright will not uncordon it"
    if state == "uncordoned":
        if current == "uncordoned":
            if cordon_record(node):
                return "clear", None, "not cordoned; stale NodeWright cordon record removed"
            return "none", None, "not cordoned"
        if current == "cordoned_by_nodewright" or force:
            return "uncordon", None, "uncordoned" + (" (forced)" if current == "cordoned_by_other" else "")
        return "refuse", None, ("node was cordoned by someone else, not NodeWright; leaving it cordoned "
                                "(use force to override)")
    raise ValidationError("state must be cordoned or uncordoned, got %r" % state, field="state")


def cordon_patch(action, reason=None, resource=None):
    if action == "cordon":
        record = {"owner": OWNER, "at": now_iso(), "by": socket.gethostname()}
        if reason:
            record["reason"] = reason
        if resource:
            record["resource"] = resource
        return {"spec": {"unschedulable": True},
                "metadata": {"annotations": {markers.ANNOTATION_CORDONED_BY: json.dumps(record, sort_keys=True)}}}
    if action == "uncordon":
        return {"spec": {"unschedulable": None}, "metadata": {"annotations": {markers.ANNOTATION_CORDONED_BY: None}}}
    if action == "clear":
        return {"metadata": {"annotations": {markers.ANNOTATION_CORDONED_BY: None}}}
    return None


def patch_node(core, name, patch):
    names.node_name(name, "node")
    return call("patch node %s" % name, core.patch_node, name, patch)


def set_cordon(core, name, state, force=False, reason=None, resource=None, check_mode=False):
    node = get_node(core, name)
    action, dummy, message = plan_cordon(node, state, force)
    result = {"node": name, "previous": cordon_state(node), "action": action, "msg": message,
              "changed": action in ("cordon", "uncordon", "clear")}
    if action == "refuse":
        result["failed"] = True
        return result
    patch = cordon_patch(action, reason, resource)
    if patch and not check_mode:
        patch_node(core, name, patch)
        emit_event(core, name, markers.EVENT_CORDON if action == "cordon" else markers.EVENT_UNCORDON,
                   "%s%s" % (message, (": " + reason) if reason else ""))
    result["current"] = state if action != "clear" else "uncordoned"
    return result


# --- events --------------------------------------------------------------------------

def emit_event(core, node_name, reason, message, event_type="Normal", namespace="default", involved=None):
    """Record a Kubernetes Event on the node (or on ``involved``, an object reference
    such as a NodeWright resource). Never fails the caller: events are advisory."""
    if involved is None and not names.is_subdomain(node_name):
        return False
    ts = now_iso()
    involved = involved or {"kind": "Node", "name": node_name, "uid": node_name, "apiVersion": "v1"}
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "%s.nodewright.%s" % (involved["name"][:200].rstrip(".-"), uuid.uuid4().hex[:10]),
                     "namespace": namespace},
        "involvedObject": involved,
        "reason": reason, "message": message[:1024], "type": event_type,
        "source": {"component": "nodewright"}, "reportingComponent": "nodewright",
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
    }
    try:
        core.create_namespaced_event(namespace, body)
        return True
    except Exception:  # noqa: BLE001 - an event is never worth failing maintenance for
        return False


# --- NodeWright state markers ----------------------------------------------------------

def read_state(node, resource):
    """The JSON state NodeWright recorded for ``resource`` on this node (``node/state.py``,
    the one reader): ``{}``, the state, or ``{"error": ...}`` when it cannot be parsed."""
    return node_state.read_node_state(node, resource)


def resource_ref(name):
    """The object reference of a NodeWright resource, for Events about it."""
    return {"kind": "NodeWright", "name": name, "apiVersion": "%s/%s" % (markers.API_GROUP, markers.API_VERSION)}


def set_resource_condition(core, resource, condition):
    """Set one condition in a NodeWright resource's status (``nodewright_api.set_condition``:
    its lastTransitionTime changes only with its status). Advisory: returns False when the
    resource is not there or could not be written, never raises."""
    try:
        return nodewright_api.set_condition(core.api_client, resource, condition["type"], lambda old: condition)
    except Exception:  # noqa: BLE001 - a status note is never worth failing maintenance for
        return False


def node_lines(message, node, text):
    """A condition message holding one line per node (``NODE: text``, sorted by node)
    with ``node``'s line set to ``text``, or removed when ``text`` is None."""
    lines = {}
    for line in (message or "").splitlines():
        name, sep, rest = line.partition(": ")
        if sep and name and " " not in name:
            lines[name] = rest
    if text is None:
        lines.pop(node, None)
    else:
        lines[node] = " ".join(str(text).split())
    return "\n".join("%s: %s" % (name, lines[name]) for name in sorted(lines))


def set_resource_node_line(core, resource, ctype, node, text, reason, clear_reason, clear_message, attempts=3):
    """Set (``text``) or remove (None) ``node``'s line in the resource condition ``ctype``:
    True with ``reason`` while any node has a line, False with ``clear_reason`` and
    ``clear_message`` once none has. Several nodes' drains write it at once:
    ``nodewright_api.set_condition`` reads again when another writer won the race.
    Advisory: returns False when it could not be written, never raises."""
    def decide(old):
        old = old or {}
        message = node_lines(old.get("message") if old.get("status") == "True" else "", node, text)
        if not old and not message:
            return None     # nothing was ever blocked: no condition to clear
        return ({"type": ctype, "status": "True", "reason": reason, "message": message} if message else
                {"type": ctype, "status": "False", "reason": clear_reason, "message": clear_message})
    try:
        return nodewright_api.set_condition(core.api_client, resource, ctype, decide, attempts=attempts)
    except Exception:  # noqa: BLE001 - a status note is never worth failing maintenance for
        return False


def aggregate_status(statuses):
    """One node-level status from the per-resource ones (worst wins)."""
    order = [markers.STATUS_ERRORING, markers.STATUS_BLOCKED, markers.STATUS_IN_PROGRESS,
             markers.STATUS_WAITING, markers.STATUS_UNKNOWN, markers.STATUS_COMPLETE]
    present = set(statuses)
    for s in order:
        if s in present:
            return s
    return None


def state_patch(node, resource, status=None, state=None, merge=True):
    """Metadata patch that records ``status``/``state`` for ``resource``."""
    if status is not None and status not in markers.STATUSES:
        raise ValidationError("status must be one of %s, got %r" % (", ".join(markers.STATUSES), status),
                              field="status")
    if state is not None or status is not None:
        node_state.refuse_to_overwrite(node, resource)
    labels = {}
    annotations = {}
    if status is not None:
        labels[markers.status_label(resource)] = status
        current = dict(((node.get("metadata") or {}).get("labels") or {}))
        current[markers.status_label(resource)] = status
        per_resource = [v for k, v in current.items() if k.startswith(markers.LABEL_STATUS + "-")]
        labels[markers.LABEL_STATUS] = aggregate_status(per_resource)
    if state is not None:
        new_state = dict(read_state(node, resource)) if merge else {}
        new_state.update(state)
        if status is not None:
            new_state["status"] = status
        new_state["updated"] = now_iso()
        annotations[markers.state_annotation(resource)] = json.dumps(new_state, sort_keys=True)
    elif status is not None:
        new_state = dict(read_state(node, resource))
        new_state["status"] = status
        new_state["updated"] = now_iso()
        annotations[markers.state_annotation(resource)] = json.dumps(new_state, sort_keys=True)
    meta = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta} if meta else None


def condition_patch(node, cond_type, status, reason, message):
    """Status patch that sets one node condition (strategic merge by type)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type and cond.get("status") == status and cond.get("reason") == reason \
                and cond.get("message") == message:
            return None
    ts = now_iso()
    return {"status": {"conditions": [{"type": cond_type, "status": status, "reason": reason,
                                       "message": message[:1024], "lastHeartbeatTime": ts,
                                       "lastTransitionTime": ts}]}}


def merged(obj, patch):
    """``obj`` as a JSON merge ``patch`` would leave it (None removes a key); for check mode."""
    if not isinstance(patch, dict) or not isinstance(obj, dict):
        return patch
    out = dict(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merged(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


def patch_node_status(core, name, patch):
    names.node_name(name, "node")
    return call("patch status of node %s" % name, core.patch_node_status, name, patch)


def clear_marks_patch(node, resource, keep=()):
    """Metadata patch that removes ``resource``'s status label and state annotation.
    ``keep``: packages whose entries stay in the annotation (a deleted resource's
    packages that were not uninstalled and so are still on the node); the annotation
    goes only when none of them is recorded."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    meta = {"labels": {}, "annotations": {}}
    if markers.status_label(resource) in labels:
        meta["labels"][markers.status_label(resource)] = None
        rest = [v for k, v in labels.items() if k.startswith(markers.LABEL_STATUS + "-")
                and k != markers.status_label(resource)]
        meta["labels"][markers.LABEL_STATUS] = aggregate_status(rest)
    if markers.state_annotation(resource) in annotations:
        state = read_state(node, resource)
        kept = {name: entry for name, entry in node_state.package_entries(state).items() if name in keep} \
            if "error" not in state else {}
        if kept:
            value = json.dumps({"packages": kept, "updated": state.get("updated") or now_iso()}, sort_keys=True)
            if value != annotations[markers.state_annotation(resource)]:
                meta["annotations"][markers.state_annotation(resource)] = value
        else:
            meta["annotations"][markers.state_annotation(resource)] = None
    meta = {k: v for k, v in meta.items() if v}
    return {"metadata": meta} if meta else None


# --- the Erroring condition, over every resource on the node ---------------------------

ERRORING_REASON = "ResourceErroring"
HEALTHY_REASON = "Healthy"
HEALTHY_MESSAGE = "no NodeWright error"


def _why(state):
    """One line of what went wrong, from a resource's state annotation."""
    if state.get("error"):
        return state["error"]
    reason = str(state.get("reason") or "").strip()
    reason = reason.splitlines()[0] if reason else "marked erroring"
    step = state.get("step")
    if step and not reason.startswith(str(step)):
        return "%s: %s" % (step, reason)
    return reason


def erroring_resources(node):
    """``{resource: why}`` for every NodeWright resource that is erroring on ``node``:
    its status label says erroring, or its state annotation cannot be read."""
    meta = node.get("metadata") or {}
    found = {}
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith(markers.LABEL_STATUS + "-") and value == markers.STATUS_ERRORING:
            resource = key[len(markers.LABEL_STATUS) + 1:]
            found[resource] = _why(read_state(node, resource))
    for key in meta.get("annotations") or {}:
        if key.startswith(markers.ANNOTATION_STATE_PREFIX):
            resource = key[len(markers.ANNOTATION_STATE_PREFIX):]
            state = read_state(node, resource)
            if "error" in state:
                found[resource] = state["error"]
    return found


def current_condition(node, cond_type):
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type:
            return cond
    return None


def erroring_condition(node, resource=None, error=None):
    """``(status, reason, message)`` of the ``nodewright.io/Erroring`` condition ``node``
    must carry: True while any resource is erroring on it (``erroring_resources``, plus
    ``resource`` itself when ``error`` - a mapping with ``reason`` and ``message`` - is
    given), naming each with what went wrong; False otherwise.

    A resource that succeeds never clears the condition another resource's failure set.
    """
    failing = erroring_resources(node)
    if resource is not None and error:
        failing[resource] = error["message"]
    if not failing:
        return "False", HEALTHY_REASON, HEALTHY_MESSAGE
    current = current_condition(node, markers.CONDITION_ERRORING) or {}
    if resource is not None and error:
        reason = error.get("reason") or ERRORING_REASON
    elif current.get("status") == "True" and current.get("reason"):
        reason = current["reason"]
    else:
        reason = ERRORING_REASON
    if len(failing) == 1:
        name, why = next(iter(failing.items()))
        message = "%s: %s" % (name, why)
    else:
        message = "%d NodeWright resources are erroring: %s" % (
            len(failing), "; ".join("%s: %s" % (name, why) for name, why in sorted(failing.items())))
    return "True", reason, message


def erroring_condition_patch(node, resource=None, error=None):
    """The status patch that brings the Erroring condition in line with the node's
    resources (``erroring_condition``), or None when it already is. A False condition is
    only written over a True one: a node that never erred gets no condition."""
    status, reason, message = erroring_condition(node, resource, error)
    current = current_condition(node, markers.CONDITION_ERRORING)
    if status == "False" and (current is None or current.get("status") != "True"):
        return None
    return condition_patch(node, markers.CONDITION_ERRORING, status, reason, message)
