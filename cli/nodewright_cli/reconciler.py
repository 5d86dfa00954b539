# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright reconcile``: watch Nodes, NodeWright and DeploymentPolicy resources and
run the rollout when there is new or changed work.

* Three watch threads (list, then watch from the list's resourceVersion; a 410
  relists) feed one queue; the main thread owns the caches and decides.
* Changes are debounced: a pass starts once the cluster has been quiet for
  ``debounce`` seconds (at the latest ``max_debounce`` after the first change).
* A pass describes every resource (``desired_state``), surfaces what cannot run
  (a missing policy, a malformed node state) as resource status and node
  conditions, opens runtime-required gates that are ready, and starts
  ``playbooks/rollout.yml`` through ansible-runner when some node has work. One run
  at a time, in a worker thread, so that new nodes are tainted
  (``autoTaintNewNodes``) while a run is going on.
* The same work (same resources, generations and nodes) after a run waits
  ``retry_interval`` before it is tried again, so a failing node is not hammered.
* After a restart nothing is remembered but what is on the nodes and resources:
  the first pass sees the recorded state and the rollout resumes from it.
* SIGTERM/SIGINT: no new run starts; a run in progress gets ``stop_timeout``
  seconds to finish, then is abandoned (ansible-runner kills it). Abandoning is safe:
  every step of the safe sequence records itself on the node first, so the next
  reconciler resumes it (NodeWright's own cordon is recognised, finished package
  steps are not repeated, a pending reboot is verified by boot id).
* Deletion: a resource with a package whose ``uninstall.enabled`` is true gets the
  finalizer ``nodewright.io/uninstall``; once it is deleted, its packages are
  uninstalled from the nodes that record them (``playbooks/uninstall.yml``, the
  safe sequence in waves under its policy) and then the finalizer is removed
  (``fleet/deletion.py``). A failed uninstall leaves the resource there with the
  reason (condition ``Deleting``) and is retried; it holds nothing else up.
* Reboots: a runtimeRequired node that rebooted outside NodeWright, whose resource
  re-applies its packages then (``reapplyOnReboot``), gets the runtime-required
  taint back until they are complete again.
* Drift: every ``drift_interval`` seconds, when idle, the check stages of completed
  nodes run again (``playbooks/drift.yml`` of this package); drifted nodes get the
  ``nodewright.io/Drift`` condition, an Event and a metric, and with
  ``drift_reapply`` the drifted packages are marked for the next rollout.
* A new boot: where a package's settings do not survive a reboot (NVIDIA tuning on
  Container-Optimized OS, whose ``/etc`` is wiped at boot), a node whose boot ID is no
  longer the one its resource's status recorded (``nodeBootIds``) gets the drift check
  at once, with reapply, and the same pass applies the package again (it needs no
  interrupt there, so the node is not drained).
"""

from __future__ import annotations

import datetime
import logging
import os
import queue
import signal
import threading
import time

from nodewright_cli import collection, runner, status
from nodewright_cli.lifecycle import LifecycleMixin, record_uninstall_outcome
from nodewright_cli.cluster import NODEWRIGHTS, POLICIES, GROUP, VERSION, NODES

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import drift
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_metrics
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.desired_state import targeted_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import compute_status
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import parse_label_selector
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import reapplies_every_boot

LOG = logging.getLogger("nodewright.reconcile")

KINDS = ("nodes", "nodewrights", "deploymentpolicies")
PATHS = {"nodes": NODES, "nodewrights": NODEWRIGHTS, "deploymentpolicies": POLICIES}
OVERRIDES = ("blocked", "paused", "disabled")


class Options(object):
    """Settings of a reconciler (the CLI fills them from flags and the chart's environment)."""

    def __init__(self, **kwargs):
        self.debounce = 5.0
        self.max_debounce = 30.0
        self.resync = 600.0
        self.retry_interval = 600.0
        self.drift_interval = 3600.0
        self.drift_reapply = False
        self.new_node_window = 600.0
        self.stop_timeout = 20.0
        self.watch_timeout = 300
        self.metrics_port = 0
        self.metrics_address = "0.0.0.0"
        self.inventory = None
        self.connection = "k8s"
        self.workdir = None
        self.taint_key = markers.TAINT_RUNTIME_REQUIRED
        self.package_dirs = []
        self.extravars = {}
        self.resource_selector = None
        for key, value in kwargs.items():
            if not hasattr(self, key):
                raise TypeError("unknown reconciler option %s" % key)
            setattr(self, key, value)


def _name(obj):
    return ((obj or {}).get("metadata") or {}).get("name")


def _ready(node):
    return node_ops.is_ready(node)


def node_fingerprint(node):
    """What of a node matters for the work: labels, NodeWright's annotations, taints,
    cordon and readiness - not the status heartbeats the kubelet writes."""
    meta = node.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(markers.PREFIX)}
    spec = node.get("spec") or {}
    return (tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted(annotations.items())),
            repr(spec.get("taints")), bool(spec.get("unschedulable")), _ready(node))


