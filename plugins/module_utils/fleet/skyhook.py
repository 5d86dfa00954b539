# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Convert Skyhook resources to NodeWright resources.

Upstream NodeWright's later fields (``drainConfig``, ``sequencing``,
``runtimeRequiredCordonAfter``, a package's ``stageTimeout`` and ``uninstall``)
carry over with the same meaning; the fields upstream marks nullable are dropped
when null.

``skyhook.nvidia.com/v1alpha1`` ``Skyhook`` and ``DeploymentPolicy`` objects (and the
same kinds under the later ``nodewright.nvidia.com`` group) become
``nodewright.io/v1alpha1`` ``NodeWright`` and ``DeploymentPolicy`` objects. Field
names are the same where the concept is the same, so most of a resource carries over
unchanged; the ``pause`` and ``disable`` annotations move to ``nodewright.io/``.

Upstream's objects are taken as upstream takes them:

* versions as upstream's Go semver reads them (``1.2`` for ``1.2.0``, a leading ``v``),
  kept as written: they are the image tag and the node-state key (``foobar|1.2``);
* an image with a tag: upstream pulls ``image:version`` whatever the tag says, and so
  does NodeWright; a tag that differs from the version is a warning that it is replaced;
* fields that only shape upstream's package pods (``resources``, ``gracefulShutdown``,
  ``agentImageOverride``): NodeWright runs the steps on the host itself, so they have
  no meaning here and are left out with one warning each (``Conversion.warnings``).

