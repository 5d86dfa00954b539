"""Per-node host roots: a small Linux userland (busybox) that package scripts really
run in through chroot, with stand-ins for the commands that would touch this
machine's kernel, init system or GPUs. Each stand-in records what it was asked in
``/var/lib/nodewright-sim/actions.log`` and changes only that node's simulated
state: ``/proc/sys``, ``/proc/cmdline`` and ``/sys`` are plain files here, systemd
is emulated from the unit files in the root (``standins/_units.sh``), and ``boot()``
rebuilds the runtime state from persisted configuration the way a real boot does,
then starts the units default.target pulls in.

This module lays a node's root down (``create``, or ``Template.clone`` for nodes of
one kind) and runs commands in it; the rest lives beside it and is reachable from
here: the base image and its prerequisites (``hostimage``), the boot and GPU faults
(``hostboot``), the mounts (``hostmounts``) and the root's layout (``hostlayout``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import uuid

from nodewright_sim.hostboot import boot, boot_id, crash_kernel_size, gpu_fault
from nodewright_sim.hostimage import (
    PREREQUISITES,
    BaseImage,
    check_prerequisites,
    copy_libraries,
    find_busybox,
    missing_prerequisites,
)
from nodewright_sim.hostlayout import (
    DEFAULT_KERNEL,
    DEFAULT_MEMORY_MIB,
    HERE,
    NODE_ENV,
    REBOOT_REQUEST,
    SIM_DIR,
    UNIT_DIR,
    HostRootError,
)
from nodewright_sim.hostmounts import mount_overlay, mount_tmpfs, overlay_safe, remove, unmount_under

# What the simulator, its CLI and the tests use of host roots, wherever it is defined.
__all__ = [
    "BaseImage", "DEFAULT_KERNEL", "HOST_ROOTS_ENV", "HostRootError", "NODE_ENV", "PREREQUISITES",
    "REBOOT_REQUEST", "TEMPLATE_NAME", "Template", "boot", "boot_id", "check_prerequisites", "copy_libraries",
    "crash_kernel_size", "create", "find_busybox", "gpu_fault", "missing_prerequisites", "mount_overlay",
    "mount_tmpfs", "remove", "run", "run_argv", "unmount_under",
]

ENABLED_UNITS = ("containerd.service", "kubelet.service")


def _make_devices(root):
    dev = os.path.join(root, "dev")
    os.makedirs(dev, exist_ok=True)
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
        path = os.path.join(dev, name)
        if not os.path.exists(path):
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            except PermissionError:
                open(path, "w").close()


def install_payload(root, family, name):
    """Lay a package of the simulated package database down as apt-get would (the
    files of payload/FAMILY/NAME; _pkg.sh does the same inside the root)."""
    src = os.path.join(HERE, "payload", family, name)
    listed = []
    for dirpath, _, filenames in os.walk(src):
        for fname in filenames:
            if fname == ".depends":
                continue
            rel = os.path.relpath(os.path.join(dirpath, fname), src)
            dest = os.path.join(root, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest):
                os.unlink(dest)
            shutil.copy2(os.path.join(dirpath, fname), dest)
            listed.append("/" + rel)
    with open(os.path.join(root, SIM_DIR, "pkgdb", name + ".list"), "w") as fh:
        fh.write("".join(p + "\n" for p in sorted(listed)))


def create(root, base, node):
    """Lay out a node's host root. ``node`` carries the facts the stand-ins answer
    with: name, arch, gpu_name, compute_cap, gpu_count, gpu_memory_mib, memory_mib,
    nvswitch_count (HGX boards), os_id."""
    os.makedirs(root, exist_ok=True)
    _make_devices(root)
    for dirpath, dirnames, filenames in os.walk(base.path):
        rel = os.path.relpath(dirpath, base.path)
        dest_dir = os.path.join(root, rel) if rel != "." else root
        os.makedirs(dest_dir, exist_ok=True)
        for name in dirnames + filenames:
            src = os.path.join(dirpath, name)
            dst = os.path.join(dest_dir, name)
            if name == ".ready" or os.path.lexists(dst):
                continue
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
                if name in dirnames:
                    dirnames.remove(name)
            elif os.path.isfile(src):
                if rel.split("/")[0] in ("bin", "lib", "lib64", "usr"):
                    os.link(src, dst)  # shared, read-mostly: the userland
                else:
                    shutil.copy2(src, dst)
    for d in ("etc/sysctl.d", "etc/modprobe.d", "etc/modules-load.d", "etc/default/grub.d",
              "etc/systemd/system/multi-user.target.wants", "etc/nodewright-sim", "var/lib", "var/log", "run",
              "boot/grub", SIM_DIR + "/pkgdb"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    if not os.path.lexists(os.path.join(root, "var/run")):
        os.symlink("../run", os.path.join(root, "var/run"))
    machine = "aarch64" if node.get("arch") == "arm64" else "x86_64"
    env = {
        "NODE_NAME": node["name"], "MACHINE": machine,
        "GPU_NAME": node.get("gpu_name", ""), "COMPUTE_CAP": node.get("compute_cap", ""),
        "GPU_COUNT": str(node.get("gpu_count", 0)), "GPU_MEMORY_MIB": str(node.get("gpu_memory_mib", 0)),
        "MEMORY_MIB": str(node.get("memory_mib", DEFAULT_MEMORY_MIB)),
        "NVSWITCH_COUNT": str(node.get("nvswitch_count", 0)),
        "DRIVER_VERSION": node.get("driver_version", "580.95.05"), "OS_ID": node.get("os_id", "ubuntu"),
    }
    if node.get("memory_kib"):
        env["MEMORY_KIB"] = str(int(node["memory_kib"]))
    with open(os.path.join(root, NODE_ENV), "w") as fh:
        for k, v in env.items():
            fh.write("%s=%s\n" % (k, shlex.quote(v)))
    os_release = {"ubuntu": 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04 LTS"\n',
                  "cos": 'ID=cos\nVERSION_ID=121\nPRETTY_NAME="Container-Optimized OS"\n'}
    with open(os.path.join(root, "etc/os-release"), "w") as fh:
        fh.write(os_release.get(env["OS_ID"], os_release["ubuntu"]))
    with open(os.path.join(root, "etc/default/grub"), "w") as fh:
        fh.write('GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n')
    distro_files(root, env["OS_ID"])
    if node.get("mofed"):
        install_mofed(root)
    for unit in ENABLED_UNITS:  # enabled on a Kubernetes node
        link = os.path.join(root, "etc/systemd/system/multi-user.target.wants", unit)
        if not os.path.lexists(link):
            os.symlink("/%s/%s" % (UNIT_DIR, unit), link)
    installed = ["linux-image-%s %s" % (DEFAULT_KERNEL, DEFAULT_KERNEL), "openssl 3.0.13-0ubuntu3.1",
                 "containerd 1.7.12-0ubuntu4"]
    if int(env["GPU_COUNT"]):
        installed.append("nvidia-compute-utils-580 %s-0ubuntu1" % env["DRIVER_VERSION"])
    if int(env["NVSWITCH_COUNT"]):
        install_payload(root, "deb", "nvidia-fabricmanager-580")
        installed.append("nvidia-fabricmanager-580 %s-1" % env["DRIVER_VERSION"])
    with open(os.path.join(root, SIM_DIR, "pkgdb/installed"), "w") as fh:
        fh.write("".join(line + "\n" for line in sorted(installed)))
    with open(os.path.join(root, SIM_DIR, "pkgdb/available"), "w") as fh:
        fh.write("openssl 3.0.13-0ubuntu3.4\ncontainerd 1.7.27-0ubuntu1\n"
                 "linux-image-6.8.0-51-generic 6.8.0-51-generic\nkdump-tools 1:1.8.1ubuntu1\n"
                 "kexec-tools 1:2.0.27-1ubuntu2\n")
    for name in ("vmlinuz", "initrd.img"):
        open(os.path.join(root, "boot", "%s-%s" % (name, DEFAULT_KERNEL)), "a").close()
    etc_snapshot = sorted(os.path.relpath(os.path.join(d, f), root)
                          for d, _, fs in os.walk(os.path.join(root, "etc")) for f in fs)
    with open(os.path.join(root, SIM_DIR, "etc-manifest"), "w") as fh:
        fh.write("\n".join(etc_snapshot) + "\n")
    with open(os.path.join(root, SIM_DIR, "kernel"), "w") as fh:
        fh.write(DEFAULT_KERNEL + "\n")
    if env["OS_ID"] != "cos":
        build_initramfs(root, DEFAULT_KERNEL, ["nvidia", "nvidia_uvm", "nvidia_modeset"] if node.get("gpu_count") else [])
    return boot(root)


# --- what a node's image ships: distribution files, MOFED, the first initramfs -----

def distro_files(root, os_id):
    """Files the distribution ships that change kernel defaults: Ubuntu 24.04 raises the
    map count in /etc/sysctl.d/10-map-count.conf."""
    if os_id == "ubuntu":
        with open(os.path.join(root, "etc/sysctl.d/10-map-count.conf"), "w") as fh:
            fh.write("# Increase the number of memory map areas a process may have\nvm.max_map_count = 1048576\n")


def install_mofed(root):
    """MLNX_OFED on the host (a pool with InfiniBand): its ofed_info says so."""
    path = os.path.join(root, "bin/ofed_info")  # /usr/bin is a link to /bin here
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write('#!/bin/sh\ncase "$1" in -s) echo "MLNX_OFED_LINUX-24.10-1.1.4.0:" ;; '
                 '*) echo "MLNX_OFED_LINUX-24.10-1.1.4.0 (OFED-24.10-1.1.4):" ;; esac\n')
    os.chmod(path, 0o755)


def build_initramfs(root, kernel, modules):
    """The node's first initramfs (the image update-initramfs and dracut rebuild, see
    standins/_initramfs.sh): ``modules`` load from it, with no options yet."""
    with open(os.path.join(root, SIM_DIR, "initramfs-modules"), "w") as fh:
        fh.write(" ".join(modules) + "\n")
    with open(os.path.join(root, "boot", "initrd.img-%s" % kernel), "w") as fh:
        fh.write("# nodewright-sim initramfs for %s, built by the image\n" % kernel)
        for m in modules:
            fh.write("module %s\n" % m)


# --- fleets: one boot per kind of node, shared by every node of that kind ---------

TEMPLATE_NAME = "nodewright-sim-template-node"
HOST_ROOTS_ENV = "NODEWRIGHT_SIM_HOST_ROOTS"  # overlay (the default where it works) or copy


class Template(object):
    """A host root created and booted once for nodes that differ only in their name,
    then laid down for each of them (``clone``): at fleet size a full boot per node
    (the init's shell, about 0.2 s of CPU) is what makes creating nodes slow, and a
    boot of the same facts makes the same files.

    A node's root is an overlay mount of the template (read-only, shared) under a
    directory of the node's own that takes every change: nothing is copied until a
    node writes it, and a file written on one node is that node's alone (the userland
    too). Where overlay mounts are not possible (no privilege, a file system that
    cannot be an upper layer) or ``NODEWRIGHT_SIM_HOST_ROOTS=copy``, the root is a copy
    of the template instead, entry by entry, with the userland hard-linked to the base
    image as ``create`` links it. Either way the node's files are the template's with
    its name (``TEMPLATE_NAME``) and boot ID replaced by the node's own in the files that
    hold them (``node.env``, the hostname, the boot ID, the boot's line in
    ``actions.log``); timestamps in the journal are those of the template's boot."""

    def __init__(self, root, base, node, layers=None, mode=None):
        """``layers``: where the nodes' own layers go (a directory per node; by default
        beside each node's root), best a tmpfs (``mount_tmpfs``): on a disk every
        directory and file they start with costs a journalled write. ``mode``:
        ``overlay`` or ``copy``, over ``NODEWRIGHT_SIM_HOST_ROOTS``."""
        self.root = root
        self.layers = layers
        ready = root + ".ready"
        if not os.path.exists(ready):
            shutil.rmtree(root, ignore_errors=True)
            create(root, base, dict(node, name=TEMPLATE_NAME))
            open(ready, "w").close()
        self.boot_id = boot_id(root).encode()
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.plan = self._scan()
        self.personal = [item for item in self.plan if item[0] == "f" and item[4]]
        self.dir_modes = {item[1]: item[2] for item in self.plan if item[0] == "d"}
        mode = mode or os.environ.get(HOST_ROOTS_ENV, "")
        if mode not in ("", "overlay", "copy"):
            raise HostRootError("%s must be overlay or copy, not %r" % (HOST_ROOTS_ENV, mode))
        # None: overlay mounts not tried yet; the first clone finds out.
        self.overlay = False if mode == "copy" or not overlay_safe(root) else (True if mode else None)

    def _scan(self):
        plan = []
        name = TEMPLATE_NAME.encode()
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            for entry in sorted(dirnames) + sorted(filenames):
                src = os.path.join(dirpath, entry)
                rel = entry if rel_dir == "." else os.path.join(rel_dir, entry)
                if TEMPLATE_NAME in rel:
                    raise HostRootError("the template host root %s has a path with the node's name: %s"
                                        % (self.root, rel))
                st = os.lstat(src)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    plan.append(("l", rel, os.readlink(src)))
                elif stat.S_ISDIR(st.st_mode):
                    plan.append(("d", rel, mode))
                elif stat.S_ISCHR(st.st_mode):
                    plan.append(("c", rel, mode | stat.S_IFCHR, st.st_rdev))
                elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    plan.append(("h", rel, src))  # the shared userland
                elif stat.S_ISREG(st.st_mode):
                    with open(src, "rb") as fh:
                        data = fh.read()
                    personal = name in data or self.boot_id in data
                    plan.append(("f", rel, mode, data, personal))
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        # os.walk lists a directory's entries before descending: parents come first.
        return plan

    def layer(self, dest, name):
        """The directory holding a node root's own layer (upper and work directories)."""
        return os.path.join(self.layers, name) if self.layers else dest.rstrip("/") + ".layer"

    def clone(self, dest, name):
        """Lay the template down as the host root of node ``name`` at ``dest`` (a
        root already there, of an earlier node of the name, is replaced); return the
        node's boot ID."""
        remove(dest)
        new_id = str(uuid.uuid4())
        subst = ((TEMPLATE_NAME.encode(), name.encode()), (self.boot_id, new_id.encode()))
        if self.overlay is not False:
            try:
                self._clone_overlay(dest, name, subst)
                self.overlay = True
                return new_id
            except OSError:
                if self.overlay:
                    raise
                self.overlay = False  # not here: copies from now on
                remove(dest)
        self._clone_copy(dest, subst)
        return new_id

    def _write(self, path, data, mode, subst):
        for old, new in subst:
            data = data.replace(old, new)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode != mode & (0o666 & ~self.umask):
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def _clone_overlay(self, dest, name, subst):
        layer = self.layer(dest, name)
        if os.path.lexists(layer):
            shutil.rmtree(layer)
        upper, work = os.path.join(layer, "upper"), os.path.join(layer, "work")
        os.makedirs(work)
        os.makedirs(dest)
        os.mkdir(upper, self.dir_modes.get(".", 0o755))
        for item in self.personal:
            parent = os.path.dirname(item[1])
            todo = []
            while parent and not os.path.isdir(os.path.join(upper, parent)):
                todo.append(parent)
                parent = os.path.dirname(parent)
            for d in reversed(todo):  # the template's modes: the upper directory's are the merged one's
                mode = self.dir_modes.get(d, 0o755)
                os.mkdir(os.path.join(upper, d), mode)
                os.chmod(os.path.join(upper, d), mode)
            self._write(os.path.join(upper, item[1]), item[3], item[2], subst)
        mount_overlay(self.root, upper, work, dest)

    def _clone_copy(self, dest, subst):
        default_dir = 0o777 & ~self.umask
        os.makedirs(dest)
        join = os.path.join
        for item in self.plan:
            kind, path = item[0], join(dest, item[1])
            if kind == "f":
                self._write(path, item[3], item[2], subst if item[4] else ())
            elif kind == "l":
                os.symlink(item[2], path)
            elif kind == "d":
                os.mkdir(path, item[2])
                if item[2] != item[2] & default_dir:
                    os.chmod(path, item[2])
            elif kind == "h":
                os.link(item[2], path)
            else:
                try:
                    os.mknod(path, item[2], item[3])
                except PermissionError:
                    open(path, "w").close()


# --- running commands in a node's root ------------------------------------------------

def run_argv(root, argv, env=None, timeout=None, capture=False):
    """Run a program with its arguments inside a node's host root (chroot)."""
    return subprocess.run(["chroot", root] + list(argv), capture_output=capture, text=True,
                          env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME": "/root", **(env or {})}, timeout=timeout)


def run(root, command, env=None, timeout=120):
    """Run a shell command inside a node's host root (chroot), as a package step would."""
    return subprocess.run(["chroot", root, "/bin/sh", "-c", command], capture_output=True, text=True,
                          env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME": "/root", **(env or {})}, timeout=timeout)
