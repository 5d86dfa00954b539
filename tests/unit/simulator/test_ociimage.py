# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The simulator's OCI image builder without a runtime: the archive is an OCI image
layout whose blobs match their digests, named the way containerd's import reads."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

ociimage = pytest.importorskip("nodewright_sim.ociimage", reason="the simulator package is not installed")

pytestmark = pytest.mark.unit


def read_archive(path):
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_an_image_archive_is_an_oci_layout_with_named_manifests(tmp_path):
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "hello").write_text("#!/bin/sh\necho hello\n")
    layer = ociimage.write_layer(str(tree), str(tmp_path / "layer.tar"))
    out = ociimage.build(str(tmp_path / "img.oci.tar"), ["nodewright.local/hello:1", "example.org/hello:1"],
                         [layer], cmd=["/bin/hello"], user="1000")
    files = read_archive(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    names = [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]]
    assert names == ["nodewright.local/hello:1", "example.org/hello:1"]
    manifest = json.loads(files["blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Cmd"] == ["/bin/hello"] and config["config"]["User"] == "1000"
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    with tarfile.open(layer) as tar:
        member = tar.getmember("bin/hello")
        assert member.uid == 0 and member.gid == 0
