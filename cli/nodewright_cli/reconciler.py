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

Where the parts live: the pure decisions in ``reconcile_work``, the status and
conditions a pass writes in ``reconcile_surface``, drift in ``reconcile_drift``,
metrics in ``reconcile_metrics``, deletion and re-tainting in ``lifecycle``; this
module holds the options, the watches, the caches, the passes and the runs.
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
from nodewright_cli.reconcile_drift import DriftMixin
from nodewright_cli.reconcile_metrics import MetricsMixin
from nodewright_cli.reconcile_surface import SurfaceMixin
from nodewright_cli.reconcile_work import name_of, relevant_change, rollout_limit, work_fingerprint, work_of

from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_metrics
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import parse_label_selector

LOG = logging.getLogger("nodewright.reconcile")

KINDS = ("nodes", "nodewrights", "deploymentpolicies")
PATHS = {"nodes": NODES, "nodewrights": NODEWRIGHTS, "deploymentpolicies": POLICIES}


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


class Reconciler(LifecycleMixin, SurfaceMixin, DriftMixin, MetricsMixin):
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
        fresh = {name_of(o): o for o in items if name_of(o)}
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
        name = name_of(obj)
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
            self.pending_new.add(name_of(node))
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
            gating.add_taint(self.cluster.core, name_of(node), self.opts.taint_key, reason=why)
            LOG.info("tainted %s with %s: %s", name_of(node), self.opts.taint_key, why)
        except NodeWrightError as exc:
            LOG.error("could not taint new node %s: %s", name_of(node), exc)

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
                 [d.name for _r, d in view["rollouts"] if d.name in work]) if work else []

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
            self.caches[kind] = {name_of(o): o for o in
                                 self.cluster.list_raw(PATHS[kind], "list %s" % kind).get("items") or []}


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""
