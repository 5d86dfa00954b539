# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Upstream NodeWright's end-to-end scenarios on the simulator.

How a scenario maps (docs/conformance.md lists every upstream scenario directory):

* **Input**: the scenario's YAML files, as upstream wrote them, under
  ``tests/conformance/upstream/<scenario>/`` (each file starts with upstream's
  licence header). They are read and never edited; each object goes through the
  product's conversion (``module_utils/fleet/skyhook.py`` ``convert()``), and the
  resulting NodeWright object is created in the cluster, as a user applies it.
* **Image**: upstream's packages name the test image ``ghcr.io/nvidia/skyhook/agentless``
  with a version as the tag. A local registry serves the shipped ``agentless`` package
  under that name, one tag per version the scenario uses, and ``registries.conf``
  (``NODEWRIGHT_REGISTRIES_CONF``) mirrors ``ghcr.io/nvidia/skyhook`` to it, the way an
  air-gapped site mirrors upstream's registry. The package sleeps ``SLEEP_LEN`` and exits
  ``EXIT_CODE``, both from the package's ``env``, as the image does.
* **Nodes**: upstream labels its kind workers ``skyhook.nvidia.com/test-node=skyhooke2e``;
  each scenario labels a few fresh simulator nodes so (six where upstream's assert
  counts six) and removes them afterwards; a service an interrupt restarts is given
  to the node's host (upstream's image only pretends to restart it).
* **Front door**: the reconciler, one pass at a time (``nodewright reconcile --once``),
  which rolls out, writes status and handles deletion as the operator's loop does.
* **Asserts**: upstream's node annotations, labels and conditions become NodeWright's
  (``nodewright.io/state-<name>``, ``nodewright.io/status-<name>``,
  ``nodewright.io/Erroring``), its ``Skyhook`` status the ``NodeWright`` status.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import yaml
from kubernetes.client.rest import ApiException

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from fleet_helpers import kill_tree  # noqa: E402
from k8s_helpers import ensure_crds  # noqa: E402
from test_oci_packages import Registry, dir_files, tool, write_layout  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.skyhook import convert  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.package.sources import version_tag  # noqa: E402

UPSTREAM = os.path.join(HERE, "upstream")
AGENTLESS = os.path.join(REPO, "packages", "agentless")
# Upstream's images that stand for a package that does nothing but sleep SLEEP_LEN and exit
# EXIT_CODE, each with the repository the mirror serves it from: the agentless test image,
# and alpine (whose default command does nothing and exits 0).
IMAGES = {"ghcr.io/nvidia/skyhook/agentless": "nvidia/skyhook/agentless", "alpine": "library/alpine"}
MIRRORED = {"ghcr.io/nvidia/skyhook": "nvidia/skyhook", "docker.io/library/alpine": "library/alpine"}
# Every node of a scenario carries this label, whatever upstream's labels: the inventory selects it.
NODE_LABEL = ("test.nodewright.io/conformance", "true")
TEST_LABEL = ("skyhook.nvidia.com/test-node", "skyhooke2e")
GROUP, VERSION = markers.API_GROUP, markers.API_VERSION
PLURALS = {"NodeWright": "nodewrights", "DeploymentPolicy": "deploymentpolicies"}


