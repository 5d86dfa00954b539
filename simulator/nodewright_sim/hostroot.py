"""Per-node host roots: a small Linux userland (busybox) that package scripts really
run in through chroot, with stand-ins for the commands that would touch this
machine's kernel, init system or GPUs. Each stand-in records what it was asked in
``/var/lib/nodewright-sim/actions.log`` and changes only that node's simulated
state: ``/proc/sys``, ``/proc/cmdline`` and ``/sys`` are plain files here, systemd
is emulated from the unit files in the root (``standins/_units.sh``), and ``boot()``
rebuilds the runtime state from persisted configuration the way a real boot does,
then starts the units default.target pulls in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import re
import shlex
import shutil
import stat
import subprocess
import uuid

import yaml

from nodewright_sim.cluster import SimulatorError

HERE = os.path.dirname(os.path.abspath(__file__))
SIM_DIR = "var/lib/nodewright-sim"
REBOOT_REQUEST = "run/nodewright-sim/reboot-requested"
NODE_ENV = "etc/nodewright-sim/node.env"
DEFAULT_KERNEL = "6.8.0-45-generic"
BASE_CMDLINE = "ro quiet"
DEFAULT_MEMORY_MIB = 2 * 1024 * 1024
SIM_CPUS = 4  # cpufreq directories per node; the Node object reports the real count
INIT = "/usr/lib/nodewright-sim/_init"
UNIT_DIR = "usr/lib/systemd/system"
# Stand-ins that live outside the PATH, where systemd's units name them.
LIBEXEC = {"systemd-sysctl": "usr/lib/systemd/systemd-sysctl",
           "systemd-modules-load": "usr/lib/systemd/systemd-modules-load"}
ENABLED_UNITS = ("containerd.service", "kubelet.service")
# What building host roots and running package scripts in them needs from this
# machine: command -> the Debian package that has it (busybox must be static).
PREREQUISITES = (("bash", "bash"), ("dash", "dash"), ("ldd", "libc-bin"), ("chroot", "coreutils"))

# Commands whose busybox applet would act on the real machine, or that the
# simulator emulates per node.
STANDINS = ("sysctl", "reboot", "shutdown", "systemctl", "service", "journalctl", "modprobe", "lsmod",
            "update-grub", "grub-mkconfig", "grub2-mkconfig", "uname", "nvidia-smi", "nvidia-persistenced", "dcgmi",
            "apt-get", "apt", "dpkg", "dpkg-query", "dnf", "yum", "rpm", "containerd", "kubelet")
NEVER_LINK = {"halt", "poweroff", "init", "linuxrc", "insmod", "rmmod", "mount", "umount",
              "swapon", "swapoff", "switch_root", "pivot_root", "chroot", "ifconfig", "ip",
              "route", "hwclock", "klogd", "syslogd", "mdev", "losetup", "fdisk", "mkfs.ext2",
              "mke2fs", "mkswap", "reboot", "shutdown", "sysctl", "modprobe", "lsmod", "uname",
              "depmod", "kill", "killall", "killall5", "pkill", "nsenter", "unshare"}


class HostRootError(SimulatorError):
    pass


def find_busybox(path=None):
    """A static busybox on PATH (``path``: another search path), or None."""
    found = shutil.which("busybox", path=path)
    return found if found and _is_static(found, path) else None


def missing_prerequisites(path=None):
    """The Debian packages host roots need that this machine (its PATH, or ``path``)
    lacks, in the order a fix installs them."""
    missing = [] if find_busybox(path) else ["busybox-static"]
    missing += [pkg for cmd, pkg in PREREQUISITES if not shutil.which(cmd, path=path)]
    return missing


def check_prerequisites(path=None):
    """Raise HostRootError (one line: what is missing and the fix) unless host roots
    can be built and used here."""
    problems = []
    missing = missing_prerequisites(path)
    if missing:
        problems.append("the simulator's node host roots need %s: run `make setup` as root, or "
                        "apt-get install -y %s" % (", ".join(missing), " ".join(missing)))
    if os.geteuid() != 0:
        problems.append("package scripts run in a chroot of each node's host root: run the simulator as root")
    if problems:
        raise HostRootError("; ".join(problems))


def _is_static(path, search=None):
    tool = shutil.which("file", path=search)
    if tool:
        out = subprocess.run([tool, "-L", path], capture_output=True, text=True).stdout
        return "statically linked" in out or "static-pie" in out
    with open(path, "rb") as fh:
        head = fh.read(8192)
    return b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head


def sysctl_defaults():
    return yaml.safe_load(_read(os.path.join(HERE, "sysctl_defaults.yaml")))


def _kernel_value(value):
    """A multi-number parameter reads back TAB-separated, as the kernel prints it."""
    value = str(value)
    if re.fullmatch(r"-?\d+(\s+-?\d+)+", value.strip()):
        return "\t".join(value.split())
    return value


def _sysctl_path(root, key):
    return os.path.join(root, "proc/sys", *key.split("."))


class BaseImage(object):
    """A template root prepared once per simulator; node roots hard-link it."""

    def __init__(self, path):
        self.path = path

    def prepare(self):
        if os.path.exists(os.path.join(self.path, ".ready")):
            return self
        check_prerequisites()
        bb = find_busybox()
        tmp = self.path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for d in ("bin", "etc", "usr/lib/nodewright-sim", "usr/lib/systemd/system/sysinit.target.wants", "tmp",
                  "root"):
            os.makedirs(os.path.join(tmp, d), exist_ok=True)
        shutil.copy2(bb, os.path.join(tmp, "bin/busybox"))
        applets = subprocess.run([bb, "--list"], capture_output=True, text=True, check=True).stdout.split()
        for applet in applets:
            if applet in NEVER_LINK or applet == "busybox":
                continue
            os.symlink("busybox", os.path.join(tmp, "bin", applet))
        # Scripts run under real shells: busybox's own sh prefers its applets over
        # PATH, which would bypass the stand-ins.
        for shell in ("bash", "dash"):
            _copy_with_libraries(shutil.which(shell), tmp)
        os.unlink(os.path.join(tmp, "bin/sh"))
        os.symlink("dash", os.path.join(tmp, "bin/sh"))
        for d, target in (("sbin", "bin"), ("usr/bin", "../bin"), ("usr/sbin", "../bin")):
            os.symlink(target, os.path.join(tmp, d))
        standins = os.path.join(HERE, "standins")
        for name in sorted(os.listdir(standins)):
            if name.startswith("_"):
                rel = "usr/lib/nodewright-sim/" + name
            else:
                rel = LIBEXEC.get(name, "bin/" + name)
            dest = os.path.join(tmp, rel)
            if os.path.lexists(dest):
                os.unlink(dest)  # a busybox applet link: the stand-in replaces it
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(os.path.join(standins, name), dest)
            os.chmod(dest, 0o755)
        # The distribution's and the driver's units; the package database's payloads.
        shutil.copytree(os.path.join(HERE, "units"), os.path.join(tmp, UNIT_DIR), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("README"))
        os.symlink("multi-user.target", os.path.join(tmp, UNIT_DIR, "default.target"))
        for unit in ("systemd-sysctl.service", "systemd-modules-load.service"):
            os.symlink("../" + unit, os.path.join(tmp, UNIT_DIR, "sysinit.target.wants", unit))
        shutil.copytree(os.path.join(HERE, "payload"), os.path.join(tmp, "usr/lib/nodewright-sim/payload"),
                        symlinks=True, ignore=shutil.ignore_patterns("README"))
        with open(os.path.join(tmp, "etc/passwd"), "w") as fh:
            fh.write("root:x:0:0:root:/root:/bin/sh\n"
                     "nvidia-persistenced:x:117:124:NVIDIA Persistence Daemon,,,:/nonexistent:/usr/sbin/nologin\n"
                     "nobody:x:65534:65534:nobody:/:/bin/false\n")
        with open(os.path.join(tmp, "etc/group"), "w") as fh:
            fh.write("root:x:0:\nnvidia-persistenced:x:124:\nnogroup:x:65534:\n")
        open(os.path.join(tmp, ".ready"), "w").close()
        os.replace(tmp, self.path) if not os.path.exists(self.path) else None
        return self


def _copy_with_libraries(binary, dest_root):
    """Copy a dynamically linked program and the shared libraries ldd names."""
    real = os.path.realpath(binary)
    dest = os.path.join(dest_root, "bin", os.path.basename(binary))
    if os.path.lexists(dest):
        os.unlink(dest)
    shutil.copy2(real, dest)
    copy_libraries(real, dest_root, check=True)


def copy_libraries(binary, dest_root, check=False):
    """Copy the shared libraries ldd names for ``binary`` to the same paths under
    ``dest_root`` (those already there are kept). ``check``: a binary ldd cannot read
    is an error; otherwise it has no libraries to copy."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=check).stdout
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if not m:
            continue
        lib = m.group(1)
        target = os.path.join(dest_root, lib.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            shutil.copy2(os.path.realpath(lib), target)


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


def _mknod(path, major, minor):
    if os.path.lexists(path):
        os.unlink(path)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
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


# --- fleets: one boot per kind of node, shared by every node of that kind ---------

TEMPLATE_NAME = "nodewright-sim-template-node"
HOST_ROOTS_ENV = "NODEWRIGHT_SIM_HOST_ROOTS"  # overlay (the default where it works) or copy
MNT_DETACH = 2


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
        self.overlay = False if mode == "copy" or not _overlay_safe(root) else (True if mode else None)

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


def _overlay_safe(path):
    """overlay's mount options cannot name paths with a comma, colon or backslash."""
    return not any(c in os.path.abspath(path) for c in ",:\\")


_LIBC = []


def _libc():
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True))
    return _LIBC[0]


