# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Bad input against the simulator's real API server: one clear error that names the
option or field and the fix, and nothing changed - neither the nodes (spec, labels,
annotations, conditions, read back through the API and compared by content, since a
heartbeat changes the resourceVersion) nor the Events on them, nor a node's host root.

Node names that would leave their place in a URL path (``NODE/status`` reached the
status subresource, ``NODE/proxy`` the node proxy), field-selector injection, upper
case, over-long names; label keys and values that break the syntax; selectors; YAML
bombs as a package manifest and as a vars file; inline resources the CRD would refuse.
Also what is true when a task fails after changing something: it says changed, and the
node's Erroring condition covers every resource on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from k8s_helpers import host_result, wait_for
from test_crds_api import install_crds

from ansible_collections.nodewright.fleet.plugins.connection.node import NodePod
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, get_json

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
RES = "badinput"


def billion_laughs(levels=9, key="lol", name="l"):
    lines = ["%s0: &%s0 [%s]" % (name, name, ", ".join(['"%s"' % key] * 9))]
    for i in range(1, levels):
        lines.append("%s%d: &%s%d [%s]" % (name, i, name, i, ", ".join(["*%s%d" % (name, i - 1)] * 9)))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- what "nothing changed" means

def _node_content(sim, name):
    raw = json.loads(sim.core.read_node(name, _preload_content=False).data)
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    conditions = sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                        for c in status.get("conditions") or [])
    return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
            "unschedulable": bool(spec.get("unschedulable")), "taints": spec.get("taints") or [],
            "conditions": conditions}


def _nodewright_marks(sim):
    """Every node's NodeWright marks and cordon: what a request meant for one node but sent
    to another, or to another place of it, would have changed."""
    out = {}
    for node in json.loads(sim.core.list_node(_preload_content=False).data)["items"]:
        meta = node["metadata"]
        out[meta["name"]] = {
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "marks": {k: v for k, v in list((meta.get("labels") or {}).items())
                      + list((meta.get("annotations") or {}).items()) if k.startswith("nodewright.io/")},
            "conditions": sorted((c["type"], c["status"], c.get("reason"), c.get("message"))
                                 for c in (node.get("status") or {}).get("conditions") or []
                                 if c["type"].startswith("nodewright.io/"))}
    return out


def _events(sim, names):
    """NodeWright's Events on these nodes (or on a name made from theirs)."""
    found = []
    for event in sim.core.list_namespaced_event("default").items:
        if (event.source and event.source.component) != "nodewright":
            continue
        if any(event.involved_object.name.startswith(n) for n in names):
            found.append((event.involved_object.name, event.reason, event.message))
    return sorted(found)


def snapshot(sim, nodes):
    return {"nodes": {n: _node_content(sim, n) for n in nodes}, "marks": _nodewright_marks(sim),
            "events": _events(sim, nodes)}


