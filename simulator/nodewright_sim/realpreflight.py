"""What this machine needs before real nodes start: root and its capabilities, the
container runtime (Debian's containerd, runc and CNI plugins, installed here when it
can be), the kubelet binary, writable cgroups, a state directory outside the paths
each node masks; and a runc smoke test. Each lack is one SimulatorError naming the
cause and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from nodewright_sim import ociimage
from nodewright_sim.cluster import SimulatorError, bin_dir
from nodewright_sim.realboot import MASKED
from nodewright_sim.realcgroups import cgroup_hierarchies
from nodewright_sim.realmachine import run_command

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES_FILE = os.path.join(HERE, "real-node-packages.txt")
CNI_BIN = "/usr/lib/cni"
CNI_PLUGINS = ("bridge", "host-local", "loopback")


def packages():
    with open(PACKAGES_FILE) as fh:
        return [line.split("#")[0].strip() for line in fh if line.split("#")[0].strip()]


# --------------------------------------------------------------------------- preflight

def runtime_binaries():
    """containerd, its shim, ctr and runc: where they are, or None each."""
    found = {}
    for name in ("containerd", "containerd-shim-runc-v2", "ctr"):
        found[name] = shutil.which(name)
    found["runc"] = os.environ.get("NODEWRIGHT_SIM_RUNC") or shutil.which("runc")
    return found


def _missing_runtime():
    found = runtime_binaries()
    missing = [n for n, p in found.items() if not p]
    missing += ["CNI plugin %s" % p for p in CNI_PLUGINS if not os.path.exists(os.path.join(CNI_BIN, p))]
    return missing


def install_packages():
    """Install the Debian packages real nodes need (root and apt-get only); services
    the packages would start stay stopped."""
    pkgs = packages()
    if os.geteuid() != 0 or not shutil.which("apt-get") or os.environ.get("NODEWRIGHT_SIM_NO_INSTALL"):
        return False
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = "/usr/sbin/policy-rc.d"
    created = False
    if not os.path.exists(policy):
        with open(policy, "w") as fh:
            fh.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
        created = True
    try:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, check=False)
        proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + pkgs,
                              capture_output=True, text=True, env=env, check=False)
    finally:
        if created:
            os.unlink(policy)
    return proc.returncode == 0


def _cap_eff():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def preflight(state_dir):
    """Every reason real nodes cannot run here, as one SimulatorError naming the cause
    and the fix; installs the runtime packages first when it can."""
    if os.geteuid() != 0:
        raise SimulatorError("real nodes need root (containerd, cgroups, namespaces); run nodewright-sim as "
                             "root, or leave out --real-nodes")
    needed = {21: "CAP_SYS_ADMIN", 12: "CAP_NET_ADMIN", 18: "CAP_SYS_CHROOT"}
    caps = _cap_eff()
    lacking = [name for bit, name in needed.items() if not caps & (1 << bit)]
    if lacking:
        raise SimulatorError("real nodes need the capabilities %s, which this process lacks; run as root with "
                             "all capabilities (a privileged container), or leave out --real-nodes"
                             % ", ".join(lacking))
    for tool in ("nsenter", "ip"):
        if not shutil.which(tool):
            raise SimulatorError("real nodes need %s (Debian: util-linux, iproute2); install it" % tool)
    kubelet = os.path.join(bin_dir(), "kubelet")
    if not os.path.exists(kubelet):
        raise SimulatorError("missing %s; run `make binaries` (one-time build from the Go module proxy)" % kubelet)
    if _missing_runtime():
        install_packages()
    missing = _missing_runtime()
    if missing:
        raise SimulatorError("real nodes need %s, which are missing: install Debian's %s (apt-get install %s), "
                             "or leave out --real-nodes" % (", ".join(missing), ", ".join(packages()),
                                                            " ".join(packages())))
    for masked in MASKED:
        if os.path.realpath(state_dir).startswith(masked + "/"):
            raise SimulatorError("the simulator's state directory %s is under %s, which each real node replaces "
                                 "with its own; set NODEWRIGHT_SIM_DIR elsewhere" % (state_dir, masked))
    hier = cgroup_hierarchies()
    v1 = [m for m, v in hier.items() if v == "v1"]
    if not hier:
        raise SimulatorError("no cgroup file system is mounted; mount cgroup2 at /sys/fs/cgroup (or the v1 "
                             "controllers), or leave out --real-nodes")
    if v1:
        names = {os.path.basename(m) for m in v1}
        lacking = [c for c in ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices") if c not in names]
        if lacking:
            raise SimulatorError("the cgroup v1 controllers %s are not mounted under /sys/fs/cgroup; mount them "
                                 "(or boot with cgroup v2), or leave out --real-nodes" % ", ".join(lacking))
    else:
        unified = [m for m, v in hier.items() if v == "v2"][0]
        available = open(os.path.join(unified, "cgroup.controllers")).read().split()
        lacking = [c for c in ("cpu", "memory", "pids", "cpuset") if c not in available]
        if lacking:
            raise SimulatorError("the cgroup v2 controllers %s are not available at %s; enable them (a "
                                 "privileged container with its own cgroup namespace), or leave out --real-nodes"
                                 % (", ".join(lacking), unified))
    for mount in hier:
        if not os.access(mount, os.W_OK):
            raise SimulatorError("cgroup hierarchy %s is read-only here; real nodes need to create cgroups (run "
                                 "in a privileged container), or leave out --real-nodes" % mount)


def runc_smoke_test(work, cgroup):
    """Start one container with runc; a machine where that fails gets the reason."""
    runc = runtime_binaries()["runc"]
    bundle = os.path.join(work, "bundle")
    rootfs = ociimage.busybox_tree(os.path.join(bundle, "rootfs"))
    run_command([runc, "spec", "--bundle", bundle])
    with open(os.path.join(bundle, "config.json")) as fh:
        spec = json.load(fh)
    spec["process"]["args"] = ["/bin/true"]
    spec["process"]["terminal"] = False
    spec["root"]["readonly"] = True
    spec["linux"]["cgroupsPath"] = cgroup
    with open(os.path.join(bundle, "config.json"), "w") as fh:
        json.dump(spec, fh)
    proc = subprocess.run([runc, "--root", os.path.join(work, "runc-state"), "run", "--bundle", bundle,
                           "nodewright-preflight-%d" % os.getpid()], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)
    subprocess.run([runc, "--root", os.path.join(work, "runc-state"), "delete", "--force",
                    "nodewright-preflight-%d" % os.getpid()], capture_output=True, check=False)
    shutil.rmtree(rootfs, ignore_errors=True)
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SimulatorError("runc cannot start containers on this machine (%s); real nodes need root with "
                             "namespaces, cgroups and seccomp allowed (e.g. a privileged container), or leave "
                             "out --real-nodes" % (why[-1][:300] if why else "exit %d" % proc.returncode))
