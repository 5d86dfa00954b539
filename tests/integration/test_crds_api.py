# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The CRDs of deploy/crds on a real API server: installed by playbooks/install_crds.yml
(nodewright.fleet.apply), Established, and the API server itself refusing bad objects
(OpenAPI bounds, patterns, CEL rules, list-map keys) while accepting good ones; the
status subresource and the printer columns of ``kubectl get nodewrights``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECTL = os.path.expanduser("~/.cache/nodewright/bin/kubectl")
GROUP, VERSION = "nodewright.io", "v1alpha1"


def install_crds(sim, *extra):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
           os.path.join(REPO, "playbooks", "install_crds.yml")] + list(extra)
    env = sim.env()
    env.update({"ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"})
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def recap_changed(proc):
    for line in proc.stdout.splitlines():
        if line.startswith("localhost") and "changed=" in line:
            return int(line.split("changed=")[1].split()[0])
    raise AssertionError("no recap in:\n" + proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def crds(sim):
    proc = install_crds(sim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return client.CustomObjectsApi(sim.api)


def name(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def policy(spec, policy_name=None):
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "DeploymentPolicy",
            "metadata": {"name": policy_name or name("dp")}, "spec": spec}


def nodewright(spec, nw_name=None):
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "NodeWright",
            "metadata": {"name": nw_name or name("nw")}, "spec": spec}


GOOD_POLICY = {
    "default": {"budget": {"percent": 25}, "strategy": {"fixed": {"initialBatch": 1}}},
    "compartments": [
        {"name": "canary", "selector": {"matchLabels": {"pool": "canary"}}, "budget": {"count": 1},
         "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 100}}},
        {"name": "h100", "selector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
         "budget": {"percent": 25}, "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}}},
    ],
    "maintenanceWindows": [{"days": ["Sat", "Sun"], "start": "22:00", "end": "06:00", "timeZone": "Europe/Berlin"}],
}
GOOD_NODEWRIGHT = {"nodeSelectors": {"matchLabels": {"nvidia.com/gpu.family": "hopper"}},
                   "packages": {"tuning": {"version": "1.2.3", "interrupt": {"type": "reboot"}}},
                   "deploymentPolicy": "h100-rollout"}


def create_policy(api, body):
    return api.create_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", body)


def create_nodewright(api, body):
    return api.create_cluster_custom_object(GROUP, VERSION, "nodewrights", body)


def rejected(fn, body):
    with pytest.raises(ApiException) as info:
        fn(body)
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)["message"]


def test_install_playbook_is_idempotent_and_crds_are_established(sim, crds):
    ext = client.ApiextensionsV1Api(sim.api)
    for crd in ("nodewrights.nodewright.io", "deploymentpolicies.nodewright.io"):
        conditions = {c.type: c.status for c in ext.read_custom_resource_definition(crd).status.conditions}
        assert conditions["Established"] == "True"
    again = install_crds(sim)
    assert again.returncode == 0 and recap_changed(again) == 0, again.stdout + again.stderr
    check = install_crds(sim, "--check")
    assert check.returncode == 0 and recap_changed(check) == 0, check.stdout + check.stderr


def test_api_server_accepts_good_objects(crds):
    created = create_policy(crds, policy(GOOD_POLICY))
    # Schema defaults are filled in by the API server.
    assert created["spec"]["resetBatchStateOnCompletion"] is True
    assert created["spec"]["compartments"][1]["strategy"]["exponential"]["safetyLimit"] == 50
    create_nodewright(crds, nodewright(GOOD_NODEWRIGHT))


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s["default"]["budget"].update(count=3), "set exactly one of percent or count"),
    (lambda s: s["compartments"][0]["budget"].update(percent=10), "set exactly one of percent or count"),
    (lambda s: s["default"]["budget"].update(percent=101), "less than or equal to 100"),
    (lambda s: s["compartments"][1]["strategy"]["exponential"].update(growthFactor=1), "greater than or equal to 2"),
    (lambda s: s["default"]["strategy"]["fixed"].update(safetyLimit=0), "greater than or equal to 1"),
    (lambda s: s["default"].update(strategy={"fixed": {}, "linear": {}}), "set exactly one strategy"),
    (lambda s: s["compartments"][1].update(name="canary"), "Duplicate value"),
    (lambda s: s["compartments"][1].update(selector=copy.deepcopy(s["compartments"][0]["selector"])),
     "identical selectors"),
    (lambda s: s["compartments"][0].update(name="__default__"), "reserved"),
    (lambda s: s["maintenanceWindows"][0].update(end="25:00"), "maintenanceWindows[0].end"),
], ids=["percent-and-count", "compartment-percent-and-count", "percent-over-100", "growth-factor-1",
        "safety-limit-0", "two-strategies", "duplicate-compartment-names", "identical-selectors",
        "reserved-name", "bad-window-end"])
