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
    Problems,
    did_you_mean,
    field_path,
    parse_duration,
    read_int,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries as package_retries
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import (
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
    config_key_matches,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.versions import SEMVER_RE, Version
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
# spec.priority is an OpenAPI integer without a format: the API server takes any
# value that fits in 64 bits and refuses larger ones ("must be of type integer").
PRIORITY_MIN = 1
PRIORITY_MAX = 2 ** 63 - 1
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# The same patterns appear in the CRDs; tests/unit/repo/test_crds.py keeps them in step.
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
# (The API server also holds every object name to the DNS-1123 subdomain rule; names.py checks both.)
NODEWRIGHT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
NODEWRIGHT_NAME_MAX = names.NODEWRIGHT_NAME_MAX
OBJECT_NAME_PATTERN = names.DNS1123_SUBDOMAIN_PATTERN

NODEWRIGHT_SPEC_FIELDS = ("nodeSelectors", "packages", "podNonInterruptLabels", "interruptionBudget",
                          "deploymentPolicy", "deploymentPolicyOptions", "priority", "runtimeRequired",
                          "autoTaintNewNodes", "additionalTolerations", "drainConfig", "stageTimeout", "sequencing",
                          "reapplyOnReboot", "runtimeRequiredCordonAfter", "podNonInterruptWait", "stageRetries",
                          "stageRetryBackoff", "interruptRestartLimit", "gpuHealthGate")
PACKAGE_FIELDS = ("version", "image", "containerSHA", "source", "interrupt", "configMap",
                  "configInterrupts", "dependsOn", "env", "stageTimeout", "uninstall", "stageRetries")
SEQUENCING = ("node", "all")
DRAIN_FIELDS = ("timeout", "gracePeriod", "deleteEmptyDirData", "force", "ignoreDaemonSets", "disableEviction")
# drainConfig field -> the nodewright.fleet.node_drain option it sets.
DRAIN_OPTIONS = {"timeout": "timeout", "gracePeriod": "grace_period", "deleteEmptyDirData": "delete_emptydir_data",
                 "force": "force", "ignoreDaemonSets": "ignore_daemonsets", "disableEviction": "disable_eviction"}
UNINSTALL_FIELDS = ("enabled", "apply")
NON_INTERRUPT_WAIT_FIELDS = ("timeout", "giveUpAfter")

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
    """Refuse every key of ``mapping`` not in ``allowed`` (all of them, each with the nearest known one)."""
    problems = Problems()
    for key in mapping:
        if key not in allowed:
            near = did_you_mean(key, allowed)
            problems.add(ValidationError("unknown field %r" % (key,), field=_key_path(where, key),
                                         hint="%sallowed here: %s" % (near + " " if near else "",
                                                                      ", ".join(allowed))))
    problems.raise_if_any()


def _string(value, where, what, pattern=None, max_length=None, hint=None):
    if not isinstance(value, str) or not value:
        raise ValidationError("%s must be a non-empty string, got %r" % (what, value), field=where, hint=hint)
    if max_length is not None and len(value) > max_length:
        raise ValidationError("%s is %d characters; the limit is %d" % (what, len(value), max_length),
                              field=where, hint=hint)
    if pattern is not None and not _RE[pattern].fullmatch(value):
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
            hint = ("this is a Skyhook resource: give it to nodewright.fleet.desired_state, which converts it, or "
                    "convert it first with convert() of the collection's module_utils/fleet/skyhook.py")
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
                   hint="use semantic versioning MAJOR.MINOR.PATCH, e.g. 1.2.3 or 2.0.0-rc.1 (MAJOR.MINOR such as "
                        "1.2 stands for 1.2.0)")


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


def _non_interrupt_wait(value, where):
    """podNonInterruptWait: how long one run waits for a node's non-interruptible pods
    before it leaves the node blocked (``timeout``), and after how long blocked in all a
    node counts as failed (``giveUpAfter``). Returned as it is."""
    _mapping(value, where, "podNonInterruptWait")
    _allowed(value, NON_INTERRUPT_WAIT_FIELDS, where)
    out = {}
    for key in NON_INTERRUPT_WAIT_FIELDS:
        if value.get(key) is not None:
            out[key] = _duration(value[key], _key_path(where, key), key)
    timeout = parse_duration(out.get("timeout"), where)
    give_up = parse_duration(out.get("giveUpAfter"), where)
    if give_up and timeout and give_up < timeout:
        raise ValidationError("giveUpAfter %s is shorter than timeout %s: a node would count as failed before one "
                              "run stopped waiting for it" % (out["giveUpAfter"], out["timeout"]),
                              field=_key_path(where, "giveUpAfter"),
                              hint="raise giveUpAfter above %s, or leave it out to wait for as many runs as it "
                                   "takes" % out["timeout"])
    return out