def tree_digest(root):
    """Paths, modes, link targets and contents of a host root."""
    digest = hashlib.sha256()
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(base, name)
            st = os.lstat(path)
            digest.update(("%s %o" % (os.path.relpath(path, root), st.st_mode)).encode())
            if os.path.islink(path):
                digest.update(os.readlink(path).encode())
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    digest.update(hashlib.sha256(fh.read()).digest())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def crds(sim):
    proc = install_crds(sim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return client.CustomObjectsApi(sim.api)


def settled(sim, names):
    """Wait until fresh nodes are done being set up (kwok's status, the controllers' labels):
    two reads a second apart that agree."""
    import time

    def same():
        first = {n: _node_content(sim, n) for n in names}
        time.sleep(1)
        return first == {n: _node_content(sim, n) for n in names} and \
            all(("Ready", "True") in [(c[0], c[1]) for c in first[n]["conditions"]] for n in names)
    wait_for(same, timeout=120, interval=0.5, what="nodes %s settled" % ", ".join(names))


@pytest.fixture(scope="module")
def nodes(sim):
    """Two fresh nodes: the one every bad name is made from, and its neighbour."""
    names = tuple(sim.add_nodes("h200", 2))
    settled(sim, names)
    return names


# --------------------------------------------------------------------------- the table

def bad_inputs(n1):
    """(task name, module, options, the option the error must name, what it must say)."""
    name_cases = [
        ("status subresource", n1 + "/status", "'/' is not allowed"),
        ("node proxy", n1 + "/proxy", "'/' is not allowed"),
        ("dot-dot", "..", "each part between dots"),
        ("dot-dot segment", n1 + "/../" + n1, "'/' is not allowed"),
        ("encoded slash", n1 + "%2Fstatus", "'%' is not allowed"),
        ("upper case", n1.upper(), "it has upper-case letters"),
        ("too long", "n" * 254, "it is 254 characters long"),
        ("field selector injection", n1 + ",metadata.name=" + n1, "',' is not allowed"),
        ("query", n1 + "?dryRun=All", "'?' is not allowed"),
        ("white space", n1 + " ", "it contains white space"),
        ("empty", "", "it is empty"),
    ]
    cases = []
    modules = [
        ("node_state", {"status": "erroring", "state": {"reason": "x"},
                        "error": {"reason": "Test", "message": "bad input test"}}),
        ("node_cordon", {"state": "cordoned", "reason": "bad input test"}),
        ("node_drain", {"timeout": 5}),
        ("node_wait_pods", {"selectors": "app.kubernetes.io/component=training", "timeout": 5}),
        ("node_health", {"phase": "post", "timeout": 5}),
        ("node_gate", {"state": "present"}),
        ("node_wait_ready", {"timeout": 5}),
        ("node_maintenance", {"timeout": 5}),
    ]
    for module, extra in modules:
        for label, value, problem in name_cases:
            cases.append(("%s %s" % (module, label), module, dict(extra, name=value), "name", problem))
    cases += [
        ("resource_status targets", "resource_status", {"name": RES, "targets": [n1 + "/status"]}, "targets[0]",
         "'/' is not allowed"),
        ("desired_state name", "desired_state", {"name": "Bad/Name"}, "name", "is not a valid NodeWright name"),
        ("node_state resource path", "node_state", {"name": n1, "resource": "../etc", "status": "complete"},
         "resource", "is not a valid NodeWright name"),
        ("node_state resource too long", "node_state", {"name": n1, "resource": "r" * 57, "status": "complete"},
         "resource", "57 characters long"),
        ("node_state error text", "node_state", {"name": n1, "status": "erroring", "error": "boom"}, "error",
         "must be false or a mapping"),
        ("node_state error without message", "node_state", {"name": n1, "status": "erroring",
                                                            "error": {"reason": "R"}}, "error.message",
         "is required"),
        ("node_state error unknown key", "node_state", {"name": n1, "status": "erroring",
                                                        "error": {"reason": "R", "message": "m", "why": 1}},
         "error.why", "unknown field"),
        ("node_state event type", "node_state", {"name": n1, "status": "erroring",
                                                 "event": {"reason": "R", "message": "m", "type": "Urgent"}},
         "event.type", "must be Normal or Warning"),
        ("node_state event without message", "node_state", {"name": n1, "event": {"reason": "R"}},
         "event.message", "is required"),
        ("node_cordon resource", "node_cordon", {"name": n1, "resource": "A_B"}, "resource",
         "is not a valid NodeWright name"),
        ("node_cordon reason too long", "node_cordon", {"name": n1, "reason": "r" * 5000}, "reason",
         "at most 1024 fit"),
        ("node_drain skip namespace", "node_drain", {"name": n1, "skip_namespaces": ["Kube-System"]},
         "skip_namespaces[0]", "is not a valid namespace name"),
        ("node_drain selector", "node_drain", {"name": n1, "pod_selector": "app in (a"}, "pod_selector",
         "unclosed '('"),
        ("node_drain selector value", "node_drain", {"name": n1, "non_interruptible_selector":
                                                     {"matchLabels": {"app": "a b"}}},
         "non_interruptible_selector", "is not a valid label value"),
        ("node_drain timeout", "node_drain", {"name": n1, "timeout": 0}, "timeout", "between 1 second"),
        ("node_wait_pods empty selector", "node_wait_pods", {"name": n1, "selectors": ""}, "selectors",
         "would match every pod"),
        ("node_wait_pods selector operator", "node_wait_pods",
         {"name": n1, "selectors": {"matchExpressions": [{"key": "a", "operator": "Maybe"}]}},
         "selectors.matchExpressions[0]", "unknown operator"),
        ("node_health label key", "node_health", {"name": n1, "labels": {"bad key": "x"}}, 'labels["bad key"]',
         "is not a valid label key"),
        ("node_health label prefix", "node_health", {"name": n1, "labels": {"Nvidia.com/gpu": "x"}},
         'labels["Nvidia.com/gpu"]', "is not a DNS-1123 subdomain"),
        ("node_health label value", "node_health", {"name": n1, "labels": {"pool": "x" * 64}}, 'labels["pool"]',
         "64 characters long"),
        ("node_health validation job namespace", "node_health",
         {"name": n1, "validation_job": {"namespace": "Bad NS", "template": {"spec": {}}}},
         "validation_job.namespace", "is not a valid namespace name"),
        ("node_health validation job name", "node_health",
         {"name": n1, "validation_job": {"name": "v" * 40, "template": {"spec": {}}}},
         "validation_job.name", "at most 30"),
        ("node_gate taint key", "node_gate", {"name": n1, "state": "present", "taint_key": "nodewright.io/"},
         "taint_key", "is not a valid taint key"),
    ]
    return cases


def test_bad_names_and_keys_are_refused_naming_the_option_and_change_nothing(sim, crds, nodes, tmp_path):
    n1, n2 = nodes
    cases = bad_inputs(n1)
    tasks = [{"name": label, "nodewright.fleet." + module: dict(options), "ignore_errors": True}
             for label, module, options, _field, _text in cases]
    before = snapshot(sim, [n1, n2])
    proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": tasks})
    assert proc.returncode == 0, proc.stdout[-3000:]
    for label, module, _options, field, text in cases:
        result = host_result(proc, "localhost", label)
        assert result is not None, label
        assert result["failed"], (label, result)
        assert result["changed"] is False, (label, result)
        msg = result["msg"]
        assert msg.startswith(field + ": ") or (field + ": ") in msg or msg.startswith(field + " "), (label, msg)
        assert text in msg, (label, msg)
        assert not msg.startswith("%s: %s" % (field, field)), (label, msg)  # named once, not repeated
        assert "ansible_collections" not in msg and "Traceback" not in msg, (label, msg)
        if module != "node_state" or field == "name":
            assert result.get("hint") or "(" in msg, (label, result)
    assert snapshot(sim, [n1, n2]) == before


def test_the_same_refusals_from_the_module_run_as_its_own_process(sim, nodes, tmp_path):
    """Outside the controller (NODEWRIGHT_INPROCESS=0) the module itself refuses."""
    n1, n2 = nodes
    cases = [c for c in bad_inputs(n1) if c[0].endswith(("status subresource", "node proxy"))]
    tasks = [{"name": label, "nodewright.fleet." + module: dict(options), "ignore_errors": True}
             for label, module, options, _field, _text in cases]
    before = snapshot(sim, [n1, n2])
    old = os.environ.copy()
    os.environ["NODEWRIGHT_INPROCESS"] = "0"
    try:
        proc = sim.playbook(tmp_path, {"hosts": "localhost", "vars": {"ansible_python_interpreter": sys.executable},
                                       "tasks": tasks})
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for label, _module, _options, field, text in cases:
        result = host_result(proc, "localhost", label)
        assert result["failed"] and result["changed"] is False, (label, result)
        assert result["msg"].startswith(field + ": ") and text in result["msg"], (label, result)
    assert snapshot(sim, [n1, n2]) == before


def test_why_quoting_alone_would_not_do(sim, nodes):
    """The API server decodes %2F back into '/': a GET of nodes/NODE%2Fstatus is the status
    subresource of NODE. So names are checked against their rule, not only quoted."""
    n1, _n2 = nodes
    assert get_json(sim.api, "/api/v1/nodes/%s%%2Fstatus" % n1, "read")["metadata"]["name"] == n1
    with pytest.raises(ValidationError):
        api_path("v1", "nodes", n1 + "/status", name_rule="node")


# --------------------------------------------------------------------------- the other doors

def cli(sim, tmp_path, *args):
    env = sim.env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")])
    env["HOME"] = str(tmp_path)
    return subprocess.run([sys.executable, "-m", "nodewright_cli"] + list(args), capture_output=True, text=True,
                          env=env, cwd=str(tmp_path))


@pytest.mark.parametrize("args,field,text", [
    (("reset", "{n1}/status"), "NODE", "'/' is not allowed"),
    (("ignore", "{N1}"), "NODE", "upper-case"),
    (("reset", "{n1}", "--resource", "../etc"), "--resource", "is not a valid NodeWright name"),
    (("pause", "x/../y"), "NAME", "is not a valid NodeWright name"),
    (("reset-batches", "Bad"), "NAME", "upper-case"),
    (("status", "--taint-key", "bad key"), "--taint-key", "is not a valid taint key"),
    (("drift", "--resource-selector", "a in ("), "--resource-selector", "unclosed"),
])
def test_the_cli_refuses_bad_names_before_it_talks_to_the_cluster(sim, crds, nodes, tmp_path, args, field, text):
    n1, n2 = nodes
    before = snapshot(sim, [n1, n2])
    proc = cli(sim, tmp_path, *[a.format(n1=n1, N1=n1.upper()) for a in args])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("nodewright %s: error: %s: " % (args[0], field)), proc.stderr
    assert text in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(sim, [n1, n2]) == before


def test_the_cli_refuses_a_yaml_bomb_vars_file(sim, crds, nodes, tmp_path):
    bomb = tmp_path / "vars.yml"
    bomb.write_text(billion_laughs())
    proc = cli(sim, tmp_path, "reconcile", "--once", "-e", "@%s" % bomb)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "expands to more than" in proc.stderr and "YAML bomb" in proc.stderr


@pytest.mark.parametrize("options,field,text", [
    ({"nodewright": "a/../b"}, "nodewright", "is not a valid NodeWright name"),
    ({"label_selectors": "nodepool in (h100"}, "label_selectors", "unclosed"),
    ({"label_selectors": {"matchLabels": {"nodepool": "a b"}}}, "label_selectors", "is not a valid label value"),
    ({"zone_labels": ["bad key"]}, "zone_labels[0]", "is not a valid label key"),
    ({"field_selectors": "metadata.name=a,b"}, "field_selectors[0]", "cannot parse field selector"),
])
def test_the_inventory_refuses_bad_options(sim, tmp_path, options, field, text):
    source = tmp_path / "bad.k8s_nodes.yml"
    source.write_text(yaml.safe_dump(dict({"plugin": "nodewright.fleet.k8s_nodes"}, **options)))
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(source), "--list"],
                          capture_output=True, text=True, env=dict(sim.env(), ANSIBLE_INVENTORY_UNPARSED_FAILED="1"),
                          cwd=str(tmp_path))
    assert proc.returncode != 0
    assert "%s: " % field in proc.stderr and text in proc.stderr, proc.stderr[-2000:]


