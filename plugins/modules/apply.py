#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: apply
short_description: Server-side apply NodeWright's CRDs and resources with NodeWright's Kubernetes client
version_added: "0.1.0"
description:
  - Applies Kubernetes objects from YAML files or inline definitions with server-side apply (field manager
    C(nodewright)), the way C(kubectl apply --server-side) does, so that the API server validates them against
    their schema and merges them field by field.
  - Made for installing NodeWright's CustomResourceDefinitions (C(deploy/crds/)) and applying C(NodeWright) and
    C(DeploymentPolicy) resources without C(kubectl) or C(kubernetes.core); any object of a named API group
    works. Objects of the core group (C(apiVersion=v1)) are not handled.
  - With O(wait), a CustomResourceDefinition is applied and then waited for until the API server reports it
    C(Established), so that objects of its kind can be applied next, in the same task.
options:
  src:
    description:
      - A YAML file (several documents allowed) or a directory whose C(*.yaml) and C(*.yml) files are applied
        in name order. Read where the module runs (usually the controller, with C(delegate_to) or a
        C(localhost) play).
    type: path
  definition:
    description: Objects to apply inline, a mapping or a list of mappings (or YAML text of either).
    type: raw
  force_conflicts:
    description:
      - Take over fields another field manager owns. Off by default, so a field that GitOps (Argo CD, Flux)
        or Helm manages is reported as a conflict instead of silently taken.
    type: bool
    default: false
  wait:
    description: Wait until each applied CustomResourceDefinition is C(Established).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for each CustomResourceDefinition.
    type: int
    default: 60
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.k8s_auth
notes:
  - In check mode every object is sent with C(dryRun=All), so the API server still validates it.
  - O(src) or O(definition), one of them.
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Install the NodeWright CRDs
  nodewright.fleet.apply:
    src: "{{ playbook_dir }}/../deploy/crds"
  delegate_to: localhost
  run_once: true

- name: A DeploymentPolicy, inline
  nodewright.fleet.apply:
    definition:
      apiVersion: nodewright.io/v1alpha1
      kind: DeploymentPolicy
      metadata: {name: h100-rollout}
      spec:
        default:
          budget: {percent: 25}
          strategy: {exponential: {initialBatch: 1, failureThreshold: 2}}
  delegate_to: localhost
"""

RETURN = r"""
resources:
  description: One entry per object, in the order applied.
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description: The object's kind.
      type: str
    name:
      description: The object's name.
      type: str
    namespace:
      description: The object's namespace, for namespaced kinds.
      type: str
    action:
      description: What the apply did (or would do, in check mode).
      type: str
      choices: [created, configured, unchanged]
  sample: [{kind: CustomResourceDefinition, name: nodewrights.nodewright.io, action: created}]
msg:
  description: Human summary.
  returned: always
  type: str
