# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Drain a node through the Eviction API so that PodDisruptionBudgets hold.

The decision of what happens to each pod is a list of filters, each returning a
verdict and a human reason (as kubectl's drain does), so a result can say
"skipped gpu-monitoring/dcgm-exporter-x: DaemonSet pod stays". The eviction loop
retries a 429 (a PDB allows no disruption now) with backoff until the deadline,
and the drain counts a pod as gone only when a pod with its UID no longer exists.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import threading
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, names
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops

try:
    from kubernetes.client.rest import ApiException
except ImportError:
    ApiException = Exception

EVICT = "evict"
DELETE = "delete"      # finished pods: removed (their eviction skips the PDB check)
SKIP = "skip"
REFUSE = "refuse"      # the drain cannot proceed without an operator's decision
WAIT = "wait"          # already terminating: only wait for it to go

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# How often a running drain brings the node's DrainBlocked condition in line (seconds).
SIGNAL_INTERVAL = 1.0


class DrainOptions(object):
    def __init__(self, force=False, delete_emptydir_data=False, ignore_daemonsets=True, grace_period=None,
                 skip_namespaces=(), skip_selector=None, pod_selector=None, non_interruptible=None,
                 disable_eviction=False, timeout=600, max_parallel=32, poll_interval=0.5):
        if grace_period is not None and grace_period < 0:
            raise ValidationError("grace_period must be 0 or more seconds (0 means immediately), got %s"
                                  % grace_period, field="grace_period",
                                  hint="leave it unset to use each pod's own terminationGracePeriodSeconds")
        if timeout is None or timeout <= 0 or timeout > 7 * 86400:
            raise ValidationError("timeout must be between 1 second and 7 days, got %s" % timeout, field="timeout",
                                  hint="the seconds the whole drain may take, e.g. 600")
        if max_parallel < 1 or max_parallel > 256:
            raise ValidationError("max_parallel must be between 1 and 256, got %s" % max_parallel,
                                  field="max_parallel", hint="how many evictions are in flight at once, e.g. 32")
        self.force = force
        self.delete_emptydir_data = delete_emptydir_data
        self.ignore_daemonsets = ignore_daemonsets
        self.grace_period = grace_period
        self.skip_namespaces = set(skip_namespaces or ())
        self.skip_selector = to_selector(skip_selector, "skip_pod_selector") if skip_selector else None
        self.pod_selector = to_selector(pod_selector, "pod_selector") if pod_selector else None
        self.non_interruptible = to_selector(non_interruptible, "non_interruptible_selector") \
            if non_interruptible else None
        self.disable_eviction = disable_eviction
        self.timeout = timeout
        self.max_parallel = max_parallel
        self.poll_interval = poll_interval


def pod_key(pod):
    return "%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"]["name"])


def controller_of(pod):
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


# --- filters: (pod, options) -> (verdict, reason) or None to pass on -------------------

def _terminating(pod, opts):
    if pod["metadata"].get("deletionTimestamp"):
        return WAIT, "already terminating"
    return None


def _terminal(pod, opts):
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return DELETE, "pod has finished (%s); removed (no PDB applies)" % pod["status"]["phase"]
    return None


def _nodewright_pod(pod, opts):
    if (pod["metadata"].get("labels") or {}).get(markers.LABEL_NODE_POD) == "true":
        return SKIP, "NodeWright's own node-access pod stays (the connection removes it)"
    return None


def _mirror(pod, opts):
    if MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {}):
        return SKIP, "static (mirror) pod stays: the kubelet owns it"
    return None


def _daemonset(pod, opts):
    ref = controller_of(pod)
    if ref and ref.get("kind") == "DaemonSet":
        if opts.ignore_daemonsets:
            return SKIP, "DaemonSet pod stays (DaemonSet %s)" % ref.get("name")
        return REFUSE, "DaemonSet pod (DaemonSet %s); set ignore_daemonsets to leave it" % ref.get("name")
    return None


def _skip_namespace(pod, opts):
    if pod["metadata"].get("namespace") in opts.skip_namespaces:
        return SKIP, "namespace %s is skipped" % pod["metadata"]["namespace"]
    return None


def _skip_selector(pod, opts):
    labels = pod["metadata"].get("labels") or {}
    if opts.skip_selector is not None and opts.skip_selector.matches(labels):
        return SKIP, "matches skip_pod_selector %s" % opts.skip_selector.to_string()
    if opts.pod_selector is not None and not opts.pod_selector.matches(labels):
        return SKIP, "does not match pod_selector %s" % opts.pod_selector.to_string()
    return None


