# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""OCI package sources without a registry: references, platforms, skopeo's
errors, the layer unpacker's rules (paths, links, devices, whiteouts), digest
checks of a pulled image, and the cache that makes a pinned image need no network."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.sources import (
    ImageResolver,
    UnsafeImage,
    cache_key,
    classify_skopeo_error,
    find_package_prefix,
    image_ref_for_package,
    is_image_reference,
    parse_image_ref,
    read_manifest,
    select_platform,
    unpack_image_dir,
    unpack_layer,
)

pytestmark = pytest.mark.unit

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


# --------------------------------------------------------------------------- references

@pytest.mark.parametrize("text,registry,repository,tag,digest", [
    ("oci://registry.example.com/gpu/kdump:1.0.0", "registry.example.com", "gpu/kdump", "1.0.0", None),
    ("oci://registry.example.com/gpu/kdump@" + D1, "registry.example.com", "gpu/kdump", None, D1),
    ("oci://registry.example.com/gpu/kdump:1.0.0@" + D1, "registry.example.com", "gpu/kdump", "1.0.0", D1),
    ("docker://127.0.0.1:5000/pk/demo:2.0.0-rc.1", "127.0.0.1:5000", "pk/demo", "2.0.0-rc.1", None),
    ("registry://localhost/demo:1", "localhost", "demo", "1", None),
    ("nvcr.io/nvidia/skyhook/shellscript@" + D2, "nvcr.io", "nvidia/skyhook/shellscript", None, D2),
    ("oci://busybox:1.37", "docker.io", "library/busybox", "1.37", None),
    ("oci://someone/pkg:1.0.0", "docker.io", "someone/pkg", "1.0.0", None),
])
def test_references_parse(text, registry, repository, tag, digest):
    ref = parse_image_ref(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.text == text


@pytest.mark.parametrize("text,problem", [
    ("oci://registry.example.com/gpu/kdump", "neither a tag nor a digest"),
    ("oci://registry.example.com/gpu/kdump@sha256:abc", "not sha256:<64 lowercase hex>"),
    ("oci://registry.example.com/gpu/kdump@md5:" + "1" * 32, "not sha256"),
    ("oci://registry.example.com/GPU/kdump:1", "repository path"),
    ("oci://registry.example.com/gpu/kdump:bad+tag", "not a valid image tag"),
    ("http://registry.example.com/gpu/kdump:1", "unknown scheme"),
    ("oci://bad_host.example.com/x:1", "not a host name"),
])
def test_bad_references_say_what_is_wrong(text, problem):
    with pytest.raises(ValueError) as caught:
        parse_image_ref(text)
    assert problem in str(caught.value)


@pytest.mark.parametrize("src,expected", [
    ("oci://registry.example.com/gpu/kdump:1.0.0", True),
    ("docker://registry.example.com/gpu/kdump:1.0.0", True),
    ("registry.example.com/gpu/kdump@" + D1, True),
    ("http://example.com/kdump.tar.gz", False),
    ("packages/kdump", False),
    ("/srv/packages/kdump", False),
    ("registry.example.com/gpu/kdump:1.0.0", False),  # without a scheme only a pinned reference is an image
])
def test_which_sources_are_images(src, expected):
    assert is_image_reference(src) is expected


def test_a_nodewright_package_names_its_image_like_skyhook():
    ref = image_ref_for_package("nvcr.io/nvidia/skyhook/shellscript", "1.2.0+build.5", D1)
    assert (ref.name, ref.tag, ref.digest) == ("nvcr.io/nvidia/skyhook/shellscript", "1.2.0_build.5", D1)
    assert ref.transport() == "docker://nvcr.io/nvidia/skyhook/shellscript:1.2.0_build.5"
    assert ref.transport(D2) == "docker://nvcr.io/nvidia/skyhook/shellscript@" + D2
    assert image_ref_for_package("ghcr.io/org/pkg", "1.0.0").digest is None


# --------------------------------------------------------------------------- manifests and platforms

INDEX = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D1, "size": 1,
     "platform": {"os": "linux", "architecture": "amd64"}},
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D2, "size": 1,
     "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "3" * 64, "size": 1,
     "platform": {"os": "unknown", "architecture": "unknown"}},  # a build attestation
]}


