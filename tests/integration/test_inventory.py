# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The k8s_nodes inventory plugin against the simulator's real API server, through
``ansible-inventory`` as a user runs it.

Other tests add nodes to the same simulator, so every test here selects the nodes this
module created by a label unique to the run.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid

import pytest
import yaml
from k8s_helpers import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
RUN = uuid.uuid4().hex[:8]
TEST_LABEL = "test.nodewright.io/inventory"
NW_NAME = "inv-%s" % RUN


# --- helpers ---------------------------------------------------------------------------

def unwrap(value):
    """``ansible-inventory --list`` prints untrusted strings as {"__ansible_unsafe": ...}."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def run_inventory(sim, tmp_path, config, *args, env=None, name="test"):
    path = tmp_path / ("%s.k8s_nodes.yml" % name)
    path.write_text(yaml.safe_dump(dict({"plugin": "nodewright.fleet.k8s_nodes"}, **config)))
    full_env = sim.env()
    full_env.update(env or {})
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(path), "--list"] + list(args),
                          env=full_env, capture_output=True, text=True, timeout=300)
    proc.path = str(path)
    return proc


class Inventory(object):
    def __init__(self, data):
        self.data = data
        self.hostvars = unwrap(data.get("_meta", {}).get("hostvars", {}))

    @property
    def hosts(self):
        return set(self.hostvars)

    def group(self, name):
        return set(self.data.get(name, {}).get("hosts", []))

    def facts(self, host):
        return self.hostvars[host]["k8s_node"]


def inventory(sim, tmp_path, config, *args, **kw):
    proc = run_inventory(sim, tmp_path, config, *args, **kw)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to parse" not in proc.stderr, proc.stderr
    return Inventory(json.loads(proc.stdout))


def ours(extra=None):
    """Label selectors for this module's nodes, plus ``extra``."""
    return ["%s=%s" % (TEST_LABEL, RUN)] + ([extra] if extra else [])


def patch_node(sim, name, labels=None, annotations=None, unschedulable=None):
    body = {"metadata": {}}
    if labels is not None:
        body["metadata"]["labels"] = labels
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    if unschedulable is not None:
        body["spec"] = {"unschedulable": unschedulable}
    sim.core.patch_node(name, body)


def is_ready(sim, name):
    conds = sim.core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conds)


def ensure_nodewright_crd(sim):
    ext = client.ApiextensionsV1Api(sim.api)
    path = os.path.join(REPO, "deploy", "crds", "nodewright.io_nodewrights.yaml")
    crd = None
    if os.path.exists(path):
        with open(path) as fh:
            crd = next(d for d in yaml.safe_load_all(fh) if d)
    minimal = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodewrights.nodewright.io"},
        "spec": {"group": "nodewright.io", "scope": "Cluster",
                 "names": {"kind": "NodeWright", "plural": "nodewrights", "singular": "nodewright",
                           "listKind": "NodeWrightList"},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {
                                   "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    for body in [b for b in (crd, minimal) if b]:
        try:
            ext.create_custom_resource_definition(body)
            break
        except ApiException as exc:
            if exc.status == 409:
                break
            if body is minimal:
                raise

    def served():
        try:
            client.CustomObjectsApi(sim.api).list_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights")
            return True
        except ApiException:
            return False
    wait_for(served, what="the NodeWright CRD to be served")


# --- fixtures --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fleet(sim):
    """Three nodes of this module, all labelled with the run's label:

    ``h100`` managed by kwok with a host root (Ready); ``b200`` managed, API only (Ready);
    ``gb200`` not managed (never Ready, no addresses).
    """
    h100 = sim.add_nodes("h100", 1)[0]
    b200 = sim.add_nodes("b200", 1, host_roots=False)[0]
    gb200 = sim.add_nodes("gb200", 1, host_roots=False, managed=False)[0]
    for name in (h100, b200, gb200):
        patch_node(sim, name, labels={TEST_LABEL: RUN})
    wait_for(lambda: is_ready(sim, h100) and is_ready(sim, b200), what="the test nodes to be Ready")
    return {"h100": h100, "b200": b200, "gb200": gb200}


# --- selection -------------------------------------------------------------------------

def test_equality_selector_selects_exactly_our_nodes(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": "%s=%s" % (TEST_LABEL, RUN)})
    assert inv.hosts == set(fleet.values())


@pytest.mark.parametrize("selector,expected", [
    ("nodepool in (h100,b200)", {"h100", "b200"}),
    ("nodepool notin (h100)", {"b200", "gb200"}),
    ("nodepool!=b200", {"h100", "gb200"}),
    ("nvidia.com/gpu.clique", {"gb200"}),
    ("!nvidia.com/gpu.clique", {"h100", "b200"}),
    ("nvidia.com/gpu.family in (blackwell), kubernetes.io/arch=amd64", {"b200"}),
])
def test_set_based_selectors(sim, tmp_path, fleet, selector, expected):
    inv = inventory(sim, tmp_path, {"label_selectors": ours(selector)})
    assert inv.hosts == {fleet[k] for k in expected}


def test_label_selector_mapping_form(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": {
        "matchLabels": {TEST_LABEL: RUN},
        "matchExpressions": [{"key": "nvidia.com/gpu.family", "operator": "In", "values": ["hopper"]}]}})
    assert inv.hosts == {fleet["h100"]}


def test_field_selectors(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": ours(),
                                    "field_selectors": ["metadata.name!=%s" % fleet["h100"]]})
    assert inv.hosts == {fleet["b200"], fleet["gb200"]}
    inv = inventory(sim, tmp_path, {"label_selectors": ours(), "field_selectors": "metadata.name=%s" % fleet["b200"]})
    assert inv.hosts == {fleet["b200"]}