A field whose loss would change what happens on a node (an unknown field, an ``env``
value from the pod's own fields) is an error naming the field and why, never a silent
loss. To convert anyway, name it in ``drop`` (shell-style patterns over field paths,
e.g. ``spec.packages.*.valueFrom.fieldRef``; the ``desired_state`` module's
option ``skyhook_drop``, the playbooks' variable ``nodewright_skyhook_drop``); a field
named there is left out with a note instead of a warning. Every dropped or adjusted
field is listed in the result's notes. The result is validated against NodeWright's
rules before it is returned. Every problem of a resource is reported at once, not only
the first.
"""

from __future__ import annotations

import copy
import fnmatch
from dataclasses import dataclass, field
from typing import List

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import (
    ANNOTATION_DISABLE,
    ANNOTATION_PAUSE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    GROUP_VERSION,
    KIND_DEPLOYMENT_POLICY,
    KIND_NODEWRIGHT,
    validate_deployment_policy,
    validate_nodewright,
)

# apiVersion -> (annotation prefix, kind of the main resource)
SOURCE_GROUPS = {
    "skyhook.nvidia.com/v1alpha1": ("skyhook.nvidia.com/", "Skyhook"),
    "nodewright.nvidia.com/v1alpha1": ("nodewright.nvidia.com/", "NodeWright"),
}

# Fields whose meaning is the same in NodeWright: copied as they are.
_SAME_SPEC_FIELDS = ("nodeSelectors", "podNonInterruptLabels", "deploymentPolicy", "deploymentPolicyOptions",
                     "priority", "runtimeRequired", "autoTaintNewNodes", "additionalTolerations", "sequencing",
                     "runtimeRequiredCordonAfter", "reapplyOnReboot", "stageTimeout")
_SAME_PACKAGE_FIELDS = ("version", "containerSHA", "interrupt", "dependsOn", "configMap", "configInterrupts",
                        "stageTimeout")
_SAME_POLICY_FIELDS = ("default", "compartments", "resetBatchStateOnCompletion")

# Metadata the API server sets; it belongs to the old object.
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "managedFields", "selfLink", "finalizers", "ownerReferences")

# Package fields that only shape upstream's package pods: without meaning here, they are
# left out with a warning each (why, in words).
_POD_ONLY_PACKAGE_FIELDS = {
    "resources": "NodeWright runs package steps on the host, not in a package pod, so there are no pod "
                 "resources to set",
    "gracefulShutdown": "NodeWright runs package steps on the host, not in a package pod, so there is no pod "
                        "grace period",
    "agentImageOverride": "NodeWright runs the package's steps itself, without upstream's agent image",
}


def _set_fields(value):
    """A mapping without the fields set to null (upstream writes nullable fields)."""
    return {k: copy.deepcopy(v) for k, v in value.items() if v is not None} if isinstance(value, dict) else value


@dataclass
class Conversion(object):
    """A converted resource and what changed on the way, in words."""

    resource: dict
    notes: List[str] = field(default_factory=list)
    # Fields accepted but without meaning here (upstream's package pods) and image tags
    # replaced by the version: one line each, naming the field.
    warnings: List[str] = field(default_factory=list)


# How the hint of a field without an equivalent says to leave it out: the argument of
# convert() for Python callers; modules and playbooks pass their own option's wording.
DROP_HINT = "convert with drop=[%r] to leave it out"


class _Converter(object):
    def __init__(self, drop, drop_hint=DROP_HINT):
        if isinstance(drop, str):
            drop = (drop,)
        self.drop = tuple(drop or ())
        self.drop_hint = drop_hint
        self.notes = []
        self.warnings = []
        self.problems = Problems()

    def dropped(self, path):
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.drop)

    def ignored(self, path, why):
        """Leave out a field without meaning here: a warning, or a note when the caller named it in drop."""
        if self.dropped(path):
            self.notes.append("dropped %s: %s" % (path, why))
        else:
            self.warnings.append("%s is ignored: %s" % (path, why))

    def without_equivalent(self, path, why, value=None):
        """Drop the field if the caller allowed it; otherwise record the refusal, naming it."""
        if self.dropped(path):
            self.notes.append("dropped %s: %s" % (path, why))
            return
        shown = "" if value is None else " (%s)" % _short(value)
        self.problems.add(ValidationError("has no NodeWright equivalent%s: %s" % (shown, why), field=path,
                                          hint="remove it from the source resource, or %s"
                                               % (self.drop_hint % (path,))))

    def validated(self, resource, validate):
        """``resource`` checked by ``validate``; every problem found so far and the
        validator's own raised together."""
        with self.problems.collect():
            validate(resource)
        self.problems.raise_if_any()
        return resource

    def metadata(self, metadata, prefix):
        metadata = metadata or {}
        out = {}
        for key, value in metadata.items():
            if key in ("name", "generateName", "labels"):
                out[key] = copy.deepcopy(value)
            elif key == "namespace":
                self.notes.append("dropped metadata.namespace %r: NodeWright resources are cluster scoped" % value)
            elif key in _SERVER_METADATA:
                continue
            elif key != "annotations":
                self.notes.append("dropped metadata.%s" % key)
        annotations = {}
        for key, value in (metadata.get("annotations") or {}).items():
            if key == prefix + "pause":
                annotations[ANNOTATION_PAUSE] = value
            elif key == prefix + "disable":
                annotations[ANNOTATION_DISABLE] = value
            elif key.startswith(prefix) or key == "kubectl.kubernetes.io/last-applied-configuration":
                self.notes.append("dropped annotation %s: it belongs to the old resource" % key)
            else:
                annotations[key] = value
        if annotations:
            out["annotations"] = annotations
        return out

    def package(self, name, pkg, where):
        if not isinstance(pkg, dict):
            raise ValidationError("a package must be a mapping", field=where)
        out = {}
        for key, value in pkg.items():
            path = "%s.%s" % (where, key)
            if value is None:
                continue
            if key in _SAME_PACKAGE_FIELDS:
                out[key] = copy.deepcopy(value)
            elif key == "name":
                if value != name:
                    self.problems.add(ValidationError(
                        "package name %r differs from its key %r" % (value, name), field=path,
                        hint="NodeWright takes a package's name from its key; rename the key or remove name"))
            elif key == "image":
                continue  # below, once version and containerSHA are known
            elif key == "env":
                with self.problems.collect():
                    out["env"] = self.env(value, path)
            elif key == "uninstall":
                out[key] = _set_fields(value)
            elif key in _POD_ONLY_PACKAGE_FIELDS:
                self.ignored(path, _POD_ONLY_PACKAGE_FIELDS[key])
            else:
                self.without_equivalent(path, "not an upstream package field NodeWright knows, so what it "
                                              "would change on a node cannot be done", value)
        if pkg.get("image"):
            with self.problems.collect():
                self.image(pkg["image"], out, where)
        interrupts = [out.get("interrupt")] + list((out.get("configInterrupts") or {}).values())
        for interrupt in interrupts:
            # Skyhook writes services: [] for interrupts that have none.
            if isinstance(interrupt, dict) and interrupt.get("services") == [] and interrupt.get("type") != "service":
                del interrupt["services"]
        return out

    def image(self, image, out, where):
        path = where + ".image"
        repository, digest, tag = image, None, None
        if "@" in repository:
            repository, digest = repository.split("@", 1)
        last = repository.rsplit("/", 1)[-1]
        if ":" in last:
            repository, tag = repository.rsplit(":", 1)
        problems = Problems()
        if tag is not None:
            version = out.get("version")
            if tag != version:
                # Upstream pulls image:version whatever the tag says (its simple-skyhook test relies on it).
                self.warnings.append("%s: tag %r is replaced by the version (%s:%s is pulled, as upstream does)"
                                     % (path, tag, repository, version))
            else:
                self.notes.append("%s: removed tag %r (the tag comes from version)" % (path, tag))
        if digest is not None:
            pinned = out.get("containerSHA")
            if pinned is not None and pinned != digest:
                problems.add(ValidationError("image digest %s differs from containerSHA %s" % (digest, pinned),
                                             field=path, hint="keep one digest, in containerSHA"))
            else:
                out["containerSHA"] = digest
                self.notes.append("%s: moved digest to containerSHA" % path)
        problems.raise_if_any()
        out["image"] = repository

    def env(self, env, where):
        if not isinstance(env, list):
            raise ValidationError("env must be a list", field=where)
        out = []
        for n, item in enumerate(env):
            here = "%s[%d]" % (where, n)
            source = (item or {}).get("valueFrom") or {}
            for ref in source:
                if ref not in ("secretKeyRef", "configMapKeyRef"):
                    self.without_equivalent("%s.valueFrom.%s" % (here, ref),
                                            "package steps run on the host, outside any pod, so only "
                                            "secretKeyRef and configMapKeyRef can be resolved", source[ref])
            item = copy.deepcopy(item)
            if item.get("valueFrom") is not None:
                kept = {k: v for k, v in item["valueFrom"].items() if k in ("secretKeyRef", "configMapKeyRef")}
                if not kept:
                    continue
                item["valueFrom"] = kept
            out.append(item)
        return out

    def interruption_budget(self, budget, where):
        if not isinstance(budget, dict):
            raise ValidationError("interruptionBudget must be a mapping", field=where,
                                  hint="e.g. {percent: 25} or {count: 2}")
        budget = {k: v for k, v in budget.items() if v is not None}
        if not budget:
            return None  # Skyhook writes interruptionBudget: {} when none is set
        if budget.get("percent") == 0 and "count" not in budget:
            self.notes.append("%s: percent 0 became count 1 (Skyhook's ceiling for 0%% is one node)" % where)
            return {"count": 1}
        if budget.get("count") == 0 and "percent" not in budget:
            self.without_equivalent(where + ".count", "a count of 0 would never let a node start; use count: 1 "
                                                      "or more", 0)
            return None
        return budget

    def skyhook(self, obj, prefix):
        spec = {} if obj.get("spec") is None else obj["spec"]
        if not isinstance(spec, dict):
            raise ValidationError("spec must be a mapping", field="spec")
        out_spec = {}
        metadata = self.metadata(obj.get("metadata"), prefix)
        for key, value in spec.items():
            path = "spec." + key
            if value is None:
                continue
            if key in _SAME_SPEC_FIELDS:
                out_spec[key] = copy.deepcopy(value)
            elif key == "packages":
                if not isinstance(value, dict):
                    raise ValidationError("packages must be a mapping of name to package", field=path)
                out_spec["packages"] = {}
                for name, pkg in value.items():
                    with self.problems.collect():
                        out_spec["packages"][name] = self.package(name, pkg, "%s.%s" % (path, name))
            elif key == "interruptionBudget":
                with self.problems.collect():
                    budget = self.interruption_budget(value, path)
                    if budget is not None:
                        out_spec[key] = budget
            elif key == "pause":
                if value:
                    metadata.setdefault("annotations", {})[ANNOTATION_PAUSE] = "true"
                    self.notes.append("spec.pause: true became annotation %s: \"true\"" % ANNOTATION_PAUSE)
            elif key == "serial":
                self.notes.append("dropped spec.serial: NodeWright applies a node's packages one at a time, in "
                                  "dependency order")
            elif key == "drainConfig":
                out_spec[key] = _set_fields(value)
            else:
                self.without_equivalent(path, "not an upstream field NodeWright knows, so what it would change "
                                              "cannot be done", value)
        if out_spec.get("autoTaintNewNodes") is True and out_spec.get("runtimeRequired") is not True:
            self.notes.append("spec.autoTaintNewNodes has no effect without spec.runtimeRequired (Skyhook ignores "
                              "it too)")
        if obj.get("status"):
            self.notes.append("dropped status: NodeWright writes its own")
        resource = {"apiVersion": GROUP_VERSION, "kind": KIND_NODEWRIGHT, "metadata": metadata, "spec": out_spec}
        return self.validated(resource, validate_nodewright)

    def policy(self, obj, prefix):
        spec = {} if obj.get("spec") is None else obj["spec"]
        if not isinstance(spec, dict):
            raise ValidationError("spec must be a mapping", field="spec")
        out_spec = {}
        for key, value in spec.items():
            if value is None:
                continue
            if key in _SAME_POLICY_FIELDS:
                out_spec[key] = copy.deepcopy(value)
            else:
                self.without_equivalent("spec." + key, "not a Skyhook DeploymentPolicy field NodeWright knows", value)
        resource = {"apiVersion": GROUP_VERSION, "kind": KIND_DEPLOYMENT_POLICY,
                    "metadata": self.metadata(obj.get("metadata"), prefix), "spec": out_spec}
        return self.validated(resource, validate_deployment_policy)


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def convert(obj, drop=(), drop_hint=DROP_HINT):
    """Convert one Skyhook ``Skyhook`` or ``DeploymentPolicy`` object; return a Conversion.

    ``drop``: patterns of field paths without a NodeWright equivalent that may be left
    out (e.g. ``["spec.packages.*.valueFrom.fieldRef"]``; a field of upstream's package
    pods named there is left out without a warning). ``drop_hint``: how an error tells
    the caller to name a field in ``drop`` (``%r`` is the field's path). The result's
    ``warnings`` name each field left out for having no meaning here.
    Raises ``ValidationError`` naming every problem of the object.
    """
    if not isinstance(obj, dict):
        raise ValidationError("a resource must be a mapping, got %s" % type(obj).__name__)
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if api_version not in SOURCE_GROUPS:
        raise ValidationError("cannot convert apiVersion %r" % (api_version,), field="apiVersion",
                              hint="expected one of: %s" % ", ".join(sorted(SOURCE_GROUPS)))
    prefix, main_kind = SOURCE_GROUPS[api_version]
    converter = _Converter(drop, drop_hint)
    if kind == main_kind:
        resource = converter.skyhook(obj, prefix)
    elif kind == KIND_DEPLOYMENT_POLICY:
        resource = converter.policy(obj, prefix)
    else:
        raise ValidationError("cannot convert kind %r of %s" % (kind, api_version), field="kind",
                              hint="expected %s or %s" % (main_kind, KIND_DEPLOYMENT_POLICY))
    return Conversion(resource=resource, notes=converter.notes, warnings=converter.warnings)