def _non_interruptible(pod, opts):
    if opts.non_interruptible is not None and opts.non_interruptible.matches(pod["metadata"].get("labels") or {}):
        return REFUSE, ("non-interruptible pod (matches %s): NodeWright never evicts it; wait for it to "
                        "finish first (node_wait_pods)" % opts.non_interruptible.to_string())
    return None


def _local_storage(pod, opts):
    if any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or []):
        if opts.delete_emptydir_data:
            return None
        return REFUSE, "uses emptyDir storage that would be lost; set delete_emptydir_data to evict it"
    return None


def _unreplicated(pod, opts):
    if controller_of(pod) is None:
        if opts.force:
            return None
        return REFUSE, "not managed by a controller, so nothing recreates it; set force to evict it"
    return None


FILTERS = (_terminating, _terminal, _nodewright_pod, _mirror, _daemonset, _skip_namespace, _skip_selector, _non_interruptible,
           _local_storage, _unreplicated)


def classify(pod, opts):
    for f in FILTERS:
        verdict = f(pod, opts)
        if verdict:
            return verdict
    ref = controller_of(pod)
    return EVICT, "evict (%s %s)" % (ref.get("kind"), ref.get("name")) if ref else "evict (forced, no controller)"


def plan_drain(pods, opts):
    """Group the node's pods by verdict. Pure: used by check mode and by the drain."""
    plan = {EVICT: [], DELETE: [], SKIP: [], REFUSE: [], WAIT: []}
    for pod in pods:
        verdict, reason = classify(pod, opts)
        plan[verdict].append({"pod": pod_key(pod), "uid": pod["metadata"].get("uid"), "reason": reason})
    return plan