def _mount(source, target, fstype, options):
    if _libc().mount(source.encode(), target.encode(), fstype.encode(), 0, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (fstype, target, os.strerror(err)))


def mount_overlay(lower, upper, work, target):
    _mount("overlay", target, "overlay", "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=on" % (lower, upper, work))


def mount_tmpfs(target):
    """A tmpfs at ``target`` (made when missing, and empty): True, or False where this
    machine does not allow it (the directory stays a plain one)."""
    os.makedirs(target, exist_ok=True)
    if os.path.ismount(target):
        return True
    if os.listdir(target):
        return False
    try:
        _mount("tmpfs", target, "tmpfs", "mode=0755")
    except OSError:
        return False
    return True


def _mountinfo():
    """(mount point, file system type, super options) of every mount."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                sep = fields.index("-")
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                out.append((point, fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""))
    except (OSError, ValueError):
        pass
    return out


def mounts_under(path):
    """The mount points at or below ``path``, deepest first."""
    path = os.path.realpath(path).rstrip("/")
    found = [point for point, _, _ in _mountinfo() if point == path or point.startswith(path + "/")]
    return sorted(found, key=len, reverse=True)


def unmount_under(path):
    """Detach every mount at or below ``path`` (the overlay host roots of a simulator)."""
    for point in mounts_under(path):
        if _libc().umount2(point.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):
                raise HostRootError("could not unmount %s: %s" % (point, os.strerror(err)))


def remove(root):
    """Remove a node's host root, and its own layer when it is an overlay."""
    if not os.path.lexists(root):
        return
    real = os.path.realpath(root)
    for point, fstype, options in _mountinfo() if os.path.ismount(real) else ():
        if point == real and fstype == "overlay":
            upper = re.search(r"(?:^|,)upperdir=([^,]+)", options)
            unmount_under(real)
            if upper and os.path.basename(upper.group(1)) == "upper":
                shutil.rmtree(os.path.dirname(upper.group(1)), ignore_errors=True)
    if os.path.lexists(root):
        shutil.rmtree(root)