# --- NodeWright targeting and the ignore label ----------------------------------------------

@pytest.fixture(scope="module")
def nodewright(sim, fleet):
    ensure_nodewright_crd(sim)
    body = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": NW_NAME},
            "spec": {"nodeSelectors": {"matchLabels": {TEST_LABEL: RUN},
                                       "matchExpressions": [{"key": "nodepool", "operator": "In",
                                                             "values": ["h100", "gb200"]}]},
                     "podNonInterruptLabels": {"matchLabels": {"app.kubernetes.io/component": "training"}},
                     "packages": {"kernel": {"version": "1.0.0"}}}}
    custom = client.CustomObjectsApi(sim.api)
    custom.create_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", body)
    yield NW_NAME
    custom.delete_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", NW_NAME)


def test_nodewright_targets_its_selected_nodes_minus_ignored(sim, tmp_path, fleet, nodewright):
    inv = inventory(sim, tmp_path, {"nodewright": nodewright})
    assert inv.hosts == {fleet["h100"], fleet["gb200"]}
    patch_node(sim, fleet["gb200"], labels={"nodewright.io/ignore": "true"})
    try:
        inv = inventory(sim, tmp_path, {"nodewright": nodewright})
        assert inv.hosts == {fleet["h100"]}
        # without nodewright: the ignored node is listed, marked and grouped
        inv = inventory(sim, tmp_path, {"label_selectors": ours()})
        assert inv.facts(fleet["gb200"])["ignored"] is True
        assert inv.facts(fleet["h100"])["ignored"] is False
        assert fleet["gb200"] in inv.group("nodewright_ignored")
        assert fleet["h100"] not in inv.group("nodewright_ignored")
    finally:
        patch_node(sim, fleet["gb200"], labels={"nodewright.io/ignore": None})
    # label selectors narrow the resource's nodes further
    inv = inventory(sim, tmp_path, {"nodewright": nodewright, "label_selectors": "nodepool=gb200"})
    assert inv.hosts == {fleet["gb200"]}