def test_the_connection_refuses_a_bad_node_name_before_any_request(sim, nodes):
    n1, _n2 = nodes
    ns = sim.namespace("nwconn")
    for bad in (n1 + "/status", n1.upper(), n1 + "/../x"):
        with pytest.raises(ValidationError) as err:
            NodePod(sim.api, bad, namespace=ns, timeout=5).start()
        assert err.value.field == "node (ansible_host)"
    with pytest.raises(ValidationError) as err:
        NodePod(sim.api, n1, namespace="Bad/NS", timeout=5)
    assert err.value.field == "namespace (nodewright_node_pod_namespace)"
    assert sim.core.list_namespaced_pod(ns).items == []


# --------------------------------------------------------------------------- bounded input

def test_a_yaml_bomb_package_manifest_fails_at_once_and_touches_no_host(sim, nodes, tmp_path):
    n1, _n2 = nodes
    package = tmp_path / "bomb"
    package.mkdir()
    (package / "package.yaml").write_text(billion_laughs())
    root = sim.host_root(n1)
    before = tree_digest(root)
    proc = sim.playbook(tmp_path, {"hosts": "all", "tasks": [
        {"name": "Bomb", "nodewright.fleet.package": {"src": str(package), "version": "1.0.0",
                                                      "host_root": "{{ nodewright_host_root }}",
                                                      "resource": RES}}]}, hosts=[n1])
    assert proc.returncode != 0
    result = host_result(proc, n1, "Bomb")
    assert result["failed"] and not result.get("changed")
    assert result["msg"].startswith("%s: expands to more than" % (package / "package.yaml")), result["msg"]
    assert "YAML bomb" in result["msg"]
    assert tree_digest(root) == before