def _read(path, default=""):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return default


def _node_env(root):
    env = {}
    for line in _read(os.path.join(root, NODE_ENV)).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = (shlex.split(v) or [""])[0]
    return env


def _cmdline_from_grub_cfg(root, kernel):
    for cfg_path in ("boot/grub/grub.cfg", "boot/grub2/grub.cfg"):
        cfg = _read(os.path.join(root, cfg_path))
        m = re.search(r"^\s*linux\s+(\S+)\s+(.*)$", cfg, re.M)
        if m:
            return "BOOT_IMAGE=%s %s" % (m.group(1), " ".join(m.group(2).split()))
    return "BOOT_IMAGE=/boot/vmlinuz-%s root=/dev/sda1 %s" % (kernel, BASE_CMDLINE)


_SIZE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text):
    m = re.fullmatch(r"(\d+)([KMGT]?)", text.strip(), re.I)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * _SIZE[m.group(2).upper()]


def crash_kernel_size(cmdline, memory_bytes):
    """The memory the kernel reserves for a crash kernel: the last crashkernel= of the
    command line, SIZE[@OFFSET] or RANGE:SIZE,... ranges chosen by the memory size
    (and ,high / ,low). 0 when there is none or it does not parse (the kernel ignores it)."""
    spec = None
    for token in cmdline.split():
        if token.startswith("crashkernel="):
            spec = token.split("=", 1)[1]
    if not spec:
        return 0
    spec = re.sub(r",(high|low)$", "", spec).split("@", 1)[0]
    try:
        if ":" not in spec:
            return _size(spec)
        for item in spec.split(","):
            span, size = item.split(":", 1)
            start, _, end = span.partition("-")
            if _size(start) <= memory_bytes and (not end or memory_bytes < _size(end)):
                return _size(size)
    except ValueError:
        return 0
    return 0


