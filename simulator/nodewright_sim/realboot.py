"""One boot of a real node, in a process of its own (``RealNodes.start_node`` starts it
in the simulator's network namespace):

    python -m nodewright_sim.realboot boot NODE_DIR BIN_DIR

It joins the node's cgroups, enters a mount namespace of its own with fresh ``/run``,
``/var/lib`` and ``/var/log`` (``MASKED``: the paths the kubelet and containerd write
without asking, so every mount they make disappears with their processes; the node's
own directories bound where the content must survive a reboot), starts containerd,
then the kubelet, and ends when either ends, or on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from nodewright_sim.realcgroups import join_cgroups
from nodewright_sim.realnodefiles import NODE_FILE, log_tail

# Paths the kubelet and containerd use whatever they are told; each node's mount
# namespace gets fresh ones (tmpfs), with the node's own directories bound where the
# content must survive a reboot.
MASKED = ("/run", "/var/lib", "/var/log")
PERSISTENT = {"/var/lib/kubelet": "kubelet", "/var/lib/cni": "cni/lib"}
MS_BIND, MS_REC, MS_PRIVATE, MS_SHARED = 4096, 16384, 1 << 18, 1 << 20


def _mount(source, target, fstype=None, flags=0, data=None):
    """mount(2) itself: the mount program would record its mounts in the machine's /run."""
    from nodewright_sim.realnet import _libc
    import ctypes
    if _libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                   ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (source, target, os.strerror(err)))


def unmount_under(path):
    """Unmount anything left mounted below ``path`` in this mount namespace."""
    prefix = os.path.realpath(path) + "/"
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split()[4] for line in fh]
    from nodewright_sim.realnet import _libc
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        _libc.umount2(m.encode(), 2)  # MNT_DETACH


def boot_main(node_dir, binaries):
    """Run one boot of a node (in the simulator's network namespace already): join the
    node's cgroups, enter a new mount namespace, start containerd, then the kubelet;
    end when either ends, or on SIGTERM."""
    from nodewright_sim import realnet
    with open(os.path.join(node_dir, NODE_FILE)) as fh:
        info = json.load(fh)
    join_cgroups(info["cgroup"] + "/runtime", os.getpid())
    realnet.unshare(realnet.CLONE_NEWNS)
    # Private first, so nothing mounted here propagates to the machine; then shared within
    # this namespace, as the kubelet's HostToContainer mounts need.
    _mount(None, "/", flags=MS_REC | MS_PRIVATE)
    _mount(None, "/", flags=MS_REC | MS_SHARED)
    for masked in MASKED:
        _mount("tmpfs", masked, "tmpfs", data="mode=755")
    for target, source in PERSISTENT.items():
        os.makedirs(target, exist_ok=True)
        _mount(os.path.join(node_dir, source), target, flags=MS_BIND)
    os.makedirs("/run/containerd", exist_ok=True)
    logs = os.path.join(node_dir, "logs")
    procs = []

    def stop(*_):
        for p in reversed(procs):
            with contextlib.suppress(OSError):
                p.terminate()
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    with open(os.path.join(logs, "containerd.log"), "ab") as log:
        procs.append(subprocess.Popen([shutil.which("containerd"), "--config",
                                       os.path.join(node_dir, "containerd", "config.toml")],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    deadline = time.time() + 30
    while not os.path.exists("/run/containerd/containerd.sock"):
        if procs[0].poll() is not None or time.time() > deadline:
            open(os.path.join(node_dir, "boot-failed"), "w").close()
            print("containerd did not start: %s" % log_tail(os.path.join(logs, "containerd.log")), flush=True)
            return 1
        time.sleep(0.05)
    with open(os.path.join(logs, "kubelet.log"), "ab") as log:
        procs.append(subprocess.Popen([
            os.path.join(binaries, "kubelet"), "--config", os.path.join(node_dir, "kubelet-config.json"),
            "--kubeconfig", os.path.join(node_dir, "kubelet.kubeconfig"), "--hostname-override", info["name"],
            "--node-ip", info["ip"], "--root-dir", "/var/lib/kubelet",
            "--boot-id-file", info["boot_id_file"],
            "--machine-id-file", os.path.join(info["root"], "etc/machine-id"), "--v=1"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    open(os.path.join(node_dir, "booted"), "w").close()
    while all(p.poll() is None for p in procs):
        time.sleep(0.5)
    for p in procs:
        print("%s exited: %s" % (p.args[0], p.poll()), flush=True)
    stop()


def _main(argv):
    if argv[:1] == ["boot"]:
        return boot_main(argv[1], argv[2])
    print("usage: python -m nodewright_sim.realboot boot NODE_DIR BIN_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