def test_api_server_rejects_bad_deployment_policies(crds, mutate, expected):
    spec = copy.deepcopy(GOOD_POLICY)
    mutate(spec)
    message = rejected(lambda body: create_policy(crds, body), policy(spec))
    assert expected in message


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s["packages"]["tuning"].update(version="1.2.3.4"), "spec.packages.tuning.version"),
    (lambda s: s["packages"]["tuning"].update(version="1.2-rc.1"), "spec.packages.tuning.version"),
    (lambda s: s.update(interruptionBudget={"percent": 10}), "set interruptionBudget or deploymentPolicy, not both"),
    (lambda s: (s.pop("deploymentPolicy"), s.update(interruptionBudget={"percent": 0})),
     "greater than or equal to 1"),
    (lambda s: s.update(priority=0), "greater than or equal to 1"),
    (lambda s: s["packages"]["tuning"].update(interrupt={"type": "service"}), "interrupt type service needs services"),
    (lambda s: s["packages"].update(Bad_Name={"version": "1.0.0"}), "package names must match"),
], ids=["semver-four-parts", "semver-short-with-prerelease", "budget-with-policy", "budget-percent-0", "priority-0",
        "service-without-services", "bad-package-name"])
def test_api_server_rejects_bad_nodewrights(crds, mutate, expected):
    spec = copy.deepcopy(GOOD_NODEWRIGHT)
    mutate(spec)
    message = rejected(lambda body: create_nodewright(crds, body), nodewright(spec))
    assert expected in message


@pytest.mark.parametrize("version", ["1.2", "3", "v1.2.3"])
def test_api_server_takes_versions_as_upstream_writes_them(crds, version):
    spec = copy.deepcopy(GOOD_NODEWRIGHT)
    spec["nodeSelectors"] = {"matchLabels": {"crd-test": "selects-no-node"}}
    spec["packages"]["tuning"]["version"] = version
    spec["packages"]["base"] = {"version": "2.1", "dependsOn": {"tuning": version}}
    created = crds.create_cluster_custom_object(GROUP, VERSION, "nodewrights", nodewright(spec), dry_run="All")
    assert created["spec"]["packages"]["tuning"]["version"] == version   # kept as written


PARITY = {"drainConfig": {"timeout": "20m", "gracePeriod": "60s", "deleteEmptyDirData": True, "force": False,
                          "ignoreDaemonSets": True, "disableEviction": False},
          "stageTimeout": "30m", "sequencing": "all", "reapplyOnReboot": True, "runtimeRequired": True,
          "runtimeRequiredCordonAfter": True}


def test_api_server_accepts_upstream_parity_fields_and_defaults_them(crds):
    spec = dict(copy.deepcopy(GOOD_NODEWRIGHT), **copy.deepcopy(PARITY))
    # A runtimeRequired resource holds the gate of every node it selects: select none,
    # so that other tests' nodes are not held by it.
    spec["nodeSelectors"] = {"matchLabels": {"crd-test": "selects-no-node"}}
    spec["packages"]["tuning"].update(stageTimeout="1h30m", uninstall={"enabled": True})
    spec["packages"]["base"] = {"version": "1.4.0"}
    spec["packages"]["tuning"]["dependsOn"] = {"base": "1.0.0"}  # a minimum: 1.4.0 will do
    created = create_nodewright(crds, nodewright(spec))
    assert created["spec"]["packages"]["tuning"]["uninstall"] == {"enabled": True, "apply": False}
    assert created["spec"]["drainConfig"]["gracePeriod"] == "60s"
    plain = create_nodewright(crds, nodewright(copy.deepcopy(GOOD_NODEWRIGHT)))
    assert (plain["spec"]["sequencing"], plain["spec"]["reapplyOnReboot"],
            plain["spec"]["runtimeRequiredCordonAfter"]) == ("node", False, False)
    for obj in (created, plain):
        crds.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", obj["metadata"]["name"])


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s.update(stageTimeout="-5m"), "stageTimeout is a duration such as 30m"),
    (lambda s: s["packages"]["tuning"].update(stageTimeout="five minutes"), "stageTimeout is a duration such as 30m"),
    (lambda s: s.update(sequencing="serial"), 'supported values: "node", "all"'),
    (lambda s: s["packages"]["tuning"].update(uninstall={"enabled": False, "apply": True}),
     "uninstall.apply needs uninstall.enabled"),
    (lambda s: s.update(runtimeRequired=False), "runtimeRequiredCordonAfter needs runtimeRequired"),
    (lambda s: s["drainConfig"].update(timeout="-1m"), "timeout is a duration such as 10m"),
    (lambda s: s["packages"]["tuning"].update(dependsOn={"missing": "1.0.0"}),
     "dependsOn must name other packages of this resource"),
], ids=["negative-stage-timeout", "bad-package-stage-timeout", "unknown-sequencing", "uninstall-apply-alone",
        "cordon-after-without-runtime-required", "negative-drain-timeout", "depends-on-missing-package"])