@pytest.mark.parametrize("playbook", ["plan.yml", "rollout.yml", "uninstall.yml"])
def test_a_yaml_bomb_vars_file_fails_the_playbook_at_once(sim, crds, nodes, tmp_path, playbook):
    n1, n2 = nodes
    bomb = tmp_path / "vars.yml"
    bomb.write_text(billion_laughs(name="x") + "nodewright_resources: *x8\nnodewright_resource: %s\n" % RES)
    before = snapshot(sim, [n1, n2])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", playbook),
                           "-e", "@%s" % bomb], capture_output=True, text=True, env=sim.env(), cwd=str(tmp_path),
                          timeout=300)
    assert proc.returncode != 0
    assert "expand to more than 250000 values once YAML aliases (*name) are followed" in proc.stdout
    assert "Refuse inputs that expand beyond reason" in proc.stdout
    assert snapshot(sim, [n1, n2]) == before


def test_a_package_named_with_a_path_is_refused_before_the_host(sim, nodes, tmp_path):
    n1, _n2 = nodes
    root = sim.host_root(n1)
    before = tree_digest(root)
    proc = sim.playbook(tmp_path, {"hosts": "all", "tasks": [
        {"name": "Escape", "nodewright.fleet.package": {"name": "sysctl", "version": "1.0.0",
                                                        "host_root": "{{ nodewright_host_root }}",
                                                        "resource": "../../etc"}}]}, hosts=[n1])
    assert proc.returncode != 0
    assert "resource: '../../etc' is not a valid NodeWright name" in host_result(proc, n1, "Escape")["msg"]
    assert tree_digest(root) == before


