"""Real nodes beside the kwok fleet: a real kubelet and a real container runtime each.

``nodewright-sim up --real-nodes N`` adds N nodes run by the kubelet built from
``k8s.io/kubernetes/cmd/kubelet`` (``simulator/build-binaries.sh``), each with its own
containerd and runc (Debian's packages: a proven pair, security updates from Debian,
and no build time), CNI from Debian's containernetworking-plugins, images built
locally (``ociimage``), a client certificate from the simulator's CA, the GPU labels
and capacity of its pool, and its own host root like the kwok nodes.

Containment, so that nothing outlives ``down`` and nothing reaches the machine:

* network: one network namespace per simulator (``realnet``) holds every bridge, pod
  interface and address; a veth pair links it to the machine;
* mounts: each node boots in a mount namespace of its own, with fresh ``/run``,
  ``/var/lib`` and ``/var/log`` (the paths the kubelet and containerd write without
  asking), so every mount they make disappears with their processes;
* processes: each node's processes, containers included, live under
  ``nodewright-sim/<simulator>/<node>`` in every cgroup hierarchy; stopping a node kills
  what is there and removes the cgroups;
* kernel: the machine-wide settings the kubelet changes (``KUBELET_SYSCTLS``) are
  recorded before the first real node of any simulator starts and restored when the
  last one stops (``<state root>/real-nodes-machine.json``);
* the host: a node pod's host mount is the node's own host root (the connection's
  ``host_path``), and an admission policy refuses, on real nodes, any hostPath outside
  the simulator's state directory.

A reboot (``reboot_node``) stops the node's processes, boots its host root (new boot
ID, which the kubelet reads through ``--boot-id-file``), waits until the control plane
has noticed the node is gone (NotReady), and starts it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from nodewright_sim import hostroot, ociimage, pki
from nodewright_sim.cluster import SimulatorError, bin_dir, pid_alive, state_root

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES_FILE = os.path.join(HERE, "real-node-packages.txt")
CNI_BIN = "/usr/lib/cni"
CNI_PLUGINS = ("bridge", "host-local", "loopback")
KUBELET_SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
# Paths the kubelet and containerd use whatever they are told; each node's mount
# namespace gets fresh ones (tmpfs), with the node's own directories bound where the
# content must survive a reboot.
MASKED = ("/run", "/var/lib", "/var/log")
PERSISTENT = {"/var/lib/kubelet": "kubelet", "/var/lib/cni": "cni/lib"}
DEFAULT_POOL = "h100"
CGROUP_TOP = "nodewright-sim"
NODE_FILE = "realnode.json"
REAL_LABEL = "sim.nodewright.io/real-node"
SERVICE_IP = "10.0.0.1"


def _run(args, check=True, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise SimulatorError("%s failed: %s" % (" ".join(args), (proc.stderr or proc.stdout).strip()[-300:]))
    return proc


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
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env)
        proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + pkgs,
                              capture_output=True, text=True, env=env)
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


def cgroup_hierarchies():
    """The cgroup hierarchies to place node processes in: {mount point: 'v1'|'v2'}."""
    found = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            sep = parts.index("-")
            fstype, mount = parts[sep + 1], parts[4]
            if fstype == "cgroup":
                found[mount] = "v1"
            elif fstype == "cgroup2":
                found[mount] = "v2"
    return found


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
    _run([runc, "spec", "--bundle", bundle])
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
                          timeout=60, stdin=subprocess.DEVNULL)
    subprocess.run([runc, "--root", os.path.join(work, "runc-state"), "delete", "--force",
                    "nodewright-preflight-%d" % os.getpid()], capture_output=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SimulatorError("runc cannot start containers on this machine (%s); real nodes need root with "
                             "namespaces, cgroups and seccomp allowed (e.g. a privileged container), or leave "
                             "out --real-nodes" % (why[-1][:300] if why else "exit %d" % proc.returncode))


# --------------------------------------------------------------------------- machine-wide record

@contextlib.contextmanager
def _machine_lock():
    os.makedirs(state_root(), exist_ok=True)
    with open(os.path.join(state_root(), ".real-nodes.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _machine_file():
    return os.path.join(state_root(), "real-nodes-machine.json")


def _sysctl_path(key):
    return "/proc/sys/" + key.replace(".", "/")


def _read_sysctl(key):
    with open(_sysctl_path(key)) as fh:
        return fh.read().strip()


def _load_machine():
    try:
        with open(_machine_file()) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"users": [], "sysctls": {}}


def _save_machine(record):
    tmp = _machine_file() + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
    os.replace(tmp, _machine_file())


def _live_users(record, leaving=None):
    alive = []
    for name in record.get("users", []):
        if name == leaving:
            continue
        try:
            with open(os.path.join(state_root(), name, "state.json")) as fh:
                pids = (json.load(fh).get("pids") or {}).values()
        except (OSError, ValueError):
            pids = ()
        if any(pid_alive(p) for p in pids):  # a simulator that is still up (or coming up)
            alive.append(name)
    return alive


def claim_machine(sim_name):
    """Record the kernel settings before this simulator's kubelets change them."""
    with _machine_lock():
        record = _load_machine()
        users = _live_users(record)
        if not users:
            record["sysctls"] = {k: _read_sysctl(k) for k in KUBELET_SYSCTLS if os.path.exists(_sysctl_path(k))}
        record["users"] = sorted(set(users) | {sim_name})
        _save_machine(record)
        return record