def object_fingerprint(obj):
    """A NodeWright or DeploymentPolicy changes its work through its spec (generation) and
    its annotations (pause, disable); status writes do not count."""
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), tuple(sorted((meta.get("annotations") or {}).items())),
            meta.get("deletionTimestamp"))


def relevant_change(kind, old, new):
    if old is None or new is None:
        return True
    if kind == "nodes":
        return node_fingerprint(old) != node_fingerprint(new)
    return object_fingerprint(old) != object_fingerprint(new)


def work_of(view):
    """``{resource: [nodes]}`` with work now: not paused, not disabled, minus the nodes
    whose state annotation is malformed (they are reported, not touched)."""
    malformed = set(view["malformed"])
    work = {}
    for _resource, described in view["rollouts"]:
        if described["paused"] or described["disabled"]:
            continue
        nodes = [n for n in described["work"] if n not in malformed]
        if nodes:
            work[described["name"]] = nodes
    return work


def work_fingerprint(view, work, uninstalls=None):
    generations = {d["name"]: d.get("generation") for _r, d in view["rollouts"]}
    return tuple(sorted((name, generations.get(name), tuple(sorted(nodes))) for name, nodes in work.items())) + \
        tuple(sorted(("uninstall", name, tuple(u["nodes"])) for name, u in (uninstalls or {}).items()))


def boot_id(node):
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""


def rebooted_since_applied(view, nodes):
    """``{node: [resource]}``: nodes that booted again since their resource's status
    recorded them (``status.nodeBootIds``), for resources with a package whose OS
    forgets its settings at every boot, where the node is complete (its record says
    the settings are there, the host no longer has them)."""
    by_name = {_name(n): n for n in nodes}
    out = {}
    for resource, described in view["rollouts"]:
        if described["paused"] or described["disabled"]:
            continue
        if not any(reapplies_every_boot(spec) for spec in described.get("packages") or ()):
            continue
        recorded = (resource.get("status") or {}).get("nodeBootIds") or {}
        for name in described["targets"]:
            node = by_name.get(name)
            before, now = recorded.get(name), boot_id(node or {})
            if not node or not before or not now or before == now:
                continue
            if node_ops.read_state(node, described["name"]).get("status") == markers.STATUS_COMPLETE:
                out.setdefault(name, []).append(described["name"])
    return out


def rollout_limit(malformed):
    """An ansible --limit that keeps nodes with a malformed state out of the run."""
    if not malformed:
        return None
    return ":".join(["localhost", "all"] + ["!%s" % n for n in sorted(malformed)])