# --------------------------------------------------------------------------- plan.yml and inline resources

def test_plan_prints_the_plan_then_fails_on_a_blocked_resource_naming_every_problem(sim, crds, nodes, tmp_path):
    n1, n2 = nodes
    sim.core.patch_node(n1, {"metadata": {"labels": {"test.nodewright.io/bad-input": "plan"}}})
    good = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "plan-good"},
            "spec": {"nodeSelectors": {"matchLabels": {"test.nodewright.io/bad-input": "plan"}},
                     "interruptionBudget": {"count": 1}, "packages": {"sysctl": {"version": "1.0.0"}}}}
    bad = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "plan-bad"},
           "spec": {"nodeSelectors": {"matchLabels": {"test.nodewright.io/bad-input": "plan"}},
                    "priority": 10 ** 30, "runtimeRequired": "yes",
                    "packages": {"sysctl": {"version": "1.0.0", "dependsOn": {"kdump": "1.0.0", "none": "2.0.0"}}}}}
    skyhook = {"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook", "metadata": {"name": "plan-sky"},
               "spec": {"nodeSelectors": {"matchLabels": {"x": "y"}}, "drainConfig": {"timeout": "1m"},
                        "packages": {"sysctl": {"version": "1.0.0", "bogus": {"cpuRequest": "1"}, "env": [
                            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}}}}
    # Fields of upstream's package pods and a tag the version replaces: accepted, one warning each.
    warned = {"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright", "metadata": {"name": "plan-warn"},
              "spec": {"nodeSelectors": {"matchLabels": {"x": "y"}},
                       "packages": {"sysctl": {"version": "1.0", "resources": {"cpuRequest": "1"},
                                               "gracefulShutdown": "30s"}}}}
    extra = tmp_path / "resources.json"
    extra.write_text(json.dumps({"nodewright_resources": [good, bad, skyhook, warned]}))
    before = snapshot(sim, [n1, n2])
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "plan.yml"),
                           "-e", "@%s" % extra], capture_output=True, text=True, env=sim.env(), cwd=str(tmp_path),
                          timeout=300)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "NodeWright plan-good (priority 200)" in out  # the plan is still printed
    assert "NodeWright plan-bad: BLOCKED - 4 problems" in out
    for text in ("spec.priority: must be a whole number from 1 to 9223372036854775807",
                 "spec.runtimeRequired: must be true or false",
                 "spec.packages.sysctl.dependsOn.kdump: depends on package 'kdump'",
                 "spec.packages.sysctl.dependsOn.none: depends on package 'none'",
                 "spec.packages.sysctl.bogus: has no NodeWright equivalent",
                 "spec.packages.sysctl.env[0].valueFrom.fieldRef: has no NodeWright equivalent",
                 "name it in the option skyhook_drop",
                 "NodeWright plan-warn (priority 200)",
                 "warning: spec.packages.sysctl.resources is ignored: NodeWright runs package steps on the host",
                 "warning: spec.packages.sysctl.gracefulShutdown is ignored"):
        assert text in out, text
    warnings = " ".join((out + proc.stderr).split())   # Ansible wraps its [WARNING] lines
    assert "NodeWright plan-warn (converted from upstream): spec.packages.sysctl.gracefulShutdown is ignored" in warnings
    assert "2 NodeWright resource(s) cannot be rolled out: plan-sky: 2 problems" in out
    assert "; plan-bad: 4 problems: (1) spec.packages.sysctl.dependsOn.kdump" in out
    # The API server refuses the same priority.
    with pytest.raises(ApiException) as err:
        crds.create_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", dict(bad, spec={
            "priority": 10 ** 30}), dry_run="All")
    assert "spec.priority" in err.value.body
    assert snapshot(sim, [n1, n2]) == before


