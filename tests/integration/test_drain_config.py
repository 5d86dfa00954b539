# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every field of a NodeWright resource's spec.drainConfig changes what the drain of
a rollout does, through the front door: a resource in the cluster, rollout.yml, a
disruptive package (a containerd restart) so that each node is cordoned and drained.

One fleet serves the whole file; each node carries one case (its own pods), and three
rollouts cover the fields:

- permissive (disableEviction, deleteEmptyDirData, force, gracePeriod): every node
  completes; the pods are deleted, not evicted, each with the resource's grace period;
- strict (ignoreDaemonSets: false, deleteEmptyDirData: false, force: false): the drain
  refuses before it removes anything, naming the DaemonSet, emptyDir and bare pods;
- bounded (timeout, and a play variable that overrides disableEviction): a drain held
  by a PodDisruptionBudget ends at the resource's timeout, naming the budget, with a
  plain eviction beside it for contrast.

A fourth rollout watches the node's live nodewright.io/DrainBlocked condition, the
resource's DrainBlocked condition and ``nodewright status`` while a PodDisruptionBudget
holds its drain, and after the budget lets go.

A watch on the test namespace records every state of each pod; the first state with a
deletion time says how the pod was asked to go: the grace period its deletion gave it,
and whether the Eviction API marked it (condition DisruptionTarget, reason
EvictionByEvictionAPI) or it was deleted directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from fleet_helpers import Fleet
from k8s_helpers import node_pods, pdb, running_pods, wait_for

pytestmark = pytest.mark.integration

SERVICE = {"type": "service", "services": ["containerd"]}
OWN_GRACE = 30      # the pods' own terminationGracePeriodSeconds
CONFIG_GRACE = 2    # the permissive resource's drainConfig.gracePeriod
CASES = ("pdb", "emptydir", "bare", "strict", "timeout", "watched")


class PodWatch(object):
    """Every state of a namespace's pods, as the API server sends it, until stopped."""

    def __init__(self, sim, ns):
        self.sim, self.ns = sim, ns
        self.states = {}            # uid -> the pod's states, oldest first (dicts)
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _record(self, pod):
        with self.lock:
            self.states.setdefault(pod["metadata"]["uid"], []).append(pod)

    def _run(self):
        version = None
        while not self.done.is_set():
            if version is None:
                listed = self.sim.core.list_namespaced_pod(self.ns, _preload_content=False)
                body = json.loads(listed.data)
                for pod in body.get("items") or []:
                    self._record(pod)
                version = body["metadata"]["resourceVersion"]
            try:
                for event in watch.Watch().stream(self.sim.core.list_namespaced_pod, self.ns,
                                                  resource_version=version, timeout_seconds=2):
                    if event["type"] == "ERROR":
                        version = None      # the version is too old: list again
                        break
                    pod = event["raw_object"]
                    version = pod["metadata"]["resourceVersion"]
                    self._record(pod)
            except ApiException:
                version = None      # 410 Gone: list again

    def stop(self):
        self.done.set()
        self.thread.join(10)

    def removal(self, uid):
        """How the pod was asked to go, from its first state with a deletion time (the
        simulated kubelet then removes it at once, with a grace of 0): the grace period the
        deletion gave it, and whether the Eviction API marked it. None while it was not."""
        with self.lock:
            states = list(self.states[uid])
        for pod in states:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                evicted = any(c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI"
                              for c in (pod.get("status") or {}).get("conditions") or [])
                return {"grace": meta.get("deletionGracePeriodSeconds"), "evicted": evicted}
        return None


def _template(labels, node, emptydir=False):
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": OWN_GRACE,
            "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}
    if emptydir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {"metadata": {"labels": labels}, "spec": spec}


def deployment(sim, ns, name, node, emptydir=False):
    """A one-replica Deployment on ``node``; its running pod."""
    labels = {"app": name}
    sim.apps.create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": _template(labels, node, emptydir)}})
    return wait_for(lambda: running_pods(sim, ns, "app=" + name), what="%s running" % name)[0]


def bare_pod(sim, ns, name, node):
    """A pod no controller manages, bound to ``node``."""
    body = _template({"app": name}, node)
    body["metadata"]["name"] = name
    body["spec"]["nodeName"] = body["spec"].pop("nodeSelector")["kubernetes.io/hostname"]
    sim.core.create_namespaced_pod(ns, body)
    return wait_for(lambda: running_pods(sim, ns, "app=" + name), what="%s running" % name)[0]