"""

import copy
import os
import re
import time

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    ClusterError,
    TimeoutExceeded,
    ValidationError,
    carry_result,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, call, get_json, group_path
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import FIELD_MANAGER
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule

try:
    import yaml
except ImportError:  # reported when a YAML source is read
    yaml = None

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
CRD_API = "apiextensions.k8s.io/v1"
# Server-set fields that say nothing about what was applied.
_VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "uid")


_KIND_RE = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")


def _load_yaml(text, where):
    if yaml is None:
        raise ValidationError("PyYAML is needed to read %s" % where, hint="pip install PyYAML")
    try:
        return safe_load.load_yaml_all(text, source=where)
    except yaml.YAMLError as exc:
        raise ValidationError("not valid YAML: %s" % exc, source=where)


def check_object(obj, where):
    """An object to apply: apiVersion of a named group, kind, metadata.name (and namespace),
    each by the API's rules; every problem is named."""
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind") \
            or not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
        raise ValidationError("every object needs apiVersion, kind and metadata.name", source=where)
    problems = Problems()
    if not isinstance(obj["apiVersion"], str) or "/" not in obj["apiVersion"]:
        problems.add(ValidationError("%s %s is in the core API group, which this module does not apply"
                                     % (obj["apiVersion"], obj["kind"]), source=where,
                                     hint="apply core objects with kubectl; this module is for CRDs and custom "
                                          "resources"))
    else:
        with problems.collect():
            try:
                group_path(obj["apiVersion"])
            except ValidationError as exc:
                raise ValidationError(exc.message, field=exc.field, hint=exc.hint, source=where)
    if not isinstance(obj["kind"], str) or not _KIND_RE.match(obj["kind"]):
        problems.add(ValidationError("kind %r is not a kind name" % (obj["kind"],), field="kind", source=where,
                                     hint="a kind is a CamelCase word such as NodeWright"))
    with problems.collect():
        _named(names.object_name, obj["metadata"]["name"], "metadata.name", where, str(obj["kind"]))
    if obj["metadata"].get("namespace") is not None:
        with problems.collect():
            _named(names.namespace, obj["metadata"]["namespace"], "metadata.namespace", where)
    problems.raise_if_any()


def _named(check, value, field, where, *args):
    try:
        check(value, field, *args)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=exc.field, hint=exc.hint, source=where)


def read_objects(src=None, definition=None):
    """The objects to apply, in order, from a file, a directory or an inline definition."""
    objects = []
    if src is not None:
        if os.path.isdir(src):
            files = sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith((".yaml", ".yml")))
            if not files:
                raise ValidationError("directory %s has no .yaml or .yml files" % src, field="src")
        elif os.path.isfile(src):
            files = [src]
        else:
            raise ValidationError("%s does not exist" % src, field="src",
                                  hint="the path is read where the module runs (use delegate_to: localhost)")
        for path in files:
            objects.extend((path, obj) for obj in _load_yaml(safe_load.read_text(path), path))
    if definition is not None:
        items = _load_yaml(definition, "definition") if isinstance(definition, str) else definition
        items = items if isinstance(items, list) else [items]
        objects.extend(("definition[%d]" % n, obj) for n, obj in enumerate(items))
    problems = Problems()
    for where, obj in objects:
        with problems.collect():
            check_object(obj, where)
    problems.raise_if_any()
    return objects