GPU_FAULTS = "run/nodewright-sim/gpu-faults"
GPU_FAULTS_NEXT_BOOT = "etc/nodewright-sim/gpu-faults.next-boot"
KMSG = "run/nodewright-sim/kmsg"
GPU_FAULT_KINDS = ("missing", "ecc", "nvlink-down", "dcgm", "xid")


def gpu_fault(root, kind, value="", next_boot=False):
    """Make the node's GPUs fail a check, as hardware does: ``missing N`` (the last N
    GPUs are gone from nvidia-smi), ``ecc Disabled``, ``nvlink-down I`` (GPU I's links
    inactive), ``dcgm fail`` (dcgmi diag fails), ``xid CODE`` (an NVRM Xid in the
    kernel log). Now, until the next boot clears it, or (``next_boot``) from the next
    boot on, as a GPU that falls off the bus at a reboot."""
    if kind not in GPU_FAULT_KINDS:
        raise HostRootError("unknown GPU fault %r (one of %s)" % (kind, ", ".join(GPU_FAULT_KINDS)))
    line = ("%s %s" % (kind, value)).strip() + "\n"
    if next_boot:
        path = os.path.join(root, GPU_FAULTS_NEXT_BOOT)
    elif kind == "xid":
        path = os.path.join(root, KMSG)
        line = "kernel: NVRM: Xid (PCI:0000:18:00): %s, pid=4242, name=python3, GPU has fallen off the bus.\n" \
            % (value or "79")
    else:
        path = os.path.join(root, GPU_FAULTS)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fh.write(line)