def test_pod_counts_from_one_cluster_list(sim, tmp_path, fleet, nodewright):
    ns = sim.namespace("inv")
    node = fleet["h100"]

    def pod(name, labels, gpus):
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/x:1",
                                                           "resources": resources}]}}
    sim.core.create_namespaced_pod(ns, pod("train", {"app.kubernetes.io/component": "training"}, 4))
    sim.core.create_namespaced_pod(ns, pod("infer", {"app": "infer"}, 1))
    sim.core.create_namespaced_pod(ns, pod("sidecar", {"app": "sidecar"}, 0))
    try:
        def counts():
            inv = inventory(sim, tmp_path, {"nodewright": nodewright, "pod_counts": True, "page_size": 2})
            pods = inv.facts(node)["pods"]
            return pods if pods["total"] - pods["non_interruptible"] >= 2 else None
        pods = wait_for(counts, what="the pods to be counted")
        before = len(sim.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items)
        assert pods["non_interruptible"] == 1
        assert pods["gpu"] >= 2 and pods["total"] >= 3 and pods["total"] <= before
        # an explicit selector wins over the resource's podNonInterruptLabels
        inv = inventory(sim, tmp_path, {"label_selectors": ours(), "pod_counts": True,
                                        "non_interruptible_selector": "app in (infer,sidecar)"})
        assert inv.facts(node)["pods"]["non_interruptible"] == 2
        other = inv.facts(fleet["gb200"])["pods"]  # at most a DaemonSet pod there
        assert other["gpu"] == 0 and other["non_interruptible"] == 0
        # without any selector the count is unknown, not zero
        inv = inventory(sim, tmp_path, {"label_selectors": ours(), "pod_counts": True})
        assert inv.facts(node)["pods"]["non_interruptible"] is None
        # off by default
        assert "pods" not in inventory(sim, tmp_path, {"label_selectors": ours()}).facts(node)
    finally:
        sim.core.delete_namespace(ns)


# --- host variables and default groups ------------------------------------------------------

def test_host_variables(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": ours()})
    h100 = inv.facts(fleet["h100"])
    assert h100["name"] == fleet["h100"]
    assert h100["labels"][TEST_LABEL] == RUN and h100["pool"] == "h100" and h100["zone"].startswith("zone-")
    assert h100["ready"] is True and h100["conditions"]["Ready"] == "True"
    assert h100["node_info"]["architecture"] == "amd64" and h100["node_info"]["boot_id"]
    assert h100["node_info"]["kernel_version"] and h100["node_info"]["kubelet_version"].startswith("v")
    assert h100["capacity"]["nvidia.com/gpu"] == "8" and h100["allocatable"]["nvidia.com/gpu"] == "8"
    assert h100["gpu"]["model"] == "h100" and h100["gpu"]["family"] == "hopper" and h100["gpu"]["count"] == 8
    assert h100["gpu"]["compute_capability"] == "9.0" and h100["gpu"]["grace"] is False
    assert h100["gpu"]["memory_mib"] == 81559
    gb200 = inv.facts(fleet["gb200"])
    assert gb200["gpu"]["grace"] is True and gb200["gpu"]["family"] == "blackwell"
    assert gb200["ready"] is False and gb200["addresses"] == {}
    assert "managedFields" not in json.dumps(inv.hostvars)


def test_nodewright_state_and_a_malformed_annotation(sim, tmp_path, fleet):
    good = json.dumps({"status": "complete", "packages": {"kernel|1.0.0": {"state": "complete"}}})
    patch_node(sim, fleet["h100"], labels={"nodewright.io/status-r%s" % RUN: "complete"},
               annotations={"nodewright.io/state-r%s" % RUN: good})
    patch_node(sim, fleet["b200"], labels={"nodewright.io/status-r%s" % RUN: "erroring"},
               annotations={"nodewright.io/state-r%s" % RUN: "{hand edited"})
    try:
        inv = inventory(sim, tmp_path, {"label_selectors": ours()})
        resource = "r%s" % RUN
        assert inv.facts(fleet["h100"])["nodewright"][resource] == {"status": "complete", "state": json.loads(good)}
        broken = inv.facts(fleet["b200"])["nodewright"][resource]
        assert broken["status"] == "erroring" and "not valid JSON" in broken["error"]
        assert inv.group("nodewright_%s_complete" % resource) >= {fleet["h100"]}
        assert fleet["b200"] in inv.group("nodewright_%s_erroring" % resource)
    finally:
        for name in (fleet["h100"], fleet["b200"]):
            patch_node(sim, name, labels={"nodewright.io/status-r%s" % RUN: None},
                       annotations={"nodewright.io/state-r%s" % RUN: None})


def test_default_groups(sim, tmp_path, fleet):
    patch_node(sim, fleet["b200"], unschedulable=True)
    try:
        inv = inventory(sim, tmp_path, {"label_selectors": ours()})
    finally:
        patch_node(sim, fleet["b200"], unschedulable=False)
    h100, b200, gb200 = fleet["h100"], fleet["b200"], fleet["gb200"]
    assert {h100, b200, gb200} <= inv.group("gpu")
    assert inv.group("gpu_family_hopper") == {h100}
    assert inv.group("gpu_family_blackwell") == {b200, gb200}
    assert inv.group("gpu_h100") == {h100} and inv.group("gpu_gb200") == {gb200}
    assert inv.group("gpu_product_nvidia_h100_80gb_hbm3") == {h100}
    assert inv.group("pool_b200") == {b200}
    zone = inv.facts(h100)["zone"].replace("-", "_")
    assert h100 in inv.group("zone_" + zone)
    assert inv.group("ready") == {h100, b200} and inv.group("not_ready") == {gb200}
    assert inv.group("cordoned") == {b200} and inv.facts(b200)["unschedulable"] is True


def test_group_prefix_and_choice_of_default_groups(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": ours(), "group_prefix": "k8s-",
                                    "default_groups": ["gpu_model", "readiness"]})
    assert inv.group("k8s_gpu_h100") == {fleet["h100"]}
    assert inv.group("k8s_not_ready") == {fleet["gb200"]}
    assert not inv.group("gpu_h100") and not inv.group("k8s_pool_h100")