def test_skyhook_drop_named_in_the_hint_is_a_real_option(sim, crds, nodes, tmp_path):
    skyhook = {"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "Skyhook", "metadata": {"name": "drop-sky"},
               "spec": {"nodeSelectors": {"matchLabels": {"x": "y"}}, "drainConfig": {"timeout": "1m"},
                        "packages": {"sysctl": {"version": "1.0.0", "resources": {"cpuRequest": "1"},
                                                "gracefulShutdown": "30s"}}}}
    extra = tmp_path / "resources.json"
    extra.write_text(json.dumps({"nodewright_resources": [skyhook],
                                 "nodewright_skyhook_drop": ["spec.packages.*.gracefulShutdown",
                                                             "spec.packages.*.resources"]}))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "plan.yml"),
                           "-e", "@%s" % extra], capture_output=True, text=True, env=sim.env(), cwd=str(tmp_path),
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "NodeWright drop-sky (priority 200)" in proc.stdout
    assert "is ignored" not in proc.stdout + proc.stderr   # named in the drop: left out knowingly


# --------------------------------------------------------------------------- status that tells the truth

def test_erroring_stays_true_while_any_resource_on_the_node_is_erroring(sim, nodes, tmp_path):
    n1, _n2 = nodes

    def mark(resource, status, error):
        return {"name": "%s %s" % (resource, status), "nodewright.fleet.node_state": {
            "name": n1, "resource": resource, "status": status, "error": error,
            "state": {"step": "Drain the node", "reason": "drain timed out"} if status == "erroring" else {}}}

    proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [
        mark("first", "erroring", {"reason": "MaintenanceFailed", "message": "Drain the node: drain timed out"}),
        mark("second", "complete", False)]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    node = sim.core.read_node(n1)
    labels = node.metadata.labels
    assert labels["nodewright.io/status-first"] == "erroring" and labels["nodewright.io/status"] == "erroring"
    cond = [c for c in node.status.conditions if c.type == "nodewright.io/Erroring"][0]
    assert (cond.status, cond.reason) == ("True", "MaintenanceFailed")
    assert cond.message == "first: Drain the node: drain timed out"
    assert host_result(proc, "localhost", "second complete")["changed"]
    # Only when the first resource recovers does the condition clear.
    proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [mark("first", "complete", False)]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    cond = [c for c in sim.core.read_node(n1).status.conditions if c.type == "nodewright.io/Erroring"][0]
    assert (cond.status, cond.reason) == ("False", "Healthy")
    sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [
        {"nodewright.fleet.node_state": {"name": n1, "resource": r, "clear": True}} for r in ("first", "second")]})