def test_an_index_gives_the_nodes_platform():
    assert read_manifest(json.dumps(INDEX))[0] == "index"
    assert select_platform(INDEX, "x86_64")["digest"] == D1
    assert select_platform(INDEX, "aarch64")["digest"] == D2
    with pytest.raises(ValueError) as caught:
        select_platform(INDEX, "s390x")
    assert "no linux/s390x variant (it has linux/amd64, linux/arm64, unknown/unknown)" in str(caught.value)


def test_old_manifests_are_refused():
    with pytest.raises(ValueError) as caught:
        read_manifest(json.dumps({"schemaVersion": 1, "fsLayers": []}))
    assert "schemaVersion 1" in str(caught.value)


# --------------------------------------------------------------------------- skopeo's errors

@pytest.mark.parametrize("stderr,kind", [
    ('time="x" level=fatal msg="pinging container registry 127.0.0.1:1: Get \\"https://127.0.0.1:1/v2/\\": '
     'dial tcp 127.0.0.1:1: connect: connection refused"', "unreachable"),
    ('level=fatal msg="... lookup registry.invalid: no such host"', "unreachable"),
    ('level=fatal msg="http: server gave HTTP response to HTTPS client"', "unreachable"),
    ('level=fatal msg="reading manifest 1.0.0 in r/x: manifest unknown: manifest unknown"', "not-found"),
    ('level=fatal msg="reading manifest 1.0.0 in r/x: unauthorized: authentication required"', "denied"),
    ('level=fatal msg="something else"', "other"),
])
def test_skopeo_errors_are_sorted_by_what_to_do(stderr, kind):
    assert classify_skopeo_error(stderr) == kind


def test_skopeo_reason_keeps_the_cause():
    stderr = ('time="2026-01-01T00:00:00Z" level=fatal msg="Error parsing image name \\"docker://r:5/x:1\\": '
              'pinging container registry r:5: connection refused"\n')
    assert package_sources._skopeo_reason(stderr) == "pinging container registry r:5: connection refused"


# --------------------------------------------------------------------------- layers

