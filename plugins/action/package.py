# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Controller side of nodewright.fleet.package: find each package's source,
validate it before anything touches the node, send it over, run the module.

Source resolution is one function per kind of source so that a kind can be added
without touching the rest: an OCI image (``oci://registry/repo:tag``, pinned with
``@sha256:...``), pulled on the controller into a cache by digest and unpacked
into an ordinary package directory (``module_utils/package/sources.py``); a
directory (a path or a ``files/`` lookup); or the name of a package shipped in the
collection's ``packages/``.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import LABEL_ARCH
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import (
    CONFIG_KEY_RE,
    MANIFEST_JSON,
    MANIFEST_YAML,
    PackageError,
    load_package,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    PACKAGE_SPEC_KEYS,
    desired_from_spec,
    plan,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import package_manifest

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_PACKAGES = os.path.join(COLLECTION_ROOT, "packages")
LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "ansible.legacy.local")
HOST_ONLY_PHASES = ("logs", "rerun", "update-state", "reset")
display = Display()


def check_config_keys(config, field):
    """Config keys become file names on the host (``configmaps/<key>``): each is checked
    here, before the package is looked at, and every bad one is named."""
    if not isinstance(config, dict):
        return
    problems = Problems()
    for key in config:
        if not isinstance(key, str) or not CONFIG_KEY_RE.fullmatch(key) or key in (".", ".."):
            problems.add(ValidationError("config key %r cannot be a file name" % (key,),
                                         field='%s["%s"]' % (field, key),
                                         hint="use letters, digits, '-', '_' and '.', as in ConfigMap keys; "
                                              "'.' and '..' name directories"))
    problems.raise_if_any()


