"""The safe sequence against the simulator's real API server: PDB-respecting drain,
non-interruptible pods, ownership of the cordon, failure marking, reboots."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import watch

from k8s_helpers import deployment_on, host_result, node_pods, pdb, running_pods, wait_for

pytestmark = pytest.mark.integration

RES = "test-maint"


def node(sim, name):
    return sim.core.read_node(name)


def spec_and_metadata(sim, name):
    """What a task can change on a node; the status moves on its own (the node's heartbeat)."""
    obj = sim.api.sanitize_for_serialization(node(sim, name))
    meta = obj["metadata"]
    return obj.get("spec"), meta.get("labels"), meta.get("annotations")


def labels(sim, name):
    return node(sim, name).metadata.labels or {}


def condition(sim, name, ctype):
    for c in node(sim, name).status.conditions or []:
        if c.type == ctype:
            return c
    return None


def safe_update_play(nodes_vars=None, **role_vars):
    role_vars.setdefault("safe_update_resource", RES)
    role_vars.setdefault("safe_update_drain_timeout", 60)
    return {"tasks": [{"name": "Safe update", "ansible.builtin.include_role": {"name": "nodewright.fleet.safe_update"},
                       "vars": role_vars}]}


def test_drain_fails_at_deadline_naming_the_pdb_and_leaves_node_cordoned_and_marked(sim, tmp_path):
    ns = sim.namespace("strict")
    (n1,) = sim.add_nodes("h200", 1)
    deployment_on(sim, ns, "strict", [n1], 2)
    pdb(sim, ns, "strict", minAvailable=2)
    proc = sim.playbook(tmp_path, safe_update_play(safe_update_drain_timeout=4), hosts=[n1])
    assert proc.returncode != 0
    drain = host_result(proc, n1, "Drain the node")
    assert drain["failed"]
    assert "PodDisruptionBudget %s/strict" % ns in drain["msg"]
    assert drain["blocking_pdbs"][0]["pdb"] == "%s/strict" % ns
    assert sorted(drain["still_present"]) == sorted("%s/%s" % (ns, p.metadata.name)
                                                  for p in running_pods(sim, ns, "app=strict"))
    assert drain["eviction_attempts"] > 2  # retried, not failed on the first 429
    fail = host_result(proc, n1, "Fail with the reason")
    assert "left cordoned for triage" in fail["msg"]
    assert node(sim, n1).spec.unschedulable is True
    assert labels(sim, n1)["nodewright.io/status-%s" % RES] == "erroring"
    assert labels(sim, n1)["nodewright.io/status"] == "erroring"
    cond = condition(sim, n1, "nodewright.io/Erroring")
    assert cond.status == "True" and "strict" in cond.message
    state = json.loads(node(sim, n1).metadata.annotations["nodewright.io/state-%s" % RES])
    assert state["status"] == "erroring" and "strict" in state["reason"]
    events = sim.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % n1).items
    assert {"NodeWrightDrainFailed", "NodeWrightFailed", "NodeWrightCordon"} <= {e.reason for e in events}
    assert len(running_pods(sim, ns, "app=strict")) == 2  # nothing was lost


def test_drain_with_pdb_succeeds_without_violating_it(sim, tmp_path):
    ns = sim.namespace("budget")
    n1, n2 = sim.add_nodes("b200", 2)
    sim.core.patch_node(n2, {"spec": {"unschedulable": True}})
    # Each replacement takes 3 s to start: the PDB (maxUnavailable 1) holds every further
    # eviction until the one before it is replaced.
    deployment_on(sim, ns, "svc", [n1, n2], 4, ready_after="3s")
    sim.core.patch_node(n2, {"spec": {"unschedulable": False}})
    pdb(sim, ns, "svc", maxUnavailable=1)
    healthy_counts = []
    stop = threading.Event()

    def watcher():
        w = watch.Watch()
        pods = {}
        for ev in w.stream(sim.core.list_namespaced_pod, ns, label_selector="app=svc", timeout_seconds=90):
            p = ev["object"]
            if ev["type"] == "DELETED":
                pods.pop(p.metadata.uid, None)
            else:
                ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                pods[p.metadata.uid] = ready and not p.metadata.deletion_timestamp
            healthy_counts.append(sum(pods.values()))
            if stop.is_set():
                w.stop()
                return
    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    wait_for(lambda: healthy_counts and healthy_counts[-1] == 4, what="watch primed")
    proc = sim.playbook(tmp_path, safe_update_play(), hosts=[n1])
    stop.set()
    sim.core.create_namespaced_config_map(ns, {"metadata": {"name": "poke"}})
    assert proc.returncode == 0, proc.stdout[-3000:]
    drain = host_result(proc, n1, "Drain the node")
    assert len([e for e in drain["evicted"] if e.startswith(ns + "/")]) == 4
    assert drain["eviction_attempts"] > 4  # the PDB made some evictions wait
    assert all(p.spec.node_name == n2 for p in running_pods(sim, ns, "app=svc"))
    # Once all four were healthy, never fewer than three were (maxUnavailable: 1).
    first = healthy_counts.index(4)
    assert min(healthy_counts[first:]) >= 3, healthy_counts
    assert not node(sim, n1).spec.unschedulable
    assert labels(sim, n1)["nodewright.io/status-%s" % RES] == "complete"