def boot(root):
    """Simulate a boot: the kernel's runtime state is rebuilt from its defaults and the
    persisted configuration, then the init starts the units default.target pulls in.

    Returns the new boot ID. Runtime-only changes (``sysctl -w``, ``modprobe`` without
    a modules-load.d entry, a governor written to sysfs, GPU persistence and power
    profiles) are gone. The kernel takes its command line from the GRUB configuration
    (and reserves crash-kernel memory when it asks for it), loads the GPU driver with
    its modprobe.d options; systemd-modules-load and systemd-sysctl then apply
    modules-load.d and sysctl.d, and every enabled or wanted unit starts (oneshot units
    run: a governor or power-profile service takes effect only when enabled). On COS,
    ``/etc`` is reset to its image first, as the real OS does.
    """
    env = _node_env(root)
    if env.get("OS_ID") == "cos":
        keep = set(_read(os.path.join(root, SIM_DIR, "etc-manifest")).split())
        for d, _, files in os.walk(os.path.join(root, "etc")):
            for f in files:
                if os.path.relpath(os.path.join(d, f), root) not in keep:
                    os.unlink(os.path.join(d, f))
    for d in ("run", "proc", "sys"):
        shutil.rmtree(os.path.join(root, d), ignore_errors=True)
    os.makedirs(os.path.join(root, "run/nodewright-sim/units"), exist_ok=True)
    # Hardware faults that show at this boot (a GPU that does not come back, an Xid).
    pending = os.path.join(root, GPU_FAULTS_NEXT_BOOT)
    if os.path.exists(pending):
        for line in _read(pending).splitlines():
            kind, _, value = line.partition(" ")
            if kind:
                gpu_fault(root, kind, value)
        os.unlink(pending)
    next_kernel = os.path.join(root, SIM_DIR, "next-kernel")
    kernel = _read(next_kernel).strip() or _read(os.path.join(root, SIM_DIR, "kernel")).strip() or DEFAULT_KERNEL
    with open(os.path.join(root, SIM_DIR, "kernel"), "w") as fh:
        fh.write(kernel + "\n")
    values = dict(sysctl_defaults())
    values.update(memory_sysctl_defaults(env.get("MEMORY_KIB")))
    values["kernel.osrelease"] = kernel
    values["kernel.hostname"] = env.get("NODE_NAME", "node")
    boot_id = str(uuid.uuid4())
    values["kernel.random.boot_id"] = boot_id
    for key, value in values.items():
        path = _sysctl_path(root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(_kernel_value(value) + "\n")
    cmdline = _cmdline_from_grub_cfg(root, kernel)
    memory_mib = int(env.get("MEMORY_MIB") or DEFAULT_MEMORY_MIB)
    with open(os.path.join(root, "proc/cmdline"), "w") as fh:
        fh.write(cmdline + "\n")
    with open(os.path.join(root, "proc/meminfo"), "w") as fh:
        fh.write("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n"
                 % (memory_mib * 1024, memory_mib * 1000, memory_mib * 1000))
    # The GPU driver, loaded for the hardware with its modprobe.d options.
    gpus = int(env.get("GPU_COUNT") or 0)
    modules = ["nvidia", "nvidia_uvm", "nvidia_modeset"] if gpus else []
    with open(os.path.join(root, "proc/modules"), "w") as fh:
        for m in modules:
            fh.write("%s 16384 0 - Live 0x0000000000000000\n" % m)
    options = {}
    for name in sorted(os.listdir(os.path.join(root, "etc/modprobe.d"))) if os.path.isdir(
            os.path.join(root, "etc/modprobe.d")) else ():
        for line in _read(os.path.join(root, "etc/modprobe.d", name)).splitlines():
            parts = line.split("#")[0].split()
            if len(parts) >= 3 and parts[0] == "options":
                options.setdefault(parts[1].replace("-", "_"), []).extend(parts[2:])
    options.update(initramfs_options(root, kernel))
    for m in modules:
        pdir = os.path.join(root, "sys/module", m, "parameters")
        os.makedirs(pdir, exist_ok=True)
        for opt in options.get(m, []):
            k, _, v = opt.partition("=")
            with open(os.path.join(pdir, k), "w") as fh:
                fh.write(v + "\n")
    dev = os.path.join(root, "dev")
    for name in os.listdir(dev) if os.path.isdir(dev) else ():
        if name.startswith("nvidia"):
            os.unlink(os.path.join(dev, name))
    if gpus:
        _mknod(os.path.join(dev, "nvidiactl"), 195, 255)
        _mknod(os.path.join(dev, "nvidia-modeset"), 195, 254)
        _mknod(os.path.join(dev, "nvidia-uvm"), 511, 0)
        for i in range(gpus):
            _mknod(os.path.join(dev, "nvidia%d" % i), 195, i)
    # cpufreq: the driver's default governor until something writes another.
    if env.get("MACHINE") == "aarch64":
        driver, governors, governor = "cppc_cpufreq", "conservative ondemand userspace powersave performance " \
                                                      "schedutil", "schedutil"
    else:
        driver, governors, governor = "intel_pstate", "performance powersave", "powersave"
    for cpu in range(SIM_CPUS):
        gdir = os.path.join(root, "sys/devices/system/cpu/cpu%d/cpufreq" % cpu)
        os.makedirs(gdir, exist_ok=True)
        for name, value in (("scaling_governor", governor), ("scaling_available_governors", governors),
                            ("scaling_driver", driver)):
            with open(os.path.join(gdir, name), "w") as fh:
                fh.write(value + "\n")
    kdir = os.path.join(root, "sys/kernel")
    os.makedirs(kdir, exist_ok=True)
    for name, value in (("kexec_crash_size", crash_kernel_size(cmdline, memory_mib << 20)),
                        ("kexec_crash_loaded", 0), ("kexec_loaded", 0)):
        with open(os.path.join(kdir, name), "w") as fh:
            fh.write("%d\n" % value)
    with open(os.path.join(root, SIM_DIR, "actions.log"), "a") as fh:
        fh.write("boot %s kernel=%s\n" % (boot_id, kernel))
    init = subprocess.run(["chroot", root, "/bin/sh", INIT], capture_output=True, text=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}, timeout=300)
    if init.returncode != 0:
        raise HostRootError("the simulated init of %s failed (exit %d): %s" % (
            root, init.returncode, (init.stderr or init.stdout).strip()[-500:]))
    return boot_id


