"""Mounts under the simulator's host roots: a node's root as an overlay of its
template, a tmpfs for the nodes' own layers, and taking them down again."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import shutil

from nodewright_sim.hostlayout import HostRootError

MNT_DETACH = 2


def overlay_safe(path):
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