def test_non_interruptible_job_is_waited_for_then_drained(sim, tmp_path):
    ns = sim.namespace("train")
    (n1,) = sim.add_nodes("gb200", 1)
    sim.fleet.create_training_job("run", run_for="30s", gpus=4, namespace=ns, node_name=n1)
    wait_for(lambda: running_pods(sim, ns, "app=run"), what="training pod running")
    proc = sim.playbook(tmp_path, safe_update_play(
        safe_update_non_interruptible_selector="app.kubernetes.io/component=training",
        safe_update_wait_timeout=120), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    waited = host_result(proc, n1, "Wait for non-interruptible pods to finish")
    assert waited["initially_blocking"][0]["pod"].startswith(ns + "/run-")
    assert waited["blocking"] == []
    # Finished, not evicted (the Job controller records the success a moment after the pod ends).
    wait_for(lambda: sim.batch.read_namespaced_job("run", ns).status.succeeded == 1, what="job succeeded")


def test_non_interruptible_job_outliving_deadline_means_nothing_evicted(sim, tmp_path):
    ns = sim.namespace("longtrain")
    (n1,) = sim.add_nodes("gb200", 1)
    deployment_on(sim, ns, "side", [n1], 1)
    sim.fleet.create_training_job("long", run_for="600s", gpus=4, namespace=ns, node_name=n1)
    wait_for(lambda: running_pods(sim, ns, "app=long"), what="training pod running")
    before = {p.metadata.uid for p in node_pods(sim, n1)}
    proc = sim.playbook(tmp_path, safe_update_play(
        safe_update_non_interruptible_selector={"matchLabels": {"app.kubernetes.io/component": "training"}},
        safe_update_wait_timeout=3), hosts=[n1])
    assert proc.returncode != 0
    waited = host_result(proc, n1, "Wait for non-interruptible pods to finish")
    assert "nothing was evicted" in waited["msg"] and "/long-" in waited["msg"]
    assert before <= {p.metadata.uid for p in node_pods(sim, n1)}
    assert labels(sim, n1)["nodewright.io/status-%s" % RES] == "erroring"


def test_daemonset_pods_stay_and_are_reported(sim, tmp_path):
    (n1,) = sim.add_nodes("h100", 1)
    wait_for(lambda: [p for p in node_pods(sim, n1) if p.metadata.namespace == "gpu-monitoring"
                      and p.status.phase == "Running"], what="DaemonSet pod on the new node")
    proc = sim.playbook(tmp_path, safe_update_play(), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    drain = host_result(proc, n1, "Drain the node")
    assert any(s["pod"].startswith("gpu-monitoring/dcgm-exporter") and "DaemonSet" in s["reason"]
               for s in drain["kept"])
    assert [p for p in node_pods(sim, n1) if p.metadata.namespace == "gpu-monitoring"]


def test_node_cordoned_by_someone_else_is_not_uncordoned(sim, tmp_path):
    (n1,) = sim.add_nodes("h100", 1)
    sim.core.patch_node(n1, {"spec": {"unschedulable": True}})
    play = {"tasks": [{"name": "Uncordon", "nodewright.fleet.node_cordon": {"name": n1, "state": "uncordoned"},
                       "delegate_to": "localhost", "ignore_errors": True}]}
    proc = sim.playbook(tmp_path, play, hosts=[n1])
    res = host_result(proc, n1, "Uncordon")
    assert res["failed"] and "cordoned by someone else" in res["msg"]
    assert node(sim, n1).spec.unschedulable is True
    proc = sim.playbook(tmp_path, safe_update_play(), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert node(sim, n1).spec.unschedulable is True


def test_check_mode_changes_nothing_and_second_run_is_unchanged(sim, tmp_path):
    ns = sim.namespace("idem")
    (n1,) = sim.add_nodes("h200", 1)
    deployment_on(sim, ns, "web", [n1], 2)
    before = spec_and_metadata(sim, n1)
    play = {"tasks": [
        {"name": "Cordon", "nodewright.fleet.node_cordon": {"name": n1}, "delegate_to": "localhost"},
        {"name": "Drain", "nodewright.fleet.node_drain": {"name": n1, "timeout": 30}, "delegate_to": "localhost"},
    ]}
    proc = sim.playbook(tmp_path, play, hosts=[n1], check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert host_result(proc, n1, "Cordon")["changed"] is True
    assert len([p for p in host_result(proc, n1, "Drain")["would_evict"] if p["pod"].startswith(ns)]) == 2
    assert not node(sim, n1).spec.unschedulable
    assert spec_and_metadata(sim, n1) == before
    assert len(running_pods(sim, ns, "app=web")) == 2
    first = sim.playbook(tmp_path, play, hosts=[n1])
    assert first.returncode == 0
    assert host_result(first, n1, "Cordon")["changed"] is True
    second = sim.playbook(tmp_path, play, hosts=[n1])
    assert second.returncode == 0
    assert host_result(second, n1, "Cordon")["changed"] is False
    assert host_result(second, n1, "Drain")["changed"] is False


def test_rerun_after_crash_finishes_on_nodewrights_own_cordon(sim, tmp_path):
    (n1,) = sim.add_nodes("h100", 1)
    play = {"tasks": [
        {"name": "Cordon", "nodewright.fleet.node_cordon": {"name": n1, "reason": "crashed run"},
         "delegate_to": "localhost"},
        {"name": "Mark", "nodewright.fleet.node_state": {"name": n1, "resource": RES, "status": "in_progress"},
         "delegate_to": "localhost"}]}
    assert sim.playbook(tmp_path, play, hosts=[n1]).returncode == 0
    proc = sim.playbook(tmp_path, safe_update_play(), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "already cordoned by NodeWright" in host_result(proc, n1, "Cordon the node")["msg"]
    assert not node(sim, n1).spec.unschedulable
    assert labels(sim, n1)["nodewright.io/status-%s" % RES] == "complete"


def test_reboot_interrupt_waits_for_new_boot_id_and_ready(sim, tmp_path):
    (n1,) = sim.add_nodes("b200", 1)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in node(sim, n1).status.conditions or []),
             what="Ready")
    before = node(sim, n1).status.node_info.boot_id
    proc = sim.playbook(tmp_path, safe_update_play(safe_update_interrupt={"type": "reboot"},
                                                   safe_update_reboot_timeout=60), hosts=[n1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    ready = host_result(proc, n1, "Wait for the node to be Ready with a new boot ID")
    assert ready["rebooted"] and ready["previous_boot_id"] == before and ready["boot_id"] != before
    assert node(sim, n1).status.node_info.boot_id == ready["boot_id"]


@pytest.mark.parametrize("args,message", [
    ({"name": "no-such-node"}, "node no-such-node does not exist"),
    ({"name": "NODE", "timeout": -5}, "timeout must be between"),
    ({"name": "NODE", "grace_period": -1}, "grace_period must be 0 or more"),
    ({"name": "NODE", "non_interruptible_selector": "app in (x"}, "unclosed '('"),
])
def test_bad_input_fails_before_anything_changes(sim, tmp_path, args, message):
    nodes = [n.metadata.name for n in sim.core.list_node(label_selector="nodepool=h100").items]
    target = nodes[0]
    before = spec_and_metadata(sim, target)
    args = {k: (target if v == "NODE" else v) for k, v in args.items()}
    play = {"tasks": [{"name": "Drain", "nodewright.fleet.node_drain": args, "delegate_to": "localhost",
                       "ignore_errors": True}]}
    proc = sim.playbook(tmp_path, play, hosts=[target])
    res = host_result(proc, target, "Drain")
    assert res["failed"] and message in res["msg"], res
    assert spec_and_metadata(sim, target) == before


@pytest.mark.parametrize("args,words", [
    ({"drain_timout": 30}, ["Unsupported parameters", "drain_timout", "drain_timeout"]),
    ({"drain_timeout": "ten minutes"}, ["drain_timeout", "int"]),
    ({"on_failure": "reboot"}, ["on_failure", "keep_cordoned, uncordon"]),
    ({"phase": "takeout"}, ["phase", "take_out"]),
])
def test_maintain_refuses_bad_options_before_touching_the_node(sim, tmp_path, args, words):
    target = sim.core.list_node(label_selector="nodepool=h100").items[0].metadata.name
    before = spec_and_metadata(sim, target)
    play = {"tasks": [{"name": "Maintain", "nodewright.fleet.maintain": dict(args, packages=[]),
                       "ignore_errors": True}]}
    proc = sim.playbook(tmp_path, play, hosts=[target])
    res = host_result(proc, target, "Maintain")
    assert res["failed"] and not res["changed"], res
    for word in words:
        assert word in res["msg"], res["msg"]
    assert "nothing was changed" in res["msg"]
    assert spec_and_metadata(sim, target) == before


def test_a_failed_noop_package_says_the_node_was_never_cordoned(sim, tmp_path):
    (n1,) = sim.add_nodes("h200", 1)
    root = sim.host_root(n1)
    work = tmp_path / "work.yml"
    work.write_text(json.dumps([{"name": "Run a failing noop package", "nodewright.fleet.package": {
        "name": "shellscript", "host_root": root, "resource": RES,
        "config": {"apply.sh": "exit 4\n", "apply_check.sh": "true\n"}}}]))
    proc = sim.playbook(tmp_path, safe_update_play(safe_update_disruptive=False, safe_update_work_tasks=str(work)),
                        hosts=[n1])
    assert proc.returncode != 0
    fail = host_result(proc, n1, "Fail with the reason")
    assert "not cordoned (it was never taken out of work)" in fail["msg"]
    assert "left cordoned" not in fail["msg"]
    assert not node(sim, n1).spec.unschedulable
    assert labels(sim, n1)["nodewright.io/status-%s" % RES] == "erroring"


def test_waiting_for_training_pods_shows_on_the_resource(sim, tmp_path):
    from k8s_helpers import ensure_crds
    custom = ensure_crds(sim)
    ns = sim.namespace("waitres")
    (n1,) = sim.add_nodes("gb200", 1)
    res = "waits-%s" % n1
    custom.create_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", {
        "apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": res},
        "spec": {"nodeSelectors": {"matchLabels": {"kubernetes.io/hostname": n1}},
                 "podNonInterruptLabels": {"matchLabels": {"app.kubernetes.io/component": "training"}}}})
    sim.fleet.create_training_job("train", run_for="20s", gpus=4, namespace=ns, node_name=n1)
    wait_for(lambda: running_pods(sim, ns, "app=train"), what="training pod running")
    pod = running_pods(sim, ns, "app=train")[0].metadata.name
    done = {}
    worker = threading.Thread(target=lambda: done.update(proc=sim.playbook(tmp_path, safe_update_play(
        safe_update_resource=res, safe_update_non_interruptible_selector="app.kubernetes.io/component=training",
        safe_update_wait_timeout=120), hosts=[n1])))
    worker.start()

    def waiting():
        status = custom.get_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", res).get("status") or {}
        return [c for c in status.get("conditions") or [] if c["type"] == "NonInterruptPodsRunning"
                and c["status"] == "True"]

    (cond,) = wait_for(waiting, timeout=60, what="the resource's NonInterruptPodsRunning condition")
    assert "%s/%s" % (ns, pod) in cond["message"] and n1 in cond["message"]
    events = sim.core.list_namespaced_event("default", field_selector="involvedObject.name=%s" % res).items
    assert any(e.reason == "NonInterruptPodsRunning" and pod in e.message and e.involved_object.kind == "NodeWright"
               for e in events)
    worker.join()
    assert done["proc"].returncode == 0, done["proc"].stdout[-3000:]
    status = custom.get_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", res)["status"]
    (after,) = [c for c in status["conditions"] if c["type"] == "NonInterruptPodsRunning"]
    assert after["status"] == "False"
    custom.delete_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", res)
