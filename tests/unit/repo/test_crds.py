# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The CRDs in deploy/crds carry the same rules as the Python validators.

Bounds are read from the CRD and tried against the Python validator at the
boundary, so a change on one side without the other fails here.
"""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import policy as policy_mod
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import windows as windows_mod
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import resources
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import DURATION_PATTERN
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import INTERRUPT_TYPES
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import state_patch
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
)

pytestmark = pytest.mark.unit

CRDS = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "crds"


def load(name):
    docs = [d for d in yaml.safe_load_all((CRDS / name).read_text()) if d]
    assert len(docs) == 1
    return docs[0]


@pytest.fixture(scope="module")
def nodewright_crd():
    return load("nodewright.io_nodewrights.yaml")


@pytest.fixture(scope="module")
def policy_crd():
    return load("nodewright.io_deploymentpolicies.yaml")


def root(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def at(schema, path):
    """Walk ``spec.packages.*.interrupt``: '*' is additionalProperties, '[]' is items."""
    for part in path.split("."):
        if part == "*":
            schema = schema["additionalProperties"]
        elif part == "[]":
            schema = schema["items"]
        else:
            schema = schema["properties"][part]
    return schema


def rules(schema):
    return [r["rule"] for r in schema.get("x-kubernetes-validations", [])]


def walk(schema, path="$"):
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, path + "." + key)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], path + ".*")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], path + "[]")


# --------------------------------------------------------------------------- both CRDs


@pytest.mark.parametrize("name,kind,plural,short", [
    ("nodewright.io_nodewrights.yaml", "NodeWright", "nodewrights", "nw"),
    ("nodewright.io_deploymentpolicies.yaml", "DeploymentPolicy", "deploymentpolicies", "dp"),
])
def test_identity(name, kind, plural, short):
    crd = load(name)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == plural + ".nodewright.io"
    spec = crd["spec"]
    assert spec["group"] == "nodewright.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["shortNames"] == [short]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [("v1alpha1", True, True)]


@pytest.mark.parametrize("name", ["nodewright.io_nodewrights.yaml", "nodewright.io_deploymentpolicies.yaml"])
def test_schema_is_structural_and_rules_explain_themselves(name):
    for path, schema in walk(root(load(name))):
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            assert "type" in schema, "%s has no type" % path
        assert not (schema.get("properties") and isinstance(schema.get("additionalProperties"), dict)), path
        for rule in schema.get("x-kubernetes-validations", []):
            assert rule.get("message"), "%s: rule %r has no message" % (path, rule["rule"])
            for pattern in re.findall(r"matches\(r'([^']*)'\)", rule["rule"]):
                re.compile(pattern)


# --------------------------------------------------------------------------- NodeWright


def test_nodewright_status_and_printer_columns(nodewright_crd):
    version = nodewright_crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Status", "string", ".status.status"),
        ("Priority", "integer", ".spec.priority"),
        ("Nodes In-Progress", "integer", ".status.nodesInProgress"),
        ("Complete", "string", ".status.completeNodes"),
        ("Packages", "string", ".status.packageList"),
        ("Policy", "string", ".spec.deploymentPolicy"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]


def test_nodewright_fields_match_the_validator(nodewright_crd):
    spec = at(root(nodewright_crd), "spec")
    assert set(spec["properties"]) == set(resources.NODEWRIGHT_SPEC_FIELDS)
    assert set(at(spec, "packages.*")["properties"]) == set(resources.PACKAGE_FIELDS)


def test_nodewright_status_carries_the_engine_state(nodewright_crd):
    status = at(root(nodewright_crd), "status")
    for key in ("nodeState", "nodeStatus", "compartmentStatuses", "conditions", "observedGeneration",
                "nodesInProgress", "completeNodes", "packageList"):
        assert key in status["properties"]
    batch = at(status, "compartmentStatuses.*.batchState")
    assert set(batch["properties"]) == set(BatchState().to_dict())
    rollout = at(status, "rolloutState")
    # What a run records between waves (fleet/rollout.py state_patch), every key of it.
    state = RolloutState(parse_policy({"default": {"budget": {"count": 1}}}))
    assert set(rollout["properties"]) == set(state_patch(state, [])["status"]["rolloutState"])


def test_nodewright_patterns_are_the_validators(nodewright_crd):
    schema = root(nodewright_crd)
    assert at(schema, "metadata.name")["pattern"] == resources.NODEWRIGHT_NAME_PATTERN
    assert at(schema, "metadata.name")["maxLength"] == resources.NODEWRIGHT_NAME_MAX
    package = at(schema, "spec.packages.*")
    assert package["required"] == ["version"]
    assert package["properties"]["version"]["pattern"] == resources.SEMVER_PATTERN
    assert package["properties"]["image"]["pattern"] == resources.IMAGE_PATTERN
    assert package["properties"]["containerSHA"]["pattern"] == resources.CONTAINER_SHA_PATTERN
    assert at(package, "dependsOn.*")["pattern"] == resources.SEMVER_PATTERN
    assert at(package, "env.[].name")["pattern"] == resources.ENV_NAME_PATTERN
    assert at(package, "interrupt.type")["enum"] == list(INTERRUPT_TYPES)
    assert at(package, "configInterrupts.*.type")["enum"] == list(INTERRUPT_TYPES)
    assert at(package, "interrupt.services.[]")["pattern"] == resources.SERVICE_PATTERN
    assert at(schema, "spec.deploymentPolicy")["pattern"] == resources.OBJECT_NAME_PATTERN
    assert "self.all(k, k.matches(r'%s'))" % resources.PACKAGE_NAME_PATTERN in rules(at(schema, "spec.packages"))
    assert any(resources.CONFIG_KEY_PATTERN in r for r in rules(at(package, "configMap")))
    assert any(resources.CONFIG_INTERRUPT_KEY_PATTERN in r for r in rules(at(package, "configInterrupts")))


def test_nodewright_cross_field_rules(nodewright_crd):
    spec = at(root(nodewright_crd), "spec")
    assert "!(has(self.interruptionBudget) && has(self.deploymentPolicy))" in rules(spec)
    assert "!has(self.deploymentPolicyOptions) || has(self.deploymentPolicy)" in rules(spec)
    # autoTaintNewNodes without runtimeRequired is accepted, and does nothing (as in Skyhook).
    assert not any("autoTaintNewNodes" in r for r in rules(spec))
    assert "has(self.percent) != has(self.count)" in rules(at(spec, "interruptionBudget"))
    package = at(spec, "packages.*")
    assert "!(has(self.image) && has(self.source))" in rules(package)
    assert "!has(self.containerSHA) || has(self.image)" in rules(package)
    assert any("configInterrupts" in r and "configMap" in r for r in rules(package))
    # dependsOn names a package of the resource; its version is a minimum that
    # NodeWright checks (CEL has no semantic-version comparison to write it with).
    assert any("dependsOn" in r and "d in self" in r and "version" not in r for r in rules(at(spec, "packages")))
    interrupt = at(package, "interrupt")
    assert any("'service'" in r and "size(self.services) > 0" in r for r in rules(interrupt))
    env = at(package, "env")
    assert (env["x-kubernetes-list-type"], env["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert "!(has(self.value) && has(self.valueFrom))" in rules(env["items"])


def test_nodewright_parity_fields(nodewright_crd):
    """Upstream NodeWright's fields: their shape in the CRD and the validator agree."""
    spec = at(root(nodewright_crd), "spec")
    assert at(spec, "sequencing")["enum"] == list(resources.SEQUENCING)
    assert at(spec, "sequencing")["default"] == "node"
    assert set(at(spec, "drainConfig")["properties"]) == set(resources.DRAIN_FIELDS)
    assert set(resources.DRAIN_OPTIONS) == set(resources.DRAIN_FIELDS)
    package = at(spec, "packages.*")
    assert set(at(package, "uninstall")["properties"]) == set(resources.UNINSTALL_FIELDS)
    assert "!self.apply || self.enabled" in rules(at(package, "uninstall"))
    assert any("runtimeRequiredCordonAfter" in r and "runtimeRequired" in r for r in rules(spec))
    for schema in (at(spec, "stageTimeout"), at(package, "stageTimeout"), at(spec, "drainConfig.timeout"),
                   at(spec, "drainConfig.gracePeriod")):
        (rule,) = rules(schema)
        assert rule == "self.matches(r'%s')" % DURATION_PATTERN
        pattern = re.compile(DURATION_PATTERN)
        for good in ("0", "30m", "1h30m", "90s", "1.5h", "250ms"):
            assert pattern.match(good)
            resources._duration(good, "x", "stageTimeout")
        for bad in ("-5m", "5 minutes", "m", "1d", ""):
            assert not pattern.match(bad)
            with pytest.raises(ValidationError):
                resources._duration(bad, "x", "stageTimeout")
    for key in ("reapplyOnReboot", "runtimeRequiredCordonAfter"):
        assert at(spec, key)["default"] is False