def release_machine(sim_name):
    """Restore the kernel settings when the last simulator with real nodes stops.
    Returns the settings restored ({} while others still run)."""
    with _machine_lock():
        record = _load_machine()
        if sim_name not in record.get("users", []):
            return {}
        users = _live_users(record, leaving=sim_name)
        restored = {}
        if not users:
            for key, value in record.get("sysctls", {}).items():
                try:
                    if _read_sysctl(key) != value:
                        with open(_sysctl_path(key), "w") as fh:
                            fh.write(value + "\n")
                        restored[key] = value
                except OSError:
                    pass
            try:
                os.unlink(_machine_file())
            except OSError:
                pass
            return restored
        record["users"] = users
        _save_machine(record)
        return restored


# --------------------------------------------------------------------------- cgroups

def node_cgroup(sim_name, node):
    return "/%s/%s/%s" % (CGROUP_TOP, sim_name, node)


def _make_cgroup(mount, kind, rel):
    """Create ``rel`` (``/a/b/c``) in one hierarchy, with what each level needs."""
    path = mount
    for part in rel.strip("/").split("/"):
        parent, path = path, os.path.join(path, part)
        if kind == "v2":
            wanted = open(os.path.join(parent, "cgroup.controllers")).read().split()
            enabled = open(os.path.join(parent, "cgroup.subtree_control")).read().split()
            for c in wanted:
                if c not in enabled and c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb"):
                    try:
                        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as fh:
                            fh.write("+" + c)
                    except OSError:
                        pass
        os.makedirs(path, exist_ok=True)
        if kind == "v1" and os.path.basename(mount) == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                with open(os.path.join(path, f)) as fh:
                    current = fh.read().strip()
                if not current:
                    with open(os.path.join(parent, f)) as src:
                        value = src.read().strip()
                    with open(os.path.join(path, f), "w") as fh:
                        fh.write(value)
    return path


def make_node_cgroups(sim_name, node):
    rel = node_cgroup(sim_name, node)
    for mount, kind in cgroup_hierarchies().items():
        _make_cgroup(mount, kind, rel + "/runtime")


def join_cgroups(rel, pid):
    for mount in cgroup_hierarchies():
        path = os.path.join(mount, rel.strip("/"))
        if os.path.isdir(path):
            with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                fh.write(str(pid))


def cgroup_pids(rel):
    pids = set()
    for mount in cgroup_hierarchies():
        base = os.path.join(mount, rel.strip("/"))
        for dirpath, _dirs, files in os.walk(base):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                        pids.update(int(p) for p in fh.read().split())
                except OSError:
                    pass
    return pids


def kill_cgroup(rel, remove=True, timeout=20):
    """Kill every process under ``rel`` in every hierarchy; remove the cgroups."""
    deadline = time.time() + timeout
    while True:
        pids = cgroup_pids(rel)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.time() > deadline:
            raise SimulatorError("processes %s under cgroup %s did not end" % (sorted(pids)[:10], rel))
        time.sleep(0.1)
    if remove:
        remove_cgroups(rel)


