# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Package sources that are OCI images: parse the reference, pull the image with
``skopeo`` on the controller, check its digest, unpack the package it holds and
keep it in a cache by digest. What comes out is an ordinary package directory
(NodeWright or Skyhook layout) that the rest of the pipeline uses unchanged.

References:

* ``oci://registry/repo:tag``, ``oci://registry/repo@sha256:<64 hex>`` or both
  (``repo:tag@sha256:...``: the tag must point at that digest); ``docker://`` and
  ``registry://`` mean the same;
* ``registry/repo@sha256:<64 hex>`` without a scheme (a pinned reference only);
* a NodeWright package's ``image`` (the repository), ``version`` (the tag; a
  ``+`` in it becomes ``_``, as tags cannot hold ``+``) and ``containerSHA``
  (the pinned digest), as Skyhook reads them.

Where the package is inside the image: ``/nodewright-package/`` (a NodeWright
package), ``/skyhook-package/`` (Skyhook's layout: ``config.json``,
``skyhook_dir/``, ``root_dir/``), or the image's root (an image built ``FROM
scratch``). Only that directory is unpacked; the rest of the image (a base
image's files) never touches the controller's disk.

Digests: the digest the reference resolves to in the registry is the sha256 of
the manifest bytes it serves; with a pin, a different one is an error naming
both. The pulled manifest and every layer are checked against their digests
before anything is unpacked. For a multi-platform image (an index) the pin is
the index's digest and the manifest of ``linux/<arch>`` is unpacked.

Cache: ``$NODEWRIGHT_PACKAGE_CACHE`` or ``~/.cache/nodewright/packages``, one
directory per digest (``sha256-<hex>/``, ``sha256-<hex>-linux-<arch>/`` for an
index) holding ``package/`` and ``image.json``. A pinned reference found there
is used without asking the registry; a tag is resolved each time and pulled
only when its digest is not cached.

The tools: ``skopeo`` (``$NODEWRIGHT_SKOPEO``), which reads registry logins
(``skopeo login``, ``$REGISTRY_AUTH_FILE``, ``~/.docker/config.json``) and
``registries.conf`` (mirrors, ``insecure = true`` for a registry without TLS;
``$NODEWRIGHT_REGISTRIES_CONF`` names another file). Layers are unpacked here,
in Python, with strict rules: no absolute paths, no ``..``, no device files or
FIFOs, no symlinks or hard links that leave the package directory, no writing
through a symlink; set-id bits are dropped.

This runs where the task that needs the package runs: the controller (the
``package`` action plugin, ``desired_state`` delegated to localhost). Stdlib only.
"""

from __future__ import annotations

import copy
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import LABEL_ARCH

IMAGE_SCHEMES = ("oci", "docker", "registry")
DEFAULT_REGISTRY = "docker.io"
PACKAGE_DIRS = ("nodewright-package", "skyhook-package")
MANIFEST_NAMES = ("package.json", "package.yaml", "config.json")
MAX_PACKAGE_BYTES = 1 << 30
INSPECT_TIMEOUT = 120
COPY_TIMEOUT = 1800

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_PINNED_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_HOST_RE = re.compile(r"^(?:localhost|\[[0-9A-Fa-f:]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)(?::[0-9]{1,5})?$")

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
# Layer media types this unpacker reads (tar, gzip-compressed or not).
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar",
               "application/vnd.oci.image.layer.v1.tar+gzip",
               "application/vnd.oci.image.layer.nondistributable.v1.tar",
               "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
               "application/vnd.docker.image.rootfs.diff.tar.gzip",
               "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip")
ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                "ppc64le": "ppc64le", "s390x": "s390x"}

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


class UnsafeImage(Exception):
    """An image layer that would write outside the package, or something that is not a plain file."""


# --------------------------------------------------------------------------- references

class ImageRef(object):
    """An image reference: registry, repository, and a tag, a digest or both."""

    __slots__ = ("registry", "repository", "tag", "digest", "text")

    def __init__(self, registry, repository, tag=None, digest=None, text=None):
        self.registry = registry
        self.repository = repository
        self.tag = tag
        self.digest = digest
        self.text = text or self.display

    @property
    def name(self):
        return "%s/%s" % (self.registry, self.repository)

    @property
    def display(self):
        return self.name + (":" + self.tag if self.tag else "") + ("@" + self.digest if self.digest else "")

    def transport(self, digest=None):
        """skopeo's name for the image, by ``digest`` if given, else by tag (or pin)."""
        if digest:
            return "docker://%s@%s" % (self.name, digest)
        if self.tag:
            return "docker://%s:%s" % (self.name, self.tag)
        return "docker://%s@%s" % (self.name, self.digest)

    def __repr__(self):
        return "ImageRef(%r)" % self.display


def is_image_reference(src):
    """True when a package ``src`` names an image rather than a directory: an
    ``oci://`` (``docker://``, ``registry://``) URL, or a reference pinned by digest."""
    if not isinstance(src, str):
        return False
    if "://" in src:
        return src.split("://", 1)[0] in IMAGE_SCHEMES
    return bool(_PINNED_RE.search(src))


def parse_image_ref(text, require_version=True):
    """Parse an image reference; ``ValueError`` says what is wrong with it."""
    if not isinstance(text, str) or not text:
        raise ValueError("an image reference must be a non-empty string")
    rest = text
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme not in IMAGE_SCHEMES:
            raise ValueError("unknown scheme %r (use oci://)" % scheme)
    digest = tag = None
    if "@" in rest:
        rest, digest = rest.rsplit("@", 1)
        if not DIGEST_RE.match(digest):
            raise ValueError("digest %r is not sha256:<64 lowercase hex>" % digest)
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ValueError("tag %r is not a valid image tag" % tag)
    parts = rest.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, path = parts[0], parts[1:]
    else:
        registry, path = DEFAULT_REGISTRY, parts
        if len(path) == 1:
            path = ["library"] + path
    if not _HOST_RE.match(registry):
        raise ValueError("registry %r is not a host name with an optional port" % registry)
    for component in path:
        if not _COMPONENT_RE.match(component):
            raise ValueError("repository path %r is not valid (lowercase letters, digits and . _ - "
                             "between them)" % "/".join(path))
    if require_version and not (tag or digest):
        raise ValueError("%s has neither a tag nor a digest (add :<version> or @sha256:<digest>)" % text)
    return ImageRef(registry, "/".join(path), tag=tag, digest=digest, text=text)


def version_tag(version):
    """The image tag of a package version (semver's ``+`` is not allowed in tags)."""
    return str(version).replace("+", "_")


def image_ref_for_package(image, version, container_sha=None):
    """The reference of a NodeWright (or Skyhook) package: ``image`` is the
    repository, ``version`` the tag and ``containerSHA`` the pinned digest."""
    text = "%s:%s" % (image, version_tag(version))
    if container_sha:
        text += "@" + container_sha
    return parse_image_ref(text)


# --------------------------------------------------------------------------- manifests

def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def read_manifest(raw):
    """(``"index"`` or ``"manifest"``, parsed) for manifest bytes; ``ValueError``
    for anything else (Docker schema 1 included)."""
    try:
        data = safe_load.load_json(raw, "the registry's manifest")
    except ValueError as exc:
        raise ValueError("the registry sent a manifest that is not JSON (%s)" % exc)
    if not isinstance(data, dict) or data.get("schemaVersion") != 2:
        raise ValueError("unsupported manifest (schemaVersion %r); push the image as an OCI or Docker v2 image"
                         % (data.get("schemaVersion") if isinstance(data, dict) else None,))
    media = data.get("mediaType")
    if media in INDEX_TYPES or (media is None and "manifests" in data and "layers" not in data):
        return "index", data
    if media in MANIFEST_TYPES or (media is None and "layers" in data):
        return "manifest", data
    raise ValueError("unsupported manifest media type %r" % (media,))


def normalize_arch(arch):
    return ARCH_ALIASES.get(str(arch or "").lower(), str(arch or "").lower())


def node_architecture(node):
    """The architecture of a Node object: the kubelet's ``nodeInfo.architecture``, else
    its ``kubernetes.io/arch`` label (normalized, ``arm64``/``amd64``); None when neither says."""
    node = node if isinstance(node, dict) else {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    arch = info.get("architecture") or labels.get(LABEL_ARCH)
    return normalize_arch(arch) if arch else None


def controller_arch():
    return normalize_arch(platform.machine()) or "amd64"


def select_platform(index, arch, os_name="linux"):
    """The descriptor of the ``os_name``/``arch`` manifest of an image index."""
    arch = normalize_arch(arch)
    found = [m for m in index.get("manifests") or []
             if (m.get("platform") or {}).get("os") == os_name
             and normalize_arch((m.get("platform") or {}).get("architecture")) == arch
             and m.get("mediaType", MANIFEST_TYPES[0]) in MANIFEST_TYPES]
    if not found:
        have = sorted({"%s/%s" % ((m.get("platform") or {}).get("os"), (m.get("platform") or {}).get("architecture"))
                       for m in index.get("manifests") or []})
        raise ValueError("the image has no %s/%s variant (it has %s)" % (os_name, arch, ", ".join(have) or "none"))
    found.sort(key=lambda m: (m.get("platform") or {}).get("variant") or "")
    return found[0]


# --------------------------------------------------------------------------- unpacking

def _clean(name):
    """A tar member name as a relative path; ``UnsafeImage`` if absolute or climbing."""
    if name.startswith("/"):
        raise UnsafeImage("absolute path %r" % name)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeImage("path %r climbs out with '..'" % name)
    return "/".join(parts)


def _within(path, top):
    """``path`` is ``top`` or below it (``""`` is the image root, above everything)."""
    return top == "" or path == top or path.startswith(top + "/")


def _existing(root, rel):
    """The path of ``rel`` under ``root`` if it exists and no directory on the way
    is a symlink (whiteouts must not delete through one); else None."""
    current = root
    parts = [p for p in rel.split("/") if p]
    for n, part in enumerate(parts):
        current = os.path.join(current, part)
        if not os.path.lexists(current):
            return None
        if n < len(parts) - 1 and (os.path.islink(current) or not os.path.isdir(current)):
            return None
    return current


def _member_names(layer_path):
    with tarfile.open(layer_path, "r:*") as tar:
        return [m.name for m in tar]


def find_package_prefix(layer_names):
    """Where the package is in an image whose layers hold ``layer_names`` (lists
    of tar member names): ``nodewright-package``, ``skyhook-package`` or ``""``
    (the image root); None if no layer has a manifest at any of them."""
    seen = set()
    for names in layer_names:
        for name in names:
            try:
                seen.add(_clean(name))
            except UnsafeImage:
                continue
    for prefix in PACKAGE_DIRS:
        if any("%s/%s" % (prefix, m) in seen for m in MANIFEST_NAMES):
            return prefix
    if any(m in seen for m in MANIFEST_NAMES):
        return ""
    return None


def _ensure_dir(root, rel):
    """Make directory ``rel`` under ``root``, refusing to go through a symlink or
    a file; returns its path."""
    current = root
    for part in [p for p in rel.split("/") if p]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise UnsafeImage("%s goes through a symlink" % rel)
        if not os.path.exists(current):
            os.mkdir(current, 0o755)
        elif not os.path.isdir(current):
            raise UnsafeImage("%s is a file in a lower layer and a directory here" % rel)
    return current


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _link_stays_inside(rel, target, top):
    """A symlink at ``rel`` pointing at ``target`` stays inside directory ``top``
    (absolute targets are refused: on the controller they would name its files)."""
    if not target or target.startswith("/"):
        return False
    resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        return False
    return _within("" if resolved == "." else resolved, top)


def _layer_path(name, prefix):
    """The cleaned path of a layer member, or None for a member outside ``prefix``
    (a base image's files are never looked at). Unsafe names inside raise."""
    try:
        return _clean(name)
    except UnsafeImage:
        raw = name.lstrip("/")
        while raw.startswith("./"):
            raw = raw[2:]
        if prefix == "" or raw == prefix or raw.startswith(prefix + "/"):
            raise
        return None


def unpack_layer(layer_path, root, prefix, budget):
    """Apply one layer (a tar, compressed or not) to ``root``, keeping only what is
    under ``prefix`` (``""``: everything). Whiteouts remove what lower layers put
    there. ``budget`` is a one-item list of bytes still allowed. Raises
    ``UnsafeImage``."""
    with tarfile.open(layer_path, "r:*") as tar:
        whiteouts, entries = [], []
        for member in tar.getmembers():
            rel = _layer_path(member.name, prefix)
            if not rel:
                continue
            base, parent = os.path.basename(rel), os.path.dirname(rel)
            if base == OPAQUE:
                if _within(parent, prefix) or _within(prefix, parent):
                    whiteouts.append((parent, True))
            elif base.startswith(WHITEOUT):
                target = (parent + "/" if parent else "") + base[len(WHITEOUT):]
                if _within(target, prefix) or _within(prefix, target):
                    whiteouts.append((target, False))
            elif _within(rel, prefix):
                entries.append((rel, member))
        # Whiteouts hide what lower layers put there, not this layer's own entries.
        for target, opaque in whiteouts:
            if prefix and _within(prefix, target) and (target != prefix or not opaque):
                # The package directory itself, or a directory above it, is hidden.
                path = _existing(root, prefix)
                if path is not None:
                    _remove(path)
                continue
            path = _existing(root, target)
            if path is None:
                continue
            if opaque:
                if os.path.isdir(path) and not os.path.islink(path):
                    for child in os.listdir(path):
                        _remove(os.path.join(path, child))
            else:
                _remove(path)
        for rel, member in entries:
            _unpack_member(tar, member, rel, root, prefix, budget)


def _unpack_member(tar, member, rel, root, prefix, budget):
    parent = _ensure_dir(root, os.path.dirname(rel))
    dest = os.path.join(parent, os.path.basename(rel))
    mode = stat.S_IMODE(member.mode) & 0o777
    if member.isdir():
        if os.path.lexists(dest) and not (os.path.isdir(dest) and not os.path.islink(dest)):
            _remove(dest)
        if not os.path.isdir(dest):
            os.mkdir(dest)
        os.chmod(dest, mode | 0o700)
        return
    if member.isdev() or not (member.isreg() or member.issym() or member.islnk()):
        raise UnsafeImage("%s is a device, FIFO or other special file" % rel)
    if os.path.lexists(dest):
        _remove(dest)
    if member.issym():
        if not _link_stays_inside(rel, member.linkname, prefix):
            raise UnsafeImage("symlink %s -> %s points outside the package" % (rel, member.linkname))
        os.symlink(member.linkname, dest)
        return
    if member.islnk():
        target = _clean(member.linkname)
        if not (prefix == "" or _within(target, prefix)):
            raise UnsafeImage("hard link %s -> %s points outside the package" % (rel, member.linkname))
        source = os.path.join(root, target)
        if os.path.islink(source) or not os.path.isfile(source) or \
                os.path.realpath(source) != os.path.join(os.path.realpath(root), target):
            raise UnsafeImage("hard link %s -> %s does not name a file unpacked before it" % (rel, member.linkname))
        shutil.copyfile(source, dest)
        os.chmod(dest, stat.S_IMODE(os.stat(source).st_mode))
        return
    budget[0] -= member.size
    if budget[0] < 0:
        raise UnsafeImage("the package is larger than %d bytes" % MAX_PACKAGE_BYTES)
    src = tar.extractfile(member)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(dest, mode | 0o600)


def unpack_image_dir(image_dir, manifest_digest, dest):
    """Unpack the package held by an image copied by ``skopeo copy ... dir:image_dir``
    into ``dest`` (created). Checks the manifest and every layer against their
    digests first. Returns the package's path inside the image (``skyhook-package``,
    ``nodewright-package`` or ``""``). Raises ``ValueError`` or ``UnsafeImage``."""
    with open(os.path.join(image_dir, "manifest.json"), "rb") as fh:
        raw = fh.read()
    if sha256_digest(raw) != manifest_digest:
        raise ValueError("the pulled manifest has digest %s, not %s" % (sha256_digest(raw), manifest_digest))
    kind, manifest = read_manifest(raw)
    if kind != "manifest":
        raise ValueError("expected an image manifest, got an index")
    layers = []
    for n, layer in enumerate(manifest.get("layers") or []):
        media, digest = layer.get("mediaType"), layer.get("digest") or ""
        if media not in LAYER_TYPES:
            raise ValueError("layer %d has media type %s, which NodeWright cannot unpack (push it as a tar or "
                             "tar+gzip layer; zstd is not supported)" % (n, media))
        if not DIGEST_RE.match(digest):
            raise ValueError("layer %d has an unsupported digest %r" % (n, digest))
        path = _blob_path(image_dir, digest)
        if path is None:
            raise ValueError("layer %d (%s) is missing from the pulled image" % (n, digest))
        actual = file_digest(path)
        if actual != digest:
            raise ValueError("layer %d has digest %s, not %s" % (n, actual, digest))
        layers.append(path)
    prefix = find_package_prefix(_member_names(p) for p in layers)
    if prefix is None:
        raise ValueError("the image holds no package: none of /nodewright-package/, /skyhook-package/ or the "
                         "image root has package.json, package.yaml or config.json")
    os.makedirs(dest)
    budget = [MAX_PACKAGE_BYTES]
    for path in layers:
        unpack_layer(path, dest, prefix, budget)
    return prefix


def _blob_path(image_dir, digest):
    hexpart = digest.split(":", 1)[1]
    for name in (hexpart, "sha256-" + hexpart, digest):
        candidate = os.path.join(image_dir, name)
        if os.path.isfile(candidate):
            return candidate
    return None


# --------------------------------------------------------------------------- skopeo errors

_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "network is unreachable",
                "no route to host", "connection reset", "tls handshake timeout", "server misbehaving",
                "server gave http response to https client", "x509:", "certificate", "context deadline exceeded",
                "timeout awaiting response")
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "404")
_DENIED = ("unauthorized", "authentication required", "denied", "401", "403")