def test_api_server_rejects_bad_parity_fields(crds, mutate, expected):
    spec = dict(copy.deepcopy(GOOD_NODEWRIGHT), **copy.deepcopy(PARITY))
    mutate(spec)
    message = rejected(lambda body: create_nodewright(crds, body), nodewright(spec))
    assert expected in message


def test_status_subresource(crds):
    nw_name = name("nw")
    create_nodewright(crds, nodewright(GOOD_NODEWRIGHT, nw_name))
    status = {"status": "in_progress", "nodesInProgress": 2, "completeNodes": "3/5", "packageList": "tuning:1.2.3",
              "message": "wave 2 of h100-rollout"}
    # The main endpoint ignores status; the status endpoint ignores spec.
    crds.patch_cluster_custom_object(GROUP, VERSION, "nodewrights", nw_name, {"status": status})
    assert "status" not in crds.get_cluster_custom_object(GROUP, VERSION, "nodewrights", nw_name)
    crds.patch_cluster_custom_object_status(GROUP, VERSION, "nodewrights", nw_name,
                                            {"status": status, "spec": {"priority": 7}})
    obj = crds.get_cluster_custom_object(GROUP, VERSION, "nodewrights", nw_name)
    assert obj["status"]["completeNodes"] == "3/5"
    assert obj["spec"]["priority"] == 200  # the schema default, untouched by the status write
    # The status schema is enforced too.
    with pytest.raises(ApiException) as info:
        crds.patch_cluster_custom_object_status(GROUP, VERSION, "nodewrights", nw_name,
                                                {"status": {"nodesInProgress": -1}})
    assert info.value.status == 422


def test_kubectl_get_nodewrights_shows_printer_columns(sim, crds):
    nw_name = name("nw")
    create_nodewright(crds, nodewright(GOOD_NODEWRIGHT, nw_name))
    crds.patch_cluster_custom_object_status(GROUP, VERSION, "nodewrights", nw_name, {"status": {
        "status": "in_progress", "nodesInProgress": 2, "completeNodes": "3/5", "packageList": "tuning:1.2.3"}})
    env = dict(os.environ, KUBECONFIG=sim.kubeconfig)
    out = subprocess.run([KUBECTL, "get", "nodewrights", nw_name], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "PRIORITY", "NODES", "IN-PROGRESS", "COMPLETE", "PACKAGES",
                              "POLICY", "AGE"]
    assert row.split()[:7] == [nw_name, "in_progress", "200", "2", "3/5", "tuning:1.2.3", "h100-rollout"]
    short = subprocess.run([KUBECTL, "get", "nw", nw_name, "-o", "name"], capture_output=True, text=True, env=env)
    assert short.stdout.strip() == "nodewright.nodewright.io/%s" % nw_name
    policies = subprocess.run([KUBECTL, "get", "deploymentpolicies"], capture_output=True, text=True, env=env)
    assert policies.returncode == 0 and policies.stdout.split()[:3] == ["NAME", "TOPOLOGY", "AGE"]


def test_apply_module_reports_changes_truthfully(sim, crds, tmp_path):
    dp_name = name("dp")
    body = policy(GOOD_POLICY, dp_name)
    task = {"name": "apply", "nodewright.fleet.apply": {"definition": body}, "register": "out"}
    play = {"hosts": "localhost", "gather_facts": False, "tasks": [task]}
    first = sim.playbook(tmp_path, play)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _result(first)["resources"] == [{"kind": "DeploymentPolicy", "name": dp_name, "action": "created"}]
    again = sim.playbook(tmp_path, play)
    assert _result(again)["changed"] is False
    changed = copy.deepcopy(body)
    changed["spec"]["default"]["budget"] = {"percent": 50}
    task["nodewright.fleet.apply"]["definition"] = changed
    check = sim.playbook(tmp_path, play, check=True)
    assert _result(check)["changed"] is True and _result(check)["resources"][0]["action"] == "configured"
    stored = crds.get_cluster_custom_object(GROUP, VERSION, "deploymentpolicies", dp_name)
    assert stored["spec"]["default"]["budget"] == {"percent": 25}  # check mode wrote nothing
    bad = copy.deepcopy(body)
    bad["spec"]["default"]["budget"] = {"percent": 10, "count": 1}
    task["nodewright.fleet.apply"]["definition"] = bad
    refused = sim.playbook(tmp_path, play)
    assert refused.returncode != 0
    assert "set exactly one of percent or count" in json.dumps(_result(refused))


def _result(proc):
    for entry in (proc.json or {}).get("tasks", []):
        if entry["task"] == "apply":
            return dict(entry["result"], status=entry["status"])
    raise AssertionError("no apply result:\n" + proc.stdout + proc.stderr)