def remove_cgroups(rel):
    for mount in cgroup_hierarchies():
        base = os.path.join(mount, rel.strip("/"))
        for dirpath, _dirs, _files in sorted(os.walk(base), key=lambda t: -len(t[0])):
            for _ in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def remove_empty_parents(sim_name):
    for mount in cgroup_hierarchies():
        for rel in ("%s/%s" % (CGROUP_TOP, sim_name), CGROUP_TOP):
            try:
                os.rmdir(os.path.join(mount, rel))
            except OSError:
                pass


# --------------------------------------------------------------------------- network

def _routes_overlap(net):
    out = _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
    for line in out.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in ("default", "local", "broadcast", "unreachable"):
            dest = line.split()[1] if dest != "default" else ""
        try:
            other = ipaddress.ip_network(dest, strict=False) if dest else None
        except ValueError:
            continue
        if other is not None and other.overlaps(net) and other.prefixlen > 0:
            return True
    return False


def allocate_network():
    """A /16 for this simulator's node IPs and pods that no route on the machine and
    no other simulator uses; returns its index (10.(200+i).0.0/16)."""
    for i in range(50):
        net = ipaddress.ip_network("10.%d.0.0/16" % (200 + i))
        if os.path.exists("/sys/class/net/nws%d" % i) or _routes_overlap(net):
            continue
        return i
    raise SimulatorError("no free network for real nodes in 10.200.0.0/16-10.249.0.0/16; stop other simulators "
                         "with real nodes")


class RealNet(object):
    """The simulator's network namespace, held by ``realnet``."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.dir = os.path.join(cluster.dir, "realnet")

    def start(self, state):
        os.makedirs(self.dir, exist_ok=True)
        with _machine_lock():  # two simulators must not pick the same network
            index = allocate_network()
            veth, peer = "nws%d" % index, "nwsp%d" % index
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
        prefix = "10.%d" % (200 + index)
        state["realnet"] = {"index": index, "veth": veth, "prefix": prefix}
        self.cluster.save(state)
        try:
            log = open(os.path.join(self.cluster.dir, "logs", "realnet.log"), "ab")
            proc = subprocess.Popen([sys.executable, "-m", "nodewright_sim.realnet", self.cluster.dir],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.cluster.dir)
            log.close()
            state["pids"]["realnet"] = proc.pid
            self.cluster.save(state)
            self._wait(os.path.join(self.dir, "netns-ready"), proc, "the real nodes' network namespace")
            pid = proc.pid
            _run(["ip", "link", "set", peer, "netns", str(pid)])
            _run(["ip", "addr", "add", "%s.0.1/24" % prefix, "dev", veth])
            _run(["ip", "link", "set", veth, "up"])
            _run(["ip", "route", "add", "%s.0.0/16" % prefix, "via", "%s.0.2" % prefix, "dev", veth])
            inside = ["nsenter", "--net=/proc/%d/ns/net" % pid, "--"]
            _run(inside + ["ip", "link", "set", "lo", "up"])
            _run(inside + ["ip", "addr", "add", SERVICE_IP + "/32", "dev", "lo"])
            _run(inside + ["ip", "addr", "add", "%s.0.2/24" % prefix, "dev", peer])
            _run(inside + ["ip", "link", "set", peer, "up"])
            _run(inside + ["ip", "route", "add", "default", "via", "%s.0.1" % prefix])
            # Forwarding between the node bridges and the veth, inside the namespace only.
            _run(inside + ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
            port = state["ports"]["apiserver"]
            cfg = {"apiserver_port": port, "listen": [["127.0.0.1", port], [SERVICE_IP, 443]]}
            with open(os.path.join(self.dir, "configured.json"), "w") as fh:
                json.dump(cfg, fh)
            self._wait(os.path.join(self.dir, "listening"), proc, "the API server forwarding of the real nodes")
        except BaseException:
            _run(["ip", "link", "del", veth], check=False)
            raise
        return state["realnet"]

    @staticmethod
    def _wait(path, proc, what, timeout=30):
        deadline = time.time() + timeout
        while not os.path.exists(path):
            if proc.poll() is not None:
                raise SimulatorError("%s did not start (exit %s); see logs/realnet.log" % (what, proc.returncode))
            if time.time() > deadline:
                raise SimulatorError("%s did not start within %ds" % (what, timeout))
            time.sleep(0.05)

    @staticmethod
    def netns_pid(state):
        return (state.get("pids") or {}).get("realnet")


# --------------------------------------------------------------------------- node files

def _link_tree(src, dst):
    """Hard-link the files of ``src`` into ``dst`` (symlinks copied), keeping what is there."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target_dir = os.path.join(dst, rel) if rel != "." else dst
        os.makedirs(target_dir, exist_ok=True)
        for name in list(dirnames) + filenames:
            source, target = os.path.join(dirpath, name), os.path.join(target_dir, name)
            if os.path.islink(source):
                if not os.path.lexists(target):
                    os.symlink(os.readlink(source), target)
                if name in dirnames:
                    dirnames.remove(name)
            elif os.path.isfile(source):
                if os.path.lexists(target):
                    os.unlink(target)
                os.link(source, target)