def tar_bytes(entries, compress=False):
    """A layer from (name, kind, payload) entries: kind file/dir/symlink/hardlink/chr/fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            name, kind = entry[0], entry[1]
            payload = entry[2] if len(entry) > 2 else b""
            mode = entry[3] if len(entry) > 3 else None
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload if isinstance(payload, bytes) else payload.encode()
                info.size, info.mode = len(data), mode or 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, mode or 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, payload
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    data = buf.getvalue()
    return gzip.compress(data, mtime=0) if compress else data


def layer(tmp_path, entries, name="layer", compress=False):
    path = tmp_path / name
    path.write_bytes(tar_bytes(entries, compress))
    return str(path)


def unpack(tmp_path, layers, prefix="skyhook-package"):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    budget = [package_sources.MAX_PACKAGE_BYTES]
    for n, entries in enumerate(layers):
        unpack_layer(layer(tmp_path, entries, "l%d" % n), str(root), prefix, budget)
    return root


def tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(root)):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, str(root))
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isdir(path):
                out[rel] = "/"
            else:
                with open(path) as fh:
                    out[rel] = fh.read()
    return out


def test_only_the_package_directory_is_unpacked(tmp_path):
    root = unpack(tmp_path, [[
        ("bin/busybox", "file", "elf"),
        ("/etc/absolute-in-base-image", "file", "x"),  # outside the package: never looked at
        ("dev/null", "chr"),
        ("skyhook-package/config.json", "file", "{}"),
        ("./skyhook-package/skyhook_dir/run.sh", "file", "#!/bin/sh\n", 0o755),
    ]])
    assert tree(root) == {"skyhook-package": "/", "skyhook-package/config.json": "{}",
                          "skyhook-package/skyhook_dir": "/", "skyhook-package/skyhook_dir/run.sh": "#!/bin/sh\n"}
    assert os.access(str(root / "skyhook-package/skyhook_dir/run.sh"), os.X_OK)


@pytest.mark.parametrize("entries,problem", [
    ([("/skyhook-package/x", "file", "x")], "absolute path"),
    ([("skyhook-package/../../etc/passwd", "file", "x")], "climbs out"),
    ([("skyhook-package/dev", "chr")], "device, FIFO"),
    ([("skyhook-package/pipe", "fifo")], "device, FIFO"),
    ([("skyhook-package/up", "symlink", "../../etc")], "points outside the package"),
    ([("skyhook-package/abs", "symlink", "/etc/shadow")], "points outside the package"),
    ([("skyhook-package/sib", "symlink", "../bin/busybox")], "points outside the package"),
    ([("bin/busybox", "file", "x"), ("skyhook-package/hl", "hardlink", "bin/busybox")], "points outside"),
    ([("skyhook-package/link", "symlink", "root_dir"), ("skyhook-package/root_dir", "dir"),
      ("skyhook-package/link/evil", "file", "x")], "goes through a symlink"),
])
def test_unsafe_layers_are_refused(tmp_path, entries, problem):
    with pytest.raises(UnsafeImage) as caught:
        unpack(tmp_path, [entries])
    assert problem in str(caught.value)


def test_everything_is_checked_for_an_image_rooted_package(tmp_path):
    with pytest.raises(UnsafeImage):
        unpack(tmp_path, [[("package.json", "file", "{}"), ("/etc/x", "file", "x")]], prefix="")


def test_links_inside_the_package_are_kept_and_set_id_bits_dropped(tmp_path):
    root = unpack(tmp_path, [[
        ("skyhook-package/root_dir/usr/bin/tool", "file", "bin", 0o4755),
        ("skyhook-package/root_dir/usr/bin/alias", "symlink", "tool"),
        ("skyhook-package/root_dir/usr/bin/copy", "hardlink", "skyhook-package/root_dir/usr/bin/tool"),
    ]])
    tool = root / "skyhook-package/root_dir/usr/bin/tool"
    assert stat.S_IMODE(os.stat(str(tool)).st_mode) == 0o755
    assert os.readlink(str(root / "skyhook-package/root_dir/usr/bin/alias")) == "tool"
    assert (root / "skyhook-package/root_dir/usr/bin/copy").read_text() == "bin"


def test_whiteouts_remove_what_lower_layers_put_there(tmp_path):
    root = unpack(tmp_path, [
        [("skyhook-package/config.json", "file", "v1"), ("skyhook-package/skyhook_dir/old.sh", "file", "old"),
         ("skyhook-package/root_dir/etc/a", "file", "a"), ("skyhook-package/root_dir/etc/b", "file", "b")],
        [("skyhook-package/skyhook_dir/.wh.old.sh", "file"),
         ("skyhook-package/root_dir/etc/.wh..wh..opq", "file"),
         ("skyhook-package/root_dir/etc/c", "file", "c"),  # the opaque directory keeps this layer's own
         ("skyhook-package/config.json", "file", "v2")],
    ])
    assert tree(root) == {
        "skyhook-package": "/", "skyhook-package/config.json": "v2", "skyhook-package/skyhook_dir": "/",
        "skyhook-package/root_dir": "/", "skyhook-package/root_dir/etc": "/", "skyhook-package/root_dir/etc/c": "c"}


def test_a_whiteout_of_the_package_directory_empties_it(tmp_path):
    root = unpack(tmp_path, [
        [("skyhook-package/config.json", "file", "v1"), ("skyhook-package/stale", "file", "x")],
        [(".wh.skyhook-package", "file"), ("skyhook-package/config.json", "file", "v2")],
    ])
    assert tree(root) == {"skyhook-package": "/", "skyhook-package/config.json": "v2"}


def test_a_file_replaces_a_symlink_of_a_lower_layer_without_following_it(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    root = unpack(tmp_path, [
        [("skyhook-package/config.json", "file", "{}"), ("skyhook-package/x", "symlink", "config.json")],
        [("skyhook-package/x", "file", "new")],
    ])
    assert (root / "skyhook-package/x").read_text() == "new" and not os.path.islink(str(root / "skyhook-package/x"))
    assert (root / "skyhook-package/config.json").read_text() == "{}"


@pytest.mark.parametrize("names,prefix", [
    ([["bin/sh"], ["skyhook-package/config.json"]], "skyhook-package"),
    ([["nodewright-package/package.json", "skyhook-package/config.json"]], "nodewright-package"),
    ([["./package.yaml", "steps/a.sh"]], ""),
    ([["bin/sh", "etc/os-release"]], None),
])
def test_where_the_package_is_in_the_image(names, prefix):
    assert find_package_prefix(names) == prefix


# --------------------------------------------------------------------------- a pulled image (skopeo's dir: layout)

def write_dir_image(where, layers, media="application/vnd.oci.image.layer.v1.tar+gzip"):
    """What `skopeo copy ... dir:where` leaves: manifest.json and one file per blob."""
    os.makedirs(where, exist_ok=True)

    def blob(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with open(os.path.join(where, digest.split(":")[1]), "wb") as fh:
            fh.write(data)
        return digest

    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    descs = []
    for entries in layers:
        data = tar_bytes(entries, compress=media.endswith("gzip"))
        descs.append({"mediaType": media, "digest": blob(data), "size": len(data)})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": blob(config.encode()), "size": len(config)},
                           "layers": descs}).encode()
    with open(os.path.join(where, "manifest.json"), "wb") as fh:
        fh.write(manifest)
    return "sha256:" + hashlib.sha256(manifest).hexdigest(), descs


SKYHOOK_LAYER = [("skyhook-package/config.json", "file", "{}"), ("skyhook-package/skyhook_dir/a.sh", "file", "a")]


def test_a_pulled_image_is_checked_against_its_digests(tmp_path):
    image = str(tmp_path / "image")
    digest, descs = write_dir_image(image, [[("bin/sh", "file", "x")], SKYHOOK_LAYER])
    assert unpack_image_dir(image, digest, str(tmp_path / "out")) == "skyhook-package"
    assert (tmp_path / "out" / "skyhook-package" / "skyhook_dir" / "a.sh").read_text() == "a"

    with pytest.raises(ValueError) as caught:
        unpack_image_dir(image, D1, str(tmp_path / "out2"))
    assert "the pulled manifest has digest %s, not %s" % (digest, D1) in str(caught.value)

    with open(os.path.join(image, descs[1]["digest"].split(":")[1]), "ab") as fh:
        fh.write(b"tampered")
    with pytest.raises(ValueError) as caught:
        unpack_image_dir(image, digest, str(tmp_path / "out3"))
    assert "layer 1 has digest" in str(caught.value) and descs[1]["digest"] in str(caught.value)


def test_zstd_layers_and_images_without_a_package_are_refused(tmp_path):
    digest, _ = write_dir_image(str(tmp_path / "z"), [SKYHOOK_LAYER],
                                media="application/vnd.oci.image.layer.v1.tar+zstd")
    with pytest.raises(ValueError) as caught:
        unpack_image_dir(str(tmp_path / "z"), digest, str(tmp_path / "out"))
    assert "zstd is not supported" in str(caught.value)
    digest, _ = write_dir_image(str(tmp_path / "none"), [[("bin/sh", "file", "x")]])
    with pytest.raises(ValueError) as caught:
        unpack_image_dir(str(tmp_path / "none"), digest, str(tmp_path / "out4"))
    assert "the image holds no package" in str(caught.value)


# --------------------------------------------------------------------------- the cache

def cached_entry(cache, digest, arch=None):
    entry = os.path.join(cache, cache_key(digest, arch))
    os.makedirs(os.path.join(entry, "package", "skyhook_dir"))
    with open(os.path.join(entry, "package", "config.json"), "w") as fh:
        json.dump({"schema_version": "v1", "package_name": "demo", "package_version": "1.0.0",
                   "modes": {"apply": [{"name": "a", "path": "a.sh"}], "apply-check": [{"name": "c",
                                                                                       "path": "a.sh"}]}}, fh)
    with open(os.path.join(entry, "package", "skyhook_dir", "a.sh"), "w") as fh:
        fh.write("#!/bin/sh\n")
    with open(os.path.join(entry, "image.json"), "w") as fh:
        json.dump({"reference": "x", "digest": digest, "manifest_digest": digest}, fh)
    return os.path.join(entry, "package")


def no_network(cmd, **kw):
    raise AssertionError("skopeo was called: %s" % cmd)


def test_a_pinned_image_in_the_cache_needs_no_registry(tmp_path):
    cache = str(tmp_path / "cache")
    path = cached_entry(cache, D1)
    resolver = ImageResolver(cache_dir=cache, run=no_network)
    hit = resolver.resolve(parse_image_ref("oci://registry.invalid/pk/demo:1.0.0@" + D1), package="demo")
    assert hit.cached and hit.path == path and resolver.pulls == 0
    # an index pinned for another architecture is a different entry
    index_path = cached_entry(cache, D2, "arm64")
    assert ImageResolver(cache_dir=cache, arch="aarch64", run=no_network).cached(D2).path == index_path
    assert ImageResolver(cache_dir=cache, arch="amd64", run=no_network).cached(D2) is None


def test_a_missing_skopeo_is_named_with_the_fix(tmp_path):
    resolver = ImageResolver(cache_dir=str(tmp_path / "c"), skopeo=str(tmp_path / "no-skopeo"))
    with pytest.raises(ValidationError) as caught:
        resolver.resolve(parse_image_ref("oci://registry.example.com/pk/demo:1.0.0"), package="demo",
                         field="packages[0].src")
    text = str(caught.value)
    assert text.startswith("packages[0].src: package 'demo': pulling oci://registry.example.com/pk/demo:1.0.0 "
                           "needs skopeo on the controller")
    assert "apt-get install skopeo" in text


def test_the_cache_lives_under_the_users_cache_directory():
    assert package_sources.default_cache_dir({"HOME": "/home/op", "XDG_CACHE_HOME": "/home/op/.cache"}) == \
        "/home/op/.cache/nodewright/packages"
    assert package_sources.default_cache_dir({"NODEWRIGHT_PACKAGE_CACHE": "/var/cache/nw"}) == "/var/cache/nw"


# --------------------------------------------------------------------------- NodeWright resources

def test_a_resource_package_with_an_image_resolves_through_the_resolver(tmp_path):
    cache = str(tmp_path / "cache")
    path = cached_entry(cache, D1)
    resolver = ImageResolver(cache_dir=cache, run=no_network)
    package = {"version": "1.0.0", "image": "registry.invalid/pk/demo", "containerSHA": D1}
    assert desired_state.resolve_source("demo", package, [], "spec.packages.demo", resolver=resolver) == path


def test_a_resource_image_that_cannot_be_pulled_names_the_field(tmp_path):
    resolver = ImageResolver(cache_dir=str(tmp_path / "c"), skopeo=str(tmp_path / "no-skopeo"))
    package = {"version": "1.0.0", "image": "registry.invalid/pk/demo", "containerSHA": D1}
    with pytest.raises(ValidationError) as caught:
        desired_state.resolve_source("demo", package, [], "spec.packages.demo", resolver=resolver)
    assert caught.value.field == "spec.packages.demo.image"
