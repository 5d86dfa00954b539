"""The base image every node's host root starts from: a static busybox userland, real
shells, the stand-ins and the unit files, prepared once per simulator; and what
preparing it needs from this machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from nodewright_sim.hostlayout import HERE, UNIT_DIR, HostRootError

# Stand-ins that live outside the PATH, where systemd's units name them.
LIBEXEC = {"systemd-sysctl": "usr/lib/systemd/systemd-sysctl",
           "systemd-modules-load": "usr/lib/systemd/systemd-modules-load"}
# What building host roots and running package scripts in them needs from this
# machine: command -> the Debian package that has it (busybox must be static).
PREREQUISITES = (("bash", "bash"), ("dash", "dash"), ("ldd", "libc-bin"), ("chroot", "coreutils"))
# Busybox applets the image leaves out: they would act on this machine (its mounts,
# processes, network, power), or a stand-in or the simulated init stands for them.
NEVER_LINK = {"halt", "poweroff", "init", "linuxrc", "insmod", "rmmod", "mount", "umount",
              "swapon", "swapoff", "switch_root", "pivot_root", "chroot", "ifconfig", "ip",
              "route", "hwclock", "klogd", "syslogd", "mdev", "losetup", "fdisk", "mkfs.ext2",
              "mke2fs", "mkswap", "reboot", "shutdown", "sysctl", "modprobe", "lsmod", "uname",
              "depmod", "kill", "killall", "killall5", "pkill", "nsenter", "unshare"}


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