def python_layer(sim_dir):
    """The machine's Python laid out as a host root has it, prepared once per simulator
    and hard-linked into each real node's host root (like the busybox userland)."""
    layer = os.path.join(sim_dir, "python-root")
    if not os.path.exists(os.path.join(layer, ".ready")):
        shutil.rmtree(layer, ignore_errors=True)
        for d in ("bin", "usr/lib"):
            os.makedirs(os.path.join(layer, d), exist_ok=True)
        _python_into(layer)
        open(os.path.join(layer, ".ready"), "w").close()
    return layer


def _python_into(root):
    """Give a host root the machine's Python (binary, shared libraries, standard
    library), as a real host has: modules run in the chroot with the host's Python."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else os.path.realpath(sys.executable)
    real = os.path.realpath(python)
    out = _run([real, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['stdlib']); "
                            "print('%d.%d' % sys.version_info[:2])"]).stdout.split()
    stdlib, version = out[0], out[1]
    dest_bin = os.path.join(root, "bin")  # usr/bin links to bin in the host roots
    shutil.copy2(real, os.path.join(dest_bin, "python" + version))
    for name in ("python3", "python"):
        link = os.path.join(dest_bin, name)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink("python" + version, link)
    libs = {real}
    target_stdlib = os.path.join(root, "usr/lib/python" + version)
    shutil.copytree(stdlib, target_stdlib, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("test", "tests", "idlelib", "tkinter", "turtledemo",
                                                  "site-packages", "dist-packages", "__pycache__", "ensurepip"))
    for so in glob.glob(os.path.join(stdlib, "lib-dynload", "*.so")):
        libs.add(so)
    for binary in libs:
        out = _run(["ldd", binary], check=False).stdout
        for line in out.splitlines():
            m = re.search(r"(/\S+)\s+\(0x", line)
            if not m:
                continue
            lib = m.group(1)
            target = os.path.join(root, lib.lstrip("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                shutil.copy2(os.path.realpath(lib), target)


def _cni_config(node_dir, index, prefix):
    conf = {"cniVersion": "0.4.0", "name": "nodewright-sim", "plugins": [{
        "type": "bridge", "bridge": "nwbr%d" % index, "isGateway": True, "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s.%d.0/24" % (prefix, index + 1)}]],
                 "routes": [{"dst": "0.0.0.0/0"}]}}]}
    d = os.path.join(node_dir, "cni", "net.d")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "10-nodewright-sim.conflist"), "w") as fh:
        json.dump(conf, fh, indent=2)
    return d


CONTAINERD_CONFIG = """version = 2
root = "{root}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"""


def _kubelet_config(ip, cgroup, pki_dir, node_dir):
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": ip, "port": 10250, "readOnlyPort": 0, "healthzBindAddress": ip, "healthzPort": 10248,
        "tlsCertFile": os.path.join(pki_dir, "kubelet.crt"), "tlsPrivateKeyFile": os.path.join(pki_dir, "kubelet.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": os.path.join(pki_dir, "ca.crt")}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup, "cgroupsPerQOS": True, "failCgroupV1": False,
        "failSwapOn": False, "protectKernelDefaults": False, "makeIPTablesUtilChains": False,
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "podLogsDir": "/var/log/pods", "volumePluginDir": os.path.join(node_dir, "volume-plugins"),
        "resolvConf": os.path.join(node_dir, "resolv.conf"), "clusterDomain": "cluster.local",
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "nodeStatusUpdateFrequency": "4s", "nodeStatusReportFrequency": "1m",
        "nodeLeaseDurationSeconds": 20, "syncFrequency": "10s", "fileCheckFrequency": "20s",
        "shutdownGracePeriod": "0s", "containerLogMaxSize": "1Mi", "containerLogMaxFiles": 2,
        "maxPods": 110, "registerNode": True, "rotateCertificates": False, "serverTLSBootstrap": False,
        "enableDebuggingHandlers": True, "localStorageCapacityIsolation": True,
    }