class Applier(object):
    def __init__(self, api, check_mode=False, force=False):
        from kubernetes import client
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.check_mode = check_mode
        self.force = force
        self._discovery = {}

    def resource(self, api_version, kind):
        """(plural, namespaced) of ``kind`` in ``api_version``, from the API server's discovery."""
        if api_version not in self._discovery:
            try:
                self._discovery[api_version] = get_json(self.api, group_path(api_version),
                                                        "discover %s" % api_version).get("resources") or []
            except ClusterError as exc:
                if exc.details.get("status") == 404:
                    raise ClusterError("the API server does not serve %s" % api_version,
                                       hint="install its CustomResourceDefinition first (deploy/crds/)")
                raise
        for res in self._discovery[api_version]:
            if res.get("kind") == kind and "/" not in res.get("name", "/"):
                return res["name"], bool(res.get("namespaced"))
        raise ClusterError("%s serves no kind %s" % (api_version, kind),
                           hint="check the kind's spelling and the CRD's version")

    def _path(self, obj, plural, namespaced):
        namespace = (obj["metadata"].get("namespace") or "default") if namespaced else None
        return api_path(obj["apiVersion"], plural, obj["metadata"]["name"], namespace=namespace,
                        field="metadata.name", namespace_field="metadata.namespace", kind=obj["kind"])

    def apply(self, obj):
        group, version = obj["apiVersion"].split("/", 1)
        plural, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        name = obj["metadata"]["name"]
        what = "apply %s %s" % (obj["kind"], name)
        try:
            existing = get_json(self.api, self._path(obj, plural, namespaced), what)
        except ClusterError as exc:
            if exc.details.get("status") != 404:
                raise
            existing = None
        kwargs = {"field_manager": FIELD_MANAGER, "force": self.force, "_content_type": APPLY_CONTENT_TYPE}
        if self.check_mode:
            kwargs["dry_run"] = "All"
        try:
            if namespaced:
                namespace = obj["metadata"].get("namespace") or "default"
                result = call(what, self.custom.patch_namespaced_custom_object, group, version, namespace, plural,
                              name, obj, **kwargs)
            else:
                result = call(what, self.custom.patch_cluster_custom_object, group, version, plural, name, obj,
                              **kwargs)
        except ClusterError as exc:
            if exc.details.get("status") == 409:
                raise ClusterError(exc.message, status=409,
                                   hint="another field manager owns these fields (GitOps or Helm?); change them "
                                        "there, or set force_conflicts: true to take them over")
            raise
        entry = {"kind": obj["kind"], "name": name}
        if namespaced:
            entry["namespace"] = obj["metadata"].get("namespace") or "default"
        if existing is None:
            entry["action"] = "created"
        else:
            # Compared without status and server-set metadata: a controller writing the status
            # between the read and the apply is no change of ours.
            entry["action"] = "configured" if _comparable(result) != _comparable(existing) else "unchanged"
        return entry

    def wait_established(self, name, timeout):
        path = api_path(CRD_API, "customresourcedefinitions", name)
        deadline = time.monotonic() + timeout
        while True:
            crd = get_json(self.api, path, "read CustomResourceDefinition %s" % name)
            conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or ()}
            if (conditions.get("Established") or {}).get("status") == "True":
                return
            if (conditions.get("NamesAccepted") or {}).get("status") == "False":
                raise ClusterError("CustomResourceDefinition %s: names not accepted: %s"
                                   % (name, conditions["NamesAccepted"].get("message")),
                                   hint="another CRD already uses these names")
            if time.monotonic() >= deadline:
                raise TimeoutExceeded("CustomResourceDefinition %s is not Established after %ds" % (name, timeout),
                                      hint="check the API server's log; raise wait_timeout")
            time.sleep(0.5)


def _comparable(obj):
    obj = copy.deepcopy(obj or {})
    obj.pop("status", None)
    meta = obj.get("metadata") or {}
    for key in _VOLATILE_METADATA:
        meta.pop(key, None)
    return obj


def run(module):
    p = module.params
    objects = read_objects(p["src"], p["definition"])
    applier = Applier(module.api_client(), check_mode=module.check_mode, force=p["force_conflicts"])
    results = []
    progress = {"changed": False, "resources": results}
    # Objects applied before one that fails stay applied: the failure says so.
    with carry_result(progress):
        for _where, obj in objects:
            entry = applier.apply(obj)
            results.append(entry)
            progress["changed"] = progress["changed"] or (entry["action"] != "unchanged" and not module.check_mode)
            if p["wait"] and obj["kind"] == "CustomResourceDefinition" and obj["apiVersion"] == CRD_API \
                    and not module.check_mode:
                applier.wait_established(obj["metadata"]["name"], p["wait_timeout"])
                # A new group appears in discovery once the CRD is established.
                applier._discovery.clear()
    counts = {}
    for entry in results:
        counts[entry["action"]] = counts.get(entry["action"], 0) + 1
    summary = ", ".join("%d %s" % (n, action) for action, n in sorted(counts.items())) or "nothing to apply"
    return {"changed": any(e["action"] != "unchanged" for e in results), "resources": results,
            "msg": ("would apply: " if module.check_mode else "applied: ") + summary}


def main():
    module = NodeWrightModule(dict(
        src=dict(type="path"),
        definition=dict(type="raw"),
        force_conflicts=dict(type="bool", default=False),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=60),
    ), required_one_of=[("src", "definition")], mutually_exclusive=[("src", "definition")])
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