class Reconciler(LifecycleMixin):
    def __init__(self, cluster, options, run_playbook=runner.run_playbook):
        self.cluster = cluster
        self.opts = options
        self.run_playbook = run_playbook
        self.workdir = options.workdir or os.path.join(os.environ.get("HOME", "/tmp"), ".nodewright", "reconcile")
        self.inventory = options.inventory or runner.default_inventory(self.workdir, options.connection)
        self.package_dirs = list(options.package_dirs) + collection.shipped_package_dirs()
        self.selector = parse_label_selector(options.resource_selector, "--resource-selector") \
            if options.resource_selector else None
        self.queue = queue.Queue()
        self.stopping = threading.Event()
        self.stop_requested_at = None
        self.caches = {k: {} for k in KINDS}
        self.synced = set()
        self.pending_new = set()
        self.dirty_since = None
        self.last_change = None
        self.dirty_reasons = []
        self.retry_at = None
        self.last_rollout = None
        self.worker = None
        self.reported = {}
        self.permission_ok = False
        self.run_metrics = report_metrics.add_report_metrics(nw_metrics.MetricSet(), None, "rollout")
        self.drift_counts = {}
        self.metrics_text = ""
        self.passes = 0
        self.next_drift = time.monotonic() + options.drift_interval if options.drift_interval > 0 else None
        self.boot_checked = {}

    # --------------------------------------------------------------------- signals
    def request_stop(self, signum=None, frame=None):
        if not self.stopping.is_set():
            self.stop_requested_at = time.monotonic()
            running = self.worker is not None and self.worker.is_alive()
            LOG.info("stopping (%s)%s", signal.Signals(signum).name if signum else "requested",
                     "; the run in progress gets %ss to finish, then is abandoned (it resumes on the next start)"
                     % self.opts.stop_timeout if running else "")
        self.stopping.set()
        self.queue.put(("wake",))

    def _cancel_run(self):
        return self.stopping.is_set() and time.monotonic() - self.stop_requested_at >= self.opts.stop_timeout

    # --------------------------------------------------------------------- permissions
    def check_permissions(self):
        """True when every permission is there; otherwise log which are missing."""
        try:
            missing = self.cluster.missing_permissions()
        except ClusterError as exc:
            LOG.error("cannot check permissions at %s: %s", self.cluster.target, exc)
            self.permission_ok = False
            return False
        if missing:
            LOG.error("nodewright reconcile lacks permission(s) at %s: %s. Nothing is changed until they are "
                      "granted (the ClusterRole of deploy/helm/nodewright has them); checking again in %ds",
                      self.cluster.target, "; ".join("%s (to %s)" % m for m in missing), self.opts.resync)
        self.permission_ok = not missing
        return not missing

    # --------------------------------------------------------------------- watches
    def _watch_target(self, kind):
        if kind == "nodes":
            return self.cluster.core.list_node, ()
        return self.cluster.custom.list_cluster_custom_object, (GROUP, VERSION, kind)

    def watch(self, kind):
        """List, then watch from the list's resourceVersion; relist after 410 Gone."""
        from kubernetes import watch as k8s_watch
        from kubernetes.client.rest import ApiException
        backoff = 1.0
        fn, args = self._watch_target(kind)
        while not self.stopping.is_set():
            try:
                listing = self.cluster.list_raw(PATHS[kind], "list %s" % kind)
                version = (listing.get("metadata") or {}).get("resourceVersion")
                self.queue.put(("sync", kind, listing.get("items") or []))
                while not self.stopping.is_set():
                    stream = k8s_watch.Watch()
                    for event in stream.stream(fn, *args, resource_version=version,
                                               timeout_seconds=int(self.opts.watch_timeout),
                                               allow_watch_bookmarks=True):
                        raw = event.get("raw_object") or {}
                        if event.get("type") == "ERROR":
                            if raw.get("code") == 410:
                                raise _Expired()
                            raise ClusterError("watch %s: %s" % (kind, raw.get("message")), status=raw.get("code"))
                        version = (raw.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.queue.put(("event", kind, event["type"], raw))
                        if self.stopping.is_set():
                            stream.stop()
                            break
                backoff = 1.0
            except _Expired:
                continue
            except ApiException as exc:
                if exc.status == 410:
                    continue
                self.queue.put(("watch-error", kind, "HTTP %s: %s" % (exc.status, exc.reason), exc.status))
            except ClusterError as exc:
                self.queue.put(("watch-error", kind, str(exc), (exc.details or {}).get("status")))
            except Exception as exc:  # noqa: BLE001 - a broken connection: back off and relist
                self.queue.put(("watch-error", kind, str(exc)[:300], None))
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, 60.0)

    # --------------------------------------------------------------------- events
    def _dirty(self, why):
        now = time.monotonic()
        if self.dirty_since is None:
            self.dirty_since = now
            self.dirty_reasons = []
        self.last_change = now
        if len(self.dirty_reasons) < 20:
            self.dirty_reasons.append(why)

    def handle(self, message):
        kind = message[0]
        if kind == "sync":
            self._sync(message[1], message[2])
        elif kind == "event":
            self._event(message[1], message[2], message[3])
        elif kind == "watch-error":
            what, text, code = message[1], message[2], message[3]
            if code == 403:
                LOG.error("watching %s is forbidden at %s (%s): grant list and watch on %s (see the ClusterRole of "
                          "deploy/helm/nodewright); nothing is changed meanwhile", what, self.cluster.target,
                          text, what)
                self.permission_ok = False
            else:
                LOG.warning("watch of %s interrupted: %s; listing again", what, text)
        elif kind == "run-done":
            self._run_done(message[1], message[2])

    def _sync(self, kind, items):
        cache = self.caches[kind]
        fresh = {_name(o): o for o in items if _name(o)}
        first = kind not in self.synced
        for name, obj in fresh.items():
            old = cache.get(name)
            if kind == "nodes" and old is None and not first:
                self._node_added(obj)
            if relevant_change(kind, old, obj):
                self._dirty("%s %s" % (kind, name))
        for name in set(cache) - set(fresh):
            self._dirty("%s %s deleted" % (kind, name))
        self.caches[kind] = fresh
        self.synced.add(kind)
        if first:
            self._dirty("first list of %s" % kind)
        if kind == "nodewrights":
            self._taint_pending()

    def _event(self, kind, etype, obj):
        name = _name(obj)
        cache = self.caches[kind]
        if etype == "DELETED":
            if cache.pop(name, None) is not None:
                self._dirty("%s %s deleted" % (kind, name))
            return
        old = cache.get(name)
        cache[name] = obj
        if kind == "nodes" and etype == "ADDED" and old is None:
            self._node_added(obj)
        if relevant_change(kind, old, obj):
            self._dirty("%s %s %s" % (kind, name, etype.lower()))

    def managed(self):
        """The NodeWright resources this reconciler rolls out: all, or those whose labels
        match ``--resource-selector`` (one reconciler per team or per fleet)."""
        resources = list(self.caches["nodewrights"].values())
        if self.selector is None:
            return resources
        return [r for r in resources if self.selector.matches((r.get("metadata") or {}).get("labels") or {})]

    # --------------------------------------------------------------------- new nodes
    def _node_added(self, node):
        if "nodewrights" not in self.synced:
            self.pending_new.add(_name(node))
            return
        self._auto_taint(node)

    def _taint_pending(self):
        for name in sorted(self.pending_new):
            node = self.caches["nodes"].get(name)
            if node is not None:
                self._auto_taint(node)
        self.pending_new.clear()

    def _auto_taint(self, node):
        if not self.permission_ok:
            return
        ok, why = gating.should_auto_taint(node, self.managed(),
                                           datetime.datetime.now(datetime.timezone.utc),
                                           self.opts.new_node_window, self.opts.taint_key)
        if not ok:
            LOG.debug("not tainting: %s", why)
            return
        try:
            gating.add_taint(self.cluster.core, _name(node), self.opts.taint_key, reason=why)
            LOG.info("tainted %s with %s: %s", _name(node), self.opts.taint_key, why)
        except NodeWrightError as exc:
            LOG.error("could not taint new node %s: %s", _name(node), exc)

    # --------------------------------------------------------------------- a pass
    def due(self, now=None):
        now = time.monotonic() if now is None else now
        if self.dirty_since is None or not self.permission_ok or set(KINDS) - self.synced:
            return False
        return now - self.last_change >= self.opts.debounce or now - self.dirty_since >= self.opts.max_debounce

    def reconcile(self, run_inline=False):
        """One pass. Returns the view it decided on."""
        self.passes += 1
        reasons, self.dirty_since = self.dirty_reasons, None
        nodes = list(self.caches["nodes"].values())
        managed = self.managed()
        view = status.fleet_view(managed, nodes, self.caches["deploymentpolicies"], self.package_dirs)
        if self._reapply_after_boot(view, nodes):
            self._refresh_caches()
            nodes = list(self.caches["nodes"].values())
            managed = self.managed()
            view = status.fleet_view(managed, nodes, self.caches["deploymentpolicies"], self.package_dirs)
        self._surface_resources(view, nodes)
        self._surface_malformed(view["malformed"], nodes)
        uninstalls = self._handle_deletions(view, nodes)
        work = work_of(view)
        self._retaint_rebooted(view, work)
        busy = {n for names in work.values() for n in names} | set(view["malformed"]) | \
            {n for u in uninstalls.values() for n in u["nodes"]}
        if not (self.worker is not None and self.worker.is_alive()):
            self._open_ready_gates(nodes, managed, busy)  # the run in progress opens its own nodes' gates
        self._update_metrics(view, nodes)
        if work or uninstalls:
            self._maybe_run(view, work, reasons, run_inline, uninstalls)
        else:
            LOG.debug("pass %d: no work (%s)", self.passes, ", ".join(reasons[:5]))
        return view

    def _report_once(self, key, text, level=logging.INFO):
        if self.reported.get(key) != text:
            self.reported[key] = text
            LOG.log(level, "%s", text)

    def _surface_resources(self, view, nodes):
        """Resources that cannot roll out say why in their status: blocked (a missing
        policy, an invalid spec), paused, disabled. A resource that was so and no
        longer is gets its derived status back."""
        wanted = []
        for resource, reason in view["blocked"]:
            wanted.append((resource, "blocked", reason, None))
            self._report_once(("blocked", _name(resource)), "NodeWright %s is blocked: %s" % (_name(resource), reason),
                              logging.WARNING)
        for resource, described in view["rollouts"]:
            self.reported.pop(("blocked", described["name"]), None)
            if described["paused"]:
                wanted.append((resource, "paused", "paused (annotation %s=true): no node starts"
                               % markers.ANNOTATION_PAUSE, described))
            elif described["disabled"]:
                wanted.append((resource, "disabled", "disabled (annotation %s=true): skipped"
                               % markers.ANNOTATION_DISABLE, described))
            elif ((resource.get("status") or {}).get("status")) in OVERRIDES:
                wanted.append((resource, None, None, described))
        for resource, override, message, described in wanted:
            self._write_status(resource, override, message, nodes, described)

    def _write_status(self, resource, override, message, nodes, described):
        name = _name(resource)
        current = resource.get("status") or {}
        generation = (resource.get("metadata") or {}).get("generation")
        if override and current.get("status") == override and current.get("message") == message \
                and current.get("observedGeneration") == generation:
            return
        if described:
            targets, packages = described["targets"], described["packages"]
        else:
            try:
                targets = targeted_nodes(resource, nodes)
            except NodeWrightError:
                targets = []
            packages = [{"name": k, "version": (v or {}).get("version", "?")} for k, v in
                        sorted((((resource.get("spec") or {}).get("packages")) or {}).items())
                        if isinstance(v, dict)]
        new = compute_status(name, nodes, targets, packages, override=override, message=message,
                             generation=generation, current=current)
        before = {c.get("type"): c for c in current.get("conditions") or []}
        for cond in new["conditions"]:
            old = before.get(cond["type"])
            if old and old.get("status") == cond["status"]:
                cond["lastTransitionTime"] = old.get("lastTransitionTime", cond["lastTransitionTime"])
        try:
            self.cluster.patch_nodewright_status(name, new)
            LOG.info("NodeWright %s status: %s%s", name, new["status"], (" (%s)" % message) if message else "")
        except NodeWrightError as exc:
            LOG.error("could not write the status of NodeWright %s: %s", name, exc)

    def _surface_malformed(self, malformed, nodes):
        """A hand-edited, malformed state annotation: the node gets the Erroring condition
        and one Warning Event, and the rollout leaves it alone until it is fixed or reset."""
        by_name = {_name(n): n for n in nodes}
        for node_name, errors in sorted(malformed.items()):
            node = by_name.get(node_name)
            text = "; ".join("%s: %s" % (r, e) for r, e in sorted(errors.items()))
            message = ("NodeWright leaves this node alone until its state is fixed or reset "
                       "(nodewright reset %s --resource <name>): %s" % (node_name, text))
            patch = node_ops.condition_patch(node, markers.CONDITION_ERRORING, "True", markers.REASON_MALFORMED_STATE,
                                             message)
            if patch is None:
                continue
            try:
                self.cluster.patch_node_status(node_name, patch)
                self.cluster.event(node_name, markers.EVENT_FAILED, message, "Warning")
                LOG.warning("node %s: %s", node_name, message)
            except NodeWrightError as exc:
                LOG.error("could not mark node %s: %s", node_name, exc)

    def _open_ready_gates(self, nodes, managed, busy):
        """Tainted nodes that the rollout will not visit: open the gate when it is ready
        (e.g. a node that was re-tainted, or finished before it was tainted), or say
        why it stays closed. Only nodes a managed runtimeRequired resource targets; the
        decision weighs every resource."""
        resources = list(self.caches["nodewrights"].values())
        for node in nodes:
            name = _name(node)
            if name in busy or not gating.has_taint(node, self.opts.taint_key) \
                    or not gating.gating_resources(managed, node):
                continue
            decision = gating.decide(node, resources, self.opts.taint_key)
            if decision["action"] != gating.OPEN and not gating.gate_condition(node, decision):
                continue
            try:
                done = gating.enforce(self.cluster.core, name, resources, self.opts.taint_key)
                if done["changed"]:
                    LOG.info("node %s: %s", name, done["msg"])
            except NodeWrightError as exc:
                LOG.error("runtime gate of node %s: %s", name, exc)

    # --------------------------------------------------------------------- runs
    def _maybe_run(self, view, work, reasons, run_inline, uninstalls=None):
        uninstalls = uninstalls or {}
        if self.worker is not None and self.worker.is_alive():
            return  # the run's end marks the cluster dirty again
        if self.stopping.is_set():
            return
        fingerprint = work_fingerprint(view, work, uninstalls)
        last = self.last_rollout
        if last and last["fingerprint"] == fingerprint:
            wait = last["finished"] + self.opts.retry_interval - time.monotonic()
            if wait > 0:
                self.retry_at = time.monotonic() + wait
                self._report_once("retry", "the same work as the last run (%s): trying again in %ds"
                                  % (last["status"], wait))
                return
        summary = "; ".join(["%s: %s" % (r, ", ".join(n)) for r, n in sorted(work.items())] +
                            ["uninstall of deleted %s: %s" % (r, ", ".join(u["nodes"]))
                             for r, u in sorted(uninstalls.items())])
        LOG.info("starting a rollout for %s (after %s)", summary, ", ".join(reasons[:5]) or "a resync")
        limit = rollout_limit(view["malformed"])
        extravars = dict(self.opts.extravars, nodewright_taint_key=self.opts.taint_key)
        # Every resource in one run (a node gets its resources in one maintenance), or,
        # when this reconciler manages a selection, each of its resources by name.
        names = ([None] if self.selector is None else
                 [d["name"] for _r, d in view["rollouts"] if d["name"] in work]) if work else []

        def job():
            results = []
            for name, decision in sorted(uninstalls.items()):
                if self.stopping.is_set():
                    break
                try:
                    result = self.run_playbook(
                        collection.playbook("uninstall.yml"), "uninstall", self.inventory, self.workdir,
                        extravars=dict(extravars, nodewright_resource=name, nodewright_uninstall_nodes=decision["nodes"],
                                       nodewright_uninstall_packages=decision["packages"]),
                        limit=limit, cancel=self._cancel_run)
                    result.resource = name
                    results.append(result)
                except Exception as exc:  # noqa: BLE001 - reported; the reconciler keeps going
                    results.append(exc)
            for name in names:
                if self.stopping.is_set():
                    break
                try:
                    results.append(self.run_playbook(
                        collection.playbook("rollout.yml"), "rollout", self.inventory, self.workdir,
                        extravars=dict(extravars, nodewright_resource=name) if name else extravars, limit=limit,
                        cancel=self._cancel_run))
                except Exception as exc:  # noqa: BLE001 - reported; the reconciler keeps going
                    results.append(exc)
            self.queue.put(("run-done", fingerprint, results))

        if run_inline:
            job()
            self.handle(self.queue.get())
            return
        self.worker = threading.Thread(target=job, name="nodewright-rollout", daemon=True)
        self.worker.start()

    def _run_done(self, fingerprint, results):
        finished = time.monotonic()
        state, duration, outcomes = "successful", 0.0, {}
        for result in results:
            if isinstance(result, Exception):
                LOG.error("the rollout could not run: %s", result)
                state = "error"
                continue
            level = logging.INFO if result.success else logging.WARNING
            LOG.log(level, "%s", result.summary())
            for host, text in sorted(result.messages.items()):
                LOG.warning("  %s: %s", host, text)
            if not result.success and state == "successful":
                state = result.status
            if getattr(result, "resource", None) and result.kind == "uninstall":
                record_uninstall_outcome(self.cluster.core, result.resource, result, self.reported)
            duration += result.duration
            for outcome, count in result.outcomes().items():
                outcomes[outcome] = outcomes.get(outcome, 0) + count
            self.run_metrics.inc("nodewright_runs_total", kind=result.kind, result=result.status)
            report_metrics.add_report_metrics(self.run_metrics, result.report, result.kind)
        if any(isinstance(r, Exception) for r in results):
            self.run_metrics.inc("nodewright_runs_total", kind="rollout", result="error")
        nw_metrics.run_metrics(self.run_metrics, "rollout", duration, state == "successful", time.time(), outcomes)
        self.last_rollout = {"fingerprint": fingerprint, "finished": finished, "status": state}
        self.reported.pop("retry", None)
        self._dirty("the rollout finished")

    # --------------------------------------------------------------------- a new boot
    def _reapply_after_boot(self, view, nodes):
        """Nodes that lost their settings with a reboot (``rebooted_since_applied``) get
        the drift check with reapply; True when some package was marked. Each boot of a
        node is checked once."""
        if self.worker is not None and self.worker.is_alive():
            return False
        due = {}
        for name, resources in rebooted_since_applied(view, nodes).items():
            boot = boot_id(next(n for n in nodes if _name(n) == name))
            if self.boot_checked.get(name) != boot:
                self.boot_checked[name] = boot
                due[name] = resources
        if not due:
            return False
        LOG.info("booted again since their settings were applied (the OS forgets them at boot): %s",
                 ", ".join("%s (%s)" % (n, ", ".join(r)) for n, r in sorted(due.items())))
        found = self.drift_check(targets=due, reapply=True)
        return any(items for per_resource in found.values() for items in per_resource.values())

    # --------------------------------------------------------------------- drift
    def drift_check(self, targets=None, reapply=None):
        """Run the check stages on completed nodes (or ``targets``, ``{node:
        [resource]}``); record Drift conditions, Events and metrics; with ``reapply``
        (default: ``drift_reapply``) mark drifted packages for the next rollout."""
        reapply = self.opts.drift_reapply if reapply is None else reapply
        nodes = list(self.caches["nodes"].values())
        by_name = {_name(n): n for n in nodes}
        full = targets is None
        if full:
            targets = drift.check_targets(nodes, self.managed())
        targets = {n: r for n, r in targets.items() if n in by_name
                   and not gating.has_taint(by_name[n], self.opts.taint_key)
                   and node_ops.cordon_state(by_name[n]) == "uncordoned"}
        if not targets:
            LOG.debug("drift check: no completed node to check")
            return {}
        LOG.info("drift check of %d node(s)", len(targets))
        try:
            result = self.run_playbook(collection.own_playbook("drift.yml"), "drift", self.inventory, self.workdir,
                                       extravars={"nodewright_drift_targets": targets,
                                                  "nodewright_drift_reapply": bool(reapply)},
                                       limit=",".join(sorted(targets)), cancel=self._cancel_run,
                                       keep_events=runner.is_drift_result)
        except Exception as exc:  # noqa: BLE001
            LOG.error("the drift check could not run: %s", exc)
            self.run_metrics.inc("nodewright_runs_total", kind="drift", result="error")
            return {}
        found, errors = runner.drift_results(result.events)
        if not result.success and not found:
            LOG.error("the drift check %s (rc %s); its output is in %s", result.status, result.rc, result.artifacts)
        nw_metrics.run_metrics(self.run_metrics, "drift", result.duration, result.success and not errors,
                               result.finished, result.outcomes())
        self.run_metrics.inc("nodewright_runs_total", kind="drift", result=result.status)
        for node, text in sorted(errors.items()):
            LOG.warning("drift check of %s could not run: %s", node, text)
        counts = {}
        for node_name, per_resource in sorted(found.items()):
            node = by_name.get(node_name)
            for resource, items in per_resource.items():
                if items:
                    counts[resource] = counts.get(resource, 0) + 1
            self._record_drift(node, per_resource, reapply)
        if full:
            self.drift_counts = counts
        return found

    def _record_drift(self, node, per_resource, reapply=False):
        name = _name(node)
        cond = drift.condition(per_resource)
        if cond["status"] == "False" and not drift.is_drifting(node):
            return
        patch = node_ops.condition_patch(node, cond["type"], cond["status"], cond["reason"], cond["message"])
        try:
            if patch:
                self.cluster.patch_node_status(name, patch)
                if cond["status"] == "True":
                    self.cluster.event(name, markers.EVENT_DRIFT, cond["message"], "Warning")
                    LOG.warning("node %s: %s", name, cond["message"])
                else:
                    self.cluster.event(name, markers.EVENT_DRIFT, "drift resolved: " + cond["message"])
                    LOG.info("node %s: drift resolved", name)
            if reapply and cond["status"] == "True":
                for resource, items in sorted(per_resource.items()):
                    if not items:
                        continue
                    state, marked = drift.reapply_state(node_ops.read_state(node, resource), items)
                    patch = node_ops.state_patch(node, resource, status=markers.STATUS_IN_PROGRESS, state=state,
                                                 merge=False)
                    self.cluster.patch_node(name, patch)
                    LOG.info("node %s: %s marked to be applied again (%s)", name, ", ".join(marked), resource)
        except NodeWrightError as exc:
            LOG.error("could not record drift on node %s: %s", name, exc)

    # --------------------------------------------------------------------- metrics
    def _update_metrics(self, view, nodes):
        found = nw_metrics.MetricSet()
        found.update(self.run_metrics)
        found.set("nodewright_reconciler_ready", self.permission_ok)
        found.set("nodewright_runtime_required_tainted_nodes",
                  sum(1 for n in nodes if gating.has_taint(n, self.opts.taint_key)))
        for resource, _reason in view["blocked"]:
            found.set("nodewright_resource_status", 1, resource=_name(resource), status="blocked")
        for resource, described in view["rollouts"]:
            overall = "paused" if described["paused"] else "disabled" if described["disabled"] else \
                ((resource.get("status") or {}).get("status") or "unknown")
            try:
                nw_metrics.resource_metrics(found, described, nodes, resource, overall)
            except NodeWrightError as exc:
                LOG.debug("metrics of %s: %s", described["name"], exc)
            found.set("nodewright_drift_nodes", self.drift_counts.get(described["name"], 0),
                      resource=described["name"])
        self.metrics_text = found.render()

    def serve_metrics(self):
        """Serve /metrics (and /healthz) on the metrics port, in a daemon thread."""
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                if self.path.split("?")[0] == "/metrics":
                    body, ctype = owner.metrics_text.encode(), "text/plain; version=0.0.4; charset=utf-8"
                elif self.path.split("?")[0] in ("/healthz", "/readyz"):
                    body, ctype = b"ok\n", "text/plain"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer((self.opts.metrics_address, self.opts.metrics_port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="nodewright-metrics", daemon=True).start()
        LOG.info("metrics on http://%s:%d/metrics", self.opts.metrics_address, server.server_address[1])
        return server

    # --------------------------------------------------------------------- main loops
    def run_forever(self):
        """Until SIGTERM/SIGINT. Returns the exit status (0)."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        server = self.serve_metrics() if self.opts.metrics_port else None
        self.metrics_text = nw_metrics.MetricSet().render()
        while not self.stopping.is_set() and not self.check_permissions():
            self._update_metrics({"rollouts": [], "blocked": [], "malformed": {}}, [])
            self.stopping.wait(self.opts.resync)
        if not self.stopping.is_set():
            LOG.info("watching nodes, NodeWright and DeploymentPolicy resources at %s", self.cluster.target)
            for kind in KINDS:
                threading.Thread(target=self.watch, args=(kind,), name="watch-%s" % kind, daemon=True).start()
        next_resync = time.monotonic() + self.opts.resync
        while not self.stopping.is_set():
            try:
                message = self.queue.get(timeout=0.5)
            except queue.Empty:
                message = None
            while message is not None:
                if message[0] != "wake":
                    self.handle(message)
                try:
                    message = self.queue.get_nowait()
                except queue.Empty:
                    message = None
            now = time.monotonic()
            if not self.permission_ok and now >= next_resync:
                self.check_permissions()
            if now >= next_resync:
                next_resync = now + self.opts.resync
                self._dirty("resync")
            if self.retry_at is not None and now >= self.retry_at:
                self.retry_at = None
                self._dirty("retry")
            try:
                if self.due(now):
                    self.reconcile()
                elif self._drift_due(now):
                    self.next_drift = now + self.opts.drift_interval
                    self.drift_check()
            except Exception:  # noqa: BLE001 - logged; the next change or resync tries again (no crash loop)
                LOG.exception("the reconcile pass failed; trying again at the next change or resync")
                self.dirty_since = None
        self._shutdown(server)
        return 0

    def _drift_due(self, now):
        return (self.next_drift is not None and now >= self.next_drift and self.permission_ok
                and self.dirty_since is None and not (self.worker is not None and self.worker.is_alive())
                and not set(KINDS) - self.synced)

    def _shutdown(self, server):
        if self.worker is not None and self.worker.is_alive():
            self.worker.join()
            while not self.queue.empty():
                message = self.queue.get_nowait()
                if message[0] == "run-done":
                    self._run_done(message[1], message[2])
        if server is not None:
            server.shutdown()
        LOG.info("stopped")

    def run_once(self, with_drift=False):
        """One pass without watching (cron, CI, tests): list, reconcile (running the
        rollout to its end if there is work), optionally check drift. Exit status:
        0 fine, 2 a run failed or a resource is blocked, 3 missing permissions."""
        if not self.check_permissions():
            return 3
        for kind in KINDS:
            self._sync(kind, self.cluster.list_raw(PATHS[kind], "list %s" % kind).get("items") or [])
        view = self.reconcile(run_inline=True)
        if with_drift:
            self._refresh_caches()
            self.drift_check()
            self._update_metrics(view, list(self.caches["nodes"].values()))
        failed = self.last_rollout is not None and self.last_rollout["status"] != "successful"
        return 2 if failed or view["blocked"] else 0

    def _refresh_caches(self):
        for kind in KINDS:
            self.caches[kind] = {_name(o): o for o in
                                 self.cluster.list_raw(PATHS[kind], "list %s" % kind).get("items") or []}


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""
