# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Validation of NodeWright and DeploymentPolicy custom resources.

The rules here are the rules of the CRDs in ``deploy/crds/`` (OpenAPI schema plus
CEL ``x-kubernetes-validations``), so a resource given to a playbook inline is held
to the same standard as one the API server admitted. Where the API server cannot
check something (a dependency cycle, a configInterrupts glob, an IANA time zone,
two selectors that are written differently but select the same nodes), this module
checks it too and the CRD's description says so.

Only the shape of the resource is checked here; a package's own manifest and steps
are validated where packages are loaded.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    DURATION_PATTERN,
    did_you_mean,
    field_path,
    parse_duration,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import (  # noqa: F401 - re-exported
    INTERRUPT_TYPES,
    SERVICE_PATTERN,
    compact,
    parse_interrupt,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    ANNOTATION_DISABLE,
    ANNOTATION_PAUSE,
    API_GROUP,
    API_VERSION,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    CONFIG_KEY_RE,
    NAME_RE,
    SEMVER_RE,
    Version,
    config_key_matches,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    parse_budget,
    parse_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import (
    from_label_selector,
    validate_key,
)

GROUP_VERSION = "%s/%s" % (API_GROUP, API_VERSION)
KIND_NODEWRIGHT = "NodeWright"
KIND_DEPLOYMENT_POLICY = "DeploymentPolicy"

DEFAULT_PRIORITY = 200
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# The same patterns appear in the CRDs; tests/unit/test_crds.py keeps them in step.
# Package names, versions and config keys are the package model's rules.
PACKAGE_NAME_PATTERN = NAME_RE.pattern
SEMVER_PATTERN = SEMVER_RE.pattern
CONTAINER_SHA_PATTERN = r"^sha256:[a-f0-9]{64}$"
# A bare repository reference: registry[:port]/path, with no tag and no digest.
IMAGE_PATTERN = (r"^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?"
                 r"(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")
CONFIG_KEY_PATTERN = CONFIG_KEY_RE.pattern
CONFIG_INTERRUPT_KEY_PATTERN = r"^[-._a-zA-Z0-9*]+$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# A NodeWright's name becomes part of label and annotation keys on nodes
# (nodewright.io/status-<name>), whose name part is at most 63 characters.
NODEWRIGHT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
NODEWRIGHT_NAME_MAX = 56
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
OBJECT_NAME_MAX = 253

NODEWRIGHT_SPEC_FIELDS = ("nodeSelectors", "packages", "podNonInterruptLabels", "interruptionBudget",
                          "deploymentPolicy", "deploymentPolicyOptions", "priority", "runtimeRequired",
                          "autoTaintNewNodes", "additionalTolerations", "drainConfig", "stageTimeout", "sequencing",
                          "reapplyOnReboot", "runtimeRequiredCordonAfter")
PACKAGE_FIELDS = ("version", "image", "containerSHA", "source", "interrupt", "configMap",
                  "configInterrupts", "dependsOn", "env", "stageTimeout", "uninstall")
SEQUENCING = ("node", "all")
DRAIN_FIELDS = ("timeout", "gracePeriod", "deleteEmptyDirData", "force", "ignoreDaemonSets", "disableEviction")
# drainConfig field -> the nodewright.fleet.node_drain option it sets.
DRAIN_OPTIONS = {"timeout": "timeout", "gracePeriod": "grace_period", "deleteEmptyDirData": "delete_emptydir_data",
                 "force": "force", "ignoreDaemonSets": "ignore_daemonsets", "disableEviction": "disable_eviction"}
UNINSTALL_FIELDS = ("enabled", "apply")
STAGE_TIMEOUT_PATTERN = DURATION_PATTERN

_RE = {name: re.compile(pattern) for name, pattern in (
    ("package", PACKAGE_NAME_PATTERN), ("semver", SEMVER_PATTERN), ("sha", CONTAINER_SHA_PATTERN),
    ("image", IMAGE_PATTERN), ("config", CONFIG_KEY_PATTERN), ("config_glob", CONFIG_INTERRUPT_KEY_PATTERN),
    ("env", ENV_NAME_PATTERN), ("service", SERVICE_PATTERN), ("nw_name", NODEWRIGHT_NAME_PATTERN),
    ("object", OBJECT_NAME_PATTERN))}
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _key_path(where, key):
    """``spec.packages.tuning``, ``spec.packages.tuning.configMap.sysctl.conf``: one
    field-path style everywhere (``common/validation.field_path``)."""
    return field_path(where, key)


def _or_empty(value, empty):
    return empty if value is None else value


def _mapping(value, where, what):
    if not isinstance(value, dict):
        raise ValidationError("%s must be a mapping, got %s" % (what, type(value).__name__), field=where)
    return value


def _allowed(mapping, allowed, where):
    for key in mapping:
        if key not in allowed:
            near = did_you_mean(key, allowed)
            raise ValidationError("unknown field %r" % (key,), field=_key_path(where, key),
                                  hint="%sallowed here: %s" % ((near + " ") if near else "", ", ".join(allowed)))


def _string(value, where, what, pattern=None, max_length=None, hint=None):
    if not isinstance(value, str) or not value:
        raise ValidationError("%s must be a non-empty string, got %r" % (what, value), field=where, hint=hint)
    if max_length is not None and len(value) > max_length:
        raise ValidationError("%s is %d characters; the limit is %d" % (what, len(value), max_length),
                              field=where, hint=hint)
    if pattern is not None and not _RE[pattern].match(value):
        raise ValidationError("%s %r is not valid" % (what, value), field=where, hint=hint)
    return value


def _bool(spec, key, where, default):
    value = spec.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("must be true or false, got %r" % (value,), field=_key_path(where, key))
    return value


def _check_header(obj, kind, where=""):
    _mapping(obj, where or "resource", "a %s resource" % kind)
    api_version = obj.get("apiVersion")
    if api_version != GROUP_VERSION or obj.get("kind") != kind:
        hint = "use apiVersion: %s and kind: %s" % (GROUP_VERSION, kind)
        if isinstance(api_version, str) and api_version.startswith(("skyhook.nvidia.com/", "nodewright.nvidia.com/")):
            hint = "this is a Skyhook resource; convert it with skyhook_convert.convert() first"
        raise ValidationError("expected %s %s, got %s %s" % (GROUP_VERSION, kind, api_version, obj.get("kind")),
                              field="apiVersion", hint=hint)
    metadata = _mapping(_or_empty(obj.get("metadata"), {}), "metadata", "metadata")
    return metadata


def _label_selector(value, where):
    # In a resource a selector is a LabelSelector mapping; the string form is only for playbooks.
    if value is None:
        return {}
    _mapping(value, where, "a LabelSelector")
    from_label_selector(value, where)
    return copy.deepcopy(value)


def validate_semver(value, where, what="version"):
    return _string(value, where, what, "semver", 128,
                   hint="use semantic versioning MAJOR.MINOR.PATCH, e.g. 1.2.3 or 2.0.0-rc.1 (no leading v)")


def _interrupt(value, where):
    """The one interrupt validator (``package/interrupts.py``), in the resource's form."""
    return compact(parse_interrupt(value, where))


def _duration(value, where, what):
    if not isinstance(value, str):
        raise ValidationError("%s must be a duration string such as 30m, got %r" % (what, value), field=where,
                              hint="quote it in YAML: \"30m\", \"1h30m\", \"90s\", \"0\"")
    parse_duration(value, where, what)
    return value


def _drain_config(value, where):
    """drainConfig (upstream NodeWright's field): how nodes are drained before an
    interrupt. Returned as it is; ``drain_options`` maps it onto node_drain."""
    _mapping(value, where, "drainConfig")
    _allowed(value, DRAIN_FIELDS, where)
    out = {}
    for key in ("timeout", "gracePeriod"):
        if value.get(key) is not None:
            out[key] = _duration(value[key], _key_path(where, key), key)
    for key in ("deleteEmptyDirData", "force", "ignoreDaemonSets", "disableEviction"):
        if value.get(key) is not None:
            out[key] = _bool(value, key, where, None)
    timeout = parse_duration(out.get("timeout"), where)
    grace = parse_duration(out.get("gracePeriod"), where)
    if timeout and grace is not None and grace > timeout:
        raise ValidationError("gracePeriod %s is longer than timeout %s: the drain would give up before the pods "
                              "it evicts are allowed to stop" % (out["gracePeriod"], out["timeout"]),
                              field=_key_path(where, "gracePeriod"),
                              hint="shorten gracePeriod below %s, or raise timeout above %s"
                                   % (out["timeout"], out["gracePeriod"]))
    return out


def drain_options(drain_config):
    """A resource's drainConfig as ``nodewright.fleet.node_drain`` options (seconds for
    the durations); only what the resource sets. A timeout of 0 (upstream: none) is
    left out: NodeWright always bounds a drain, with the rollout's own timeout."""
    out = {}
    for key, value in (drain_config or {}).items():
        option = DRAIN_OPTIONS[key]
        if key in ("timeout", "gracePeriod"):
            seconds = parse_duration(value, key)
            if key == "timeout" and not seconds:
                continue
            out[option] = int(seconds + 0.999) if key == "timeout" else int(seconds)
        else:
            out[option] = value
    return out


def _uninstall(value, where, name):
    _mapping(value, where, "uninstall")
    _allowed(value, UNINSTALL_FIELDS, where)
    out = {"enabled": _bool(value, "enabled", where, False), "apply": _bool(value, "apply", where, False)}
    if out["apply"] and not out["enabled"]:
        raise ValidationError("uninstall.apply without uninstall.enabled", field=_key_path(where, "apply"),
                              hint="set enabled: true to say package %s has a working uninstall, or remove apply"
                                   % name)
    return out


def _env(value, where):
    if not isinstance(value, list):
        raise ValidationError("must be a list of environment variables", field=where,
                              hint="e.g. [{name: PROFILE, value: throughput}]")
    seen = set()
    out = []
    for n, item in enumerate(value):
        here = "%s[%d]" % (where, n)
        _mapping(item, here, "an environment variable")
        _allowed(item, ("name", "value", "valueFrom"), here)
        name = _string(item.get("name"), here + ".name", "variable name", "env", 256,
                       hint="letters, digits, '_', '-', '.'; not starting with a digit")
        if name in seen:
            raise ValidationError("variable %s is set twice" % name, field=here + ".name",
                                  hint="keep one entry per variable")
        seen.add(name)
        if "value" in item and "valueFrom" in item:
            raise ValidationError("sets both value and valueFrom", field=here, hint="keep one")
        if "value" in item and not isinstance(item["value"], str):
            raise ValidationError("value must be a string, got %r" % (item["value"],), field=here + ".value",
                                  hint="quote numbers and booleans in YAML")
        if "valueFrom" in item:
            source = _mapping(item["valueFrom"], here + ".valueFrom", "valueFrom")
            _allowed(source, ("secretKeyRef", "configMapKeyRef"), here + ".valueFrom")
            if len(source) != 1:
                raise ValidationError("valueFrom needs exactly one of secretKeyRef, configMapKeyRef",
                                      field=here + ".valueFrom")
            ref_kind = next(iter(source))
            ref_where = "%s.valueFrom.%s" % (here, ref_kind)
            ref = _mapping(source[ref_kind], ref_where, ref_kind)
            _allowed(ref, ("name", "key", "optional"), ref_where)
            _string(ref.get("name"), ref_where + ".name", "name", max_length=253)
            _string(ref.get("key"), ref_where + ".key", "key", max_length=253)
            if "optional" in ref and not isinstance(ref["optional"], bool):
                raise ValidationError("must be true or false", field=ref_where + ".optional")
        out.append(copy.deepcopy(item))
    return out


def _package(name, value, where):
    _mapping(value, where, "a package")
    if "name" in value:
        raise ValidationError("a package takes its name from its key; remove name", field=where + ".name",
                              hint="write packages: {%s: {version: ...}}" % name)
    _allowed(value, PACKAGE_FIELDS, where)
    out = {"version": validate_semver(value.get("version"), where + ".version")}
    if value.get("image") is not None:
        out["image"] = _string(value["image"], where + ".image", "image", "image", 512,
                               hint="give the repository only (e.g. ghcr.io/org/pkg); the tag is the version, "
                                    "the digest goes in containerSHA")
    if value.get("source") is not None:
        out["source"] = _string(value["source"], where + ".source", "source", max_length=4096,
                                hint="the path of the package directory")
        if "\n" in out["source"] or "\0" in out["source"]:
            raise ValidationError("source must be a single path", field=where + ".source")
    if "image" in out and "source" in out:
        raise ValidationError("sets both image and source", field=where,
                              hint="a package comes from an image or from a directory (source), not both")
    if value.get("containerSHA") is not None:
        if "image" not in out:
            raise ValidationError("containerSHA pins an image, but the package has none",
                                  field=where + ".containerSHA", hint="set image, or remove containerSHA")
        out["containerSHA"] = _string(value["containerSHA"], where + ".containerSHA", "containerSHA", "sha", 71,
                                      hint="sha256: followed by 64 lowercase hex characters")
    if value.get("interrupt") is not None:
        out["interrupt"] = _interrupt(value["interrupt"], where + ".interrupt")
    config = {}
    if value.get("configMap") is not None:
        _mapping(value["configMap"], where + ".configMap", "configMap")
        for key, content in value["configMap"].items():
            here = _key_path(where + ".configMap", key)
            _string(key, here, "config key", "config", 253,
                    hint="config keys are file names: letters, digits, '-', '_', '.'; no '/'")
            if not isinstance(content, str):
                raise ValidationError("config content must be a string, got %s" % type(content).__name__,
                                      field=here, hint="use a YAML block scalar (|) for file content")
            config[key] = content
        out["configMap"] = config
    if value.get("configInterrupts") is not None:
        _mapping(value["configInterrupts"], where + ".configInterrupts", "configInterrupts")
        interrupts = {}
        for key, interrupt in value["configInterrupts"].items():
            here = _key_path(where + ".configInterrupts", key)
            _string(key, here, "configInterrupts key", "config_glob", 253,
                    hint="a configMap key, or a pattern with '*'")
            if not any(config_key_matches(key, k) for k in config):
                raise ValidationError("%r matches no key of configMap" % key, field=here,
                                      hint="configMap keys: %s" % (", ".join(sorted(config)) or "none"))
            interrupts[key] = _interrupt(interrupt, here)
        out["configInterrupts"] = interrupts
    if value.get("dependsOn") is not None:
        _mapping(value["dependsOn"], where + ".dependsOn", "dependsOn")
        depends = {}
        for dep, version in value["dependsOn"].items():
            here = _key_path(where + ".dependsOn", dep)
            depends[dep] = validate_semver(version, here, "dependsOn version")
        out["dependsOn"] = depends
    if value.get("env") is not None:
        out["env"] = _env(value["env"], where + ".env")
    if value.get("stageTimeout") is not None:
        out["stageTimeout"] = _duration(value["stageTimeout"], where + ".stageTimeout", "stageTimeout")
    if value.get("uninstall") is not None:
        out["uninstall"] = _uninstall(value["uninstall"], where + ".uninstall", name)
    return out


def _check_dependencies(packages, where):
    for name, pkg in packages.items():
        for dep, version in (pkg.get("dependsOn") or {}).items():
            here = _key_path("%s.%s.dependsOn" % (where, name), dep)
            if dep == name:
                raise ValidationError("package %s depends on itself" % name, field=here)
            if dep not in packages:
                raise ValidationError("depends on package %r, which this resource does not define" % dep,
                                      field=here, hint="add %s to packages or remove the dependency" % dep)
            if Version(packages[dep]["version"]) < Version(version):
                raise ValidationError("depends on %s %s or later, but the resource has %s %s: the dependency cannot "
                                      "be met" % (dep, version, dep, packages[dep]["version"]), field=here,
                                      hint="raise %s to %s or later, or lower the dependsOn version (it is the "
                                           "lowest version that will do)" % (dep, version))
            if (packages[dep].get("uninstall") or {}).get("apply") and not (pkg.get("uninstall") or {}).get("apply"):
                raise ValidationError("depends on %s, which uninstall.apply removes: the dependency cannot be met"
                                      % dep, field=here,
                                      hint="uninstall %s too, or keep %s" % (name, dep))
    # Cycles: depth-first search, reporting the loop in order.
    state = {}

    def visit(name, trail):
        state[name] = "open"
        for dep in sorted(packages[name].get("dependsOn") or {}):
            if state.get(dep) == "open":
                loop = trail[trail.index(dep):] + [dep]
                raise ValidationError("dependsOn forms a cycle: %s" % " -> ".join(loop),
                                      field="%s.%s.dependsOn" % (where, name),
                                      hint="packages must form a DAG; remove one of these dependencies")
            if dep not in state:
                visit(dep, trail + [dep])
        state[name] = "done"

    for name in sorted(packages):
        if name not in state:
            visit(name, [name])


def _tolerations(value, where):
    if not isinstance(value, list):
        raise ValidationError("must be a list of tolerations", field=where)
    out = []
    for n, item in enumerate(value):
        here = "%s[%d]" % (where, n)
        _mapping(item, here, "a toleration")
        _allowed(item, ("key", "operator", "value", "effect", "tolerationSeconds"), here)
        key = item.get("key") or ""
        operator = item.get("operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            raise ValidationError("unknown operator %r" % (operator,), field=here + ".operator",
                                  hint="Exists or Equal")
        if key:
            validate_key(key, here + ".key")
        elif operator != "Exists":
            raise ValidationError("a toleration without a key must use operator Exists", field=here,
                                  hint="add a key, or set operator: Exists to tolerate every taint")
        if operator == "Exists" and item.get("value"):
            raise ValidationError("operator Exists takes no value", field=here + ".value")
        effect = item.get("effect") or ""
        if effect and effect not in TOLERATION_EFFECTS:
            raise ValidationError("unknown effect %r" % (effect,), field=here + ".effect",
                                  hint="one of %s, or leave it out for all" % ", ".join(TOLERATION_EFFECTS))
        if item.get("tolerationSeconds") is not None:
            seconds = item["tolerationSeconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                raise ValidationError("must be a whole number of seconds", field=here + ".tolerationSeconds")
            if effect != "NoExecute":
                raise ValidationError("tolerationSeconds only applies to effect NoExecute",
                                      field=here + ".tolerationSeconds")
        out.append(copy.deepcopy(item))
    return out


def validate_nodewright(obj):
    """Validate a NodeWright resource; return a normalised copy with defaults filled in.

    Raises ValidationError with the field path (``spec.packages.tuning.version``).
    """
    metadata = _check_header(obj, KIND_NODEWRIGHT)
    _string(metadata.get("name"), "metadata.name", "name", "nw_name", NODEWRIGHT_NAME_MAX,
            hint="lowercase letters, digits, '-' and '.', at most %d characters (the name is part of "
                 "label keys on nodes)" % NODEWRIGHT_NAME_MAX)
    spec = _mapping(_or_empty(obj.get("spec"), {}), "spec", "spec")
    _allowed(spec, NODEWRIGHT_SPEC_FIELDS, "spec")

    out_spec = {
        "nodeSelectors": _label_selector(spec.get("nodeSelectors"), "spec.nodeSelectors"),
        "podNonInterruptLabels": _label_selector(spec.get("podNonInterruptLabels"), "spec.podNonInterruptLabels"),
    }
    packages = {}
    raw_packages = _mapping(_or_empty(spec.get("packages"), {}), "spec.packages", "packages")
    for name, pkg in raw_packages.items():
        here = _key_path("spec.packages", name)
        _string(name, here, "package name", "package", 43,
                hint="2-43 characters: lowercase letters, digits and '-', starting and ending with a letter")
        packages[name] = _package(name, pkg, here)
    _check_dependencies(packages, "spec.packages")
    out_spec["packages"] = packages

    if spec.get("interruptionBudget") is not None and spec.get("deploymentPolicy") is not None:
        raise ValidationError("sets both interruptionBudget and deploymentPolicy", field="spec.interruptionBudget",
                              hint="a DeploymentPolicy has its own budgets; remove interruptionBudget")
    if spec.get("interruptionBudget") is not None:
        out_spec["interruptionBudget"] = parse_budget(spec["interruptionBudget"], "spec.interruptionBudget",
                                                      "interruptionBudget").to_dict()
    if spec.get("deploymentPolicy") is not None:
        out_spec["deploymentPolicy"] = _string(spec["deploymentPolicy"], "spec.deploymentPolicy",
                                               "deploymentPolicy", "object", OBJECT_NAME_MAX,
                                               hint="the name of a DeploymentPolicy resource")
    if spec.get("deploymentPolicyOptions") is not None:
        if "deploymentPolicy" not in out_spec:
            raise ValidationError("deploymentPolicyOptions without deploymentPolicy",
                                  field="spec.deploymentPolicyOptions",
                                  hint="set deploymentPolicy, or remove the options")
        options = _mapping(spec["deploymentPolicyOptions"], "spec.deploymentPolicyOptions", "deploymentPolicyOptions")
        _allowed(options, ("resetBatchStateOnCompletion",), "spec.deploymentPolicyOptions")
        out_spec["deploymentPolicyOptions"] = {}
        if options.get("resetBatchStateOnCompletion") is not None:
            out_spec["deploymentPolicyOptions"]["resetBatchStateOnCompletion"] = _bool(
                options, "resetBatchStateOnCompletion", "spec.deploymentPolicyOptions", True)

    priority = spec.get("priority")
    if priority is None:
        priority = DEFAULT_PRIORITY
    elif isinstance(priority, bool) or not isinstance(priority, int) or priority < 1:
        raise ValidationError("must be a whole number >= 1, got %r" % (priority,), field="spec.priority",
                              hint="lower runs first; the default is %d" % DEFAULT_PRIORITY)
    out_spec["priority"] = priority
    out_spec["runtimeRequired"] = _bool(spec, "runtimeRequired", "spec", False)
    out_spec["autoTaintNewNodes"] = _bool(spec, "autoTaintNewNodes", "spec", False)
    if out_spec["autoTaintNewNodes"] and not out_spec["runtimeRequired"]:
        raise ValidationError("autoTaintNewNodes needs runtimeRequired: true", field="spec.autoTaintNewNodes",
                              hint="the taint it adds is the runtime-required taint; set runtimeRequired "
                                   "or remove autoTaintNewNodes")
    out_spec["additionalTolerations"] = _tolerations(_or_empty(spec.get("additionalTolerations"), []),
                                                     "spec.additionalTolerations")
    if spec.get("drainConfig") is not None:
        out_spec["drainConfig"] = _drain_config(spec["drainConfig"], "spec.drainConfig")
    if spec.get("stageTimeout") is not None:
        out_spec["stageTimeout"] = _duration(spec["stageTimeout"], "spec.stageTimeout", "stageTimeout")
    sequencing = spec.get("sequencing")
    if sequencing is None:
        sequencing = "node"
    if sequencing not in SEQUENCING:
        near = did_you_mean(sequencing, SEQUENCING) if isinstance(sequencing, str) else None
        raise ValidationError("unknown sequencing %r" % (sequencing,), field="spec.sequencing",
                              hint="%snode (each node moves on by itself) or all (every node completes this "
                                   "resource before any starts the next priority)" % ((near + " ") if near else ""))
    out_spec["sequencing"] = sequencing
    out_spec["reapplyOnReboot"] = _bool(spec, "reapplyOnReboot", "spec", False)
    out_spec["runtimeRequiredCordonAfter"] = _bool(spec, "runtimeRequiredCordonAfter", "spec", False)
    if out_spec["runtimeRequiredCordonAfter"] and not out_spec["runtimeRequired"]:
        raise ValidationError("runtimeRequiredCordonAfter needs runtimeRequired: true",
                              field="spec.runtimeRequiredCordonAfter",
                              hint="the cordon follows the opening of the runtime-required gate; set runtimeRequired "
                                   "or remove runtimeRequiredCordonAfter")

    result = copy.deepcopy(obj)
    result["spec"] = out_spec
    return result


def validate_deployment_policy(obj):
    """Validate a DeploymentPolicy resource; return a copy whose spec is normalised."""
    metadata = _check_header(obj, KIND_DEPLOYMENT_POLICY)
    _string(metadata.get("name"), "metadata.name", "name", "object", OBJECT_NAME_MAX,
            hint="lowercase letters, digits, '-' and '.'")
    policy = parse_policy(obj.get("spec"), "spec")
    result = copy.deepcopy(obj)
    result["spec"] = policy.to_dict()
    return result


def _annotation_set(obj, key):
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(key) == "true"


def is_paused(obj):
    """``nodewright.io/pause: "true"``: stop at this resource; nothing after it proceeds."""
    return _annotation_set(obj, ANNOTATION_PAUSE)


def is_disabled(obj):
    """``nodewright.io/disable: "true"``: skip this resource; later ones proceed."""
    return _annotation_set(obj, ANNOTATION_DISABLE)