def test_compose_groups_and_keyed_groups(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {
        "label_selectors": ours(),
        "default_groups": [],
        "compose": {
            "gpu_model": "k8s_node.gpu.model",                         # a plain path
            "kernel_major": "k8s_node.node_info.kernel_version.split('.')[0]",   # Jinja2
            "rack": "k8s_node.labels['nvidia.com/gpu.clique'] | default('none')",
            "undefined_is_skipped": "k8s_node.labels['no-such-label']",
        },
        "groups": {
            "grace": "k8s_node.gpu.grace",
            "eight_gpus": "k8s_node.gpu.count == 8",
            "big_memory": "k8s_node.gpu.memory_mib > 150000",
        },
        "keyed_groups": [
            {"key": "gpu_model", "prefix": "model"},
            {"key": "k8s_node.labels['nodepool']", "prefix": "np", "separator": "-"},
            {"key": "rack", "prefix": "rack"},
            {"key": "gpu_model", "prefix": "in", "parent_group": "zone_{{ k8s_node.zone }}"},
        ],
    })
    h100, b200, gb200 = fleet["h100"], fleet["b200"], fleet["gb200"]
    assert inv.hostvars[h100]["gpu_model"] == "h100" and inv.hostvars[h100]["kernel_major"] == "6"
    assert inv.hostvars[h100]["rack"] == "none" and inv.hostvars[gb200]["rack"].startswith("gb200-rack-")
    assert "undefined_is_skipped" not in inv.hostvars[h100]
    assert inv.group("grace") == {gb200}
    assert inv.group("eight_gpus") == {h100, b200}
    assert inv.group("big_memory") == {b200, gb200}
    assert inv.group("model_h100") == {h100} and inv.group("model_gb200") == {gb200}
    assert inv.group("np_b200") == {b200}
    assert h100 in inv.group("rack_none") and gb200 not in inv.group("rack_none")
    # parent_group is templated for the host at hand, also after a directly looked-up key
    for host in (h100, b200, gb200):
        parent = "zone_" + inv.facts(host)["zone"].replace("-", "_")
        child = "in_" + inv.hostvars[host]["gpu_model"]
        assert child in inv.data[parent]["children"]


def test_strict_makes_a_broken_expression_fatal(sim, tmp_path, fleet):
    proc = run_inventory(sim, tmp_path, {"label_selectors": ours(), "strict": True,
                                         "compose": {"x": "k8s_node.no_such_fact.y"}},
                         env={"ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1"})
    assert proc.returncode != 0
    assert "compose x for host" in proc.stderr and proc.path in proc.stderr


def test_values_from_the_cluster_are_never_templated(sim, tmp_path, fleet):
    patch_node(sim, fleet["b200"], annotations={"test.nodewright.io/evil": "{{ 6 * 7 }}"})
    source = tmp_path / "evil.k8s_nodes.yml"
    source.write_text(yaml.safe_dump({
        "plugin": "nodewright.fleet.k8s_nodes", "label_selectors": ours(),
        "connection": "local", "compose": {"evil": "k8s_node.annotations['test.nodewright.io/evil']"}}))
    playbook = tmp_path / "show.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": fleet["b200"], "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "A={{ k8s_node.annotations['test.nodewright.io/evil'] }} B={{ evil }}"}}]}]))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(source), str(playbook)],
                          env=sim.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A={{ 6 * 7 }} B={{ 6 * 7 }}" in proc.stdout
    assert "42" not in proc.stdout


