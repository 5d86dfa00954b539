"""The reconciler's image for real nodes, built locally: no registry, no container engine.

Two layers, like the execution environment the Helm chart names in production:

1. a Debian root made by ``debootstrap`` from Debian's packages (the mirror the
   machine's apt uses), with Python 3 and the collection's Python requirements
   (``requirements.txt``) installed into ``/opt/nodewright/site``; built once and
   cached under ``~/.cache/nodewright/images`` (keyed by the requirements and the
   Debian suite);
2. the collection (``/usr/share/ansible/collections``) and the ``nodewright``
   command, from the work tree, made at every build (seconds).

    python -m nodewright_sim.reconcilerimage [OUT.oci.tar]
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from nodewright_sim import ociimage
from nodewright_sim.cluster import SimulatorError, cache_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "nodewright.local/nodewright-ee"
SUITE = "bookworm"
COLLECTION_DIRS = ("meta", "plugins", "roles", "playbooks", "packages", "inventory")
COLLECTION_FILES = ("galaxy.yml", "README.md", "requirements.txt")
SITE = "opt/nodewright/site"
ENTRY_POINTS = {
    "nodewright": "nodewright_cli.cli:main",
    "ansible": "ansible.cli.adhoc:main",
    "ansible-playbook": "ansible.cli.playbook:main",
    "ansible-galaxy": "ansible.cli.galaxy:main",
    "ansible-runner": "ansible_runner.__main__:main",
}


def images_dir():
    return os.path.join(cache_dir(), "images")


def debian_mirror():
    """The Debian mirror the machine's apt uses (deb822 or one-line sources)."""
    candidates = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        text = open(path).read()
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split() and SUITE in fields.get("Suites", "").split() \
                    and "main" in fields.get("Components", "").split():
                candidates += fields.get("URIs", "").split()
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(parts) >= 4 and parts[0] == "deb" and parts[2] == SUITE and "main" in parts[3:]:
                candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri:
            return uri
    raise SimulatorError("no Debian %s mirror in /etc/apt/sources.list*: add one, or build the reconciler "
                         "image on a Debian machine" % SUITE)


def _base_key():
    h = hashlib.sha256()
    with open(os.path.join(REPO, "requirements.txt"), "rb") as fh:
        h.update(fh.read())
    h.update(("%s %d.%d %s" % (SUITE, sys.version_info[0], sys.version_info[1], os.uname().machine)).encode())
    return h.hexdigest()[:16]


def _run(args, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SimulatorError("%s failed: %s" % (" ".join(args[:3]), (proc.stderr or proc.stdout).strip()[-500:]))
    return proc


def base_layer(log=print):
    """The cached Debian + Python layer (a tar path); built when missing."""
    out = os.path.join(images_dir(), "reconciler-base-%s.tar" % _base_key())
    if os.path.exists(out):
        return out
    if not shutil.which("debootstrap"):
        from nodewright_sim.realpreflight import install_packages
        install_packages()
    if not shutil.which("debootstrap"):
        raise SimulatorError("the reconciler image needs debootstrap: apt-get install debootstrap")
    os.makedirs(images_dir(), exist_ok=True)
    start = time.time()
    work = tempfile.mkdtemp(prefix="reconciler-base-", dir=images_dir())
    root = os.path.join(work, "root")
    try:
        log("building the reconciler's Debian root (one-time; cached in %s)" % images_dir())
        _run(["debootstrap", "--variant=minbase", "--include=python3,ca-certificates", SUITE, root,
              debian_mirror()], timeout=1800)
        image_python = _run(["chroot", root, "python3", "-c",
                             "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
        site = os.path.join(root, SITE)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", site,
               "-r", os.path.join(REPO, "requirements.txt")]
        here = "%d.%d" % sys.version_info[:2]
        if image_python != here:
            pip += ["--python-version", image_python, "--only-binary=:all:"]
        _run(pip, timeout=1800)
        for d in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                  "usr/share/locale"):
            for entry in glob.glob(os.path.join(root, d, "*")):
                if os.path.isdir(entry) and not os.path.islink(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    os.unlink(entry)
        shutil.rmtree(os.path.join(site, "bin"), ignore_errors=True)  # the machine's script paths
        bindir = os.path.join(root, "usr/local/bin")
        for name, target in ENTRY_POINTS.items():
            module, func = target.split(":")
            with open(os.path.join(bindir, name), "w") as fh:
                fh.write("#!/usr/bin/python3\nimport sys\nfrom %s import %s\nsys.exit(%s())\n" % (module, func, func))
            os.chmod(os.path.join(bindir, name), 0o755)
        ociimage.write_layer(root, out + ".tmp")
        os.replace(out + ".tmp", out)
        log("built the reconciler's Debian root in %.0fs" % (time.time() - start))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def collection_layer(dest):
    """The collection and the nodewright command from the work tree, as a layer tar."""
    work = tempfile.mkdtemp(prefix="reconciler-collection-", dir=os.path.dirname(dest))
    try:
        coll = os.path.join(work, "usr/share/ansible/collections/ansible_collections/nodewright/fleet")
        os.makedirs(coll)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        for d in COLLECTION_DIRS:
            if os.path.isdir(os.path.join(REPO, d)):
                shutil.copytree(os.path.join(REPO, d), os.path.join(coll, d), ignore=ignore)
        for f in COLLECTION_FILES:
            shutil.copy2(os.path.join(REPO, f), os.path.join(coll, f))
        shutil.copytree(os.path.join(REPO, "cli", "nodewright_cli"), os.path.join(work, SITE, "nodewright_cli"),
                        ignore=ignore)
        return ociimage.write_layer(work, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(out=None, tag="sim", log=print):
    """The reconciler image as an OCI archive; returns (archive path, image name)."""
    name = "%s:%s" % (IMAGE, tag)
    base = base_layer(log=log)
    out = out or os.path.join(images_dir(), "reconciler.oci.tar")
    top = collection_layer(out + ".collection.tar")
    try:
        ociimage.build(out, [name], [base, top], user="1000", workdir="/tmp", env=[
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONPATH=/" + SITE, "ANSIBLE_COLLECTIONS_PATH=/usr/share/ansible/collections",
            "LANG=C.UTF-8"])
    finally:
        os.unlink(top)
    return out, name


if __name__ == "__main__":
    start = time.time()
    path, image = build(sys.argv[1] if len(sys.argv) > 1 else None)
    print("%s (%s) in %.1fs" % (path, image, time.time() - start))