def non_interrupt_wait_options(value):
    """A resource's podNonInterruptWait in seconds: ``{"timeout": s, "give_up_after": s}``,
    only what the resource sets (0 leaves the rollout's own wait; a giveUpAfter of 0 never
    gives up)."""
    out = {}
    for key, option in (("timeout", "timeout"), ("giveUpAfter", "give_up_after")):
        seconds = parse_duration((value or {}).get(key), key)
        if seconds:
            out[option] = int(seconds + 0.999)
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


def _retries(mapping, key, where):
    """stageRetries, interruptRestartLimit: how many times again, 0 to 10 (retries.py)."""
    return read_int(mapping, key, where, 0, package_retries.MAX_RETRIES,
                    hint="a whole number from 0 (no retry) to %d; unset means %d"
                         % (package_retries.MAX_RETRIES, package_retries.DEFAULT_STAGE_RETRIES))


def retry_options(spec):
    """A validated resource spec's retry budget and limits: ``{stage_retries, retry_backoff
    (seconds), restart_limit}``, defaults filled in."""
    backoff = parse_duration(spec.get("stageRetryBackoff"), "spec.stageRetryBackoff")
    return {"stage_retries": package_retries.DEFAULT_STAGE_RETRIES if spec.get("stageRetries") is None
            else spec["stageRetries"],
            "retry_backoff": package_retries.DEFAULT_RETRY_BACKOFF if backoff is None else backoff,
            "restart_limit": package_retries.DEFAULT_RESTART_LIMIT if spec.get("interruptRestartLimit") is None
            else spec["interruptRestartLimit"]}


def _uninstall(value, where, name):
    _mapping(value, where, "uninstall")
    _allowed(value, UNINSTALL_FIELDS, where)
    out = {"enabled": _bool(value, "enabled", where, False), "apply": _bool(value, "apply", where, False)}
    if out["apply"] and not out["enabled"]:
        raise ValidationError("uninstall.apply without uninstall.enabled", field=_key_path(where, "apply"),
                              hint="set enabled: true to say package %s has a working uninstall, or remove apply"
                                   % name)
    return out


def _env_item(item, here, seen):
    _mapping(item, here, "an environment variable")
    _allowed(item, ("name", "value", "valueFrom"), here)
    problems = Problems()
    name = None
    with problems.collect():
        name = _string(item.get("name"), here + ".name", "variable name", "env", 256,
                       hint="letters, digits, '_', '-', '.'; not starting with a digit")
    if name is not None:
        if name in seen:
            problems.add(ValidationError("variable %s is set twice" % name, field=here + ".name",
                                         hint="keep one entry per variable"))
        seen.add(name)
    if "value" in item and "valueFrom" in item:
        problems.add(ValidationError("sets both value and valueFrom", field=here, hint="keep one"))
    if "value" in item and not isinstance(item["value"], str):
        problems.add(ValidationError("value must be a string, got %r" % (item["value"],), field=here + ".value",
                                     hint="quote numbers and booleans in YAML"))
    if "valueFrom" in item:
        with problems.collect():
            source = _mapping(item["valueFrom"], here + ".valueFrom", "valueFrom")
            _allowed(source, ("secretKeyRef", "configMapKeyRef"), here + ".valueFrom")
            if len(source) != 1:
                raise ValidationError("valueFrom needs exactly one of secretKeyRef, configMapKeyRef",
                                      field=here + ".valueFrom")
            ref_kind = next(iter(source))
            ref_where = "%s.valueFrom.%s" % (here, ref_kind)
            ref = _mapping(source[ref_kind], ref_where, ref_kind)
            _allowed(ref, ("name", "key", "optional"), ref_where)
            with problems.collect():
                _string(ref.get("name"), ref_where + ".name", "name", max_length=253)
            with problems.collect():
                _string(ref.get("key"), ref_where + ".key", "key", max_length=253)
            if "optional" in ref and not isinstance(ref["optional"], bool):
                problems.add(ValidationError("must be true or false", field=ref_where + ".optional"))
    problems.raise_if_any()