def pdb_from_429(body):
    """The PDB name and message from a 429 eviction refusal."""
    try:
        data = json.loads(body) if isinstance(body, (str, bytes)) else (body or {})
    except ValueError:
        return None, str(body)[:300]
    causes = (data.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "DisruptionBudget":
            msg = cause.get("message", "")
            words = msg.split()
            name = None
            if "budget" in words:
                i = words.index("budget")
                if i + 1 < len(words):
                    name = words[i + 1]
            return name, msg
    return None, data.get("message", "")


def list_node_pods(core, node):
    # The name goes into a field selector, where a ',' would add a requirement of its own.
    names.node_name(node, "node")
    resp = call("list pods on node %s" % node, core.list_pod_for_all_namespaces,
                field_selector="spec.nodeName=%s" % node, _preload_content=False)
    return json.loads(resp.data).get("items", [])


class Drainer(object):
    """Evicts the pods of one node and waits until they are gone."""

    def __init__(self, core, node, opts, clock=time.monotonic, sleep=time.sleep, signal=None,
                 signal_interval=SIGNAL_INTERVAL, showing_blocked=False, resource=None):
        self.core = core
        self.node = node
        self.opts = opts
        self.clock = clock
        self.sleep = sleep
        self.lock = threading.Lock()
        self.blocking_pdbs = {}
        self.attempts = {}
        self.errors = {}
        # pod -> {"pdb", "since"} while its eviction is refused (a 429 not yet followed by success)
        self.refused = {}
        self.signal = signal or DrainBlockedSignal(
            node, lambda patch: node_ops.patch_node_status(core, node, patch), showing=showing_blocked,
            resource_line=resource_drain_line(core, resource, node) if resource else None)
        self.signal_interval = signal_interval

    def _delete_options(self):
        body = {}
        if self.opts.grace_period is not None:
            body["gracePeriodSeconds"] = int(self.opts.grace_period)  # 0 really means 0
        return body

    def _evict_one(self, pod, deadline):
        ns, name = pod["pod"].split("/", 1)
        delay = 0.5
        while True:
            try:
                # Finished pods go through the Eviction API too: the API server skips the
                # PDB check for them, and the drain needs no delete permission on pods.
                if self.opts.disable_eviction:
                    self.core.delete_namespaced_pod(name, ns, body=self._delete_options() or None)
                else:
                    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": ns}}
                    opts = self._delete_options()
                    if opts:
                        eviction["deleteOptions"] = opts
                    self.core.create_namespaced_pod_eviction(name, ns, eviction)
                with self.lock:
                    self.attempts[pod["pod"]] = self.attempts.get(pod["pod"], 0) + 1
                    self.refused.pop(pod["pod"], None)
                return "evicted"
            except ApiException as exc:
                with self.lock:
                    self.attempts[pod["pod"]] = self.attempts.get(pod["pod"], 0) + 1
                    if exc.status != 429:
                        self.refused.pop(pod["pod"], None)
                if exc.status == 404:
                    return "gone"
                if exc.status == 429:
                    pdb, msg = pdb_from_429(exc.body)
                    with self.lock:
                        self.blocking_pdbs[pod["pod"]] = {"pdb": "%s/%s" % (ns, pdb) if pdb else None,
                                                          "message": msg}
                        since = (self.refused.get(pod["pod"]) or {}).get("since") or node_ops.now_iso()
                        self.refused[pod["pod"]] = {"pdb": self.blocking_pdbs[pod["pod"]]["pdb"], "since": since}
                elif exc.status == 500 and "more than one PodDisruptionBudget" in str(exc.body):
                    with self.lock:
                        self.errors[pod["pod"]] = "more than one PodDisruptionBudget selects this pod; " \
                                                  "the API server refuses to evict it until that is fixed"
                    return "error"
                elif exc.status in (403, 401):
                    with self.lock:
                        self.errors[pod["pod"]] = "%s forbidden (%s): grant create on pods/eviction" % (
                            "deletion" if self.opts.disable_eviction else "eviction", exc.status)
                    return "error"
                elif exc.status >= 500 or exc.status == 409:
                    pass  # transient: retry
                else:
                    with self.lock:
                        self.errors[pod["pod"]] = "eviction failed: HTTP %s %s" % (exc.status, exc.reason)
                    return "error"
            except Exception as exc:  # pylint: disable=duplicate-except  # connection trouble: retry until the deadline
                with self.lock:
                    self.errors[pod["pod"]] = "eviction request failed: %s" % str(exc)[:200]
            if self.clock() + delay > deadline:
                return "timeout"
            self.sleep(delay + random.uniform(0, delay / 4))
            delay = min(delay * 2, 5.0)

    def run(self, plan):
        """Evict/delete planned pods, then wait for them to be gone. Returns a result dict."""
        start = self.clock()
        deadline = start + self.opts.timeout
        targets = [dict(p) for p in plan[EVICT]] + [dict(p, delete=True) for p in plan[DELETE]]
        outcome = {}
        if targets:
            workers = min(self.opts.max_parallel, len(targets))
            stop = threading.Event()
            monitor = threading.Thread(target=self._show_refusals, args=(stop,), daemon=True)
            monitor.start()
            try:
                with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
                    futures = {ex.submit(self._evict_one, p, deadline): p for p in targets}
                    for fut in concurrent.futures.as_completed(futures):
                        outcome[futures[fut]["pod"]] = fut.result()
            finally:
                stop.set()
                monitor.join()
        self.signal.finish(self._refused_now())
        # Wait until no pod with a targeted (or already terminating) UID remains.
        waiting = {p["uid"]: p["pod"] for p in targets + plan[WAIT]
                   if outcome.get(p["pod"]) in (None, "evicted", "gone")}
        remaining = dict(waiting)
        present = {}
        while remaining:
            present = {p["metadata"]["uid"]: p for p in list_node_pods(self.core, self.node)}
            remaining = {uid: key for uid, key in remaining.items() if uid in present}
            if not remaining or self.clock() >= deadline:
                break
            self.sleep(self.opts.poll_interval)
        evicted = sorted(k for k, v in outcome.items() if v in ("evicted", "gone") and k not in remaining.values())
        still = sorted(set(remaining.values()) | {k for k, v in outcome.items() if v in ("timeout", "error")})
        pdbs = {}
        for key in still:
            info = self.blocking_pdbs.get(key)
            if info and info.get("pdb"):
                pdbs.setdefault(info["pdb"], {"pdb": info["pdb"], "message": info["message"], "pods": []})
                pdbs[info["pdb"]]["pods"].append(key)
        result = {
            "accepted": sorted(k for k, v in outcome.items() if v == "evicted"),
            "stuck": sorted((pod_holdup(present[uid]) for uid in remaining if uid in present),
                            key=lambda d: d["pod"]),
            "evicted": evicted,
            "deleted_terminal": sorted(p["pod"] for p in plan[DELETE] if p["pod"] in evicted),
            "kept": plan[SKIP],
            "still_present": still,
            "blocking_pdbs": sorted(pdbs.values(), key=lambda d: d["pdb"]),
            "errors": {k: v for k, v in self.errors.items() if k in still},
            "eviction_attempts": sum(self.attempts.values()),
            "duration": round(self.clock() - start, 2),
            "timed_out": bool(still) and (self.clock() >= deadline or "timeout" in outcome.values()),
        }
        if self.signal.errors:
            result["drain_blocked_errors"] = list(self.signal.errors)
        return result

    def _refused_now(self):
        with self.lock:
            return {key: dict(value) for key, value in self.refused.items()}

    def _show_refusals(self, stop):
        while not stop.wait(self.signal_interval):
            self.signal.update(self._refused_now())


# --- the live DrainBlocked condition -----------------------------------------------------

REASON_BLOCKED = "EvictionRefused"
REASON_PROCEEDING = "EvictionsAccepted"
REASON_ENDED = "DrainEnded"


def drain_refusals(refused, verb="refuses"):
    """``refused`` ({pod: {"pdb", "since"}}) in words: each PodDisruptionBudget with the
    pods whose eviction it refuses, and since when."""
    by_pdb = {}
    for key, info in refused.items():
        by_pdb.setdefault(info.get("pdb"), []).append((key, info.get("since")))
    parts = []
    for pdb in sorted(by_pdb, key=lambda name: (name is None, name or "")):
        pods = sorted(by_pdb[pdb])
        sinces = [since for key, since in pods if since]
        who = "PodDisruptionBudget %s" % pdb if pdb else "the API server (HTTP 429 without a budget named)"
        keys = ", ".join(key for key, since in pods)
        parts.append("%s %s to evict %s since %s" % (who, verb, keys, min(sinces) if sinces else "an unknown time"))
    return "; ".join(parts)


DRAIN_NOT_BLOCKED = "no drain of a node of this resource is held by a PodDisruptionBudget"


def drain_blocked_text(node):
    """What holds the drain of ``node`` now (its nodewright.io/DrainBlocked condition while
    True, without the node's name), or ''."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == markers.CONDITION_DRAIN_BLOCKED and cond.get("status") == "True":
            text = str(cond.get("message") or "")
            name = (node.get("metadata") or {}).get("name")
            prefix = "drain of node %s is waiting: " % name
            return " ".join((text[len(prefix):] if text.startswith(prefix) else text).split()) or "blocked"
    return ""


def resource_drain_line(core, resource, node):
    """Writes ``node``'s line of the resource's ``DrainBlocked`` condition (None removes it)."""
    def write(text):
        return node_ops.set_resource_node_line(
            core, resource, markers.CONDITION_RESOURCE_DRAIN_BLOCKED, node, text, REASON_BLOCKED, REASON_PROCEEDING,
            DRAIN_NOT_BLOCKED)
    return write


def drain_blocked_showing(node):
    """Whether ``node`` (a dict) says its drain is blocked now."""
    cond = node_ops.current_condition(node or {}, markers.CONDITION_DRAIN_BLOCKED)
    return bool(cond) and cond.get("status") == "True"


def drain_blocked_since(refused):
    sinces = [info.get("since") for info in refused.values() if info.get("since")]
    return min(sinces) if sinces else node_ops.now_iso()


class DrainBlockedSignal(object):
    """The node's ``nodewright.io/DrainBlocked`` condition, kept in line with the
    evictions a running drain is refused: True (naming the budgets, the pods and since
    when) while any is, False once they go through or the drain ends. ``write(patch)``
    sends one node status patch; the condition is written only when what holds the drain
    changes. A write that fails never fails the drain: it is kept in ``errors``."""

    def __init__(self, node, write, now=None, showing=False, resource_line=None):
        self.node = node
        self.write = write
        # The line of this node in the resource's DrainBlocked condition (None: no resource).
        self.resource_line = resource_line
        self.now = now or node_ops.now_iso
        # What the condition says now: None (not True), or the (pod, pdb) pairs it names.
        # ``showing``: the node already says True (a run that died mid-drain), so this one
        # rewrites or clears it whatever it meets.
        self.shown = frozenset([None]) if showing else None
        self.errors = []

    def _write(self, status, reason, message, since):
        cond = {"type": markers.CONDITION_DRAIN_BLOCKED, "status": status, "reason": reason,
                "message": message[:1024], "lastHeartbeatTime": self.now(), "lastTransitionTime": since}
        try:
            self.write({"status": {"conditions": [cond]}})
        except Exception as exc:  # pylint: disable=broad-except  # a signal, never a reason to stop the drain
            if len(self.errors) < 5:
                self.errors.append("could not write %s on node %s: %s" % (
                    markers.CONDITION_DRAIN_BLOCKED, self.node, str(exc)[:200]))
            return False
        return True

    def update(self, refused):
        """``refused``: {pod: {"pdb", "since"}} of the evictions refused now."""
        names = frozenset((key, info.get("pdb")) for key, info in refused.items())
        if refused and names != self.shown:
            if self._write("True", REASON_BLOCKED, "drain of node %s is waiting: %s"
                           % (self.node, drain_refusals(refused)), drain_blocked_since(refused)):
                self.shown = names
                self._resource(drain_refusals(refused))
        elif not refused and self.shown:
            if self._write("False", REASON_PROCEEDING, "drain of node %s: the refused evictions went through"
                           % self.node, self.now()):
                self.shown = None
                self._resource(None)

    def _resource(self, text):
        # Advisory, like the resource's NonInterruptPodsRunning: a resource that is not in the
        # cluster (packages given to a play directly) has no condition to write.
        if self.resource_line is not None:
            self.resource_line(text)

    def finish(self, refused):
        """The evictions are over: a True condition becomes False, saying whether the
        drain went on or ended with evictions still refused."""
        if not self.shown:
            return
        if refused:
            message = "drain of node %s ended at its deadline: %s" % (
                self.node, drain_refusals(refused, verb="still refused"))
            if self._write("False", REASON_ENDED, message, self.now()):
                self.shown = None
                self._resource(None)
        else:
            self.update({})


def pod_holdup(pod):
    """What keeps a pod that was asked to go on the node: its deletion time, grace period
    and finalizers, as the API shows them."""
    meta = pod.get("metadata") or {}
    return {"pod": pod_key(pod), "terminating": bool(meta.get("deletionTimestamp")),
            "since": meta.get("deletionTimestamp"), "grace_period": meta.get("deletionGracePeriodSeconds"),
            "finalizers": list(meta.get("finalizers") or []), "phase": (pod.get("status") or {}).get("phase")}


def _describe_holdup(entry):
    if not entry.get("terminating"):
        return "%s was not deleted (%s)" % (entry["pod"], entry.get("phase") or "phase unknown")
    text = "%s has been terminating since %s" % (entry["pod"], entry.get("since"))
    if entry.get("grace_period") is not None:
        text += " (grace period %ss)" % entry["grace_period"]
    if entry.get("finalizers"):
        text += ", held by finalizer%s %s, which nothing has removed" % (
            "s" if len(entry["finalizers"]) > 1 else "", ", ".join(entry["finalizers"]))
    else:
        text += ", and the node's kubelet has not confirmed that it ended"
    return text


def describe_failure(node, result, timeout):
    parts = []
    for pdb in result["blocking_pdbs"]:
        parts.append("PodDisruptionBudget %s allowed no disruption (%s) for %s"
                     % (pdb["pdb"], pdb["message"], ", ".join(pdb["pods"])))
    for key, err in sorted(result["errors"].items()):
        parts.append("%s: %s" % (key, err))
    explained = {k for p in result["blocking_pdbs"] for k in p["pods"]} | set(result["errors"])
    stuck = {e["pod"]: e for e in result.get("stuck") or ()}
    others = [k for k in result["still_present"] if k not in explained]
    for key in others:
        parts.append(_describe_holdup(stuck[key]) if key in stuck else "%s is still on the node" % key)
    what = "timed out after %ss" % timeout if result.get("timed_out") else "failed"
    return "drain of node %s %s: %s. The node stays cordoned." % (node, what, "; ".join(parts) or "unknown cause")


def failure_hint(result):
    """What to do about a failed drain, for what really held it."""
    hints = []
    if result["blocking_pdbs"]:
        hints.append("the PodDisruptionBudgets named need more healthy replicas elsewhere, or a longer timeout")
    stuck = [e for e in result.get("stuck") or () if e["pod"] not in
             {k for p in result["blocking_pdbs"] for k in p["pods"]}]
    if any(e.get("finalizers") for e in stuck):
        hints.append("the controller that owns a finalizer must remove it; remove it by hand (kubectl patch pod "
                     "-n NS NAME --type=merge -p '{\"metadata\":{\"finalizers\":null}}') only when it is safe")
    if any(e.get("terminating") and not e.get("finalizers") for e in stuck):
        hints.append("a pod that outlives its grace period waits for the node's kubelet: check that the node is "
                     "Ready, or drain with a shorter grace_period")
    if result["errors"]:
        hints.append("fix the errors named, then run again")
    return "; ".join(hints) or "raise the timeout, or look at the pods still on the node"