# --- connection presets ------------------------------------------------------------------

def test_connection_presets(sim, tmp_path, fleet):
    h100, b200, gb200 = fleet["h100"], fleet["b200"], fleet["gb200"]
    ssh = inventory(sim, tmp_path, {"label_selectors": ours()})
    internal_ip = sim.core.read_node(h100).status.addresses[0].address
    assert ssh.hostvars[h100]["ansible_connection"] == "ssh"
    assert ssh.hostvars[h100]["ansible_host"] == internal_ip
    assert ssh.hostvars[gb200]["ansible_host"] == gb200  # no address at all: the node name
    by_name = inventory(sim, tmp_path, {"label_selectors": ours(), "address_preference": ["Hostname", "InternalIP"]})
    assert by_name.hostvars[h100]["ansible_host"] in (h100, internal_ip)

    k8s = inventory(sim, tmp_path, {"label_selectors": ours(), "connection": "k8s"})
    assert k8s.hostvars[h100]["ansible_connection"] == "nodewright.fleet.node"
    assert k8s.hostvars[h100]["ansible_host"] == h100
    assert "nodewright_host_root" not in k8s.hostvars[h100]
    # A simulator node's pod mounts the node's own host root, never the machine's /.
    assert k8s.hostvars[h100]["nodewright_node_pod_host_path"] == sim.host_root(h100)
    assert "nodewright_node_pod_host_path" not in k8s.hostvars[b200]

    local = inventory(sim, tmp_path, {"label_selectors": ours(), "connection": "local"})
    assert local.hostvars[h100]["ansible_connection"] == "local"
    assert local.hostvars[h100]["nodewright_host_root"] == sim.host_root(h100)
    assert os.path.isdir(local.hostvars[h100]["nodewright_host_root"])
    assert local.hostvars[b200]["nodewright_host_root"] == "/"

    # compose runs after the preset, so it can override it
    custom = inventory(sim, tmp_path, {"label_selectors": ours(), "connection": "local",
                                       "compose": {"ansible_host": "'bastion-' ~ k8s_node.name"}})
    assert custom.hostvars[h100]["ansible_host"] == "bastion-" + h100


def test_host_var_name_is_configurable(sim, tmp_path, fleet):
    inv = inventory(sim, tmp_path, {"label_selectors": ours(), "host_var": "node"})
    assert inv.hostvars[fleet["h100"]]["node"]["name"] == fleet["h100"]
    assert "k8s_node" not in inv.hostvars[fleet["h100"]]


def test_node_facts_narrows_what_the_hosts_carry_not_what_builds_the_inventory(sim, tmp_path, fleet):
    full = inventory(sim, tmp_path, {"label_selectors": ours()}, name="full")
    lean = inventory(sim, tmp_path, {"label_selectors": ours(), "node_facts": ["labels", "gpu", "ready"],
                                     "compose": {"kernel": "k8s_node.node_info.kernel_version"},
                                     "keyed_groups": [{"key": "k8s_node.node_info.architecture", "prefix": "arch"}]},
                     name="lean")
    h100 = fleet["h100"]
    assert set(lean.facts(h100)) == {"name", "labels", "gpu", "ready"}
    for key in ("labels", "gpu", "ready"):
        assert lean.facts(h100)[key] == full.facts(h100)[key]
    # The default groups, compose and keyed_groups saw every fact.
    assert lean.hostvars[h100]["kernel"] == full.facts(h100)["node_info"]["kernel_version"]
    assert h100 in lean.group("arch_amd64") and fleet["gb200"] in lean.group("arch_arm64")
    for group in ("zone_" + full.facts(h100)["zone"].replace("-", "_"), "pool_h100", "ready", "not_ready"):
        assert lean.group(group) == full.group(group), group
    assert lean.hostvars[h100]["ansible_host"] == full.hostvars[h100]["ansible_host"]
    proc = run_inventory(sim, tmp_path, {"label_selectors": ours(), "node_facts": ["labels", "lables"]}, name="bad")
    assert "node_facts: unknown fact(s) 'lables'" in proc.stderr and "did you mean 'labels'?" in proc.stderr, \
        proc.stderr