def _env(value, where):
    if not isinstance(value, list):
        raise ValidationError("must be a list of environment variables", field=where,
                              hint="e.g. [{name: PROFILE, value: throughput}]")
    seen = set()
    problems = Problems()
    for n, item in enumerate(value):
        with problems.collect():
            _env_item(item, "%s[%d]" % (where, n), seen)
    problems.raise_if_any()
    return [copy.deepcopy(item) for item in value]


def _package(name, value, where):
    _mapping(value, where, "a package")
    if "name" in value:
        raise ValidationError("a package takes its name from its key; remove name", field=where + ".name",
                              hint="write packages: {%s: {version: ...}}" % name)
    problems = Problems()
    with problems.collect():
        _allowed(value, PACKAGE_FIELDS, where)
    out = {}
    with problems.collect():
        out["version"] = validate_semver(value.get("version"), where + ".version")
    if value.get("image") is not None:
        with problems.collect():
            out["image"] = _string(value["image"], where + ".image", "image", "image", 512,
                                   hint="give the repository only (e.g. ghcr.io/org/pkg); the tag is the version, "
                                        "the digest goes in containerSHA")
    if value.get("source") is not None:
        with problems.collect():
            out["source"] = _string(value["source"], where + ".source", "source", max_length=4096,
                                    hint="the path of the package directory")
            if "\n" in out["source"] or "\0" in out["source"]:
                raise ValidationError("source must be a single path", field=where + ".source")
    if value.get("image") is not None and value.get("source") is not None:
        problems.add(ValidationError("sets both image and source", field=where,
                                     hint="a package comes from an image or from a directory (source), not both"))
    if value.get("containerSHA") is not None:
        with problems.collect():
            if value.get("image") is None:
                raise ValidationError("containerSHA pins an image, but the package has none",
                                      field=where + ".containerSHA", hint="set image, or remove containerSHA")
            out["containerSHA"] = _string(value["containerSHA"], where + ".containerSHA", "containerSHA", "sha",
                                          71, hint="sha256: followed by 64 lowercase hex characters")
    if value.get("interrupt") is not None:
        with problems.collect():
            out["interrupt"] = _interrupt(value["interrupt"], where + ".interrupt")
    config = {}
    config_ok = True
    if value.get("configMap") is not None:
        with problems.collect() as block:
            _mapping(value["configMap"], where + ".configMap", "configMap")
            for key, content in value["configMap"].items():
                here = _key_path(where + ".configMap", key)
                with problems.collect() as one:
                    _string(key, here, "config key", "config", 253,
                            hint="config keys are file names: letters, digits, '-', '_', '.'; no '/'")
                    if key in (".", ".."):
                        raise ValidationError("config key %r cannot be a file name" % key, field=here,
                                              hint="config keys are file names; '.' and '..' name directories")
                    if not isinstance(content, str):
                        raise ValidationError("config content must be a string, got %s" % type(content).__name__,
                                              field=here, hint="use a YAML block scalar (|) for file content")
                    config[key] = content
                config_ok = config_ok and not one.failed
            out["configMap"] = config
        config_ok = config_ok and not block.failed
    if value.get("configInterrupts") is not None:
        with problems.collect():
            _mapping(value["configInterrupts"], where + ".configInterrupts", "configInterrupts")
            interrupts = {}
            for key, interrupt in value["configInterrupts"].items():
                here = _key_path(where + ".configInterrupts", key)
                with problems.collect():
                    _string(key, here, "configInterrupts key", "config_glob", 253,
                            hint="a configMap key, or a pattern with '*'")
                    # Only against a configMap that is itself right: its own problems are reported above.
                    if config_ok and not any(config_key_matches(key, k) for k in config):
                        raise ValidationError("%r matches no key of configMap" % key, field=here,
                                              hint="configMap keys: %s" % (", ".join(sorted(config)) or "none"))
                    interrupts[key] = _interrupt(interrupt, here)
            out["configInterrupts"] = interrupts
    if value.get("dependsOn") is not None:
        with problems.collect():
            _mapping(value["dependsOn"], where + ".dependsOn", "dependsOn")
            depends = {}
            for dep, version in value["dependsOn"].items():
                here = _key_path(where + ".dependsOn", dep)
                with problems.collect():
                    depends[dep] = validate_semver(version, here, "dependsOn version")
            out["dependsOn"] = depends
    if value.get("env") is not None:
        with problems.collect():
            out["env"] = _env(value["env"], where + ".env")
    if value.get("stageTimeout") is not None:
        with problems.collect():
            out["stageTimeout"] = _duration(value["stageTimeout"], where + ".stageTimeout", "stageTimeout")
    if value.get("uninstall") is not None:
        with problems.collect():
            out["uninstall"] = _uninstall(value["uninstall"], where + ".uninstall", name)
    if value.get("stageRetries") is not None:
        with problems.collect():
            out["stageRetries"] = _retries(value, "stageRetries", where)
    problems.raise_if_any()
    return out