def test_a_failed_drain_that_cordoned_and_evicted_says_changed_and_names_the_stuck_pod(sim, tmp_path):
    """No PDB: a pod on a node whose kubelet never confirms its end (this node has none),
    held by a finalizer too. The drain names them, not PodDisruptionBudgets."""
    (node,) = sim.add_nodes("h200", 1, managed=False, host_roots=False)
    ns = sim.namespace("stuck")
    sim.core.create_namespaced_pod(ns, {"metadata": {"name": "held", "finalizers": ["test.nodewright.io/hold"]},
                                        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                                                 "tolerations": [{"operator": "Exists"}],
                                                 "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}})
    try:
        proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [
            {"name": "Drain", "nodewright.fleet.node_drain": {"name": node, "force": True, "timeout": 4},
             "ignore_errors": True}]})
        result = host_result(proc, "localhost", "Drain")
        assert result["failed"] and result["changed"] is True, result
        assert result["cordon"]["changed"] and result["accepted"] == ["%s/held" % ns]
        assert "%s/held has been terminating since" % ns in result["msg"]
        assert "held by finalizer test.nodewright.io/hold, which nothing has removed" in result["msg"]
        assert "PodDisruptionBudget" not in result["msg"] + result["hint"]
        assert "finalizer" in result["hint"]
        assert result["stuck"][0]["finalizers"] == ["test.nodewright.io/hold"]
        assert sim.core.read_node(node).spec.unschedulable
    finally:
        sim.core.patch_namespaced_pod("held", ns, {"metadata": {"finalizers": None}})
        try:
            sim.core.delete_namespaced_pod("held", ns, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        wait_for(lambda: not sim.core.list_namespaced_pod(ns).items, what="the held pod gone")
        sim.core.delete_node(node)


def test_reset_brings_the_erroring_condition_in_line(sim, crds, nodes, tmp_path):
    n1, _n2 = nodes
    proc = sim.playbook(tmp_path, {"hosts": "localhost", "tasks": [{"nodewright.fleet.node_state": {
        "name": n1, "resource": "resetme", "status": "erroring", "state": {"step": "Run", "reason": "failed"},
        "error": {"reason": "MaintenanceFailed", "message": "Run: failed"}}}]})
    assert proc.returncode == 0, proc.stdout[-3000:]
    cond = [c for c in sim.core.read_node(n1).status.conditions if c.type == "nodewright.io/Erroring"][0]
    assert cond.status == "True" and cond.message == "resetme: Run: failed"
    dry = cli(sim, tmp_path, "reset", n1, "--resource", "resetme", "--dry-run")
    assert dry.returncode == 0 and '"status": "False"' in dry.stdout, dry.stdout + dry.stderr
    assert [c for c in sim.core.read_node(n1).status.conditions if c.type == "nodewright.io/Erroring"][0].status == \
        "True"
    done = cli(sim, tmp_path, "reset", n1, "--resource", "resetme")
    assert done.returncode == 0, done.stdout + done.stderr
    node = sim.core.read_node(n1)
    assert "nodewright.io/status-resetme" not in (node.metadata.labels or {})
    cond = [c for c in node.status.conditions if c.type == "nodewright.io/Erroring"][0]
    assert (cond.status, cond.reason) == ("False", "Healthy")