def test_the_shipped_fleet_sync_inventory_keeps_its_lean_facts(sim, tmp_path, fleet):
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i",
                           os.path.join(REPO, "inventory", "fleet-sync.k8s_nodes.yml"), "--list"],
                          env=sim.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Failed to parse" not in proc.stderr, proc.stderr
    inv = Inventory(json.loads(proc.stdout))
    assert fleet["h100"] in inv.hosts and fleet["gb200"] in inv.group("gpu_family_blackwell")
    assert {frozenset(inv.facts(h)) for h in inv.hosts} == {
        frozenset(["name", "labels", "gpu", "ready", "unschedulable", "nodewright"])}


# --- caching -----------------------------------------------------------------------------

def test_second_run_is_served_from_the_cache(sim, tmp_path, fleet):
    config = {"label_selectors": ours(), "cache": True, "cache_plugin": "ansible.builtin.jsonfile",
              "cache_connection": str(tmp_path / "cache"), "compose": {"mark": "k8s_node.labels['test.nodewright.io/mark']"}}
    patch_node(sim, fleet["h100"], labels={"test.nodewright.io/mark": "first"})
    try:
        assert inventory(sim, tmp_path, config).hostvars[fleet["h100"]]["mark"] == "first"
        assert os.listdir(str(tmp_path / "cache"))
        patch_node(sim, fleet["h100"], labels={"test.nodewright.io/mark": "second"})
        cached = inventory(sim, tmp_path, config)
        assert cached.hostvars[fleet["h100"]]["mark"] == "first"
        fresh = inventory(sim, tmp_path, config, "--flush-cache")
        assert fresh.hostvars[fleet["h100"]]["mark"] == "second"
        # other selection options do not reuse a cache written for different ones
        narrowed = inventory(sim, tmp_path, dict(config, label_selectors=ours("nodepool=b200")))
        assert narrowed.hosts == {fleet["b200"]}
    finally:
        patch_node(sim, fleet["h100"], labels={"test.nodewright.io/mark": None})


# --- bad input -------------------------------------------------------------------------------

def _kubeconfig(sim):
    with open(sim.kubeconfig) as fh:
        return yaml.safe_load(fh)


def _server(sim):
    return _kubeconfig(sim)["clusters"][0]["cluster"]["server"]


def _write_b64(path, data):
    path.write_bytes(base64.b64decode(data))
    return str(path)


def failure(sim, tmp_path, config, env=None):
    """Run a bad inventory; return the message our plugin gave."""
    env = dict(env or {}, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1")
    proc = run_inventory(sim, tmp_path, config, env=env, name="bad")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines()
             if line.startswith("nodewright.fleet.k8s_nodes inventory %s: " % proc.path)]
    assert lines, proc.stderr
    return lines[0]


@pytest.mark.parametrize("config,env,cause", [
    ({"label_selector": "nodepool=h100"}, None, "unknown option 'label_selector' (did you mean: label_selector -> label_selectors?)"),
    ({"label_selectors": "nodepool in (h100"}, None, "unclosed '('"),
    ({"label_selectors": "nodepool=h100,,"}, None, "label_selectors"),
    ({"field_selectors": "metadata.name"}, None, "cannot parse field selector requirement 'metadata.name'"),
    ({"connection": "telnet"}, None, "Valid values are: ssh, k8s, local"),
    ({"default_groups": ["gpu", "racks"]}, None, "unknown default group kind(s) 'racks'"),
    ({"nodewright": "Not_A_Name"}, None, "'Not_A_Name' is not a valid NodeWright name"),
    ({"host": "https://127.0.0.1:1", "api_key": "x"}, None, "cannot reach the Kubernetes API server: connection refused"),
    ({"kubeconfig": "/nonexistent/kubeconfig"}, None, "kubeconfig /nonexistent/kubeconfig does not exist"),
])
def test_bad_input_fails_with_one_clear_message(sim, tmp_path, fleet, config, env, cause):
    assert cause in failure(sim, tmp_path, config, env)


