"""A small OCI image builder: an image layout archive from directory trees, made with
the standard library, that ``ctr images import`` loads into a node's containerd.
No registry and no container engine are involved.

Layers are uncompressed tars (``application/vnd.oci.image.layer.v1.tar``); the
index names the image (``io.containerd.image.name``), so pods use the name as it is,
with ``imagePullPolicy: Never`` or ``IfNotPresent``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

from nodewright_sim import hostroot

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"

BUSYBOX_IMAGE = "nodewright.local/busybox:sim"
PAUSE_IMAGE = "nodewright.local/pause:sim"
# The node-pod image the nodewright.fleet.node connection uses by default; the real
# nodes get the local busybox under this name too, so the default works without a pull.
CONNECTION_DEFAULT_IMAGE = "docker.io/library/busybox:1.37"
# The image of the simulator's own workloads (fleet.py): on a real node it runs and sleeps.
WORKLOAD_IMAGE = "registry.invalid/sim/workload:1"


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _normalize(info):
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_layer(tree, out_path):
    """A layer tar of the directory ``tree`` (its contents at the image's /)."""
    with tarfile.open(out_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(tree)):
            tar.add(os.path.join(tree, name), arcname=name, filter=_normalize)
    return out_path


def build(out_path, names, layer_paths, entrypoint=None, cmd=None, env=None, workdir=None, user=None,
          arch="amd64"):
    """Write an OCI image layout archive with the given layer tars; returns ``out_path``."""
    blobs = []  # (digest, path or bytes)
    layers, diff_ids = [], []
    for path in layer_paths:
        digest = _sha256_file(path)
        layers.append({"mediaType": LAYER, "digest": "sha256:" + digest, "size": os.path.getsize(path)})
        diff_ids.append("sha256:" + digest)
        blobs.append((digest, path))
    cfg = {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    if entrypoint:
        cfg["Entrypoint"] = list(entrypoint)
    if cmd:
        cfg["Cmd"] = list(cmd)
    if workdir:
        cfg["WorkingDir"] = workdir
    if user:
        cfg["User"] = user
    config = json.dumps({"architecture": arch, "os": "linux", "config": cfg,
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}, sort_keys=True).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    blobs.append((config_digest, config))
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST,
                           "config": {"mediaType": CONFIG, "digest": "sha256:" + config_digest,
                                      "size": len(config)},
                           "layers": layers}, sort_keys=True).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    blobs.append((manifest_digest, manifest))
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": MANIFEST, "digest": "sha256:" + manifest_digest, "size": len(manifest),
         "annotations": {"io.containerd.image.name": name,
                         "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}
        for name in names]}
    tmp = out_path + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        def add_bytes(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add_bytes("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes("index.json", json.dumps(index).encode())
        for digest, blob in blobs:
            if isinstance(blob, bytes):
                add_bytes("blobs/sha256/" + digest, blob)
            else:
                tar.add(blob, arcname="blobs/sha256/" + digest, filter=_normalize)
    os.replace(tmp, out_path)
    return out_path


def busybox_tree(dest):
    """A minimal root: static busybox with its applets, passwd and group."""
    bb = hostroot.find_busybox()
    for d in ("bin", "etc", "tmp", "root", "proc", "sys", "dev"):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    os.chmod(os.path.join(dest, "tmp"), 0o1777)
    shutil.copy2(bb, os.path.join(dest, "bin/busybox"))
    applets = subprocess.run([bb, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            os.symlink("busybox", os.path.join(dest, "bin", applet))
    for d, target in (("sbin", "bin"), ("usr", ".")):
        os.symlink(target, os.path.join(dest, d))
    with open(os.path.join(dest, "etc/passwd"), "w") as fh:
        fh.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    with open(os.path.join(dest, "etc/group"), "w") as fh:
        fh.write("root:x:0:\nnogroup:x:65534:\n")
    return dest


def build_base_images(out_dir):
    """The images every real node gets: busybox (tests' pods, node pods), the
    simulator's workload image (sleeps) and the sandbox ("pause") image, whose process
    only sleeps. Returns the archive paths."""
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(dir=out_dir)
    try:
        tree = busybox_tree(os.path.join(work, "tree"))
        layer = write_layer(tree, os.path.join(work, "layer.tar"))
        busybox = build(os.path.join(out_dir, "busybox.oci.tar"), [BUSYBOX_IMAGE, CONNECTION_DEFAULT_IMAGE],
                        [layer], cmd=["sh"])
        workload = build(os.path.join(out_dir, "workload.oci.tar"), [WORKLOAD_IMAGE], [layer],
                         cmd=["sleep", "2147483647"])
        pause = build(os.path.join(out_dir, "pause.oci.tar"), [PAUSE_IMAGE], [layer],
                      entrypoint=["/bin/sleep", "2147483647"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [busybox, workload, pause]
