# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Taking over from upstream NodeWright (NVIDIA's operator, formerly Skyhook) on the
simulator: nodes carry the state the operator's controller writes (its nodeState
annotation as json.Marshal writes it, status label and annotation, version and cordon
annotations, its runtime-required taint; one node from before the rename, under
skyhook.nvidia.com), ``nodewright adopt`` records what upstream completed, and
rollout.yml then applies only the rest: an adopted package never runs again (its
setting is not on the host, since upstream's run is only recorded here), the package
upstream left erroring runs from the start, the cordon upstream held is lifted and its
taint removed once the node is complete. A second adopt changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fleet_helpers import REPO, Fleet

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers

pytestmark = pytest.mark.integration

MARKER = "/etc/adopt-test-applied"
TAINT = {"key": "nodewright.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}


def package_status(name, version, stage, state):
    """A PackageStatus as the operator marshals it (fields in declaration order)."""
    return {"name": name, "version": version, "image": "ghcr.io/nvidia/skyhook-packages/" + name, "stage": stage,
            "state": state}


def upstream_marks(prefix, resource, entries, status, cordoned=False):
    """The annotations the operator's controller keeps on a node for ``resource``."""
    state = {"%s|%s" % (e["name"], e["version"]): e for e in entries}
    out = {"%s/nodeState_%s" % (prefix, resource): json.dumps(state, separators=(",", ":"), sort_keys=True),
           "%s/status_%s" % (prefix, resource): status, "%s/version_%s" % (prefix, resource): "v0.20.0"}
    if cordoned:
        out["%s/cordon_%s" % (prefix, resource)] = "true"
    return out


def adopt(fleet, *args):
    env = fleet.sim.env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")])
    env["HOME"] = str(fleet.tmp)
    nodes = [a for n in fleet.nodes for a in ("--node", n)]
    return subprocess.run([sys.executable, "-m", "nodewright_cli", "adopt"] + nodes + list(args),
                          capture_output=True, text=True, env=env, cwd=str(fleet.tmp))


def marks(fleet, node):
    """What adopt may change on a node: its annotations, labels, cordon and taints."""
    n = fleet.sim.core.read_node(node)
    return (n.metadata.annotations, n.metadata.labels, n.spec.unschedulable,
            sorted(t.key for t in n.spec.taints or []))


def settled_marks(fleet, node, timeout=60):
    """``marks`` once the node controller's unschedulable taint agrees with the cordon
    (it follows a cordon or an uncordon a moment later), so that a later change is adopt's own."""
    deadline = time.monotonic() + timeout
    while True:
        found = marks(fleet, node)
        if bool(found[2]) == ("node.kubernetes.io/unschedulable" in found[3]) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def nodewright_state(fleet, node, resource):
    return json.loads(fleet.sim.core.read_node(node).metadata.annotations[markers.state_annotation(resource)])


def test_adopt_records_what_upstream_finished_and_the_rollout_does_only_the_rest(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h200", 2)])
    finished, halfway = fleet.nodes
    res = "adopt-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 2},
        "runtimeRequired": True,
        "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"}},
                     "shellscript": {"version": "1.0.0", "configMap": {
                         "apply.sh": "echo applied > %s\n" % MARKER, "apply_check.sh": "test -s %s\n" % MARKER}}}})
    # Upstream finished both packages on one node (an operator from before the rename: the legacy
    # prefix); on the other, the shellscript package failed, with the node cordoned and gated.
    # sysctl was written "1.0", as upstream accepts it.
    legacy = upstream_marks("skyhook.nvidia.com", res, [package_status("sysctl", "1.0", "config", "complete"),
                                                        package_status("shellscript", "1.0.0", "config", "complete")],
                            "complete")
    ghost = upstream_marks("nodewright.nvidia.com", "ghost-" + fleet.label,
                           [package_status("sysctl", "1.0.0", "config", "complete")], "complete")
    sim.core.patch_node(finished, {"metadata": {"annotations": dict(legacy, **ghost),
                                                "labels": {"skyhook.nvidia.com/status_" + res: "complete"}}})
    sim.core.patch_node(halfway, {
        "metadata": {"annotations": upstream_marks(
            "nodewright.nvidia.com", res, [package_status("sysctl", "1.0", "config", "complete"),
                                           package_status("shellscript", "1.0.0", "apply", "erroring")],
            "erroring", cordoned=True),
            "labels": {"nodewright.nvidia.com/status_" + res: "erroring"}},
        "spec": {"unschedulable": True, "taints": [TAINT]}})
    before = {n: settled_marks(fleet, n) for n in fleet.nodes}

    # The plan says what upstream completed and that it would be applied again until adopted.
    plan = fleet.plan(res)
    assert plan["adoptable"] == {finished: ["shellscript 1.0.0", "sysctl 1.0.0"], halfway: ["sysctl 1.0.0"]}
    assert {p["action"] for n in plan["nodes"].values() for p in n["packages"]} == {"apply"}

    # The dry run shows the adoption and changes nothing.
    dry = adopt(fleet, "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "would be adopted as complete: shellscript 1.0.0, sysctl 1.0.0" in dry.stdout
    assert "would be adopted as complete: sysctl 1.0.0" in dry.stdout
    assert "dry run: nothing was changed" in dry.stdout
    assert {n: marks(fleet, n) for n in fleet.nodes} == before

    done = adopt(fleet)
    # The state of a resource NodeWright does not have is reported, not adopted: exit 2.
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout
    assert "upstream resource %s (skyhook.nvidia.com/nodeState_%s, operator v0.20.0, status complete)" % (
        res, res) in out
    assert "adopted as complete: shellscript 1.0.0, sysctl 1.0.0" in out
    assert ("not adopted, to be applied again by the next rollout: shellscript 1.0.0 (upstream left it erroring at "
            "stage apply; NodeWright applies it from the start)") in out
    assert "no NodeWright resource ghost-%s: nothing adopted" % fleet.label in out
    assert "cordon held by upstream (nodewright.nvidia.com/cordon_%s) taken over" % res in out
    assert "taint nodewright.nvidia.com=runtime-required:NoSchedule: taint nodewright.nvidia.com kept" in out
    assert "adopted 3 package(s); 2 node(s) changed; 1 to be applied again by the next rollout" in out
    state = nodewright_state(fleet, finished, res)
    assert {p: (e["version"], e["state"], e["adoptedFrom"]) for p, e in state["packages"].items()} == {
        "sysctl": ("1.0.0", "complete", "skyhook.nvidia.com/nodeState_" + res),
        "shellscript": ("1.0.0", "complete", "skyhook.nvidia.com/nodeState_" + res)}
    assert fleet.node_labels(finished)[markers.status_label(res)] == "complete"
    assert list(nodewright_state(fleet, halfway, res)["packages"]) == ["sysctl"]
    record = json.loads(sim.core.read_node(halfway).metadata.annotations[markers.ANNOTATION_CORDONED_BY])
    assert (record["owner"], record["resource"]) == ("nodewright", res)
    # Upstream's own marks stay as the operator left them.
    for node in fleet.nodes:
        for key, value in before[node][0].items():
            assert marks(fleet, node)[0][key] == value

    # Adopted, the plan applies only what upstream did not finish.
    plan = fleet.plan(res)
    assert plan["adoptable"] == {} and plan["work"] == [halfway]
    assert {p["name"]: p["action"] for p in plan["nodes"][halfway]["packages"]} == {
        "sysctl": "none", "shellscript": "apply"}

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # Nothing adopted ran again: sysctl's setting is not on either host, shellscript's mark only where
    # upstream had failed it.
    for node in fleet.nodes:
        assert fleet.sysctl(node, "vm.max_map_count") != "262144"
    assert fleet.sysctl(finished, "vm.max_map_count") == fleet.sysctl(halfway, "vm.max_map_count")
    assert not os.path.exists(os.path.join(sim.host_root(finished), MARKER.lstrip("/")))
    with open(os.path.join(sim.host_root(halfway), MARKER.lstrip("/"))) as fh:
        assert fh.read() == "applied\n"
    after = nodewright_state(fleet, halfway, res)["packages"]
    assert after["sysctl"]["adoptedFrom"] == "nodewright.nvidia.com/nodeState_" + res
    assert after["shellscript"]["state"] == "complete" and "adoptedFrom" not in after["shellscript"]
    host = json.loads(open(os.path.join(sim.host_root(halfway), "var/lib/nodewright/state/%s.json" % res)).read())
    assert sorted(host["packages"]) == ["shellscript", "sysctl"]
    assert finished not in [h for h in proc.report["hosts"]]
    node = sim.core.read_node(halfway)
    assert not node.spec.unschedulable
    assert "nodewright.nvidia.com" not in [t.key for t in node.spec.taints or []]
    assert {fleet.node_labels(n)[markers.status_label(res)] for n in fleet.nodes} == {"complete"}

    # A second adopt finds it all recorded and changes nothing.
    settled = {n: settled_marks(fleet, n) for n in fleet.nodes}
    again = adopt(fleet)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "nothing to adopt: everything upstream completed is already recorded" in again.stdout
    assert "already recorded by NodeWright: shellscript 1.0.0, sysctl 1.0.0" in again.stdout
    assert {n: marks(fleet, n) for n in fleet.nodes} == settled