def classify_skopeo_error(stderr):
    """``unreachable``, ``not-found``, ``denied`` or ``other`` for skopeo's error output."""
    text = (stderr or "").lower()
    if any(s in text for s in _UNREACHABLE):
        return "unreachable"
    if any(s in text for s in _DENIED):
        return "denied"
    if any(s in text for s in _NOT_FOUND):
        return "not-found"
    return "other"


def _skopeo_reason(stderr):
    """The useful tail of skopeo's error (it logs ``level=fatal msg="..."``)."""
    text = (stderr or "").strip().splitlines()
    line = text[-1] if text else ""
    m = re.search(r'msg="(.*)"\s*$', line)
    reason = m.group(1).replace('\\"', '"') if m else line
    # skopeo repeats the image name in front of the cause: keep the cause.
    reason = re.sub(r'^(?:Error parsing image name|initializing source) "?[^" ]+"?: ', "", reason)
    return reason[-400:]


# --------------------------------------------------------------------------- resolver

class ResolvedImage(object):
    """A package directory unpacked from an image, and where it came from."""

    __slots__ = ("path", "reference", "digest", "manifest_digest", "cached")

    def __init__(self, path, reference, digest, manifest_digest, cached):
        self.path = path
        self.reference = reference
        self.digest = digest
        self.manifest_digest = manifest_digest
        self.cached = cached

    def to_dict(self):
        return {"path": self.path, "reference": self.reference, "digest": self.digest,
                "manifest_digest": self.manifest_digest, "cached": self.cached}