def upstream(scenario, name):
    """The objects of one upstream input file, as written."""
    with open(os.path.join(UPSTREAM, scenario, name)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def created_inline(doc, step=None):
    """The objects a chainsaw Test creates inline (``create: resource:``), in the
    step named ``step`` (every step when None); [] for any other object."""
    if (doc or {}).get("kind") != "Test" or not str(doc.get("apiVersion", "")).startswith("chainsaw."):
        return []
    found = []
    for one in (doc.get("spec") or {}).get("steps") or []:
        if step is None or one.get("name") == step:
            found.extend(op["create"]["resource"] for op in one.get("try") or []
                         if isinstance(op.get("create"), dict) and op["create"].get("resource"))
    return found


def images_in(scenario):
    """Every (mirror repository, version) of the images in ``IMAGES`` that the scenario's
    input files name (inline objects of its chainsaw Test included): the images to publish."""
    found = set()
    for path in glob.glob(os.path.join(UPSTREAM, scenario, "*.yaml")):
        with open(path) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        for obj in docs + [r for d in docs for r in created_inline(d)]:
            for pkg in ((obj or {}).get("spec") or {}).get("packages", {}).values():
                if not isinstance(pkg, dict):
                    continue
                image = str(pkg.get("image", "")).strip().split("@")[0]
                if ":" in image.rsplit("/", 1)[-1]:
                    image = image.rsplit(":", 1)[0]  # the tag: upstream takes the version instead
                repository = IMAGES.get(image)
                if repository and pkg.get("version"):
                    found.add((repository, str(pkg["version"])))
    return sorted(found)


# --------------------------------------------------------------------------- the image

class Mirror(object):
    """The OCI tests' loopback registry, made by ``registries.conf`` the mirror of
    ``ghcr.io/nvidia/skyhook`` and ``docker.io/library/alpine``; ``publish()`` pushes the
    agentless package under a tag."""

    def __init__(self, workdir):
        tool("skopeo")
        self.workdir = workdir
        self.registry = Registry(workdir)
        self.registry.wait_ready()
        self.host = self.registry.host
        self.registries_conf = self.registry.registries_conf
        with open(self.registries_conf, "a") as fh:
            for prefix, path in sorted(MIRRORED.items()):
                fh.write('[[registry]]\nprefix = "%s"\nlocation = "%s"\n[[registry.mirror]]\nlocation = "%s/%s"\n'
                         'insecure = true\n' % (prefix, prefix, self.host, path))
        self.published = set()

    def stop(self):
        self.registry.stop()

    def publish(self, repository, version):
        """The shipped agentless package as ``<repository>:<version>`` (its manifest at
        that version), as upstream publishes its test image under every tag its tests use."""
        tag = version_tag(version)
        if (repository, tag) in self.published:
            return
        files = dir_files(AGENTLESS, "nodewright-package")
        manifest = json.loads(files["nodewright-package/package.json"][0])
        manifest["version"] = version
        files["nodewright-package/package.json"] = (json.dumps(manifest).encode(), 0o644)
        layout = os.path.join(self.workdir, "layout-%s-%s" % (repository.replace("/", "-"), tag))
        write_layout(layout, [files], tag)
        self.registry.push(layout, repository, tag)
        self.published.add((repository, tag))


# --------------------------------------------------------------------------- a scenario

class Scenario(object):
    """One upstream scenario: its nodes, its converted objects, reconciler passes."""

    # Tags upstream's registry does not have: a scenario uses them to show an image that cannot be pulled.
    UNPUBLISHED = ("3.2.3-bogus",)

    def __init__(self, sim, mirror, tmp_path, name):
        self.sim, self.mirror, self.tmp, self.name = sim, mirror, tmp_path, name
        self.custom = ensure_crds(sim)
        self.objects, self.nodes, self.notes = [], [], []
        for repository, version in images_in(name):
            if version not in self.UNPUBLISHED:
                mirror.publish(repository, version)
        self.inventory = str(tmp_path / "conformance.k8s_nodes.yml")
        with open(self.inventory, "w") as fh:
            yaml.safe_dump({"plugin": "nodewright.fleet.k8s_nodes", "connection": "local",
                            "label_selectors": "%s=%s" % NODE_LABEL,
                            "compose": {"ansible_python_interpreter": repr(sys.executable)}}, fh)

    # ---------------------------------------------------------------- nodes
    def add_nodes(self, count=1, pool="h100", labels=None, taints=()):
        """Fresh nodes with upstream's test label (and ``labels``, ``taints``)."""
        names = self.sim.add_nodes(pool, count, taints=taints)
        wanted = dict({TEST_LABEL[0]: TEST_LABEL[1], NODE_LABEL[0]: NODE_LABEL[1]}, **(labels or {}))
        for n in names:
            self.sim.core.patch_node(n, {"metadata": {"labels": wanted}})
        self.nodes.extend(names)
        return names

    def add_services(self, node, *services, start_seconds=0):
        """Systemd units on the node's host for services a scenario's interrupts restart
        (upstream's test image only pretends to restart them; here the node does).
        ``start_seconds``: how long each takes to start (a slow service keeps the node in
        its interrupt, as upstream's interrupt pod sleeping does)."""
        where = os.path.join(self.sim.host_root(node), "etc", "systemd", "system")
        os.makedirs(where, exist_ok=True)
        slow = "ExecStartPre=/bin/sleep %d\n" % start_seconds if start_seconds else ""
        for service in services:
            with open(os.path.join(where, service + ".service"), "w") as fh:
                fh.write("[Unit]\nDescription=%s\n\n[Service]\n%sExecStart=/bin/true\n" % (service, slow))

    def node(self, name):
        return self.sim.api.sanitize_for_serialization(self.sim.core.read_node(name))

    def node_status(self, node, resource):
        """``nodewright.io/status-<resource>`` on the node (upstream: ``status_<skyhook>``)."""
        return (self.node(node)["metadata"].get("labels") or {}).get(markers.status_label(resource))

    @staticmethod
    def state_key(resource):
        return markers.state_annotation(resource)

    def node_packages(self, node, resource):
        """``{"name|version": {stage, state}}`` from the node's state annotation, in
        upstream's ``nodeState_<skyhook>`` shape."""
        raw = (self.node(node)["metadata"].get("annotations") or {}).get(markers.state_annotation(resource))
        if raw is None:
            return None
        state = json.loads(raw)
        return {"%s|%s" % (name, p.get("version")): {"stage": p.get("stage"), "state": p.get("state")}
                for name, p in (state.get("packages") or {}).items()}

    def node_condition(self, node, ctype):
        for cond in self.node(node)["status"].get("conditions") or []:
            if cond["type"] == ctype:
                return cond
        return None

    def events(self, node, reason):
        return [e for e in self.sim.core.list_event_for_all_namespaces(
            field_selector="involvedObject.name=%s,reason=%s" % (node, reason)).items]

    def resource_events(self, name, reason, etype=None):
        found = self.sim.core.list_event_for_all_namespaces(
            field_selector="involvedObject.name=%s,reason=%s" % (name, reason)).items
        return [e for e in found if etype is None or e.type == etype]

    def _step_logs(self, node, resource, package, version=None):
        """(mtime, log name) of each step log the package left on the node's host
        (``/var/log/nodewright/<resource>/<package>/<version>/``)."""
        base = os.path.join(self.sim.host_root(node), "var", "log", "nodewright", resource, package, version or "")
        logs = []
        for dirpath, _dirs, names in os.walk(base):
            for log in names:
                path = os.path.join(dirpath, log)
                logs.append((os.stat(path).st_mtime, log))
        return sorted(logs)

    def stages_run(self, node, resource, package, version=None):
        """The stages of ``package`` (of every version, or of ``version``) that ran on
        the node, from their step logs."""
        stages = set()
        for _mtime, log in self._step_logs(node, resource, package, version):
            for stage in ("uninstall-check", "uninstall", "apply-check", "apply", "config-check", "config",
                          "upgrade-check", "upgrade", "post-interrupt-check", "post-interrupt"):
                if log.startswith(stage):
                    stages.add(stage)
                    break
        return stages

    def step_span(self, node, resource, package):
        """(first, last) modification time of the package's step logs on the node: when
        the node worked on it."""
        logs = self._step_logs(node, resource, package)
        return logs[0][0], logs[-1][0]

    def config_file(self, node, resource, package, version, key):
        """A config key of the package as its steps saw it on the node (``configmaps/``)."""
        path = os.path.join(self.sim.host_root(node), "var", "lib", "nodewright", "packages", resource, package,
                            version, "configmaps", key)
        with open(path) as fh:
            return fh.read()

    def apply_order(self, node, resource):
        """The resource's packages in the order their first step ran on the node."""
        names = sorted(os.listdir(os.path.join(self.sim.host_root(node), "var", "log", "nodewright", resource)))
        first = {n: self._step_logs(node, resource, n)[0][0] for n in names if self._step_logs(node, resource, n)}
        return sorted(first, key=first.get)

    # ---------------------------------------------------------------- objects
    def convert(self, name, step=None):
        """Each object of upstream file ``name`` through the product's conversion; with
        ``step``, the objects that step of the chainsaw Test in ``name`` creates inline."""
        out = []
        objects = upstream(self.name, name)
        if step is not None:
            objects = [r for d in objects for r in created_inline(d, step)]
            assert objects, "step %s of %s creates nothing" % (step, name)
        for obj in objects:
            conversion = convert(obj)
            self.notes.extend(conversion.notes)
            out.append(conversion.resource)
        return out

    def apply(self, name, step=None):
        """Convert the objects of upstream file ``name`` (of its chainsaw step ``step``)
        and create them, or replace their spec and metadata when they exist (``kubectl
        apply`` of the update files)."""
        names = []
        for resource in self.convert(name, step):
            plural = PLURALS[resource["kind"]]
            rname = resource["metadata"]["name"]
            try:
                current = self.custom.get_cluster_custom_object(GROUP, VERSION, plural, rname)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self.custom.create_cluster_custom_object(GROUP, VERSION, plural, resource)
                self.objects.append((plural, rname))
            else:
                current["spec"] = resource["spec"]
                annotations = {k: v for k, v in (current["metadata"].get("annotations") or {}).items()
                               if not k.startswith(markers.PREFIX + "/")}
                annotations.update(resource["metadata"].get("annotations") or {})
                current["metadata"]["annotations"] = annotations
                self.custom.replace_cluster_custom_object(GROUP, VERSION, plural, rname, current)
            names.append(rname)
        return names

    def patch(self, name):
        """Convert the objects of upstream file ``name`` and merge them into the existing
        resources (a JSON merge patch, as upstream's ``patch`` steps do)."""
        names = []
        for resource in self.convert(name):
            rname = resource["metadata"]["name"]
            self.custom.patch_cluster_custom_object(GROUP, VERSION, PLURALS[resource["kind"]], rname,
                                                    {"spec": resource["spec"]})
            names.append(rname)
        return names

    def resource(self, name):
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)

    def delete(self, name):
        self.custom.delete_cluster_custom_object(GROUP, VERSION, "nodewrights", name)

    def exists(self, name):
        try:
            self.resource(name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def condition(self, name, ctype):
        for cond in (self.resource(name).get("status") or {}).get("conditions") or []:
            if cond["type"] == ctype:
                return cond
        return None

    # ---------------------------------------------------------------- the front door
    def env(self):
        env = self.sim.env()
        bindir = os.path.dirname(sys.executable)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "cli"), os.path.join(REPO, ".collections")])
        env["ANSIBLE_DEPRECATION_WARNINGS"] = "false"
        env["HOME"] = str(self.tmp)
        env["NODEWRIGHT_REGISTRIES_CONF"] = self.mirror.registries_conf
        env["NODEWRIGHT_PACKAGE_CACHE"] = os.path.join(self.mirror.workdir, "cache")
        return env

    def nodewright(self, *args):
        return subprocess.run([sys.executable, "-m", "nodewright_cli"] + [str(a) for a in args],
                              capture_output=True, text=True, env=self.env(), cwd=str(self.tmp))

    def reconcile(self):
        """One pass of the reconciler over the scenario's nodes."""
        return self.nodewright("reconcile", "--once", "--inventory", self.inventory,
                               "--workdir", self.tmp / "work")

    def reconcile_started(self):
        """One pass of the reconciler, started and left running (a ``subprocess.Popen``)."""
        return subprocess.Popen([sys.executable, "-m", "nodewright_cli", "reconcile", "--once", "--inventory",
                                 self.inventory, "--workdir", str(self.tmp / "work")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env(),
                                cwd=str(self.tmp))

    @staticmethod
    def stop(proc):
        """Stop a pass started with ``reconcile_started`` and everything it started, then reap it."""
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.communicate()

    @staticmethod
    def eventually(check, timeout=240.0, every=0.1):
        """``check()`` until it returns something true (upstream's assert timeout: 240 s); the
        last value."""
        deadline = time.monotonic() + timeout
        value = check()
        while not value and time.monotonic() < deadline:
            time.sleep(every)
            value = check()
        return value

    def until_settled(self, resource, passes=4):
        """Reconciler passes until the resource is complete or erroring (at most ``passes``);
        the last pass."""
        proc = None
        for _ in range(passes):
            proc = self.reconcile()
            status = (self.resource(resource).get("status") or {}).get("status") if self.exists(resource) else None
            if status in ("complete", "erroring"):
                break
        return proc

    def cleanup(self):
        for plural, name in self.objects:
            try:
                self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name,
                                                        {"metadata": {"finalizers": None}})
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException:
                pass
        for name in self.nodes:
            try:
                self.sim.core.delete_node(name)
            except ApiException:
                pass
            shutil.rmtree(self.sim.host_root(name), ignore_errors=True)


def output(proc):
    return "rc=%s\n%s\n%s" % (proc.returncode, proc.stdout[-4000:], proc.stderr[-3000:])