# --- kernel defaults that depend on the node, distribution files, the initramfs ------

def memory_sysctl_defaults(memory_kib):
    """What the kernel computes at boot from the node's memory (KiB): the min_free_kbytes
    reserve (sqrt(lowmem * 16), at most 256 MiB), inotify watches (1% of memory, at most
    1048576) and threads-max."""
    try:
        kib = int(memory_kib or 0)
    except ValueError:
        kib = 0
    if kib <= 0:
        return {}
    watch_cost = 1080  # an inotify mark and two inodes, 64-bit 6.8 kernel
    return {
        "vm.min_free_kbytes": str(max(128, min(math.isqrt(kib * 16), 262144))),
        "fs.inotify.max_user_watches": str(max(8192, min(kib * 1024 // 100 // watch_cost, 1048576))),
        "kernel.threads-max": str(max(20, min(kib * 1024 // (8 * 16384), 0x3fffffff))),
    }


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


def initramfs_options(root, kernel):
    """``{module: [options]}`` for the modules the initramfs of ``kernel`` carries: what
    they load with at boot, whatever /etc/modprobe.d says now."""
    for name in ("initrd.img-%s" % kernel, "initramfs-%s.img" % kernel):
        text = _read(os.path.join(root, "boot", name), None)
        if text is None:
            continue
        options = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "module":
                options.setdefault(parts[1], [])
            elif len(parts) >= 3 and parts[0] == "options" and parts[1] in options:
                options[parts[1]].extend(parts[2:])
        return options
    return {}


def reboot_requested(root):
    return os.path.exists(os.path.join(root, REBOOT_REQUEST))


def boot_id(root):
    return _read(os.path.join(root, "proc/sys/kernel/random/boot_id")).strip()


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