def default_cache_dir(environ=None):
    environ = os.environ if environ is None else environ
    if environ.get("NODEWRIGHT_PACKAGE_CACHE"):
        return os.path.expanduser(environ["NODEWRIGHT_PACKAGE_CACHE"])
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nodewright", "packages")


def cache_key(digest, arch=None):
    """The cache directory name of an image (``arch`` for an index)."""
    key = digest.replace(":", "-")
    return key + ("-linux-%s" % normalize_arch(arch) if arch else "")


class ImageResolver(object):
    """Pulls package images with skopeo into a cache by digest.

    ``run`` runs a command (``subprocess.run``'s signature); tests and callers may
    replace it. Errors are ``ValidationError`` naming the package, the field and
    the fix; they are raised before any node is touched."""

    def __init__(self, cache_dir=None, arch=None, skopeo=None, registries_conf=None, environ=None, run=None):
        environ = os.environ if environ is None else environ
        self.cache_dir = cache_dir or default_cache_dir(environ)
        self.arch = normalize_arch(arch) if arch else controller_arch()
        self.skopeo = skopeo or environ.get("NODEWRIGHT_SKOPEO") or "skopeo"
        self.registries_conf = registries_conf or environ.get("NODEWRIGHT_REGISTRIES_CONF") or None
        self._run = run or subprocess.run
        self.pulls = 0  # how many images this resolver copied from a registry

    def for_arch(self, arch):
        """The same resolver (cache, skopeo, registries) for another architecture."""
        other = copy.copy(self)
        other.arch = normalize_arch(arch) if arch else controller_arch()
        return other

    # ---------------------------------------------------------------- cache
    def _entry(self, key):
        return os.path.join(self.cache_dir, key)

    def cached(self, digest):
        """The cached package of ``digest`` (a manifest, or an index for this
        resolver's architecture), or None."""
        for key in (cache_key(digest), cache_key(digest, self.arch)):
            entry = self._entry(key)
            meta = os.path.join(entry, "image.json")
            if os.path.isdir(os.path.join(entry, "package")) and os.path.isfile(meta):
                try:
                    with open(meta) as fh:
                        info = json.load(fh)
                except (OSError, ValueError):
                    continue
                return ResolvedImage(os.path.join(entry, "package"), info.get("reference"), digest,
                                     info.get("manifest_digest"), True)
        return None

    @contextlib.contextmanager
    def _locked(self, key):
        os.makedirs(self.cache_dir, exist_ok=True)
        with open(os.path.join(self.cache_dir, ".%s.lock" % key), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # another fork pulling the same image: wait for it
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ---------------------------------------------------------------- skopeo
    def _skopeo(self, args, timeout):
        cmd = [self.skopeo]
        if self.registries_conf:
            cmd += ["--registries-conf", self.registries_conf]
        cmd += list(args)
        try:
            proc = self._run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)
        except FileNotFoundError:
            return None, "skopeo-missing"
        except subprocess.TimeoutExpired:
            return None, "timeout"
        return proc, None

    def _fail(self, what, ref, field, label, problem, stderr=""):
        reason = _skopeo_reason(stderr)
        registry = ref.registry
        if problem == "skopeo-missing":
            return ValidationError(
                "%s: pulling %s needs skopeo on the controller, which is not installed (%s)"
                % (label, ref.text, self.skopeo), field=field,
                hint="install it (apt-get install skopeo, dnf install skopeo) or set NODEWRIGHT_SKOPEO")
        if problem == "timeout":
            return ValidationError("%s: %s of %s timed out" % (label, what, ref.text), field=field,
                                   hint="check that the controller reaches registry %s" % registry)
        kind = classify_skopeo_error(stderr)
        if kind == "unreachable":
            return ValidationError(
                "%s: cannot reach registry %s for %s: %s" % (label, registry, ref.text, reason), field=field,
                hint="check the registry address and that the controller reaches it; a registry without TLS "
                     "needs insecure = true for it in registries.conf (NODEWRIGHT_REGISTRIES_CONF)")
        if kind == "denied":
            return ValidationError(
                "%s: registry %s refused access to %s: %s" % (label, registry, ref.text, reason), field=field,
                hint="log in on the controller (skopeo login %s) or set REGISTRY_AUTH_FILE" % registry)
        if kind == "not-found":
            return ValidationError(
                "%s: %s is not in registry %s: %s" % (label, ref.text, registry, reason), field=field,
                hint="check the repository, the tag (the package version) and the digest")
        return ValidationError("%s: %s of %s failed: %s" % (label, what, ref.text, reason), field=field,
                               hint="run skopeo %s by hand to see the whole error" % what)

    def _inspect(self, ref, field, label):
        proc, problem = self._skopeo(["inspect", "--raw", ref.transport()], INSPECT_TIMEOUT)
        if problem or proc.returncode != 0:
            raise self._fail("inspect", ref, field, label, problem, proc.stderr.decode("utf-8", "replace")
                             if proc is not None else "")
        return proc.stdout

    # ---------------------------------------------------------------- resolve
    def resolve(self, ref, package=None, field=None, digest_field=None):
        """The unpacked package of image ``ref`` (an ``ImageRef``), from the cache
        or pulled into it. ``field`` names the reference in the input,
        ``digest_field`` the pinned digest (default: ``field``)."""
        label = "package %r" % package if package else "package"
        digest_field = digest_field or field
        if ref.digest:
            hit = self.cached(ref.digest)
            if hit is not None:
                return hit
        raw = self._inspect(ref, field, label)
        digest = sha256_digest(raw)
        if ref.digest and digest != ref.digest:
            raise ValidationError(
                "%s: %s points at %s, but the pinned digest is %s" % (
                    label, ref.name + (":" + ref.tag if ref.tag else ""), digest, ref.digest),
                field=digest_field,
                hint="if the new image is intended, pin %s; otherwise push the pinned image under that tag "
                     "again" % digest)
        try:
            kind, data = read_manifest(raw)
            if kind == "index":
                manifest_digest = select_platform(data, self.arch)["digest"]
                key = cache_key(digest, self.arch)
            else:
                manifest_digest, key = digest, cache_key(digest)
        except ValueError as exc:
            raise ValidationError("%s: %s: %s" % (label, ref.text, exc), field=field,
                                  hint="push the package as an OCI (or Docker v2) image for linux/%s" % self.arch)
        with self._locked(key):
            hit = self.cached(digest)
            if hit is not None:
                return hit
            return self._pull(ref, digest, manifest_digest, key, field, label)

    def _pull(self, ref, digest, manifest_digest, key, field, label):
        os.makedirs(self.cache_dir, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".pull-", dir=self.cache_dir)
        try:
            image_dir = os.path.join(work, "image")
            proc, problem = self._skopeo(["copy", "--quiet", ref.transport(manifest_digest), "dir:" + image_dir],
                                         COPY_TIMEOUT)
            if problem or proc.returncode != 0:
                raise self._fail("copy", ref, field, label, problem,
                                 proc.stderr.decode("utf-8", "replace") if proc is not None else "")
            self.pulls += 1
            unpacked = os.path.join(work, "rootfs")
            try:
                prefix = unpack_image_dir(image_dir, manifest_digest, unpacked)
            except (ValueError, UnsafeImage) as exc:
                raise ValidationError("%s: image %s@%s cannot be used: %s" % (label, ref.name, digest, exc),
                                      field=field, hint="rebuild the package image (see docs/packages.md, "
                                                        "OCI sources)")
            entry = os.path.join(work, "entry")
            os.makedirs(entry)
            os.rename(os.path.join(unpacked, prefix) if prefix else unpacked, os.path.join(entry, "package"))
            info = {"reference": ref.text, "digest": digest, "manifest_digest": manifest_digest,
                    "layout": prefix or "/", "arch": self.arch if key != cache_key(digest) else None,
                    "pulled": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
            with open(os.path.join(entry, "image.json"), "w") as fh:
                json.dump(info, fh, indent=2, sort_keys=True)
            final = self._entry(key)
            if os.path.exists(final):
                shutil.rmtree(final)  # a broken entry (no image.json): replaced
            os.rename(entry, final)
            return ResolvedImage(os.path.join(final, "package"), ref.text, digest, manifest_digest, False)
        finally:
            shutil.rmtree(work, ignore_errors=True)