def daemonset(sim, ns, name, node):
    """A DaemonSet whose one pod runs on ``node``; that pod."""
    labels = {"app": name}
    sim.apps.create_namespaced_daemon_set(ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, "template": _template(labels, node)}})
    return wait_for(lambda: running_pods(sim, ns, "app=" + name), what="%s running" % name)[0]


class DrainFleet(object):
    """One node per case, the test namespace, its pods and the watch on them."""

    def __init__(self, sim, tmp):
        self.sim = sim
        self.fleet = Fleet(sim, tmp, [("h200", len(CASES))])
        self.node = dict(zip(CASES, sorted(self.fleet.nodes)))
        for case, node in self.node.items():
            sim.core.patch_node(node, {"metadata": {"labels": {"drain-case": case}}})
        self.ns = sim.namespace("drain")
        self.watch = PodWatch(sim, self.ns)
        self.runs = {}

    def resource(self, name, cases, drain_config):
        """A resource on the nodes of ``cases`` with ``drain_config``; its name."""
        res = "%s-%s" % (name, self.fleet.label)
        self.fleet.create("NodeWright", res, {
            "nodeSelectors": {"matchLabels": {"rollout-test": self.fleet.label},
                              "matchExpressions": [{"key": "drain-case", "operator": "In", "values": list(cases)}]},
            "interruptionBudget": {"percent": 100},
            "drainConfig": drain_config,
            "packages": {"shellscript": {"version": "1.0.0", "interrupt": SERVICE, "configMap": {
                "apply.sh": "echo on > /etc/drain-config-test\n",
                "apply_check.sh": "test -s /etc/drain-config-test\n"}}}})
        return res

    def rollout(self, res, *extra):
        proc = self.fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, *extra)
        proc.output = proc.stdout + proc.stderr
        return proc

    def status(self, node, res):
        return self.fleet.node_labels(node).get("nodewright.io/status-%s" % res)

    def condition(self, node, ctype):
        for cond in self.sim.core.read_node(node).status.conditions or []:
            if cond.type == ctype:
                return cond
        return None

    def resource_condition(self, res, ctype, status="True"):
        """The resource's condition ``ctype`` when its status is ``status``, else None."""
        for cond in (self.fleet.resource(res).get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype and cond.get("status") == status:
                return cond
        return None

    def erroring_condition(self, node):
        return self.condition(node, "nodewright.io/Erroring")

    def present(self, uid):
        return uid in {p.metadata.uid for p in self.sim.core.list_namespaced_pod(self.ns).items}


@pytest.fixture(scope="module")
def drain_fleet(sim, tmp_path_factory):
    fleet = DrainFleet(sim, tmp_path_factory.mktemp("drain-config"))
    try:
        yield fleet
    finally:
        fleet.watch.stop()


@pytest.fixture(scope="module")
def permissive(drain_fleet):
    """The permissive rollout: a one-replica Deployment whose PDB allows no disruption, an
    emptyDir pod and a bare pod, each on its own node, all under disableEviction,
    deleteEmptyDirData, force and a gracePeriod shorter than the pods' own."""
    f = drain_fleet
    pods = {"pdb": deployment(f.sim, f.ns, "guarded", f.node["pdb"]),
            "emptydir": deployment(f.sim, f.ns, "scratch", f.node["emptydir"], emptydir=True),
            "bare": bare_pod(f.sim, f.ns, "loner", f.node["bare"])}
    pdb(f.sim, f.ns, "guarded", minAvailable=1)
    wait_for(lambda: f.sim.policy.read_namespaced_pod_disruption_budget("guarded", f.ns).status.current_healthy == 1,
             what="PDB guarded counts its pod")
    res = f.resource("permissive", ("pdb", "emptydir", "bare"), {
        "timeout": "60s", "gracePeriod": "%ds" % CONFIG_GRACE, "disableEviction": True,
        "deleteEmptyDirData": True, "force": True})
    budget = f.sim.policy.read_namespaced_pod_disruption_budget("guarded", f.ns).status
    proc = f.rollout(res)
    return {"res": res, "proc": proc, "pods": pods, "budget": budget}


def test_disable_eviction_deletes_a_pod_its_pdb_protects_and_the_node_completes(drain_fleet, permissive):
    f, proc, res = drain_fleet, permissive["proc"], permissive["res"]
    node = f.node["pdb"]
    assert proc.report["hosts"][node]["outcome"] == "ok", proc.report["hosts"][node].get("msg")
    assert f.status(node, res) == "complete"
    assert not f.sim.core.read_node(node).spec.unschedulable
    # The budget allowed no disruption, so the Eviction API would have refused the pod:
    # it was deleted directly, and nothing marked it as evicted.
    assert permissive["budget"].disruptions_allowed == 0
    pod = permissive["pods"]["pdb"]
    assert not f.present(pod.metadata.uid)
    assert f.watch.removal(pod.metadata.uid)["evicted"] is False
    drained = [r for r in proc.report["hosts"][node]["results"] if r["task"] == "Drain the node"]
    assert drained and "%s/%s" % (f.ns, pod.metadata.name) in drained[0]["evicted"]


@pytest.mark.parametrize("case", ["emptydir", "bare"], ids=["deleteEmptyDirData", "force"])
def test_delete_emptydir_data_and_force_let_the_drain_remove_those_pods(drain_fleet, permissive, case):
    f, proc, res = drain_fleet, permissive["proc"], permissive["res"]
    node, pod = f.node[case], permissive["pods"][case]
    assert proc.report["hosts"][node]["outcome"] == "ok", proc.report["hosts"][node].get("msg")
    assert f.status(node, res) == "complete"
    assert not f.sim.core.read_node(node).spec.unschedulable
    assert not f.present(pod.metadata.uid)
    assert f.watch.removal(pod.metadata.uid)
    if case == "bare":
        # Gone for good: no controller made another.
        assert not running_pods(f.sim, f.ns, "app=loner")


def test_grace_period_is_the_one_every_removed_pod_got(drain_fleet, permissive):
    f = drain_fleet
    removed = [f.watch.removal(pod.metadata.uid) for pod in permissive["pods"].values()]
    graces = [r["grace"] for r in removed if r]
    assert graces and set(graces) == {CONFIG_GRACE}, graces


def test_ignore_daemonsets_false_stops_the_drain_naming_each_pod_it_may_not_take(drain_fleet):
    """With ignoreDaemonSets, deleteEmptyDirData and force all false, the drain refuses
    before it removes anything and names each pod and why; the node is erroring and
    stays cordoned for triage."""
    f = drain_fleet
    node = f.node["strict"]
    pods = {"daemonset": daemonset(f.sim, f.ns, "agent", node),
            "emptydir": deployment(f.sim, f.ns, "cache", node, emptydir=True),
            "bare": bare_pod(f.sim, f.ns, "stray", node),
            "plain": deployment(f.sim, f.ns, "web", node)}
    res = f.resource("strict", ("strict",), {"ignoreDaemonSets": False, "deleteEmptyDirData": False,
                                             "force": False})
    proc = f.rollout(res)
    assert proc.returncode != 0
    host = proc.report["hosts"][node]
    assert host["outcome"] == "failed" and host["failed_task"] == "Drain the node"
    key = {name: "%s/%s" % (f.ns, pod.metadata.name) for name, pod in pods.items()}
    assert "refused before evicting anything" in host["msg"]
    assert "%s: DaemonSet pod (DaemonSet agent)" % key["daemonset"] in host["msg"]
    assert "%s: uses emptyDir storage" % key["emptydir"] in host["msg"]
    assert "%s: not managed by a controller" % key["bare"] in host["msg"]
    assert key["plain"] not in host["msg"]
    assert f.status(node, res) == "erroring"
    cond = f.erroring_condition(node)
    assert cond.status == "True" and key["daemonset"] in cond.message
    assert f.sim.core.read_node(node).spec.unschedulable
    # Nothing was taken: every pod is still there, none of them deleting.
    for name, pod in pods.items():
        assert f.watch.removal(pod.metadata.uid) is None, name
    assert {p.metadata.uid for p in pods.values()} <= {p.metadata.uid for p in node_pods(f.sim, node)}


def test_timeout_ends_a_drain_a_pdb_holds_naming_the_pdb(drain_fleet):
    """A resource with a short timeout and disableEviction, rolled out with the play
    variable safe_update_drain_disable_eviction=false (a variable given to the playbook
    wins over drainConfig): the eviction is refused by the PodDisruptionBudget until the
    resource's timeout, which ends the drain naming the budget; the pod stays. A pod
    beside it with no budget is evicted through the Eviction API with its own grace."""
    f = drain_fleet
    node = f.node["timeout"]
    held = deployment(f.sim, f.ns, "held", node)
    free = deployment(f.sim, f.ns, "free", node)
    pdb(f.sim, f.ns, "held", minAvailable=1)
    wait_for(lambda: f.sim.policy.read_namespaced_pod_disruption_budget("held", f.ns).status.current_healthy == 1,
             what="PDB held counts its pod")
    res = f.resource("bounded", ("timeout",), {"timeout": "3s", "disableEviction": True})
    proc = f.rollout(res, "-e", "safe_update_drain_disable_eviction=false")
    assert proc.returncode != 0
    host = proc.report["hosts"][node]
    assert host["outcome"] == "failed" and host["failed_task"] == "Drain the node"
    assert "drain of node %s timed out after 3s" % node in host["msg"]
    assert "PodDisruptionBudget %s/held allowed no disruption" % f.ns in host["msg"]
    assert "%s/%s" % (f.ns, held.metadata.name) in host["msg"]
    drained = [r for r in host["results"] if r["task"] == "Drain the node"][0]
    assert [b["pdb"] for b in drained["blocking_pdbs"]] == ["%s/held" % f.ns]
    assert f.status(node, res) == "erroring"
    cond = f.erroring_condition(node)
    assert cond.status == "True" and "%s/held" % f.ns in cond.message
    # The live signal of the wait ended with the drain.
    cond = f.condition(node, "nodewright.io/DrainBlocked")
    assert (cond.status, cond.reason) == ("False", "DrainEnded")
    assert "PodDisruptionBudget %s/held still refused to evict %s/%s" % (f.ns, f.ns, held.metadata.name) in cond.message
    # The held pod was never deleted; the free one was evicted, with its own grace period.
    assert f.present(held.metadata.uid)
    assert f.watch.removal(held.metadata.uid) is None
    assert not f.present(free.metadata.uid)
    assert f.watch.removal(free.metadata.uid) == {"grace": OWN_GRACE, "evicted": True}


def test_a_drain_a_pdb_holds_shows_drain_blocked_on_the_node_until_it_proceeds(drain_fleet):
    """While a PodDisruptionBudget refuses the drain's eviction, the node carries the
    condition nodewright.io/DrainBlocked (True, naming the budget, the pod and since
    when); once the budget lets the pod go, the condition turns False and the node
    completes."""
    f = drain_fleet
    node = f.node["watched"]
    gated = deployment(f.sim, f.ns, "gated", node)
    pdb(f.sim, f.ns, "gated", minAvailable=1)
    wait_for(lambda: f.sim.policy.read_namespaced_pod_disruption_budget("gated", f.ns).status.current_healthy == 1,
             what="PDB gated counts its pod")
    res = f.resource("watched", ("watched",), {"timeout": "300s"})
    run = f.fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, name="watched")
    try:
        def blocked():
            cond = f.condition(node, "nodewright.io/DrainBlocked")
            return cond if cond is not None and cond.status == "True" else None
        cond = wait_for(blocked, timeout=120, what="DrainBlocked on %s" % node)
        assert cond.reason == "EvictionRefused"
        since = cond.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert cond.message == "drain of node %s is waiting: PodDisruptionBudget %s/gated refuses to evict %s/%s " \
                               "since %s" % (node, f.ns, f.ns, gated.metadata.name, since)
        assert f.status(node, res) == "in_progress"
        # The resource says it too, one line per node whose drain is held.
        line = "%s: PodDisruptionBudget %s/gated refuses to evict %s/%s since %s" % (
            node, f.ns, f.ns, gated.metadata.name, since)
        held = wait_for(lambda: f.resource_condition(res, "DrainBlocked"), what="DrainBlocked on %s" % res)
        assert (held["status"], held["reason"], held["message"]) == ("True", "EvictionRefused", line)
        # nodewright status shows it, on the resource and on the node's row.
        shown = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nodewright"), "status", res],
                               capture_output=True, text=True, env=f.sim.env())
        assert shown.returncode == 0, shown.stderr
        assert "  drain blocked: %s" % line in shown.stdout.splitlines(), shown.stdout
        row = [r for r in shown.stdout.splitlines() if r.startswith("  %s " % node)]
        assert row and "DrainBlocked: drain of node %s is waiting" % node in row[0], shown.stdout
        # The budget goes: the next retry of the eviction goes through.
        f.sim.policy.delete_namespaced_pod_disruption_budget("gated", f.ns)
        run = f.fleet.finished(run)
    except BaseException:
        from fleet_helpers import kill_tree
        kill_tree(run.pid)
        raise
    assert run.returncode == 0, run.output[-4000:]
    assert f.status(node, res) == "complete"
    cond = f.condition(node, "nodewright.io/DrainBlocked")
    assert (cond.status, cond.reason) == ("False", "EvictionsAccepted")
    assert node in cond.message
    assert f.watch.removal(gated.metadata.uid) == {"grace": OWN_GRACE, "evicted": True}
    cond = f.resource_condition(res, "DrainBlocked", status="False")
    assert (cond["reason"], cond["message"]) == (
        "EvictionsAccepted", "no drain of a node of this resource is held by a PodDisruptionBudget")
