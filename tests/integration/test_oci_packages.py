# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Packages pulled from a real registry: Debian's docker-registry on a free
loopback port with a temporary store, images pushed into it with skopeo from OCI
layouts written here. Pulled by digest, checked, cached, unpacked and run on a
simulator host root, through the library and through the package action."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import run_packages
from ansible_collections.nodewright.fleet.plugins.module_utils.package.sources import (
    ImageResolver,
    parse_image_ref,
)

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKYHOOK_SHELLSCRIPT = os.path.join(REPO, "tests", "fixtures", "skyhook", "shellscript")
TOOLS = {"skopeo": "skopeo", "docker-registry": "docker-registry"}


def tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail("%s is missing: apt-get install %s" % (name, TOOLS[name]))
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry(object):
    """A docker-registry process on loopback, and a way to push OCI layouts into it."""

    def __init__(self, workdir):
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        store = os.path.join(workdir, "store")
        os.makedirs(store)
        self.config = os.path.join(workdir, "config.yml")
        with open(self.config, "w") as fh:
            yaml.safe_dump({"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
                            "storage": {"filesystem": {"rootdirectory": store}, "delete": {"enabled": True}},
                            "http": {"addr": self.host}}, fh)
        # skopeo talks plain HTTP to this registry only because registries.conf says so.
        self.registries_conf = os.path.join(workdir, "registries.conf")
        with open(self.registries_conf, "w") as fh:
            fh.write('[[registry]]\nlocation = "%s"\ninsecure = true\n' % self.host)
        self.log = open(os.path.join(workdir, "registry.log"), "w")
        self.proc = subprocess.Popen([tool("docker-registry"), "serve", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def wait_ready(self):
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen("http://%s/v2/" % self.host, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("docker-registry did not start on %s (see %s)" % (self.host, self.log.name))
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def push(self, layout, repository, tag, all_platforms=False):
        """Push an OCI layout's image; returns its digest in the registry."""
        digestfile = layout + ".digest"
        cmd = [tool("skopeo"), "copy", "--quiet", "--dest-tls-verify=false", "--digestfile", digestfile]
        if all_platforms:
            cmd.append("--all")
        cmd += ["oci:%s:%s" % (layout, tag), "docker://%s/%s:%s" % (self.host, repository, tag)]
        subprocess.run(cmd, check=True, capture_output=True)
        with open(digestfile) as fh:
            return fh.read().strip()

    def ref(self, repository, tag=None, digest=None):
        return "oci://%s/%s" % (self.host, repository) + (":" + tag if tag else "") + ("@" + digest if digest else "")

    def resolver(self, cache, **kw):
        return ImageResolver(cache_dir=str(cache), registries_conf=self.registries_conf, **kw)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    tool("skopeo")
    reg = Registry(str(tmp_path_factory.mktemp("registry")))
    try:
        reg.wait_ready()
        yield reg
    finally:
        reg.stop()


# --------------------------------------------------------------------------- building images

def _tar_layer(files):
    """A gzip tar layer from {path: (bytes, mode)}; a path ending in / is a directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path.rstrip("/"))
            info.mtime = 0
            if path.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0), "sha256:" + hashlib.sha256(raw).hexdigest()


def dir_files(src, prefix):
    """The files of directory ``src`` placed under ``prefix`` in an image."""
    files = {}
    for dirpath, _dirnames, filenames in os.walk(src):
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            with open(path, "rb") as fh:
                files["%s/%s" % (prefix, rel)] = (fh.read(), os.stat(path).st_mode & 0o777)
    return files


def write_layout(where, images, tag):
    """An OCI image layout with one image (a list of layers) or, for a dict of
    arch -> layers, a multi-platform index. Returns the top digest."""
    os.makedirs(os.path.join(where, "blobs", "sha256"), exist_ok=True)

    def blob(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with open(os.path.join(where, "blobs", "sha256", digest.split(":")[1]), "wb") as fh:
            fh.write(data)
        return {"digest": digest, "size": len(data)}

    def image(layers, arch):
        blobs = [_tar_layer(files) for files in layers]
        config = json.dumps({"architecture": arch, "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [d for _, d in blobs]}}).encode()
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": dict(blob(config), mediaType="application/vnd.oci.image.config.v1+json"),
            "layers": [dict(blob(data), mediaType="application/vnd.oci.image.layer.v1.tar+gzip")
                       for data, _ in blobs]}).encode()
        return dict(blob(manifest), mediaType="application/vnd.oci.image.manifest.v1+json",
                    platform={"os": "linux", "architecture": arch})

    if isinstance(images, dict):
        index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": [image(layers, arch) for arch, layers in sorted(images.items())]})
        top = dict(blob(index.encode()), mediaType="application/vnd.oci.image.index.v1+json")
    else:
        top = image(images, "amd64")
        top.pop("platform")
    top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    with open(os.path.join(where, "index.json"), "w") as fh:
        json.dump({"schemaVersion": 2, "manifests": [top]}, fh)
    with open(os.path.join(where, "oci-layout"), "w") as fh:
        json.dump({"imageLayoutVersion": "1.0.0"}, fh)
    return top["digest"]


BASE_LAYER = {"bin/": (b"", 0o755), "bin/sh": (b"not a shell", 0o755), "etc/os-release": (b"ID=scratch\n", 0o644)}


def demo_package(marker="from-image", version="1.0.0"):
    """A NodeWright package laid under /nodewright-package/."""
    manifest = {"name": "oci-demo", "version": version,
                "stages": {"apply": [{"path": "apply.sh"}], "apply-check": [{"path": "check.sh"}]}}
    return {
        "nodewright-package/package.json": (json.dumps(manifest).encode(), 0o644),
        "nodewright-package/steps/apply.sh": (("#!/bin/sh\nset -e\necho %s > /etc/oci-demo\n" % marker).encode(),
                                              0o755),
        "nodewright-package/steps/check.sh": (b"#!/bin/sh\ntest -s /etc/oci-demo\n", 0o755),
        "nodewright-package/files/etc/oci-demo.conf": (b"laid from the image\n", 0o644),
    }


@pytest.fixture(scope="module")
def demo(registry, tmp_path_factory):
    layout = str(tmp_path_factory.mktemp("layouts") / "demo")
    write_layout(layout, [BASE_LAYER, demo_package()], "1.0.0")
    return registry.push(layout, "nodewright/oci-demo", "1.0.0")


@pytest.fixture(scope="module")
def skyhook_image(registry, tmp_path_factory):
    layout = str(tmp_path_factory.mktemp("layouts") / "skyhook")
    write_layout(layout, [BASE_LAYER, dir_files(SKYHOOK_SHELLSCRIPT, "skyhook-package")], "1.0.0")
    return registry.push(layout, "skyhook/shellscript", "1.0.0")



def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


class Recorder(object):
    """Runs commands for the resolver and remembers which skopeo subcommands ran."""

    def __init__(self):
        self.calls = []

    def __call__(self, cmd, **kw):
        self.calls.append([c for c in cmd if c in ("inspect", "copy")][0])
        return subprocess.run(cmd, **kw)


# --------------------------------------------------------------------------- the tests

def test_an_image_pulled_by_digest_runs_on_a_host_root(registry, demo, root, tmp_path):
    resolved = registry.resolver(tmp_path / "cache").resolve(
        parse_image_ref(registry.ref("nodewright/oci-demo", digest=demo)), package="oci-demo")
    assert not resolved.cached and resolved.digest == demo == resolved.manifest_digest
    assert sorted(os.listdir(resolved.path)) == ["files", "package.json", "steps"], "only the package was unpacked"
    result = run_packages([{"src": resolved.path}], host_root=root, resource="oci")
    assert [(r["name"], r["action"]) for r in result["results"]] == [("oci-demo", "apply")]
    assert read(root, "/etc/oci-demo") == "from-image\n"
    assert read(root, "/etc/oci-demo.conf") == "laid from the image\n"


def test_the_second_run_uses_the_cache(registry, demo, tmp_path):
    cache = tmp_path / "cache"
    first = Recorder()
    registry.resolver(cache, run=first).resolve(parse_image_ref(registry.ref("nodewright/oci-demo", "1.0.0", demo)))
    assert first.calls == ["inspect", "copy"]
    pinned = Recorder()
    again = registry.resolver(cache, run=pinned).resolve(
        parse_image_ref(registry.ref("nodewright/oci-demo", "1.0.0", demo)))
    assert again.cached and pinned.calls == [], "a pinned image in the cache needs no registry"
    by_tag = Recorder()
    tagged = registry.resolver(cache, run=by_tag).resolve(parse_image_ref(registry.ref("nodewright/oci-demo", "1.0.0")))
    assert tagged.cached and tagged.digest == demo and by_tag.calls == ["inspect"], "a tag is resolved, not pulled"
    assert os.path.basename(os.path.dirname(again.path)) == "sha256-" + demo.split(":")[1]


def test_a_digest_mismatch_names_both_digests(registry, demo, tmp_path):
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ValidationError) as caught:
        registry.resolver(tmp_path / "cache").resolve(
            parse_image_ref(registry.ref("nodewright/oci-demo", "1.0.0", wrong)), package="oci-demo",
            field="packages[0].src")
    text = str(caught.value)
    assert text.startswith("packages[0].src: package 'oci-demo': ")
    assert "points at %s, but the pinned digest is %s" % (demo, wrong) in text
    assert "pin %s" % demo in text
    assert not os.path.exists(str(tmp_path / "cache" / ("sha256-" + "0" * 64)))

    package = {"version": "1.0.0", "image": "%s/nodewright/oci-demo" % registry.host, "containerSHA": wrong}
    with pytest.raises(ValidationError) as caught:
        desired_state.resolve_source("oci-demo", package, [], "spec.packages.oci-demo",
                                     resolver=registry.resolver(tmp_path / "cache"))
    assert caught.value.field == "spec.packages.oci-demo.containerSHA"
    assert demo in str(caught.value) and wrong in str(caught.value)


def test_an_unreachable_registry_is_refused_with_the_fix(registry, tmp_path):
    closed = "127.0.0.1:%d" % free_port()
    ref = parse_image_ref("oci://%s/nodewright/oci-demo:1.0.0@sha256:%s" % (closed, "1" * 64))
    with pytest.raises(ValidationError) as caught:
        registry.resolver(tmp_path / "cache").resolve(ref, package="oci-demo", field="packages[0].src")
    text = str(caught.value)
    assert text.startswith("packages[0].src: package 'oci-demo': cannot reach registry %s" % closed)
    assert "connection refused" in text and "registries.conf" in text


def test_an_unknown_image_says_it_is_not_there(registry, tmp_path):
    with pytest.raises(ValidationError) as caught:
        registry.resolver(tmp_path / "cache").resolve(parse_image_ref(registry.ref("nodewright/none", "1.0.0")),
                                                      package="none", field="packages[0].src")
    assert "is not in registry %s" % registry.host in str(caught.value)


def test_a_skyhook_image_runs_unmodified(registry, skyhook_image, root, tmp_path):
    package = {"version": "1.0.0", "image": "%s/skyhook/shellscript" % registry.host, "containerSHA": skyhook_image}
    src = desired_state.resolve_source("shellscript", package, [], "spec.packages.shellscript",
                                       resolver=registry.resolver(tmp_path / "cache"))
    assert sorted(os.listdir(src)) == ["config.json", "root_dir", "skyhook_dir"]
    config = {"apply.sh": "echo applied > /etc/skyhook-applied", "config.sh": "exit 3"}
    result = run_packages([{"src": src, "name": "shellscript", "version": "1.0.0", "config": config,
                            "env": {"GREETING": "hello"}}], host_root=root, resource="gpu-base")
    assert [(r["name"], r["action"], r["stages"]) for r in result["results"]] == \
        [("shellscript", "apply", ["apply", "config"])]
    assert read(root, "/etc/skyhook-applied") == "applied\n"
    assert read(root, "/etc/skyhook-shellscript/motd").startswith("Laid onto the host")
    env = dict(line.split("=", 1) for line in read(root, "/var/lib/skyhook-fixture/env-apply").splitlines())
    assert env["args"] == "apply hello" and env["SKYHOOK_DIR"] == "/var/lib/nodewright/packages/gpu-base/shellscript/1.0.0"


def test_a_multi_platform_image_gives_the_nodes_architecture(registry, tmp_path):
    layout = str(tmp_path / "multi")
    index = write_layout(layout, {"amd64": [demo_package("amd64-build")], "arm64": [demo_package("arm64-build")]},
                         "1.0.0")
    digest = registry.push(layout, "nodewright/oci-multi", "1.0.0", all_platforms=True)
    assert digest == index
    ref = parse_image_ref(registry.ref("nodewright/oci-multi", "1.0.0", digest))
    cache = tmp_path / "cache"
    arm = registry.resolver(cache, arch="aarch64").resolve(ref)
    amd = registry.resolver(cache, arch="amd64").resolve(ref)
    assert "arm64-build" in open(os.path.join(arm.path, "steps", "apply.sh")).read()
    assert "amd64-build" in open(os.path.join(amd.path, "steps", "apply.sh")).read()
    assert arm.digest == amd.digest == digest and arm.manifest_digest != amd.manifest_digest
    assert os.path.basename(os.path.dirname(arm.path)).endswith("-linux-arm64")


# --------------------------------------------------------------------------- through the package action

def playbook(tmp_path, registry, task, host_root):
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    play = [{"hosts": "all", "gather_facts": False, "tasks": [dict(task, register="pkg")],
             "post_tasks": [{"ansible.builtin.copy": {"content": "{{ pkg | to_json }}",
                                                      "dest": str(tmp_path / "result.json")},
                             "delegate_to": "localhost"}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               NODEWRIGHT_PACKAGE_CACHE=str(tmp_path / "cache"), NODEWRIGHT_REGISTRIES_CONF=registry.registries_conf,
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_DEPRECATION_WARNINGS="false")
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path))


def test_the_package_action_pulls_an_oci_source(registry, demo, root, tmp_path):
    task = {"nodewright.fleet.package": {"src": registry.ref("nodewright/oci-demo", "1.0.0", demo),
                                         "name": "oci-demo", "version": "1.0.0", "host_root": root,
                                         "resource": "oci"}}
    proc = playbook(tmp_path, registry, task, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["changed"] and result["plan"]["packages"][0]["action"] == "apply"
    assert read(root, "/etc/oci-demo") == "from-image\n"
    assert os.path.isdir(str(tmp_path / "cache" / ("sha256-" + demo.split(":")[1]) / "package"))


def test_the_package_action_refuses_a_mismatch_before_the_node(registry, demo, root, tmp_path):
    wrong = "sha256:" + "f" * 64
    task = {"nodewright.fleet.package": {"src": registry.ref("nodewright/oci-demo", "1.0.0", wrong),
                                         "name": "oci-demo", "host_root": root}}
    proc = playbook(tmp_path, registry, task, root)
    assert proc.returncode != 0
    assert "packages[0].src: package 'oci-demo'" in proc.stdout and wrong in proc.stdout and demo in proc.stdout
    assert not os.path.exists(os.path.join(root, "var/lib/nodewright/packages")), "the node was not touched"


def test_a_nodewright_resource_is_planned_from_its_image(registry, skyhook_image, tmp_path, monkeypatch):
    # desired_state builds its resolver from the controller's environment, as a rollout does.
    monkeypatch.setenv("NODEWRIGHT_PACKAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NODEWRIGHT_REGISTRIES_CONF", registry.registries_conf)
    resource = {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "shell"},
                "spec": {"packages": {"shellscript": {
                    "version": "1.0.0", "image": "%s/skyhook/shellscript" % registry.host,
                    "containerSHA": skyhook_image, "configMap": {"apply.sh": "true"}}}}}
    nodes = [{"metadata": {"name": "n1", "labels": {}, "creationTimestamp": "2026-01-01T00:00:00Z"}}]
    described = desired_state.describe(resource, nodes, {}, [])
    (spec,) = described.packages
    assert spec.src == str(tmp_path / "cache" / ("sha256-" + skyhook_image.split(":")[1]) / "package")
    assert described.nodes["n1"].actions == {"shellscript": "apply"}


# --------------------------------------------------------------------------- nodes of two architectures

@pytest.fixture(scope="module")
def multi(registry, tmp_path_factory):
    """An image index with an amd64 and an arm64 build of one package."""
    layout = str(tmp_path_factory.mktemp("layouts") / "multi-arch")
    write_layout(layout, {"amd64": [demo_package("amd64-build")], "arm64": [demo_package("arm64-build")]},
                 "1.0.0")
    return registry.push(layout, "nodewright/oci-arch", "1.0.0", all_platforms=True)


def node_object(name, arch):
    return {"metadata": {"name": name, "labels": {}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"nodeInfo": {"architecture": arch}}}


def image_resource(registry, digest, repository="nodewright/oci-arch", selector=None):
    return {"apiVersion": "nodewright.io/v1alpha1", "kind": "NodeWright", "metadata": {"name": "arch"},
            "spec": dict({"packages": {"oci-demo": {"version": "1.0.0", "image": "%s/%s" % (registry.host, repository),
                                                    "containerSHA": digest}}}, **(selector or {}))}


def test_planning_pulls_the_variant_of_every_targeted_architecture(registry, multi, tmp_path, monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_PACKAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NODEWRIGHT_REGISTRIES_CONF", registry.registries_conf)
    nodes = [node_object("h1", "amd64"), node_object("g1", "arm64")]
    described = desired_state.describe(image_resource(registry, multi), nodes, {}, [])
    assert described.images == {"oci-demo": {
        "reference": "oci://%s/nodewright/oci-arch:1.0.0@%s" % (registry.host, multi), "archs": ["amd64", "arm64"]}}
    hexdigest = multi.split(":")[1]
    assert sorted(os.listdir(str(tmp_path / "cache"))) == sorted(
        ["sha256-%s-linux-amd64" % hexdigest, "sha256-%s-linux-arm64" % hexdigest] +
        [".sha256-%s-linux-amd64.lock" % hexdigest, ".sha256-%s-linux-arm64.lock" % hexdigest])
    assert described.nodes["g1"].actions == {"oci-demo": "apply"}


def test_a_fleet_of_one_architecture_needs_no_variant_of_the_controllers(registry, tmp_path, monkeypatch):
    # An arm64-only image for Grace nodes, planned on a controller of any architecture.
    layout = str(tmp_path / "arm-only")
    write_layout(layout, {"arm64": [demo_package("arm64-build")]}, "1.0.0")
    digest = registry.push(layout, "nodewright/oci-arm-only", "1.0.0", all_platforms=True)
    monkeypatch.setenv("NODEWRIGHT_PACKAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NODEWRIGHT_REGISTRIES_CONF", registry.registries_conf)
    described = desired_state.describe(image_resource(registry, digest, "nodewright/oci-arm-only"),
                                       [node_object("g1", "arm64"), node_object("g2", "arm64")], {}, [])
    (spec,) = described.packages
    assert "arm64-build" in open(os.path.join(spec.src, "steps", "apply.sh")).read()
    assert described.images["oci-demo"]["archs"] == ["arm64"]
    # A target whose architecture the index lacks is refused before any node is touched.
    with pytest.raises(ValidationError) as caught:
        desired_state.describe(image_resource(registry, digest, "nodewright/oci-arm-only"),
                               [node_object("g1", "arm64"), node_object("h1", "amd64")], {}, [])
    assert "spec.packages.oci-demo" in str(caught.value) and "linux/amd64" in str(caught.value)


def test_a_rollout_over_hopper_and_grace_nodes_gives_each_its_own_build(registry, multi, sim, tmp_path):
    from fleet_helpers import Fleet
    fleet = Fleet(sim, tmp_path, [("h100", 1), ("gb200", 1)])
    h100, gb200 = fleet.nodes
    assert sim.core.read_node(gb200).status.node_info.architecture == "arm64"
    policy = "arch-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}}})
    res = "arch-" + fleet.label
    fleet.create("NodeWright", res, image_resource(registry, multi, selector={
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": policy})["spec"])
    env = {"NODEWRIGHT_PACKAGE_CACHE": str(tmp_path / "cache"), "NODEWRIGHT_REGISTRIES_CONF": registry.registries_conf}
    proc = fleet.finished(fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, name="arch", env=env))
    assert proc.returncode == 0, proc.output[-4000:]
    assert read(sim.host_root(h100), "/etc/oci-demo") == "amd64-build\n"
    assert read(sim.host_root(gb200), "/etc/oci-demo") == "arm64-build\n"
    for node in fleet.nodes:
        assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "complete"
    rerun = fleet.finished(fleet.start("rollout.yml", "-e", "nodewright_resource=%s" % res, name="arch-again",
                                       env=env))
    assert rerun.returncode == 0, rerun.output[-4000:]
    # Each node recorded what it got: the rerun plans no work on either.
    assert "%s: 0 of 2 nodes with work" % res in rerun.output, rerun.output[-3000:]
    assert not re.search(r"^(%s|%s)\s*:" % (h100, gb200), rerun.output.split("PLAY RECAP")[-1], re.M)