def node_arch(task_vars):
    """The architecture of the host the task runs for, when known: the node's own (the
    maintain action sets ``nodewright_node_architecture`` from the Node object), the
    k8s_nodes inventory's ``k8s_node.node_info.architecture`` or its
    ``kubernetes.io/arch`` label, or gathered facts; None otherwise (the controller's)."""
    task_vars = task_vars or {}
    if task_vars.get("nodewright_node_architecture"):
        return task_vars["nodewright_node_architecture"]
    node = task_vars.get("k8s_node")
    if isinstance(node, dict):
        info = node.get("node_info") if isinstance(node.get("node_info"), dict) else {}
        labels = node.get("labels") if isinstance(node.get("labels"), dict) else {}
        for arch in (info.get("architecture"), labels.get(LABEL_ARCH), node.get("architecture")):
            if arch:
                return arch
    facts = task_vars.get("ansible_facts")
    if isinstance(facts, dict) and facts.get("architecture"):
        return facts["architecture"]
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    def resolve_source(self, spec, index):
        """A local directory for the spec's package, or None (uninstall without a
        source uses the copy on the host)."""
        src = spec.get("src")
        if src and package_sources.is_image_reference(src):
            return self._image_source(src, spec, index)
        if src:
            return self._directory_source(src, index)
        return self._shipped_source(spec, index)

    def _image_source(self, src, spec, index):
        """An OCI image: pulled (or found in the cache by digest) and unpacked on the
        controller, before anything touches the node."""
        field = "packages[%d].src" % index
        try:
            ref = package_sources.parse_image_ref(src)
        except ValueError as exc:
            raise ValidationError("%r is not an image reference: %s" % (src, exc), field=field,
                                  hint="write oci://registry/repository:version, pinned with @sha256:<digest>")
        resolver = getattr(self, "_image_resolver", None) or package_sources.ImageResolver()
        resolved = resolver.resolve(ref, package=spec.get("name") or ref.repository.rsplit("/", 1)[-1],
                                    field=field)
        display.vv("package source %s: %s (%s)" % (src, resolved.digest, "cached" if resolved.cached else "pulled"))
        return resolved.path

    def _directory_source(self, src, index):
        if "://" in src:
            raise AnsibleError("packages[%d]: unknown package source %r (give a package directory, or an image as "
                               "oci://registry/repository:version)" % (index, src))
        if os.path.isabs(src):
            path = src
        else:
            try:
                path = self._find_needle("files", src)
            except AnsibleError:
                raise AnsibleError("packages[%d]: package directory %r not found (relative paths are looked up "
                                   "like files/ of the role or the playbook)" % (index, src))
        if not os.path.isdir(path):
            raise AnsibleError("packages[%d]: %s is not a package directory" % (index, path))
        return path

    def _shipped_source(self, spec, index):
        name = spec.get("name")
        shipped = os.path.join(SHIPPED_PACKAGES, name or "")
        if name and os.path.isdir(shipped):
            return shipped
        if (spec.get("state") or "present") == "absent":
            return None
        raise AnsibleError("packages[%d]: %r is not a package shipped with nodewright.fleet (%s) and no src was "
                           "given" % (index, name, ", ".join(sorted(os.listdir(SHIPPED_PACKAGES)))
                                      if os.path.isdir(SHIPPED_PACKAGES) else "none"))

    def _specs(self, args):
        if args.get("packages") is not None:
            both = [k for k in ("name", "src") if args.get(k) is not None]
            if both:
                raise AnsibleError("packages and %s are mutually exclusive: list every package in packages"
                                   % " and ".join(both))
            if not isinstance(args["packages"], list):
                raise AnsibleError("packages must be a list of package mappings")
            return [dict(s) for s in args["packages"]], True
        if not (args.get("name") or args.get("src")):
            return [], False
        return [{k: args[k] for k in PACKAGE_SPEC_KEYS if args.get(k) is not None}], False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        self._image_resolver = package_sources.ImageResolver(arch=node_arch(task_vars))
        staging = tempfile.mkdtemp(prefix="nodewright-package-")
        try:
            if args.get("phase") in HOST_ONLY_PHASES:
                # Triage reads or marks the host's own records: no package travels.
                if self._is_local() and os.environ.get("NODEWRIGHT_INPROCESS", "1") not in ("0", "false", "no"):
                    result.update(self._run_in_process(args))
                else:
                    result.update(self._execute_module(module_name="nodewright.fleet.package", module_args=args,
                                                       task_vars=task_vars))
                return result
            try:
                names.nodewright_name(args.get("resource", "default"), "resource")
                specs, as_list = self._specs(args)
                sent = self._transfer(self._validate(specs, staging, as_list), staging)
            except PackageError as exc:
                result.update(failed=True, msg=str(exc), errors=[str(e) for e in exc.errors])
                return result
            except (NodeWrightError, AnsibleError) as exc:
                result.update(failed=True, msg=str(exc))
                return result
            module_args = {k: v for k, v in args.items() if k not in PACKAGE_SPEC_KEYS and k != "packages"}
            if as_list:
                module_args["packages"] = sent
            elif sent:
                module_args.update(sent[0])
            if self._is_local() and os.environ.get("NODEWRIGHT_INPROCESS", "1") not in ("0", "false", "no"):
                result.update(self._run_in_process(module_args))
            else:
                result.update(self._execute_module(module_name="nodewright.fleet.package",
                                                   module_args=module_args, task_vars=task_vars))
            return result
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _run_in_process(self, module_args):
        """The host is this controller (a local connection, e.g. the simulator's host
        roots): run the module's logic here instead of shipping it to a new Python."""
        from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

        from ansible_collections.nodewright.fleet.plugins.modules import package as package_module
        validated = ArgumentSpecValidator(package_module.ARGUMENT_SPEC,
                                          mutually_exclusive=package_module.MUTUALLY_EXCLUSIVE).validate(module_args)
        if validated.error_messages:
            return {"failed": True, "msg": "; ".join(validated.error_messages)}
        check_mode = bool(self._task.check_mode if self._task.check_mode is not None
                          else self._play_context.check_mode)
        outcome = package_module.run(validated.validated_parameters, check_mode)
        outcome.setdefault("changed", False)
        return outcome

    def _validate(self, specs, staging, as_list=True):
        """Resolve and validate every package; the specs the module gets back point
        at validated directories."""
        desired, sent = [], []
        for n, spec in enumerate(specs):
            if not isinstance(spec, dict):
                raise AnsibleError("packages[%d] must be a mapping" % n)
            if spec.get("env_from"):
                raise AnsibleError("packages[%d].env_from: Secret and ConfigMap references are read by "
                                   "nodewright.fleet.maintain; give this module env values" % n)
            check_config_keys(spec.get("config"), "packages[%d].config" % n if as_list else "config")
            path = self.resolve_source(spec, n)
            package = load_package(path) if path else None
            item = desired_from_spec(spec, package, n)
            desired.append(item)
            if package is not None and package.source and package.source.endswith(MANIFEST_YAML):
                path = self._stage_json_copy(package, staging, n)
            spec = dict(spec, name=item["name"])
            if path:
                spec["src"] = path
            sent.append(spec)
        # Ordering problems (a cycle, a missing dependency) fail here, before the node.
        plan(desired, None, phase="main")
        return sent

    def _stage_json_copy(self, package, staging, index):
        """The node reads JSON only: stage a copy whose manifest is package.json."""
        dest = os.path.join(staging, "src-%d" % index, package.name)
        shutil.copytree(package.root, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        os.unlink(os.path.join(dest, MANIFEST_YAML))
        with open(os.path.join(dest, MANIFEST_JSON), "w") as fh:
            json.dump(package_manifest(package), fh, indent=2, sort_keys=True)
        return dest

    def _is_local(self):
        return getattr(self._connection, "transport", None) in LOCAL_CONNECTIONS or \
            getattr(self._connection, "_load_name", None) in LOCAL_CONNECTIONS

    def _transfer(self, specs, staging):
        """Send each package to the host as an archive; a local connection uses the
        directories where they are."""
        if self._is_local():
            return specs
        tmpdir = self._connection._shell.tmpdir or self._make_tmp_path()
        sent = []
        for n, spec in enumerate(specs):
            if spec.get("src"):
                archive = os.path.join(staging, "%d-%s.tar.gz" % (n, spec["name"]))
                with tarfile.open(archive, "w:gz") as tar:
                    tar.add(spec["src"], arcname=".")
                remote = self._connection._shell.join_path(tmpdir, os.path.basename(archive))
                self._transfer_file(archive, remote)
                self._fixup_perms2((tmpdir, remote))
                spec = dict(spec, src=remote)
            sent.append(spec)
        return sent
