"""The main job end to end on the simulator: NodeWright and DeploymentPolicy
resources in the cluster, the k8s_nodes inventory, playbooks/rollout.yml under the
rollout strategy, packages run in the nodes' host roots, markers and resource status
written; plan.yml predicts what rollout.yml then does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible.release import __version__ as CORE_VERSION
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.plugin_utils import core_internals

from fleet_helpers import Fleet, waves_from_report

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECTL = os.path.expanduser("~/.cache/nodewright/bin/kubectl")
GROUP, VERSION = "nodewright.io", "v1alpha1"


def sysctl_resource(fleet, policy, value="262144", interrupt=None):
    spec = {"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": policy,
            "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": value}}}}
    if interrupt:
        spec["packages"]["sysctl"]["interrupt"] = interrupt
    return spec


def failing_resource(fleet, prefix, strategy):
    """A policy with ``strategy`` and a resource whose package fails on every node; returns its name."""
    policy, res = prefix + "-" + fleet.label, prefix + "-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}, "strategy": strategy}})
    fleet.create("NodeWright", res, sysctl_resource(fleet, policy, value="not-a-number"))
    return res


def test_rollout_follows_the_plan_and_publishes_status(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2), ("h200", 2)])
    policy, res = "lin-" + fleet.label, "tune-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}, "strategy": {
        "linear": {"initialBatch": 1, "delta": 1, "failureThreshold": 1}}}})
    fleet.create("NodeWright", res, sysctl_resource(fleet, policy,
                                                    interrupt={"type": "service", "services": ["containerd"]}))
    plan = fleet.plan(res)
    planned = [sorted(w["nodes"]) for w in plan["waves"]["waves"]]
    assert [len(w) for w in planned] == [1, 2, 1]
    assert {p["action"] for n in plan["nodes"].values() for p in n["packages"]} == {"apply"}
    assert all(n["interrupt"] == {"type": "service", "services": ["containerd"]} for n in plan["nodes"].values())

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert waves_from_report(proc.report) == planned
    for node in fleet.nodes:
        assert fleet.sysctl(node, "vm.max_map_count") == "262144"
        assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"
        assert not sim.core.read_node(node).spec.unschedulable
        restarts = hostroot.run(sim.host_root(node), "cat /run/nodewright-sim/units/containerd.service.restarts")
        assert restarts.stdout.strip(), "containerd was not restarted on %s" % node
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "4/4"
    assert status["packageList"] == "sysctl:1.0.0"
    assert set(status["nodeStatus"].values()) == {"complete"}
    out = subprocess.run([KUBECTL, "get", "nodewrights", res, "--no-headers"], capture_output=True, text=True,
                         env=sim.env()).stdout.split()
    assert out[:5] == [res, "complete", "200", "0", "4/4"] and "sysctl:1.0.0" in out

    # Nothing left to do: a second run admits no node.
    again = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert again.returncode == 0, again.stdout[-3000:]
    assert not [h for h in again.report["hosts"] if h != "localhost"]

    # A config change reruns config only (no reapply), under the same safe sequence.
    body = {"spec": {"packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "524288"},
                                             "interrupt": {"type": "service", "services": ["containerd"]}}}}}
    fleet.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", res, body)
    plan = fleet.plan(res)
    assert {p["action"] for n in plan["nodes"].values() for p in n["packages"]} == {"config"}
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert {fleet.sysctl(n, "vm.max_map_count") for n in fleet.nodes} == {"524288"}


def test_failing_canary_halts_the_rollout_and_leaves_other_nodes_untouched(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("b200", 3)])
    res = failing_resource(fleet, "canary", {
        "exponential": {"initialBatch": 1, "growthFactor": 2, "failureThreshold": 1, "safetyLimit": 50}})
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode != 0
    assert "halted" in proc.stdout + proc.stderr
    waves = waves_from_report(proc.report)
    assert len(waves) == 1 and len(waves[0]) == 1
    canary = waves[0][0]
    assert fleet.node_labels(canary)["nodewright.io/status-%s" % res] == "erroring"
    for node in fleet.nodes:
        if node != canary:
            labels = fleet.node_labels(node)
            assert "nodewright.io/status-%s" % res not in labels
            assert "nodewright.io/state-%s" % res not in (sim.core.read_node(node).metadata.annotations or {})
            assert node not in proc.report["hosts"]


def test_a_halt_is_remembered_until_the_batch_state_is_reset_or_the_resource_changes(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 3)])
    res = failing_resource(fleet, "sticky", {
        "linear": {"initialBatch": 1, "delta": 1, "failureThreshold": 1, "safetyLimit": 100}})

    def hosts(proc):
        return sorted(h for h in proc.report["hosts"] if h != "localhost")

    first = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert first.returncode != 0 and "halted" in first.stdout + first.stderr
    (canary,) = hosts(first)
    status = fleet.resource(res)["status"]
    comp = status["compartmentStatuses"]["__default__"]
    assert comp["batchState"]["shouldStop"] is True and comp["batchState"]["consecutiveFailures"] == 1
    assert comp["matched"] == 3 and comp["progressPercent"] == 33
    assert status["rolloutState"]["version"].startswith("sysctl:1.0.0 (generation ")
    assert status["status"] == "halted" and "halted after 1 consecutive failed batch" in status["message"]

    # The next run remembers the halt: no node is touched, and it says how to go on.
    again = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert again.returncode != 0 and hosts(again) == []
    assert "nodewright reset-batches" in again.stdout + again.stderr
    for node in fleet.nodes:
        if node != canary:
            assert "nodewright.io/status-%s" % res not in fleet.node_labels(node)

    # reset-batches: the rollout starts again from its first batch (one node, which fails). The
    # canary spent its stage's retry budget: it is left alone (stageRetries), the batch takes another.
    cli = os.path.join(os.path.dirname(sys.executable), "nodewright")
    out = subprocess.run([cli, "reset-batches", res], capture_output=True, text=True, env=sim.env())
    assert out.returncode == 0 and "batch state removed" in out.stdout, out.stdout + out.stderr
    assert "rolloutState" not in fleet.resource(res)["status"]
    retry = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert retry.returncode != 0 and len(hosts(retry)) == 1 and hosts(retry) != [canary]
    # The status of the resumed halt still names the failed nodes and the real progress.
    status = fleet.resource(res)["status"]
    comp = status["compartmentStatuses"]["__default__"]
    assert comp["batchState"]["failedNodes"] >= 1 and comp["progressPercent"] == 66
    assert status["status"] == "halted" and status["nodesErroring"] == 2
    assert status["nodeStatus"][canary] == "erroring"

    # Fixing the config changes the spec: a new rollout, from the first batch, to the end.
    body = {"spec": {"packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}}}}}
    fleet.custom.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", res, body)
    fixed = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert fixed.returncode == 0, fixed.stdout[-4000:]
    assert [len(w) for w in waves_from_report(fixed.report)] == [1, 2]
    assert "starting from the first batch" in " ".join(fixed.report["rollout"][0].get("notes", []))
    status = fleet.resource(res)["status"]
    assert status["completeNodes"] == "3/3"
    comp = status["compartmentStatuses"]["__default__"]
    # Complete: progress 100%, and the batch state reset for the next rollout (resetBatchStateOnCompletion).
    assert comp["completed"] == 3 and comp["progressPercent"] == 100
    assert comp["batchState"]["currentBatch"] == 1 and comp["batchState"]["shouldStop"] is False


def test_missing_policy_leaves_the_resource_blocked_with_the_reason(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    res = "orphan-" + fleet.label
    fleet.create("NodeWright", res, sysctl_resource(fleet, "no-such-policy"))
    proc = fleet.playbook("rollout.yml")
    # The other resources roll out; the run then ends non-zero, naming this one and why.
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "could not be rolled out" in proc.stdout and res in proc.stdout and "no-such-policy" in proc.stdout
    status = fleet.resource(res)["status"]
    assert status["status"] == "blocked"
    assert "no-such-policy" in status["message"]
    blocked = [c for c in status["conditions"] if c["type"] == "Blocked"][0]
    assert blocked["status"] == "True"
    assert "nodewright.io/status-%s" % res not in fleet.node_labels(fleet.nodes[0])


def test_interrupt_requested_at_run_time_drains_the_node_first(sim, tmp_path):
    from k8s_helpers import deployment_on, running_pods
    fleet = Fleet(sim, tmp_path, [("h200", 2)])
    n1, n2 = fleet.nodes
    ns = sim.namespace("late")
    sim.core.patch_node(n2, {"spec": {"unschedulable": True}})
    deployment_on(sim, ns, "svc", [n1, n2], 1)
    sim.core.patch_node(n2, {"spec": {"unschedulable": None}})
    sim.core.patch_node(n2, {"metadata": {"labels": {"rollout-test": "elsewhere"}}})
    res = "late-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
        "packages": {"shellscript": {"version": "1.0.0", "configMap": {
            "apply.sh": "echo 'service containerd' > \"$NODEWRIGHT_INTERRUPT_FILE\"\n",
            "apply_check.sh": "test -d /etc\n"}}}})
    plan = fleet.plan(res)
    assert plan["nodes"][n1]["disruptive"] is False
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    drained = [t for t in proc.report["hosts"][n1]["results"] if t["task"] == "Drain the node before the interrupt"]
    assert drained and any(e.startswith(ns + "/svc-") for e in drained[0]["evicted"])
    assert [p.spec.node_name for p in running_pods(sim, ns, "app=svc")] == [n2]
    restarts = hostroot.run(sim.host_root(n1), "cat /run/nodewright-sim/units/containerd.service.restarts")
    assert restarts.stdout.strip()
    assert not sim.core.read_node(n1).spec.unschedulable
    assert fleet.node_labels(n1)["nodewright.io/status-%s" % res] == "complete"


def test_two_resources_that_disagree_on_a_setting_are_refused_before_anything_changes(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 2)])
    policy = "conflict-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}}})
    first, second = "first-" + fleet.label, "second-" + fleet.label
    fleet.create("NodeWright", first, sysctl_resource(fleet, policy, value="262144"))
    fleet.create("NodeWright", second, sysctl_resource(fleet, policy, value="1048576"))

    def content(node):
        obj = sim.core.read_node(node)
        return (obj.spec.to_dict(), obj.metadata.labels, obj.metadata.annotations)
    before = {n: content(n) for n in fleet.nodes}
    sysctls = {n: fleet.sysctl(n, "vm.max_map_count") for n in fleet.nodes}

    path = tmp_path / "plan.json"
    plan = fleet.playbook("plan.yml", "-e", "nodewright_plan_path=%s" % path)
    text = plan.stdout + plan.stderr
    assert "BLOCKED" in text and first in text and second in text
    assert "sysctl vm.max_map_count" in text and "'262144'" in text and "'1048576'" in text
    planned = json.loads(path.read_text())
    (conflict,) = [c for c in planned["conflicts"] if set(c["resources"]) == {first, second}]
    assert conflict["nodes"] == sorted(fleet.nodes) and conflict["setting"] == "sysctl:vm.max_map_count"

    for extra in ([], ["-e", "nodewright_resource=%s" % first]):
        proc = fleet.playbook("rollout.yml", *extra)
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        assert "both set sysctl vm.max_map_count" in out and "nothing was changed" in out
        assert {n: content(n) for n in fleet.nodes} == before
        assert {n: fleet.sysctl(n, "vm.max_map_count") for n in fleet.nodes} == sysctls
    assert fleet.resource(first)["status"]["status"] == "blocked"


def test_a_resource_that_succeeds_never_clears_anothers_error_on_the_node(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    (node,) = fleet.nodes
    policy = "err-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}}})
    bad, good = "bad-" + fleet.label, "good-" + fleet.label
    fleet.create("NodeWright", bad, {"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
                                     "deploymentPolicy": policy, "packages": {"shellscript": {
                                         "version": "1.0.0", "interrupt": {"type": "service", "services": ["x"]},
                                         "configMap": {"apply.sh": "echo broken >&2; exit 3\n",
                                                       "apply_check.sh": "false\n"}}}})
    spec = sysctl_resource(fleet, policy)
    spec["packages"]["sysctl"]["configMap"] = {"vm.swappiness": "10"}
    fleet.create("NodeWright", good, spec)
    failed = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % bad, "-e", "safe_update_on_failure=uncordon")
    assert failed.returncode != 0
    assert "The node is uncordoned and marked erroring" in failed.stdout
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % good)
    assert proc.returncode == 0, proc.stdout[-3000:]
    labels = fleet.node_labels(node)
    assert labels["nodewright.io/status-%s" % good] == "complete"
    assert labels["nodewright.io/status-%s" % bad] == "erroring" and labels["nodewright.io/status"] == "erroring"
    (cond,) = [c for c in sim.core.read_node(node).status.conditions if c.type == "nodewright.io/Erroring"]
    assert cond.status == "True" and bad in cond.message


# --------------------------------------------------------------------------- lifecycle parity


def shellscript(fleet, scripts, **spec):
    return dict({"nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}},
                 "interruptionBudget": {"count": 2},
                 "packages": {"shellscript": {"version": "1.0.0", "configMap": scripts}}}, **spec)


def node_state(fleet, node, res):
    annotations = fleet.sim.core.read_node(node).metadata.annotations or {}
    return json.loads(annotations["nodewright.io/state-%s" % res])


def test_a_stage_past_its_timeout_marks_the_node_erroring_with_the_stage_named(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    (n1,) = fleet.nodes
    res = "slow-" + fleet.label
    fleet.create("NodeWright", res, shellscript(fleet, {"apply.sh": "sleep 120\n", "apply_check.sh": "true\n"},
                                                stageTimeout="2s"))
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode != 0
    assert fleet.node_labels(n1)["nodewright.io/status-%s" % res] == "erroring"
    state = node_state(fleet, n1, res)
    entry = state["packages"]["shellscript"]
    assert (entry["stage"], entry["state"]) == ("apply", "erroring")
    assert "stage apply ran past its stageTimeout of 2s" in state["reason"]


def test_a_node_whose_state_cannot_be_read_is_left_out_and_marked(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 2)])
    n1, n2 = fleet.nodes
    res = "skip-" + fleet.label
    key = "nodewright.io/state-%s" % res
    sim.core.patch_node(n2, {"metadata": {"annotations": {key: "{hand edited"}}})
    fleet.create("NodeWright", res, shellscript(fleet, {"apply.sh": "echo on > /etc/skip-test\n",
                                                        "apply_check.sh": "test -s /etc/skip-test\n"}))
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert fleet.node_labels(n1)["nodewright.io/status-%s" % res] == "complete"
    assert sim.core.read_node(n2).metadata.annotations[key] == "{hand edited", "never overwritten"
    assert not os.path.exists(os.path.join(sim.host_root(n2), "etc/skip-test")), "the node was not touched"
    cond = [c for c in sim.core.read_node(n2).status.conditions if c.type == "nodewright.io/Erroring"][0]
    assert (cond.status, cond.reason) == ("True", "MalformedState")
    assert "nodewright reset %s --resource %s" % (n2, res) in cond.message


def test_sequencing_all_holds_the_next_priority_until_complete_everywhere(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 2)])
    n1, n2 = fleet.nodes
    first, later = "first-" + fleet.label, "later-" + fleet.label
    fleet.create("NodeWright", first, shellscript(fleet, {
        "apply.sh": "[ ! -e /etc/first-fails ]\n", "apply_check.sh": "true\n"},
        priority=10, sequencing="all"))
    fleet.create("NodeWright", later, shellscript(fleet, {"apply.sh": "echo on > /etc/later\n",
                                                          "apply_check.sh": "test -s /etc/later\n"}, priority=20))
    hostroot.run(sim.host_root(n2), "touch /etc/first-fails")
    # These two resources only (others of this session live in the same cluster).
    resources = [fleet.resource(first), fleet.resource(later)]
    proc = fleet.playbook("rollout.yml", "-e", json.dumps({"nodewright_resources": resources}))
    assert proc.returncode != 0, "first fails on n2"
    assert not any(os.path.exists(os.path.join(sim.host_root(n), "etc/later")) for n in (n1, n2)), \
        "the later priority waited"
    hostroot.run(sim.host_root(n2), "rm /etc/first-fails")
    proc = fleet.playbook("rollout.yml", "-e", json.dumps({"nodewright_resources": resources}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    proc = fleet.playbook("rollout.yml", "-e", json.dumps({"nodewright_resources": resources}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert all(os.path.exists(os.path.join(sim.host_root(n), "etc/later")) for n in (n1, n2))


def reboot(sim, node):
    before = sim.core.read_node(node).status.node_info.boot_id
    request = os.path.join(sim.host_root(node), hostroot.REBOOT_REQUEST)
    os.makedirs(os.path.dirname(request), exist_ok=True)
    with open(request, "w") as fh:
        fh.write("1\n")
    from k8s_helpers import wait_for
    wait_for(lambda: sim.core.read_node(node).status.node_info.boot_id != before and any(
        c.type == "Ready" and c.status == "True" for c in sim.core.read_node(node).status.conditions),
        timeout=120, what="%s rebooted" % node)


def test_a_reboot_reapplies_the_packages_when_asked(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    (n1,) = fleet.nodes
    asked, not_asked = "again-" + fleet.label, "once-" + fleet.label
    count = {"apply_check.sh": "test -s /var/lib/%s-runs\n"}
    fleet.create("NodeWright", asked, shellscript(fleet, {
        "apply.sh": "echo run >> /var/lib/again-runs\n", "apply_check.sh": count["apply_check.sh"] % "again"},
        reapplyOnReboot=True))
    fleet.create("NodeWright", not_asked, shellscript(fleet, {
        "apply.sh": "echo run >> /var/lib/once-runs\n", "apply_check.sh": count["apply_check.sh"] % "once"}))
    for res in (asked, not_asked):
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
        assert proc.returncode == 0, proc.stdout[-4000:]
    reboot(sim, n1)
    plan = fleet.plan(asked)
    assert plan["nodes"][n1]["actions"] == {"shellscript": "rerun"}
    assert fleet.plan(not_asked)["nodes"][n1]["actions"] == {"shellscript": "none"}
    for res in (asked, not_asked):
        proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
        assert proc.returncode == 0, proc.stdout[-4000:]
    root = sim.host_root(n1)
    assert open(os.path.join(root, "var/lib/again-runs")).read() == "run\nrun\n", "applied again after the reboot"
    assert open(os.path.join(root, "var/lib/once-runs")).read() == "run\n"
    assert fleet.plan(asked)["nodes"][n1]["actions"] == {"shellscript": "none"}, "once per reboot"


def one_node_resource(sim, tmp_path, prefix):
    """One H200 node and a resource whose script writes /etc/<prefix>-test (and checks it)."""
    fleet = Fleet(sim, tmp_path, [("h200", 1)])
    res = "%s-%s" % (prefix, fleet.label)
    fleet.create("NodeWright", res, shellscript(fleet, {"apply.sh": "echo on > /etc/%s-test\n" % prefix,
                                                        "apply_check.sh": "test -s /etc/%s-test\n" % prefix}))
    return fleet, fleet.nodes[0], res


def test_a_node_left_cordoned_by_a_crashed_run_of_the_resource_returns_to_work(sim, tmp_path):
    # A run killed between its cordon and its uncordon leaves the node cordoned by NodeWright
    # for this resource and in progress: the rerun finishes it and uncordons it, even when
    # what is left to do disrupts nothing.
    from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops
    fleet, node, res = one_node_resource(sim, tmp_path, "resume")
    crashed = ops.cordon_patch("cordon", reason="NodeWright %s" % res, resource=res)
    crashed["metadata"]["labels"] = {"nodewright.io/status-%s" % res: "in_progress"}
    sim.core.patch_node(node, crashed)
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"
    assert not sim.core.read_node(node).spec.unschedulable, "returned to work"
    assert "nodewright.io/cordoned-by" not in (sim.core.read_node(node).metadata.annotations or {})


def test_a_limit_without_localhost_is_refused_before_any_node_is_touched(sim, tmp_path):
    # rollout.yml plans on localhost first: a --limit that leaves it out must not end in a
    # run that did nothing and said nothing.
    fleet, node, res = one_node_resource(sim, tmp_path, "limit")
    before = sim.core.read_node(node).metadata.resource_version
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "--limit", node)
    assert proc.returncode != 0
    assert "plans on localhost first and the --limit leaves it out: add it (--limit localhost,NODE,...). " \
           "Nothing was changed" in proc.stdout + proc.stderr, proc.stderr
    assert sim.core.read_node(node).metadata.resource_version == before
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "--limit", "localhost," + node)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"


# --------------------------------------------------------------------------- workers


def _worker_children(proc, until):
    """Until ``until()`` is true: the package steps seen running (their ``sleep``) and, of their
    ancestors below the controller, those that are forks of it (a forked worker keeps the
    controller's command line)."""
    import time

    from fleet_helpers import process_tree

    def cmdline(pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def parent(pid):
        try:
            with open("/proc/%d/stat" % pid) as fh:
                return int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None

    # Popen returns once the exec has begun, before the kernel has set the new command line:
    # until then /proc/PID/cmdline reads empty, as it does for any process caught in its exec.
    own = b""
    while not own and proc.poll() is None:
        own = cmdline(proc.pid) or b""
        time.sleep(0.01)
    assert own, "the controller ended before its command line could be read"
    forks, steps = set(), set()
    while not until() and proc.poll() is None:
        for pid in process_tree(proc.pid)[1:]:
            if not (cmdline(pid) or b"").startswith(b"sleep"):
                continue
            chain, current = [], parent(pid)
            while current not in (None, proc.pid):
                chain.append(current)
                current = parent(current)
            if current != proc.pid:
                continue  # the step ended while its ancestors were read
            steps.add(pid)
            forks.update(p for p in chain if cmdline(p) == own)
        time.sleep(0.05)
    return forks, steps


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_maintain_tasks_run_in_threads_or_processes_with_the_same_outcome(sim, tmp_path, workers):
    fleet = Fleet(sim, tmp_path, [("h100", 3)])
    res = "workers-%s-%s" % (workers[0], fleet.label)
    fleet.create("NodeWright", res, shellscript(fleet, {"apply.sh": "sleep 3; echo on > /etc/workers-test\n",
                                                        "apply_check.sh": "test -s /etc/workers-test\n"},
                                                interruptionBudget={"count": 3}))
    extra = ("-e", "nodewright_rollout_workers=threads") if workers == "threads" else ()  # processes: the default
    proc = fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, *extra, name=workers)
    marker = "nodewright.io/status-%s" % res
    forks, steps = _worker_children(proc, lambda: all(
        fleet.node_labels(n).get(marker) == "complete" for n in fleet.nodes))
    proc = fleet.finished(proc)
    assert proc.returncode == 0, proc.output[-4000:]
    assert steps, "no package step was seen running"
    # Thread workers need the worker plumbing of ansible-core 2.19/2.20 (plugins/plugin_utils/
    # core_internals.py); on another release the rollout forks, as with processes, and says so once.
    threaded = workers == "threads" and core_internals.thread_worker_class() is not None
    fallback = "nodewright_rollout_workers=threads needs ansible-core 2.19 or 2.20; on ansible-core %s" % CORE_VERSION
    assert proc.output.count(fallback) == (1 if workers == "threads" and not threaded else 0), proc.output[-4000:]
    if threaded:
        assert not forks, "the maintain tasks forked %d worker(s)" % len(forks)
    else:
        assert forks, "no forked worker ran a maintain task"
    for node in fleet.nodes:
        assert fleet.node_labels(node)[marker] == "complete"
        assert hostroot.run(sim.host_root(node), "cat /etc/workers-test").stdout.strip() == "on"
        assert not sim.core.read_node(node).spec.unschedulable
        host = proc.report["hosts"][node]
        assert host["outcome"] == "ok"
        steps = [(e["task"], e["status"]) for e in host["timeline"]]
        assert any(name.startswith("Run the packages") and status == "changed" for name, status in steps), steps
    status = fleet.resource(res)["status"]
    assert status["status"] == "complete" and status["completeNodes"] == "3/3"


def test_an_unknown_worker_mode_is_refused_before_any_node_is_touched(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 1)])
    (n1,) = fleet.nodes
    res = "workers-bad-" + fleet.label
    fleet.create("NodeWright", res, shellscript(fleet, {"apply.sh": "echo on > /etc/workers-bad\n",
                                                        "apply_check.sh": "test -s /etc/workers-bad\n"}))
    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res, "-e", "nodewright_rollout_workers=fork")
    assert proc.returncode != 0
    assert "nodewright_rollout_workers must be one of threads, processes, got 'fork'" in proc.stdout + proc.stderr
    assert "nodewright.io/status-%s" % res not in fleet.node_labels(n1)
    assert not sim.core.read_node(n1).spec.unschedulable