# --------------------------------------------------------------------------- nodes

class RealNodes(object):
    """The real nodes of one simulator."""

    def __init__(self, cluster, fleet=None):
        self.cluster = cluster
        self._fleet = fleet

    @property
    def fleet(self):
        if self._fleet is None:
            from nodewright_sim.fleet import Fleet
            self._fleet = Fleet(self.cluster)
        return self._fleet

    def node_dir(self, name):
        return os.path.join(self.cluster.dir, "nodes", name)

    def names(self):
        state = self.cluster.load() or {}
        return list((state.get("real_nodes") or {}).get("nodes", []))

    def info(self, name):
        with open(os.path.join(self.node_dir(name), NODE_FILE)) as fh:
            return json.load(fh)

    def _save_info(self, name, info):
        path = os.path.join(self.node_dir(name), NODE_FILE)
        with open(path + ".tmp", "w") as fh:
            json.dump(info, fh, indent=2, sort_keys=True)
        os.replace(path + ".tmp", path)

    # --- up -------------------------------------------------------------------
    def up(self, count, pool=DEFAULT_POOL, timeout=120):
        """Start ``count`` real nodes; on failure everything of them is removed again."""
        from nodewright_sim.fleet import GPUS
        if count < 1:
            return []
        if pool not in GPUS:
            raise SimulatorError("unknown pool %r for real nodes; known pools: %s" % (pool, ", ".join(sorted(GPUS))))
        if GPUS[pool]["arch"] != _machine_arch():
            raise SimulatorError("real nodes run on this machine (%s); pool %s is %s: choose an %s pool"
                                 % (_machine_arch(), pool, GPUS[pool]["arch"], _machine_arch()))
        state = self.cluster.load()
        preflight(self.cluster.dir)
        work = tempfile.mkdtemp(prefix="preflight-", dir=self.cluster.dir)
        probe_cg = "/%s/%s/preflight" % (CGROUP_TOP, self.cluster.name)
        try:
            runc_smoke_test(work, probe_cg)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            kill_cgroup(probe_cg)
        claim_machine(self.cluster.name)
        state["real_nodes"] = {"nodes": [], "pool": pool}
        self.cluster.save(state)
        RealNet(self.cluster).start(state)
        images = ociimage.build_base_images(os.path.join(self.cluster.dir, "images"))
        base = hostroot.BaseImage(os.path.join(self.cluster.dir, "base-root")).prepare()
        names = []
        for i in range(count):
            name = "%s-real-%04d" % (pool, i)
            state["real_nodes"]["nodes"].append(name)
            self.cluster.save(state)
            self._create(name, i, pool, base, images, state)
            names.append(name)
        self.isolate_hosts(names)
        for name in names:
            self.start_node(name)
        self.wait_ready(names, timeout)
        for name in names:
            self.set_gpu_capacity(name)
        return names

    def _create(self, name, index, pool, base, images, state):
        from nodewright_sim.fleet import GPUS, node_manifest
        g = GPUS[pool]
        d = self.node_dir(name)
        root = os.path.join(d, "root")
        boot_id = hostroot.create(root, base, {
            "name": name, "arch": g["arch"], "gpu_name": g["smi"], "compute_cap": "%s.%s" % (g["major"], g["minor"]),
            "gpu_count": g["count"], "gpu_memory_mib": g["memory"]})
        _link_tree(python_layer(self.cluster.dir), root)
        os.unlink(os.path.join(root, ".ready"))
        with open(os.path.join(root, "etc/machine-id"), "w") as fh:
            fh.write(boot_id.replace("-", "") + "\n")
        prefix = state["realnet"]["prefix"]
        ip = "%s.0.%d" % (prefix, 10 + index)
        _run(["nsenter", "--net=/proc/%d/ns/net" % RealNet.netns_pid(state), "--", "ip", "addr", "add", ip + "/24",
              "dev", "nwsp%d" % state["realnet"]["index"]])
        pki_dir = os.path.join(d, "pki")
        os.makedirs(pki_dir, exist_ok=True)
        sim_pki = os.path.join(self.cluster.dir, "pki")
        shutil.copy(os.path.join(sim_pki, "ca.crt"), os.path.join(pki_dir, "ca.crt"))
        pki.issue(sim_pki, os.path.join(pki_dir, "node"), "system:node:%s" % name, "system:nodes")
        pki.issue(sim_pki, os.path.join(pki_dir, "kubelet"), "system:node:%s" % name, "system:nodes",
                  server_names=(ip, name))
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "sim", "cluster": {"server": self.cluster.load()["server"],
                                                     "certificate-authority": os.path.join(pki_dir, "ca.crt")}}],
            "users": [{"name": name, "user": {"client-certificate": os.path.join(pki_dir, "node.crt"),
                                              "client-key": os.path.join(pki_dir, "node.key")}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": name}}], "current-context": "sim"}
        with open(os.path.join(d, "kubelet.kubeconfig"), "w") as fh:
            json.dump(kubeconfig, fh, indent=2)
        for sub in ("kubelet", "cni/lib", "containerd/root", "volume-plugins", "logs"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        cni_conf = _cni_config(d, index, prefix)
        with open(os.path.join(d, "containerd", "config.toml"), "w") as fh:
            fh.write(CONTAINERD_CONFIG.format(root=os.path.join(d, "containerd", "root"), pause=ociimage.PAUSE_IMAGE,
                                              runc=runtime_binaries()["runc"], cni_bin=CNI_BIN, cni_conf=cni_conf))
        try:
            resolv = open("/etc/resolv.conf").read()
        except OSError:
            resolv = ""
        with open(os.path.join(d, "resolv.conf"), "w") as fh:
            fh.write(resolv)
        cgroup = node_cgroup(self.cluster.name, name)
        boot_id_file = os.path.join(root, "proc/sys/kernel/random/boot_id")
        with open(os.path.join(d, "kubelet-config.json"), "w") as fh:
            json.dump(_kubelet_config(ip, cgroup, pki_dir, d), fh, indent=2)
        info = {"name": name, "index": index, "ip": ip, "cgroup": cgroup, "pool": pool, "root": root,
                "boot_id_file": boot_id_file, "images": images, "imported": False, "pid": None, "boots": 0}
        self._save_info(name, info)
        body = node_manifest(name, pool, index, boot_id, self.fleet._k8s_version(), root, managed=False)
        body["metadata"]["labels"]["type"] = "kubelet"
        body["metadata"]["labels"][REAL_LABEL] = "true"
        body["metadata"]["annotations"].pop("sim.nodewright.io/boot-id", None)
        body.pop("status", None)
        self.fleet.core.create_node(body)

    def isolate_hosts(self, names):
        """An admission policy: a pod on a real node (or not yet scheduled) may mount no
        hostPath outside the simulator's state directory, so nothing in a pod reaches
        this machine's files."""
        from kubernetes import client
        prefix = os.path.abspath(self.cluster.dir) + "/"
        name = "nodewright-sim-host-isolation"
        nodes = ", ".join("'%s'" % n for n in names)
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                        "operations": ["CREATE"], "resources": ["pods"]}]},
                "matchConditions": [{"name": "on-a-real-node-or-unscheduled", "expression":
                                     "!has(object.spec.nodeName) || object.spec.nodeName == '' || "
                                     "object.spec.nodeName in [%s]" % nodes}],
                "validations": [{
                    "expression": "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath) || "
                                  "(v.hostPath.path.startsWith('%s') && !v.hostPath.path.contains('..')))" % prefix,
                    "message": "the simulator's real nodes run on the machine of the simulator: a hostPath must be "
                               "below %s (a node's host root is nodes/<node>/root there; the inventory's "
                               "connection: k8s sets it for node pods)" % prefix}]}}
        binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                   "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
        adm = client.AdmissionregistrationV1Api(self.fleet.api)
        adm.create_validating_admission_policy(policy)
        adm.create_validating_admission_policy_binding(binding)
        # The API server applies a policy once it has type-checked it.
        deadline = time.time() + 30
        probe = {"metadata": {"name": "nodewright-sim-isolation-probe"}, "spec": {
            "nodeName": names[0], "containers": [{"name": "c", "image": ociimage.BUSYBOX_IMAGE}],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}
        while time.time() < deadline:
            try:
                self.fleet.core.create_namespaced_pod("default", probe, dry_run="All")
            except client.ApiException as exc:
                if exc.status in (403, 422) and "ValidatingAdmissionPolicy" in (exc.body or ""):
                    return
            time.sleep(0.2)
        raise SimulatorError("the host isolation policy of the real nodes did not take effect within 30s")

    # --- one node's processes ----------------------------------------------------
    def start_node(self, name):
        """Boot a node: containerd and the kubelet in the node's own mount namespace,
        in the simulator's network namespace, under the node's cgroups."""
        info = self.info(name)
        state = self.cluster.load()
        netns = RealNet.netns_pid(state)
        if not netns or not pid_alive(netns):
            raise SimulatorError("the real nodes' network namespace is gone; run `nodewright-sim down` and up again")
        make_node_cgroups(self.cluster.name, name)
        d = self.node_dir(name)
        for f in ("booted", "boot-failed"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(d, f))
        log = open(os.path.join(d, "logs", "boot.log"), "ab")
        proc = subprocess.Popen(["nsenter", "--net=/proc/%d/ns/net" % netns, "--", sys.executable, "-m",
                                 "nodewright_sim.realnodes", "boot", d, bin_dir()],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=d)
        log.close()
        info["pid"] = proc.pid
        info["boots"] += 1
        self._save_info(name, info)
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(d, "booted")):
            if proc.poll() is not None or os.path.exists(os.path.join(d, "boot-failed")):
                raise SimulatorError("real node %s did not boot: %s" % (name, _tail(os.path.join(d, "logs", "boot.log"))))
            if time.time() > deadline:
                raise SimulatorError("real node %s did not boot within 60s: %s"
                                     % (name, _tail(os.path.join(d, "logs", "boot.log"))))
            time.sleep(0.1)
        if not info["imported"]:
            for archive in info["images"]:
                self.import_image(name, archive)
            info = self.info(name)
            info["imported"] = True
            self._save_info(name, info)
        return proc.pid

    def _ns_command(self, name, args):
        info = self.info(name)
        pid = info.get("pid")
        if not pid or not pid_alive(pid):
            raise SimulatorError("real node %s is not running" % name)
        netns = RealNet.netns_pid(self.cluster.load())
        return ["nsenter", "--mount=/proc/%d/ns/mnt" % pid, "--net=/proc/%d/ns/net" % netns, "--"] + list(args)

    def ctr(self, name, *args, check=True, timeout=600):
        ctr = runtime_binaries()["ctr"]
        return _run(self._ns_command(name, [ctr, "--address", "/run/containerd/containerd.sock", "--namespace",
                                             "k8s.io"] + list(args)), check=check, timeout=timeout)

    def import_image(self, name, archive):
        """Load an OCI archive (``ociimage.build``) into the node's containerd."""
        self.ctr(name, "images", "import", archive)

    def stop_node(self, name):
        """Power a node off: every process of it, its containers included, ends."""
        info = self.info(name)
        kill_cgroup(info["cgroup"])
        if info.get("pid"):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(info["pid"], os.WNOHANG)
        info["pid"] = None
        self._save_info(name, info)

    def node_ready(self, name):
        node = self.fleet.core.read_node(name)
        return node, any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def wait_ready(self, names, timeout=120, boot_ids=None):
        deadline = time.time() + timeout
        pending = list(names)
        while pending and time.time() < deadline:
            for name in list(pending):
                try:
                    node, ready = self.node_ready(name)
                except Exception:
                    continue
                want = (boot_ids or {}).get(name)
                if ready and (not want or node.status.node_info.boot_id == want):
                    pending.remove(name)
                info = self.info(name)
                if not info.get("pid") or not pid_alive(info["pid"]):
                    raise SimulatorError("real node %s stopped while starting: %s"
                                         % (name, _tail(os.path.join(self.node_dir(name), "logs", "kubelet.log"))))
            time.sleep(0.2)
        if pending:
            raise SimulatorError("real nodes %s were not Ready within %ds: %s" % (
                ", ".join(pending), timeout, _tail(os.path.join(self.node_dir(pending[0]), "logs", "kubelet.log"))))

    def set_gpu_capacity(self, name):
        """The node's pool's GPUs as an extended resource, as the device plugin would."""
        from nodewright_sim.fleet import GPUS
        count = str(GPUS[self.info(name)["pool"]]["count"])
        patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": count},
                 {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": count}]
        self.fleet.core.patch_node_status(name, patch)

    def reboot(self, name, delay=1.0, timeout=120):
        """Stop the node, boot its host root (new boot ID), wait until the control plane
        marks it NotReady, start it again and wait for Ready with the new boot ID."""
        self.stop_node(name)
        root = self.info(name)["root"]
        new_id = hostroot.boot(root)
        time.sleep(delay)
        deadline = time.time() + timeout
        while time.time() < deadline:
            _node, ready = self.node_ready(name)
            if not ready:
                break
            time.sleep(0.5)
        self.start_node(name)
        self.wait_ready([name], timeout, boot_ids={name: new_id})
        self.set_gpu_capacity(name)
        return new_id

    # --- down -----------------------------------------------------------------------
    def down(self, state):
        """Stop every real node and the network namespace; restore the machine."""
        report = {"nodes": [], "restored_sysctls": {}}
        nodes_dir = os.path.join(self.cluster.dir, "nodes")
        for path in glob.glob(os.path.join(nodes_dir, "*", NODE_FILE)):
            name = os.path.basename(os.path.dirname(path))
            try:
                self.stop_node(name)
            except (OSError, ValueError, SimulatorError):
                pass
            report["nodes"].append(name)
        # Whatever is left under the simulator's cgroups (a node that was being created).
        sim_cg = "/%s/%s" % (CGROUP_TOP, self.cluster.name)
        try:
            kill_cgroup(sim_cg)
        except SimulatorError as exc:  # the rest of down goes on; status names what is left
            report["left"] = str(exc)
        remove_empty_parents(self.cluster.name)
        net = state.get("realnet") or {}
        pid = RealNet.netns_pid(state)
        if pid and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.time() + 10
            while pid_alive(pid) and time.time() < deadline:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
        if net.get("veth") and os.path.exists("/sys/class/net/%s" % net["veth"]):
            _run(["ip", "link", "del", net["veth"]], check=False)
        unmount_under(self.cluster.dir)
        report["restored_sysctls"] = release_machine(self.cluster.name)
        return report

    def status(self):
        out = {}
        for name in self.names():
            try:
                info = self.info(name)
            except (OSError, ValueError):
                continue
            pid = info.get("pid")
            entry = {"ip": info["ip"], "pid": pid, "running": bool(pid and pid_alive(pid)), "boots": info["boots"],
                     "cgroup": info["cgroup"], "host_root": info["root"]}
            pids = cgroup_pids(info["cgroup"])
            entry["processes"] = len(pids)
            entry["rss_mib"] = _rss_mib(pids)
            out[name] = entry
        return out


def reboot_real_node(state_dir, name, delay):
    """The supervisor's reboot of a real node (a reboot requested in its host root)."""
    from nodewright_sim.cluster import Cluster
    cluster = Cluster(os.path.basename(state_dir.rstrip("/")))
    cluster.dir, cluster.state_file = state_dir, os.path.join(state_dir, "state.json")
    return RealNodes(cluster).reboot(name, delay=delay)


def unmount_under(path):
    """Unmount anything left mounted below ``path`` in this mount namespace."""
    prefix = os.path.realpath(path) + "/"
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split()[4] for line in fh]
    from nodewright_sim.realnet import _libc
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        _libc.umount2(m.encode(), 2)  # MNT_DETACH


def _rss_mib(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total // 1024


def _machine_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def _tail(path, lines=5):
    try:
        with open(path, errors="replace") as fh:
            text = fh.read().splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return " | ".join(t.strip()[:300] for t in text) or "(empty log)"


# --------------------------------------------------------------------------- the node's boot process

MS_BIND, MS_REC, MS_PRIVATE, MS_SHARED = 4096, 16384, 1 << 18, 1 << 20


def _mount(source, target, fstype=None, flags=0, data=None):
    """mount(2) itself: the mount program would record its mounts in the machine's /run."""
    from nodewright_sim.realnet import _libc
    import ctypes
    if _libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                   ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (source, target, os.strerror(err)))


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
            print("containerd did not start: %s" % _tail(os.path.join(logs, "containerd.log")), flush=True)
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
    print("usage: python -m nodewright_sim.realnodes boot NODE_DIR BIN_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