def test_nodewright_defaults(nodewright_crd):
    spec = at(root(nodewright_crd), "spec")
    assert spec["properties"]["priority"]["default"] == resources.DEFAULT_PRIORITY
    assert spec["properties"]["priority"]["minimum"] == 1
    assert spec["properties"]["runtimeRequired"]["default"] is False
    assert spec["properties"]["autoTaintNewNodes"]["default"] is False


NODEWRIGHT_BASE = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "nw"}}


@pytest.mark.parametrize("path", ["interruptionBudget.percent", "interruptionBudget.count", "priority"])
def test_nodewright_bounds_agree_with_the_validator(nodewright_crd, path):
    schema = at(root(nodewright_crd), "spec." + path)
    keys = path.split(".")

    def accepted(value):
        spec = {keys[0]: value} if len(keys) == 1 else {keys[0]: {keys[1]: value}}
        try:
            resources.validate_nodewright(dict(NODEWRIGHT_BASE, spec=spec))
            return True
        except ValidationError:
            return False

    assert accepted(schema["minimum"]) and not accepted(schema["minimum"] - 1)
    if "maximum" in schema:
        assert accepted(schema["maximum"]) and not accepted(schema["maximum"] + 1)


# --------------------------------------------------------------------------- DeploymentPolicy


FULL_POLICY = {
    "default": {"budget": {"percent": 100}, "strategy": {"fixed": {}}},
    "compartments": [{"name": "a", "selector": {"matchLabels": {"x": "1"}}, "budget": {"count": 1}}],
    "resetBatchStateOnCompletion": True,
    "topology": {"key": "nvidia.com/gpu.clique"},
    "fleetDisruptionLimit": {"count": 2},
    "maintenanceWindows": [{"start": "01:00", "end": "02:00"}],
    "alertGate": {"url": "http://alertmanager.monitoring:9093"},
    "nodeOrder": "workload",
}