def test_unknown_nodewright_fails(sim, tmp_path, nodewright):
    message = failure(sim, tmp_path, {"nodewright": "no-such-resource-%s" % RUN})
    assert "NodeWright 'no-such-resource-%s' does not exist" % RUN in message
    assert "kubectl get nodewrights" in message


def test_rejected_credentials_fail(sim, tmp_path, fleet):
    # host and api_key may be templates (here: lookups of environment variables)
    message = failure(sim, tmp_path, {"host": "{{ lookup('ansible.builtin.env', 'INV_TEST_HOST') }}",
                                      "api_key": "{{ lookup('ansible.builtin.env', 'INV_TEST_TOKEN') }}",
                                      "validate_certs": False},
                      env={"INV_TEST_HOST": _server(sim), "INV_TEST_TOKEN": "expired-or-wrong"})
    assert "rejected the credentials (401)" in message and "refresh the credential" in message
    assert _server(sim) in message


def test_missing_credentials_fail(sim, tmp_path, fleet):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "KUBECONFIG": "", "K8S_AUTH_KUBECONFIG": ""}
    message = failure(sim, tmp_path, {"label_selectors": ours()}, env=env)
    assert "no cluster credentials found" in message


def test_auth_from_k8s_auth_environment(sim, tmp_path, fleet):
    """What AWX/AAP's Kubernetes credential sets: K8S_AUTH_* variables and no kubeconfig."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "KUBECONFIG": "", "K8S_AUTH_HOST": _server(sim),
           "K8S_AUTH_API_KEY": "not-a-valid-token", "K8S_AUTH_VERIFY_SSL": "false"}
    message = failure(sim, tmp_path, {"label_selectors": ours()}, env=env)
    # the variables were used: the simulator's server answered, and refused the token
    assert "rejected the credentials (401)" in message and _server(sim) in message


def test_client_certificate_from_k8s_auth_environment(sim, tmp_path, fleet):
    config = _kubeconfig(sim)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "KUBECONFIG": "", "K8S_AUTH_HOST": _server(sim),
           "K8S_AUTH_SSL_CA_CERT": _write_b64(tmp_path / "ca.crt",
                                              config["clusters"][0]["cluster"]["certificate-authority-data"]),
           "K8S_AUTH_CERT_FILE": _write_b64(tmp_path / "client.crt", config["users"][0]["user"]["client-certificate-data"]),
           "K8S_AUTH_KEY_FILE": _write_b64(tmp_path / "client.key", config["users"][0]["user"]["client-key-data"])}
    assert inventory(sim, tmp_path, {"label_selectors": ours()}, env=env).hosts == set(fleet.values())


def test_bearer_token_as_awx_sets_it(sim, tmp_path, fleet):
    """AWX/AAP's Kubernetes bearer-token credential: K8S_AUTH_HOST, _API_KEY, _SSL_CA_CERT, _VERIFY_SSL.

    The token belongs to a service account that may only read nodes; without the role
    binding the same token gets a 403 that names the missing permission.
    """
    ns = sim.namespace("invsa")
    name = "inventory-reader-%s" % RUN
    sim.core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    token = sim.core.create_namespaced_service_account_token(
        name, ns, {"spec": {"expirationSeconds": 600}}).status.token
    config = _kubeconfig(sim)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "KUBECONFIG": "", "K8S_AUTH_HOST": _server(sim), "K8S_AUTH_API_KEY": token,
           "K8S_AUTH_VERIFY_SSL": "true",
           "K8S_AUTH_SSL_CA_CERT": _write_b64(tmp_path / "ca.crt",
                                              config["clusters"][0]["cluster"]["certificate-authority-data"])}
    try:
        message = failure(sim, tmp_path, {"label_selectors": ours()}, env=env)
        assert "forbidden (403)" in message and "nodes" in message
        sim.rbac.create_cluster_role({"metadata": {"name": name},
                                      "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})
        sim.rbac.create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
        inv = wait_for(lambda: (lambda p: p if p.returncode == 0 else None)(
            run_inventory(sim, tmp_path, {"label_selectors": ours()}, env=env)), what="the role binding to apply")
        assert Inventory(json.loads(inv.stdout)).hosts == set(fleet.values())
    finally:
        for delete in (sim.rbac.delete_cluster_role_binding, sim.rbac.delete_cluster_role):
            try:
                delete(name)
            except ApiException:
                pass
        sim.core.delete_namespace(ns)
