# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Fleet-wide admission: one view of the cluster's disruption, and reservations that
hold across processes.

Every run that rolls NodeWright resources out (``rollout.yml`` from a laptop, an AWX
job or one of its slices, ``nodewright rollout``, the in-cluster reconciler) admits
each wave through here:

1. It reads the **reservation record**, a Lease (``kube-system/nodewright-admission``
   by default) whose annotation ``nodewright.io/reservations`` lists, per live run
   (a *holder*), the nodes it has admitted and not yet released, with the time it
   last renewed them (the API server's clock, from the ``Date`` header, so that no
   two machines' clocks need to agree).
2. It reads every Node once. A node is **disrupted** when it is reserved by a live
   holder, cordoned (by anyone), marked in progress by any NodeWright resource, or
   **unavailable**: NotReady (its Ready condition is not True, or it carries the node
   lifecycle controller's not-ready or unreachable taint) or under another
   controller's maintenance: the GPU Operator's driver upgrade
   (``nvidia.com/gpu-driver-upgrade-state`` set, other than ``upgrade-done``),
   NVSentinel's fault handling (its state label or quarantine annotation), or a
   NodeMaintenance of another requestor (the NVIDIA maintenance-operator's CRD). Unavailability counts for the nodes the run targets (kured, the
   GPU Operator's ``maxUnavailable`` and system-upgrade-controller count it too); an
   unavailable node is not admitted until it is healthy again, unless the resource
   itself left it in progress (a rerun finishes it).
3. The policy engine (``waves.next_wave``) chooses the wave with the disrupted nodes
   counted against the budget ceiling, the topology limit and the fleet limit.
4. The wave's nodes are added to the record with the Lease's ``resourceVersion`` as
   a precondition: when another run wrote in between, the write fails (409), and
   the run reads everything again and decides again. Two runs can never both take
   the last slot.

A holder renews its entry while its wave runs (every third of ``ttlSeconds``) and
removes its nodes when the wave ends. A run that dies (kill -9) stops renewing: its
entry expires after ``ttlSeconds`` and the next writer drops it; the nodes it left
cordoned or in progress still count as disrupted through their own marks until a
rerun finishes them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

LOCK_NAME = "nodewright-admission"
DEFAULT_LOCK_NAMESPACE = "kube-system"
LOCK_NAMESPACE_ENV = "NODEWRIGHT_LOCK_NAMESPACE"
ANNOTATION_RESERVATIONS = markers.PREFIX + "/reservations"
RECORD_VERSION = 1
DEFAULT_TTL = 90
_MIN_TTL = 15
_MAX_ATTEMPTS = 12


class AdmissionError(NodeWrightError):
    """The reservation record cannot be used, or a reservation conflicts with another run."""


def _iso(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value):
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def policy_digest(policy_dict):
    """A short, stable digest of a policy (its ``to_dict()``), to tell two policies apart."""
    text = json.dumps(policy_dict, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def new_holder_id():
    return "%s-%d-%s" % (socket.gethostname()[:40], os.getpid(), uuid.uuid4().hex[:8])


# --------------------------------------------------------------------------- the nodes

# The taints the node lifecycle controller puts on a node it finds NotReady or unreachable.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# GPU Operator driver upgrade states in which the node is not under its upgrade.
GPU_UPGRADE_IDLE = ("", "upgrade-done")


def nvsentinel(labels, annotations):
    """Why NVSentinel holds the node (its break-fix state label, its quarantine
    annotation), in words; None when it does not."""
    state = (labels or {}).get(markers.NVSENTINEL_STATE)
    if state:
        return "under NVSentinel's fault handling (%s=%s)" % (markers.NVSENTINEL_STATE, state)
    if markers.NVSENTINEL_QUARANTINE in (annotations or {}):
        return "quarantined by NVSentinel (annotation %s)" % markers.NVSENTINEL_QUARANTINE
    return None


def maintenance_reason(obj):
    """A NodeMaintenance in words: whose, which object, its phase (the Ready condition's reason)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    phase = "Pending"
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            phase = cond.get("reason") or phase
    return "under maintenance requested by %s (NodeMaintenance %s/%s, %s)" % (
        spec.get("requestorID") or "?", meta.get("namespace", "?"), meta.get("name", "?"), phase)


def list_node_maintenances(api):
    """Node name -> the NodeMaintenances of other requestors on it, in words. None when
    the maintenance-operator's CRD is not installed (404) or cannot be listed (403: the
    run is then not told of them; the chart's role grants the LIST)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
    found = {}
    path = "/apis/%s/%s/%s" % (markers.NODE_MAINTENANCE_GROUP, markers.NODE_MAINTENANCE_VERSION,
                               markers.NODE_MAINTENANCE_PLURAL)
    try:
        for page in list_pages(api, path, "list NodeMaintenances"):
            for obj in page:
                spec = obj.get("spec") or {}
                node = spec.get("nodeName")
                # NodeWright's own requests (requestor mode) are this product's work in progress:
                # its reservations and node marks count them already.
                if node and spec.get("requestorID") != markers.NODE_MAINTENANCE_REQUESTOR:
                    found.setdefault(node, []).append(maintenance_reason(obj))
    except ClusterError as exc:
        if (exc.details or {}).get("status") in (403, 404):
            return None
        raise
    return {node: sorted(reasons) for node, reasons in found.items()}


def gpu_operator_upgrade(labels):
    """The GPU Operator's driver upgrade state of a node with ``labels`` while the node
    is under that upgrade (queued, cordoned, draining, validating, or failed there),
    else None."""
    state = (labels or {}).get(markers.GPU_OPERATOR_UPGRADE_STATE)
    return None if state is None or state in GPU_UPGRADE_IDLE else state


@dataclass
class NodeInfo(object):
    """What admission needs of one Node."""

    name: str
    labels: Dict[str, str]
    created: Optional[str]
    unschedulable: bool
    cordoned_by: Optional[str]  # the NodeWright resource that cordoned it, "" for NodeWright without one
    statuses: Dict[str, str]    # NodeWright resource -> its status label on the node
    ready: Optional[str] = "True"  # status of the Ready condition; None when the node reports none
    ready_reason: str = ""         # its reason and message when it is not True
    lifecycle_taints: List[str] = field(default_factory=list)  # LIFECYCLE_TAINTS on the node
    maintenance: List[str] = field(default_factory=list)  # other controllers' maintenance, in words

    def in_progress_under(self):
        return sorted(r for r, s in self.statuses.items() if s == markers.STATUS_IN_PROGRESS)

    def unavailable(self):
        """Why the node cannot take anyone's work now, in words; [] when it can. A node
        that reports no Ready condition at all is not known to be down."""
        reasons = []
        if self.ready not in ("True", None):
            reasons.append("NotReady (Ready is %s%s)" % (self.ready, (": " + self.ready_reason)
                                                         if self.ready_reason else ""))
        elif self.lifecycle_taints:
            # The taints say no more than the condition, except while they lag behind it.
            reasons.append("tainted %s%s" % (", ".join(self.lifecycle_taints),
                                             " although Ready again" if self.ready == "True" else ""))
        state = gpu_operator_upgrade(self.labels)
        if state:
            reasons.append("under the GPU Operator's driver upgrade (%s=%s)"
                           % (markers.GPU_OPERATOR_UPGRADE_STATE, state))
        reasons.extend(self.maintenance)
        return reasons

    def recovering(self):
        """Ready again, but the node lifecycle controller has yet to lift its taint (it
        does within seconds): unavailable only for a moment."""
        return self.ready == "True" and bool(self.lifecycle_taints) and not gpu_operator_upgrade(self.labels) \
            and not self.maintenance

    def view(self):
        """The policy engine's view (name, labels, creationTimestamp)."""
        return {"name": self.name, "labels": self.labels, "creationTimestamp": self.created}


def _readiness(obj):
    """``(Ready status or None, its reason and message when not True, lifecycle taints)``."""
    ready, why = None, ""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = str(cond.get("status") or "Unknown")
            if ready != "True":
                why = ", ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
            break
    taints = sorted({t.get("key") for t in (obj.get("spec") or {}).get("taints") or []
                     if isinstance(t, dict) and t.get("key") in LIFECYCLE_TAINTS})
    return ready, why, taints


def node_info(obj, maintenance=None):
    """NodeInfo of a Node object; ``maintenance``: node name -> other requestors'
    NodeMaintenances in words (``list_node_maintenances``)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    prefix = markers.LABEL_STATUS + "-"
    statuses = {key[len(prefix):]: value for key, value in labels.items() if key.startswith(prefix)}
    cordoned_by = None
    raw = annotations.get(markers.ANNOTATION_CORDONED_BY)
    if raw:
        try:
            record = json.loads(raw)
        except ValueError:
            record = {}
        cordoned_by = str(record.get("resource") or "") if isinstance(record, dict) else ""
    ready, ready_reason, taints = _readiness(obj)
    return NodeInfo(name=meta.get("name", ""), labels=dict(labels), created=meta.get("creationTimestamp"),
                    unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
                    cordoned_by=cordoned_by, statuses=statuses, ready=ready, ready_reason=ready_reason,
                    lifecycle_taints=taints,
                    maintenance=[r for r in [nvsentinel(labels, annotations)] if r] +
                    list((maintenance or {}).get(meta.get("name", ""), ())))


# --------------------------------------------------------------------------- the record


@dataclass
class Holder(object):
    """One run's entry in the reservation record."""

    id: str
    renewed: datetime.datetime
    ttl: int = DEFAULT_TTL
    run: str = ""
    nodes: Dict[str, str] = field(default_factory=dict)      # node -> resource
    policies: Dict[str, str] = field(default_factory=dict)   # resource -> policy digest

    def expires(self):
        return self.renewed + datetime.timedelta(seconds=self.ttl)

    def expired(self, now):
        return now >= self.expires()

    def to_dict(self):
        return {"renewTime": _iso(self.renewed), "ttlSeconds": self.ttl, "run": self.run,
                "nodes": dict(sorted(self.nodes.items())), "policies": dict(sorted(self.policies.items()))}

    @classmethod
    def from_dict(cls, holder_id, data):
        """A Holder, or AdmissionError naming what is wrong with the entry."""
        where = "holder %r" % holder_id
        if not isinstance(data, dict):
            raise AdmissionError("%s is not a mapping" % where)
        renewed = _parse_time(data.get("renewTime"))
        if renewed is None:
            raise AdmissionError("%s: renewTime %r is not a time" % (where, data.get("renewTime")))
        ttl = data.get("ttlSeconds")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise AdmissionError("%s: ttlSeconds %r is not a positive whole number" % (where, ttl))
        nodes = data.get("nodes") or {}
        policies = data.get("policies") or {}
        if not isinstance(nodes, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in nodes.items()):
            raise AdmissionError("%s: nodes must map node names to resource names" % where)
        if not isinstance(policies, dict):
            raise AdmissionError("%s: policies must be a mapping" % where)
        return cls(id=holder_id, renewed=renewed, ttl=ttl, run=str(data.get("run") or ""), nodes=dict(nodes),
                   policies={str(k): str(v) for k, v in policies.items()})


def parse_record(text):
    """The holders of a reservation record (the annotation's text); AdmissionError when
    it cannot be read. An absent or empty record has no holders."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AdmissionError("the reservation record is not JSON (%s)" % exc)
    if not isinstance(data, dict) or not isinstance(data.get("holders", {}), dict):
        raise AdmissionError("the reservation record must be a mapping with a 'holders' mapping")
    if data.get("version", RECORD_VERSION) != RECORD_VERSION:
        raise AdmissionError("the reservation record has version %r; this NodeWright reads version %d"
                             % (data.get("version"), RECORD_VERSION),
                             hint="run the same NodeWright version everywhere that rolls out to this cluster")
    return {hid: Holder.from_dict(hid, entry) for hid, entry in data.get("holders", {}).items()}


def render_record(holders):
    return json.dumps({"version": RECORD_VERSION,
                       "holders": {hid: h.to_dict() for hid, h in sorted(holders.items())}},
                      sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- the view


class FleetView(object):
    """The cluster as admission sees it at one moment: every node, and the live
    holders of the reservation record (expired ones are listed apart)."""

    def __init__(self, nodes, holders=None, now=None, expired=()):
        self.nodes = {n.name: n for n in nodes}
        self.holders = dict(holders or {})
        self.expired = list(expired)
        self.now = now or _utcnow()
        self._reserved = {}
        for hid, holder in self.holders.items():
            for name, resource in holder.nodes.items():
                self._reserved[name] = (hid, resource)

    @property
    def size(self):
        return len(self.nodes)

    def reserved_by(self, name):
        """``(holder id, resource)`` of the live reservation on node ``name``, or None."""
        return self._reserved.get(name)

    def unavailable(self, name, watched=None):
        """Why node ``name`` is unavailable (``NodeInfo.unavailable``); [] when it is not,
        or when ``watched`` (the nodes whose unavailability counts: the run's targets)
        is given and does not hold it. None: every node counts."""
        node = self.nodes.get(name)
        if node is None or (watched is not None and name not in watched):
            return []
        return node.unavailable()

    def unavailable_nodes(self, watched=None):
        """name -> why, in words, of every unavailable node (of ``watched``)."""
        found = {}
        for name in sorted(self.nodes):
            reasons = self.unavailable(name, watched)
            if reasons:
                found[name] = "; ".join(reasons)
        return found

    def recovering(self, watched=None):
        """Unavailable nodes (of ``watched``) that are Ready again and wait only for the
        node lifecycle controller to lift its taint."""
        return sorted(n for n, node in self.nodes.items()
                      if node.recovering() and (watched is None or n in watched))

    def disrupted(self, name, watched=None):
        node = self.nodes.get(name)
        return self.reserved_by(name) is not None or (
            node is not None and (node.unschedulable or bool(node.in_progress_under())
                                  or bool(self.unavailable(name, watched))))

    def split(self, holder_id, resource, pickable, watched=None):
        """For a wave of ``resource`` by holder ``holder_id``, the disrupted nodes as
        ``(busy, resumable)``.

        ``busy``: name -> labels of disrupted nodes the wave may not take (reserved by
        another live run, in progress under another resource, cordoned by another
        NodeWright resource, unavailable, or not among ``pickable``). ``resumable``:
        disrupted nodes among ``pickable`` the wave may take (this resource's own nodes
        left in progress or erroring by an earlier run, or cordoned by someone outside
        NodeWright): they count against every limit whether the wave takes them or not.
        An unavailable node (of ``watched``, see ``unavailable``) is resumable only when
        this resource left it in progress (it was rebooting when an earlier run
        stopped); otherwise it waits until it is healthy. Nodes this holder has reserved
        itself are neither."""
        busy, resumable = {}, []
        for name, node in self.nodes.items():
            owner = self.reserved_by(name)
            if owner is not None and owner[0] == holder_id:
                continue
            if not self.disrupted(name, watched):
                continue
            others = [r for r in node.in_progress_under() if r != resource]
            cordoned_by_other_resource = node.unschedulable and node.cordoned_by not in (None, resource)
            down = bool(self.unavailable(name, watched)) and \
                node.statuses.get(resource) != markers.STATUS_IN_PROGRESS
            if name in pickable and owner is None and not others and not cordoned_by_other_resource and not down:
                resumable.append(name)
            else:
                busy[name] = node.labels
        return busy, resumable

    def holder_of_resource(self, resource, exclude):
        """Live holders other than ``exclude`` that have nodes of ``resource`` reserved
        or declared its policy: ``[(holder id, digest)]``."""
        found = []
        for hid, holder in self.holders.items():
            if hid == exclude:
                continue
            if resource in holder.policies:
                found.append((hid, holder.policies[resource]))
        return found


def list_node_infos(api, what="list nodes for admission"):
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
    maintenance = list_node_maintenances(api)
    infos = []
    for page in list_pages(api, "/api/v1/nodes", what):
        infos.extend(node_info(obj, maintenance) for obj in page)
    return infos


# --------------------------------------------------------------------------- the lock


class ReservationRecord(object):
    """Reads and writes the reservation record of one holder (this run).

    All writes are compare-and-swap on the Lease's ``resourceVersion``; ``update()``
    retries a conflicting write after reading the record again."""

    def __init__(self, api, holder_id=None, namespace=None, name=LOCK_NAME, ttl=DEFAULT_TTL, run=""):
        self.api = api
        self.holder_id = holder_id or new_holder_id()
        self.namespace = namespace or os.environ.get(LOCK_NAMESPACE_ENV) or DEFAULT_LOCK_NAMESPACE
        self.name = name
        self.ttl = max(_MIN_TTL, int(ttl or DEFAULT_TTL))
        self.run = run or "%s pid %d" % (socket.gethostname(), os.getpid())
        self.conflicts = 0

    @property
    def where(self):
        return "Lease %s/%s" % (self.namespace, self.name)

    def _path(self, with_name=True):
        base = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.namespace
        return base + ("/" + self.name if with_name else "")

    def _explain(self, exc, verb):
        status = exc.details.get("status")
        if status == 403:
            return AdmissionError("%s the reservation record %s: forbidden" % (verb, self.where),
                                  hint="grant get, create and update on leases named %s in namespace %s "
                                       "(the Helm chart's roles do)" % (self.name, self.namespace))
        return exc

    def read(self):
        """``(lease object or None, holders, server time)``; AdmissionError when the
        record cannot be read or parsed."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import request_json, server_time
        try:
            obj, headers = request_json(self.api, "GET", self._path(), "read the reservation record %s" % self.where)
        except ClusterError as exc:
            if exc.details.get("status") == 404:
                # The Date of a 404 is not at hand; the local clock is close enough to
                # stamp the first entry, and every later write uses the server's.
                return None, {}, _utcnow()
            raise self._explain(exc, "cannot read")
        now = server_time(headers) or _utcnow()
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVATIONS)
        try:
            holders = parse_record(text)
        except AdmissionError as exc:
            raise AdmissionError("%s: %s" % (self.where, exc.message),
                                 hint="no node is admitted while the record cannot be read; delete it to start "
                                      "afresh (kubectl -n %s delete lease %s) once no rollout is running"
                                      % (self.namespace, self.name))
        return obj, holders, now

    def write(self, obj, holders, now):
        """Write ``holders`` (compare-and-swap). True when written, False on a conflict."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import request_json
        text = render_record(holders)
        micro = now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        spec = {"holderIdentity": self.holder_id, "leaseDurationSeconds": self.ttl, "renewTime": micro}
        try:
            if obj is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace,
                                     "labels": {"app.kubernetes.io/managed-by": "nodewright"},
                                     "annotations": {ANNOTATION_RESERVATIONS: text}},
                        "spec": spec}
                request_json(self.api, "POST", self._path(False), "create the reservation record %s" % self.where,
                             body=body)
            else:
                body = dict(obj)
                meta = dict(body.get("metadata") or {})
                meta["annotations"] = dict(meta.get("annotations") or {}, **{ANNOTATION_RESERVATIONS: text})
                body["metadata"] = meta
                body["spec"] = dict(body.get("spec") or {}, **spec)
                request_json(self.api, "PUT", self._path(), "update the reservation record %s" % self.where,
                             body=body)
        except ClusterError as exc:
            if exc.details.get("status") == 409:
                self.conflicts += 1
                return False
            raise self._explain(exc, "cannot write")
        return True

    def live(self, holders, now):
        """``(live holders, expired holder ids)``."""
        live = {hid: h for hid, h in holders.items() if not h.expired(now)}
        return live, sorted(set(holders) - set(live))

    def update(self, change):
        """Read the record, apply ``change(live_holders, now)`` (which returns the new
        holders, or None for no write) and write it; retried on conflicts."""
        for attempt in range(_MAX_ATTEMPTS):
            obj, holders, now = self.read()
            live, expired = self.live(holders, now)
            new = change(dict(live), now)
            if new is None:
                return False
            if self.write(obj, new, now):
                return True
            time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))
        raise AdmissionError("%s: %d writes in a row lost to other runs" % (self.where, _MAX_ATTEMPTS),
                             hint="many runs are admitting at the same moment; rerun")

    def entry(self, holders, now):
        mine = holders.get(self.holder_id)
        if mine is None:
            mine = Holder(id=self.holder_id, renewed=now, ttl=self.ttl, run=self.run)
        mine.renewed = now
        mine.ttl = self.ttl
        return mine

    def renew(self):
        """Push this holder's expiry forward (no write when it holds nothing)."""
        def change(holders, now):
            if self.holder_id not in holders:
                return None
            self.entry(holders, now)
            return holders
        return self.update(change)

    def release(self, names=None):
        """Remove ``names`` (all of this holder's nodes when None) from the record."""
        def change(holders, now):
            mine = holders.get(self.holder_id)
            if mine is None:
                return None
            if names is None:
                holders.pop(self.holder_id)
            else:
                for name in names:
                    mine.nodes.pop(name, None)
                if not mine.nodes:
                    holders.pop(self.holder_id)
                else:
                    self.entry(holders, now)
            return holders
        return self.update(change)


class Renewer(object):
    """Renews a holder's reservations every third of their lifetime while a wave runs.

    ``threaded``: renew from a thread of its own. A process that forks workers while
    the wave runs (the Ansible controller) uses ``tick()`` from its main loop instead,
    so that no fork happens while a renewal holds a lock."""

    def __init__(self, record, interval=None, warn=None, threaded=True, clock=time.monotonic):
        self.record = record
        self.interval = interval or max(1.0, record.ttl / 3.0)
        self.warn = warn or (lambda text: None)
        self.threaded = threaded
        self.clock = clock
        self._stop = threading.Event()
        self._thread = None
        self._due = None

    def _renew(self):
        try:
            self.record.renew()
        except NodeWrightError as exc:  # the next tick tries again; the wave goes on
            self.warn("could not renew the node reservations in %s: %s" % (self.record.where, exc))

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._renew()

    def tick(self):
        """Renew when due (for callers without the thread)."""
        if self._due is not None and self.clock() >= self._due:
            self._renew()
            self._due = self.clock() + self.interval

    def __enter__(self):
        self._due = self.clock() + self.interval
        if self.threaded:
            self._thread = threading.Thread(target=self._loop, name="nodewright-renew", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._due = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return False