def _versions_known(*versions):
    """Whether every version parses (one that does not is reported where it is given)."""
    for version in versions:
        try:
            Version(version)
        except (TypeError, ValueError):
            return False
    return True


def _check_dependencies(packages, where):
    """Every dependency problem: a package depending on itself, on a package the
    resource does not define or at another version, and each cycle."""
    problems = Problems()
    for name, pkg in sorted(packages.items()):
        for dep, version in sorted((pkg.get("dependsOn") or {}).items()):
            here = _key_path("%s.%s.dependsOn" % (where, name), dep)
            if dep == name:
                problems.add(ValidationError("package %s depends on itself" % name, field=here))
            elif dep not in packages:
                problems.add(ValidationError("depends on package %r, which this resource does not define" % dep,
                                             field=here, hint="add %s to packages or remove the dependency" % dep))
            elif _versions_known(packages[dep].get("version"), version) and \
                    Version(packages[dep]["version"]) < Version(version):
                problems.add(ValidationError(
                    "depends on %s %s or later, but the resource has %s %s: the dependency cannot be met"
                    % (dep, version, dep, packages[dep]["version"]), field=here,
                    hint="raise %s to %s or later, or lower the dependsOn version (it is the lowest version that "
                         "will do)" % (dep, version)))
            elif (packages[dep].get("uninstall") or {}).get("apply") and \
                    not (pkg.get("uninstall") or {}).get("apply"):
                problems.add(ValidationError("depends on %s, which uninstall.apply removes: the dependency cannot be "
                                             "met" % dep, field=here, hint="uninstall %s too, or keep %s" % (name, dep)))
    state = {}
    seen_loops = set()

    def visit(name, trail):
        state[name] = "open"
        for dep in sorted(packages[name].get("dependsOn") or {}):
            if dep == name or dep not in packages:
                continue
            if state.get(dep) == "open":
                loop = trail[trail.index(dep):] + [dep]
                if frozenset(loop) not in seen_loops:
                    seen_loops.add(frozenset(loop))
                    problems.add(ValidationError("dependsOn forms a cycle: %s" % " -> ".join(loop),
                                                 field="%s.%s.dependsOn" % (where, name),
                                                 hint="packages must form a DAG; remove one of these dependencies"))
            elif dep not in state:
                visit(dep, trail + [dep])
        state[name] = "done"

    for name in sorted(packages):
        if name not in state:
            visit(name, [name])
    problems.raise_if_any()