def test_policy_fields_match_the_engine(policy_crd):
    spec = at(root(policy_crd), "spec")
    assert set(spec["properties"]) == set(parse_policy(FULL_POLICY).to_dict())
    assert spec["required"] == ["default"]
    assert "subresources" not in policy_crd["spec"]["versions"][0]


def test_policy_compartment_rules(policy_crd):
    compartments = at(root(policy_crd), "spec.compartments")
    # Duplicate names are rejected by the list-map itself.
    assert (compartments["x-kubernetes-list-type"], compartments["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert "self.all(a, self.exists_one(b, b.selector == a.selector))" in rules(compartments)
    item = compartments["items"]
    assert item["required"] == ["name", "selector", "budget"]
    assert "self.name != '%s'" % policy_mod.DEFAULT_COMPARTMENT in rules(item)
    assert item["properties"]["name"]["maxLength"] == 63


@pytest.mark.parametrize("path", ["default.strategy", "compartments.[].strategy"])
def test_strategy_shape(policy_crd, path):
    strategy = at(root(policy_crd), "spec." + path)
    assert list(strategy["properties"]) == list(policy_mod.STRATEGY_KINDS)
    assert any("== 1" in r for r in rules(strategy))
    common = {"initialBatch", "batchThreshold", "failureThreshold", "safetyLimit"}
    assert set(strategy["properties"]["fixed"]["properties"]) == common
    assert set(strategy["properties"]["linear"]["properties"]) == common | {"delta"}
    assert set(strategy["properties"]["exponential"]["properties"]) == common | {"growthFactor"}


def policy_with(path, value):
    spec = copy.deepcopy(FULL_POLICY)
    node = spec
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return spec


BOUNDED = [
    ("default.budget.percent", "default.budget", {"percent": None}),
    ("default.budget.count", "default.budget", {"count": None}),
    ("fleetDisruptionLimit.percent", "fleetDisruptionLimit", {"percent": None}),
    ("topology.maxInProgress", "topology", {"key": "rack", "maxInProgress": None}),
] + [
    ("default.strategy.%s.%s" % (kind, param), "default.strategy", {kind: {param: None}})
    for kind, params in (("fixed", ()), ("linear", ("delta",)), ("exponential", ("growthFactor",)))
    for param in ("initialBatch", "batchThreshold", "failureThreshold", "safetyLimit") + params
]


@pytest.mark.parametrize("crd_path,where,template", BOUNDED, ids=[b[0] for b in BOUNDED])
def test_policy_bounds_agree_with_the_engine(policy_crd, crd_path, where, template):
    schema = at(root(policy_crd), "spec." + crd_path)
    leaf = crd_path.split(".")[-1]

    def accepted(value):
        block = copy.deepcopy(template)
        inner = block if leaf in block else next(iter(block.values()))
        inner[leaf] = value
        try:
            parse_policy(policy_with(where, block))
            return True
        except ValidationError:
            return False

    assert accepted(schema["minimum"]) and not accepted(schema["minimum"] - 1)
    if "maximum" in schema:
        assert accepted(schema["maximum"]) and not accepted(schema["maximum"] + 1)


def test_policy_defaults_match_the_engine(policy_crd):
    spec = at(root(policy_crd), "spec")
    engine = parse_policy({"default": {"budget": {"count": 1}, "strategy": {"linear": {}}}}).default.strategy
    linear = at(spec, "default.strategy.linear")["properties"]
    assert linear["initialBatch"]["default"] == engine.initial_batch
    assert linear["batchThreshold"]["default"] == engine.batch_threshold
    assert linear["safetyLimit"]["default"] == engine.safety_limit
    assert linear["delta"]["default"] == engine.delta
    assert "default" not in linear["failureThreshold"]   # unset = never stop
    assert at(spec, "default.strategy.exponential.growthFactor")["default"] == engine.growth_factor
    assert spec["properties"]["resetBatchStateOnCompletion"]["default"] is True
    assert at(spec, "topology.maxInProgress")["default"] == 1
    assert at(spec, "maintenanceWindows.[].timeZone")["default"] == "UTC"


def test_maintenance_window_rules_agree_with_the_engine(policy_crd):
    window = at(root(policy_crd), "spec.maintenanceWindows.[]")
    assert at(window, "days.[]")["enum"] == list(windows_mod.DAYS)
    assert window["properties"]["days"]["x-kubernetes-list-type"] == "set"
    assert window["required"] == ["start", "end"]
    assert "self.start != self.end" in rules(window)
    for field, samples in (("start", ["00:00", "23:59", "24:00", "7:00", "12:60", "2400"]),
                           ("end", ["00:00", "23:59", "24:00", "24:01", "7:00", "12:60"])):
        pattern = re.compile(window["properties"][field]["pattern"])
        for sample in samples:
            other = {"start": "03:33", "end": "04:44"}
            other[field] = sample
            try:
                parse_policy(policy_with("maintenanceWindows", [other]))
                engine_ok = True
            except ValidationError:
                engine_ok = False
            assert bool(pattern.match(sample)) is engine_ok, (field, sample)


def test_label_selector_rules(policy_crd, nodewright_crd):
    for selector in (at(root(policy_crd), "spec.compartments.[].selector"),
                     at(root(nodewright_crd), "spec.nodeSelectors"),
                     at(root(nodewright_crd), "spec.podNonInterruptLabels")):
        assert at(selector, "matchExpressions.[].operator")["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
        assert any("In" in r and "values" in r for r in rules(at(selector, "matchExpressions.[]")))
        assert len(rules(at(selector, "matchLabels"))) == 2