def _toleration(item, here):
    _mapping(item, here, "a toleration")
    _allowed(item, ("key", "operator", "value", "effect", "tolerationSeconds"), here)
    problems = Problems()
    key = item.get("key") or ""
    operator = item.get("operator") or "Equal"
    if operator not in TOLERATION_OPERATORS:
        problems.add(ValidationError("unknown operator %r" % (operator,), field=here + ".operator",
                                     hint="Exists or Equal"))
    if key:
        with problems.collect():
            validate_key(key, here + ".key")
    elif operator != "Exists":
        problems.add(ValidationError("a toleration without a key must use operator Exists", field=here,
                                     hint="add a key, or set operator: Exists to tolerate every taint"))
    if operator == "Exists" and item.get("value"):
        problems.add(ValidationError("operator Exists takes no value", field=here + ".value"))
    elif item.get("value"):
        with problems.collect():
            names.label_value(item["value"], here + ".value")
    effect = item.get("effect") or ""
    if effect and effect not in TOLERATION_EFFECTS:
        problems.add(ValidationError("unknown effect %r" % (effect,), field=here + ".effect",
                                     hint="one of %s, or leave it out for all" % ", ".join(TOLERATION_EFFECTS)))
    if item.get("tolerationSeconds") is not None:
        seconds = item["tolerationSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            problems.add(ValidationError("must be a whole number of seconds", field=here + ".tolerationSeconds"))
        elif effect != "NoExecute":
            problems.add(ValidationError("tolerationSeconds only applies to effect NoExecute",
                                         field=here + ".tolerationSeconds"))
    problems.raise_if_any()


def _dependency_view(raw_packages, packages):
    """``{name: {version, dependsOn}}`` of every package: the validated ones as they are,
    a broken one with its version and the dependsOn entries whose version is valid."""
    view = {}
    for name, pkg in raw_packages.items():
        if name in packages:
            view[name] = packages[name]
        elif isinstance(pkg, dict):
            depends = pkg.get("dependsOn") if isinstance(pkg.get("dependsOn"), dict) else {}
            view[name] = {"version": pkg.get("version"),
                          "dependsOn": {d: v for d, v in depends.items()
                                        if isinstance(v, str) and _RE["semver"].fullmatch(v)}}
    return view


def _tolerations(value, where):
    if not isinstance(value, list):
        raise ValidationError("must be a list of tolerations", field=where)
    problems = Problems()
    for n, item in enumerate(value):
        with problems.collect():
            _toleration(item, "%s[%d]" % (where, n))
    problems.raise_if_any()
    return [copy.deepcopy(item) for item in value]


def _priority(value):
    if value is None:
        return DEFAULT_PRIORITY
    if isinstance(value, bool) or not isinstance(value, int) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValidationError("must be a whole number from %d to %d (a 64-bit integer, as the CRD takes it), "
                              "got %s" % (PRIORITY_MIN, PRIORITY_MAX, _short(value)), field="spec.priority",
                              hint="lower runs first; the default is %d" % DEFAULT_PRIORITY)
    return value


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else "%s... (%d characters)" % (text[:limit], len(text))


def validate_nodewright(obj):
    """Validate a NodeWright resource; return a normalised copy with defaults filled in.

    Raises ValidationError with the field path (``spec.packages.tuning.version``); with
    several problems, one ``ValidationErrors`` that names every one of them.
    """
    metadata = _check_header(obj, KIND_NODEWRIGHT)
    problems = Problems()
    with problems.collect():
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError("name must be a non-empty string, got %r" % (name,), field="metadata.name",
                                  hint="lowercase letters, digits, '-' and '.', at most %d characters"
                                       % NODEWRIGHT_NAME_MAX)
        names.nodewright_name(name, "metadata.name")
    spec = _mapping(_or_empty(obj.get("spec"), {}), "spec", "spec")
    with problems.collect():
        _allowed(spec, NODEWRIGHT_SPEC_FIELDS, "spec")

    out_spec = {}
    for key in ("nodeSelectors", "podNonInterruptLabels"):
        with problems.collect():
            out_spec[key] = _label_selector(spec.get(key), "spec." + key)
    packages = {}
    with problems.collect():
        raw_packages = _mapping(_or_empty(spec.get("packages"), {}), "spec.packages", "packages")
        packages_ok = True
        for name, pkg in raw_packages.items():
            here = _key_path("spec.packages", name)
            with problems.collect() as one:
                _string(name, here, "package name", "package", 43,
                        hint="2-43 characters: lowercase letters, digits and '-', starting and ending with a letter")
                packages[name] = _package(name, pkg, here)
            packages_ok = packages_ok and not one.failed
        # Dependencies are checked for every package, a broken one too (as far as its
        # version and dependsOn can be read), so that each dependency problem is named.
        _check_dependencies(_dependency_view(raw_packages, packages), "spec.packages")
    out_spec["packages"] = packages

    with problems.collect():
        if spec.get("interruptionBudget") is not None and spec.get("deploymentPolicy") is not None:
            raise ValidationError("sets both interruptionBudget and deploymentPolicy",
                                  field="spec.interruptionBudget",
                                  hint="a DeploymentPolicy has its own budgets; remove interruptionBudget")
    if spec.get("interruptionBudget") is not None:
        with problems.collect():
            out_spec["interruptionBudget"] = parse_budget(spec["interruptionBudget"], "spec.interruptionBudget",
                                                          "interruptionBudget").to_dict()
    if spec.get("deploymentPolicy") is not None:
        with problems.collect():
            out_spec["deploymentPolicy"] = names.object_name(spec["deploymentPolicy"], "spec.deploymentPolicy",
                                                             "DeploymentPolicy")
    if spec.get("deploymentPolicyOptions") is not None:
        with problems.collect():
            if spec.get("deploymentPolicy") is None:
                raise ValidationError("deploymentPolicyOptions without deploymentPolicy",
                                      field="spec.deploymentPolicyOptions",
                                      hint="set deploymentPolicy, or remove the options")
            options = _mapping(spec["deploymentPolicyOptions"], "spec.deploymentPolicyOptions",
                               "deploymentPolicyOptions")
            _allowed(options, ("resetBatchStateOnCompletion",), "spec.deploymentPolicyOptions")
            out_spec["deploymentPolicyOptions"] = {}
            if options.get("resetBatchStateOnCompletion") is not None:
                out_spec["deploymentPolicyOptions"]["resetBatchStateOnCompletion"] = _bool(
                    options, "resetBatchStateOnCompletion", "spec.deploymentPolicyOptions", True)

    with problems.collect():
        out_spec["priority"] = _priority(spec.get("priority"))
    for key in ("runtimeRequired", "autoTaintNewNodes", "reapplyOnReboot", "runtimeRequiredCordonAfter"):
        with problems.collect():
            out_spec[key] = _bool(spec, key, "spec", False)
    # autoTaintNewNodes without runtimeRequired is accepted and has no effect (Skyhook
    # ignores it too, and manifests written for it rely on that): the taint it would add
    # is the runtime-required gate, which only runtimeRequired opens.
    if out_spec.get("runtimeRequiredCordonAfter") and spec.get("runtimeRequired") is not True:
        problems.add(ValidationError("runtimeRequiredCordonAfter needs runtimeRequired: true",
                                     field="spec.runtimeRequiredCordonAfter",
                                     hint="the cordon follows the opening of the runtime-required gate; set "
                                          "runtimeRequired or remove runtimeRequiredCordonAfter"))
    with problems.collect():
        out_spec["additionalTolerations"] = _tolerations(_or_empty(spec.get("additionalTolerations"), []),
                                                         "spec.additionalTolerations")
    if spec.get("drainConfig") is not None:
        with problems.collect():
            out_spec["drainConfig"] = _drain_config(spec["drainConfig"], "spec.drainConfig")
    if spec.get("stageTimeout") is not None:
        with problems.collect():
            out_spec["stageTimeout"] = _duration(spec["stageTimeout"], "spec.stageTimeout", "stageTimeout")
    if spec.get("podNonInterruptWait") is not None:
        with problems.collect():
            out_spec["podNonInterruptWait"] = _non_interrupt_wait(spec["podNonInterruptWait"],
                                                                  "spec.podNonInterruptWait")
    for key in ("stageRetries", "interruptRestartLimit"):
        if spec.get(key) is not None:
            with problems.collect():
                out_spec[key] = _retries(spec, key, "spec")
    if spec.get("gpuHealthGate") is not None:
        with problems.collect():
            from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu_health import parse_gate
            parse_gate(spec["gpuHealthGate"], "spec.gpuHealthGate")
            out_spec["gpuHealthGate"] = copy.deepcopy(spec["gpuHealthGate"])
    if spec.get("stageRetryBackoff") is not None:
        with problems.collect():
            out_spec["stageRetryBackoff"] = _duration(spec["stageRetryBackoff"], "spec.stageRetryBackoff",
                                                      "stageRetryBackoff")
    sequencing = spec.get("sequencing")
    if sequencing is None:
        sequencing = "node"
    if sequencing not in SEQUENCING:
        near = did_you_mean(sequencing, SEQUENCING) if isinstance(sequencing, str) else None
        problems.add(ValidationError("unknown sequencing %r" % (sequencing,), field="spec.sequencing",
                                     hint="%snode (each node moves on by itself) or all (every node completes this "
                                          "resource before any starts the next priority)"
                                          % ((near + " ") if near else "")))
    out_spec["sequencing"] = sequencing
    problems.raise_if_any()

    result = copy.deepcopy(obj)
    result["spec"] = out_spec
    return result


def validate_deployment_policy(obj):
    """Validate a DeploymentPolicy resource; return a copy whose spec is normalised."""
    metadata = _check_header(obj, KIND_DEPLOYMENT_POLICY)
    problems = Problems()
    with problems.collect():
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError("name must be a non-empty string, got %r" % (name,), field="metadata.name",
                                  hint="lowercase letters, digits, '-' and '.'")
        names.object_name(name, "metadata.name", "DeploymentPolicy")
    policy = None
    with problems.collect():
        policy = parse_policy(obj.get("spec"), "spec")
    problems.raise_if_any()
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
