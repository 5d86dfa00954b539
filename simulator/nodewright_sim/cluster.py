"""Start, stop and inspect the simulator's control plane.

Processes: etcd, kube-apiserver (RBAC on, loopback only), kube-controller-manager,
kube-scheduler, kwok, and the simulator's supervisor (which performs node reboots).
All state lives in one directory per simulator (``state.json`` records ports and
pids); ``down`` stops every process it recorded and removes the directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from nodewright_sim import pki

HERE = os.path.dirname(os.path.abspath(__file__))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
CONTROLLERS = ("deployment-controller,replicaset-controller,job-controller,disruption-controller,"
               "garbage-collector-controller,node-lifecycle-controller,taint-eviction-controller,"
               "namespace-controller,serviceaccount-controller,serviceaccount-token-controller,"
               "pod-garbage-collector-controller,daemonset-controller,ttl-after-finished-controller,"
               "endpointslice-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller")


class SimulatorError(RuntimeError):
    """A simulator operation failed; the message says what to do."""


class PortTaken(SimulatorError):
    """A process could not listen on the port picked for it: another program took that
    port between the pick and the bind (simulators starting side by side)."""


# Start-ups that lose a port picked for them to another program are tried again with new ports.
START_ATTEMPTS = 3


# kwok renews a node's Lease every quarter of its duration; the node lifecycle
# controller marks a node Unknown when no renewal came for its grace period.
LEASE_RENEWALS_PER_SECOND = 50
KUBELET_LEASE_SECONDS = 40


def heartbeat_settings(fleet_size):
    """(node lease seconds, node-monitor grace seconds) for a fleet of ``fleet_size``
    kwok nodes. Up to 500 nodes a kubelet's: renewed every 10 s, Unknown after 20 s
    without. A larger fleet renews less often, so that all its renewals together stay
    about LEASE_RENEWALS_PER_SECOND (5,000 nodes renewing every 10 s write 500 Leases a
    second, which is more than a small machine's API server keeps up with: nodes then
    flap between Ready and Unknown); the grace stays twice the renewal interval."""
    renew = max(KUBELET_LEASE_SECONDS // 4, -(-int(fleet_size or 0) // LEASE_RENEWALS_PER_SECOND))
    return 4 * renew, 2 * renew


def cache_dir():
    return os.environ.get("NODEWRIGHT_CACHE") or os.path.expanduser("~/.cache/nodewright")


def bin_dir():
    return os.environ.get("NODEWRIGHT_SIM_BIN") or os.path.join(cache_dir(), "bin")


def state_root():
    return os.environ.get("NODEWRIGHT_SIM_DIR") or os.path.expanduser("~/.local/state/nodewright-sim")


def state_dir(name):
    return os.path.join(state_root(), name)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def rss_kib(pids):
    """Resident memory of ``pids`` together, in KiB (a process that has ended counts 0)."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % int(pid)) as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            pass
    return total


def tree_pids(root_pid):
    """``root_pid`` and all its descendants, from /proc."""
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    found, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def check_binaries():
    """Each binary must exist and run; returns {name: version line}."""
    versions = {}
    missing = []
    for name in BINARIES:
        path = os.path.join(bin_dir(), name)
        if not os.path.exists(path):
            missing.append(name)
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except OSError as exc:
            raise SimulatorError("%s is broken (%s); delete it and run `make binaries` to rebuild" % (path, exc))
        text = (out.stdout + out.stderr).strip()
        if out.returncode != 0 or not text:
            raise SimulatorError("%s does not run (%s); delete it and run `make binaries` to rebuild"
                                 % (path, text[-200:] or "exit %d" % out.returncode))
        versions[name] = text.splitlines()[0]
    if missing:
        raise SimulatorError("missing simulator binaries in %s: %s; run `make binaries` (one-time build "
                             "from the Go module proxy)" % (bin_dir(), ", ".join(missing)))
    return versions


class Cluster(object):
    """One simulator instance, identified by name."""

    def __init__(self, name="default"):
        self.name = name
        self.dir = state_dir(name)
        self.state_file = os.path.join(self.dir, "state.json")

    # --- state -------------------------------------------------------------
    def load(self):
        try:
            with open(self.state_file) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def save(self, state):
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
        os.replace(tmp, self.state_file)

    @property
    def kubeconfig(self):
        return os.path.join(self.dir, "kubeconfig")

    def running(self):
        state = self.load()
        if not state:
            return False
        return any(pid_alive(p) for p in state.get("pids", {}).values())

    # --- start -------------------------------------------------------------
    def up(self, apiserver_port=None, wait_timeout=120, node_grace_seconds=None, eviction_seconds=30,
           reboot_delay=3.0, kubelet_access=False, fleet_size=0):
        """``fleet_size``: the most kwok nodes this simulator will have; it sets how often
        they renew their Leases (``heartbeat_settings``). ``node_grace_seconds``: the
        node lifecycle controller's grace period, when not the one that goes with it."""
        if self.running():
            raise SimulatorError("simulator %r is already running (kubeconfig %s); run `nodewright-sim down"
                                 "%s` first, or use another --name" % (
                                     self.name, self.kubeconfig, "" if self.name == "default" else
                                     " --name " + self.name))
        if os.path.exists(self.dir):
            self._remove_dir(strict=True)  # left over by a crash: nothing of it is alive
        if apiserver_port and port_in_use(apiserver_port):
            raise SimulatorError("port %d is already in use on 127.0.0.1; choose another --port or leave it "
                                 "out to pick a free one" % apiserver_port)
        versions = check_binaries()
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        lease_seconds, grace = heartbeat_settings(fleet_size)
        state = {"name": self.name, "pids": {}, "versions": versions, "reboot_delay": reboot_delay,
                 "started": time.time(), "kubelet_access": kubelet_access, "fleet_size": int(fleet_size or 0),
                 "node_lease_seconds": lease_seconds,
                 "node_grace_seconds": grace if node_grace_seconds is None else node_grace_seconds}
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(state, apiserver_port, wait_timeout, state["node_grace_seconds"], eviction_seconds)
                return state
            except PortTaken:
                self._stop_pids(state)
                if attempt == START_ATTEMPTS:
                    logs = self._log_tails(state)
                    self._remove_dir()
                    raise SimulatorError("the ports picked for the simulator were taken by other programs %d times "
                                         "in a row%s" % (START_ATTEMPTS, logs))
                # Afresh: new ports, an empty etcd, new logs.
                self._remove_dir()
                os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
                state["pids"] = {}
            except BaseException as exc:
                logs = self._log_tails(state)
                self._stop_pids(state)
                self._remove_dir()
                if isinstance(exc, SimulatorError):
                    raise SimulatorError("%s%s" % (exc, logs))
                raise
        return state

    def _spawn(self, state, name, args):
        log = open(os.path.join(self.dir, "logs", name + ".log"), "ab")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.dir)
        log.close()
        state["pids"][name] = proc.pid
        state.setdefault("args", {})[name] = list(args)
        self.save(state)
        return proc

    def restart(self, name, down_seconds=0.0, wait_timeout=120):
        """Stop one control-plane process and start it again with the same arguments: an
        API server that restarts under a running rollout, say. Returns the seconds it was
        down."""
        state = self.load()
        if state is None or not self.running():
            raise SimulatorError("simulator %r is not running" % self.name)
        args = (state.get("args") or {}).get(name)
        if not args:
            raise SimulatorError("%s is not a process of simulator %r that can be restarted (%s)"
                                 % (name, self.name, ", ".join(sorted(state.get("args") or {})) or "none"))
        started = time.time()
        self._stop_pids(dict(state, pids={name: state["pids"][name]}))
        time.sleep(max(0.0, down_seconds))
        self._spawn(state, name, args)
        if name == "kube-apiserver":
            self._wait_http(state, name, state["server"] + "/readyz", time.time() + wait_timeout, tls=True)
        return time.time() - started

    def _start(self, state, apiserver_port, wait_timeout, node_grace_seconds, eviction_seconds):
        d = self.dir
        b = bin_dir()
        pki_dir = os.path.join(d, "pki")
        pki.make_pki(pki_dir)
        ports = {"etcd": free_port(), "etcd_peer": free_port(), "apiserver": apiserver_port or free_port(),
                 "controller_manager": free_port(), "scheduler": free_port(), "kwok": free_port()}
        state["ports"] = ports
        state["server"] = "https://127.0.0.1:%d" % ports["apiserver"]
        for client in ("admin", "controller-manager", "scheduler", "kwok"):
            self._write_kubeconfig(os.path.join(d, "%s.kubeconfig" % client), state["server"], client)
        shutil.copy(os.path.join(d, "admin.kubeconfig"), self.kubeconfig)
        self.save(state)
        deadline = time.time() + wait_timeout

        etcd_url = "http://127.0.0.1:%d" % ports["etcd"]
        self._spawn(state, "etcd", [
            os.path.join(b, "etcd"), "--name", "sim", "--data-dir", os.path.join(d, "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", "http://127.0.0.1:%d" % ports["etcd_peer"],
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ports["etcd_peer"],
            "--initial-cluster", "sim=http://127.0.0.1:%d" % ports["etcd_peer"],
            "--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592", "--log-level=warn"])
        self._wait_http(state, "etcd", etcd_url + "/health", deadline)

        p = pki_dir + "/"
        self._spawn(state, "kube-apiserver", [
            os.path.join(b, "kube-apiserver"), "--etcd-servers", etcd_url,
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            "--secure-port=%d" % ports["apiserver"],
            "--cert-dir", pki_dir, "--tls-cert-file", p + "apiserver.crt",
            "--tls-private-key-file", p + "apiserver.key", "--client-ca-file", p + "ca.crt",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--service-cluster-ip-range=10.0.0.0/16", "--service-account-issuer=https://kubernetes.default.svc",
            "--service-account-key-file", p + "sa.pub", "--service-account-signing-key-file", p + "sa.key",
            "--api-audiences=https://kubernetes.default.svc",
            "--endpoint-reconciler-type=none",
            "--default-not-ready-toleration-seconds=%d" % eviction_seconds,
            "--default-unreachable-toleration-seconds=%d" % eviction_seconds,
            "--max-requests-inflight=1600", "--max-mutating-requests-inflight=800",
            "--enable-priority-and-fairness=false",
            # Nodes register Ready (fleet.node_manifest), so the not-ready taint this plugin
            # puts on every new node would only cost the node lifecycle controller a read
            # and a write per node to lift (minutes at 5,000 nodes); a node that goes
            # NotReady later is tainted by that controller as in any cluster.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--profiling=false", "--v=0"] + ([
                # Real kubelets (realnodes.py): exec and logs go to their node IPs, with a client
                # certificate, and their serving certificates are checked against the CA.
                "--kubelet-client-certificate", p + "apiserver-kubelet-client.crt",
                "--kubelet-client-key", p + "apiserver-kubelet-client.key",
                "--kubelet-certificate-authority", p + "ca.crt",
                "--kubelet-preferred-address-types=InternalIP,Hostname"] if state.get("kubelet_access") else []))
        self._wait_http(state, "kube-apiserver", state["server"] + "/readyz", deadline, tls=True)

        self._spawn(state, "kube-controller-manager", [
            os.path.join(b, "kube-controller-manager"),
            "--kubeconfig", os.path.join(d, "controller-manager.kubeconfig"),
            "--authentication-kubeconfig", os.path.join(d, "controller-manager.kubeconfig"),
            "--authorization-kubeconfig", os.path.join(d, "controller-manager.kubeconfig"),
            "--leader-elect=false", "--bind-address=127.0.0.1",
            "--secure-port=%d" % ports["controller_manager"],
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--root-ca-file", p + "ca.crt", "--service-account-private-key-file", p + "sa.key",
            "--use-service-account-credentials=true",
            "--controllers", CONTROLLERS,
            "--node-monitor-grace-period=%ds" % node_grace_seconds, "--node-monitor-period=2s",
            "--kube-api-qps=200", "--kube-api-burst=400",
            "--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
            "--concurrent-job-syncs=10", "--v=0"])
        self._spawn(state, "kube-scheduler", [
            os.path.join(b, "kube-scheduler"), "--kubeconfig", os.path.join(d, "scheduler.kubeconfig"),
            "--authentication-kubeconfig", os.path.join(d, "scheduler.kubeconfig"),
            "--authorization-kubeconfig", os.path.join(d, "scheduler.kubeconfig"),
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=%d" % ports["scheduler"],
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--kube-api-qps=200", "--kube-api-burst=400", "--v=0"])
        self._spawn(state, "kwok", [
            os.path.join(b, "kwok"), "--kubeconfig", os.path.join(d, "kwok.kubeconfig"),
            "--config", os.path.join(HERE, "kwok-stages.yaml"),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-lease-duration-seconds=%d" % state["node_lease_seconds"], "--cidr=10.244.0.0/16",
            "--node-ip=10.240.0.1",
            "--server-address=127.0.0.1:%d" % ports["kwok"], "--tls-cert-file", p + "apiserver.crt",
            "--tls-private-key-file", p + "apiserver.key"])
        self._spawn(state, "supervisor", [sys.executable, "-m", "nodewright_sim.supervisor", d])
        self._wait_http(state, "kube-controller-manager",
                        "https://127.0.0.1:%d/healthz" % ports["controller_manager"], deadline, tls=True,
                        insecure=True)
        self._wait_http(state, "kube-scheduler", "https://127.0.0.1:%d/healthz" % ports["scheduler"],
                        deadline, tls=True, insecure=True)
        state["ready"] = time.time()
        self.save(state)

    def _write_kubeconfig(self, path, server, client):
        pki_dir = os.path.join(self.dir, "pki")

        def b64(name):
            with open(os.path.join(pki_dir, name), "rb") as fh:
                return base64.b64encode(fh.read()).decode()
        cfg = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "nodewright-sim", "cluster": {
                "server": server, "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": client, "user": {"client-certificate-data": b64(client + ".crt"),
                                                "client-key-data": b64(client + ".key")}}],
            "contexts": [{"name": "nodewright-sim", "context": {"cluster": "nodewright-sim", "user": client}}],
            "current-context": "nodewright-sim",
        }
        with open(path, "w") as fh:
            json.dump(cfg, fh, indent=2)
        os.chmod(path, 0o600)

    def ssl_context(self, client="admin", insecure=False):
        pki_dir = os.path.join(self.dir, "pki")
        ctx = ssl.create_default_context(cafile=os.path.join(pki_dir, "ca.crt"))
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(os.path.join(pki_dir, client + ".crt"), os.path.join(pki_dir, client + ".key"))
        return ctx

    def _wait_http(self, state, name, url, deadline, tls=False, insecure=False):
        ctx = self.ssl_context(insecure=insecure) if tls else None
        last = None
        while time.time() < deadline:
            pid = state["pids"].get(name)
            if pid and not pid_alive(pid):
                if self._lost_port(name):
                    raise PortTaken("%s could not listen on its port: another program took it" % name)
                raise SimulatorError("%s exited during start-up" % name)
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = exc
            time.sleep(0.2)
        raise SimulatorError("%s was not healthy at %s before the deadline (%s)" % (name, url, last))

    def _lost_port(self, name):
        """Whether process ``name`` ended because its port was taken (its log says so)."""
        try:
            with open(os.path.join(self.dir, "logs", name + ".log"), errors="replace") as fh:
                return "address already in use" in fh.read()[-20000:]
        except OSError:
            return False

    def _log_tails(self, state, lines=15):
        out = []
        for name in state.get("pids", {}):
            path = os.path.join(self.dir, "logs", name + ".log")
            try:
                with open(path, errors="replace") as fh:
                    tail = fh.read().splitlines()[-lines:]
            except OSError:
                continue
            if tail:
                out.append("\n--- %s log (last %d lines) ---\n%s" % (name, len(tail), "\n".join(tail)))
        return "".join(out)

    # --- stop --------------------------------------------------------------
    def _stop_pids(self, state):
        pids = state.get("pids", {})
        order = ["supervisor", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
        names = [n for n in order if n in pids] + [n for n in pids if n not in order]
        if "etcd" in names and len(names) > 1:
            # etcd last: a kube-apiserver whose etcd went away first can take 15 s to stop.
            self._stop_pids(dict(state, pids={n: p for n, p in pids.items() if n != "etcd"}))
            names = ["etcd"]
        for name in names:
            pid = pids[name]
            if pid_alive(pid):
                try:
                    os.killpg(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 15
        for name in names:
            pid = pids[name]
            while pid_alive(pid) and time.time() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def down(self, keep=False):
        state = self.load()
        if state is None:
            if os.path.exists(self.dir):
                self._remove_dir()
            return False
        if state.get("real_nodes") or state.get("realnet"):
            from nodewright_sim.realnodes import RealNodes
            RealNodes(self).down(state)
        self._stop_pids(state)
        if not keep:
            self._remove_dir()
        return True

    def _remove_dir(self, strict=False):
        """Remove the state directory, the node host roots' overlay mounts first."""
        from nodewright_sim import hostroot
        hostroot.unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=not strict)

    def status(self):
        state = self.load()
        if not state:
            return {"name": self.name, "running": False}
        procs = {n: {"pid": p, "alive": pid_alive(p)} for n, p in state.get("pids", {}).items()}
        out = {"name": self.name, "running": all(v["alive"] for v in procs.values()),
               "server": state.get("server"), "kubeconfig": self.kubeconfig, "processes": procs,
               "versions": state.get("versions"), "nodes": len(state.get("nodes", {})),
               "node_lease_seconds": state.get("node_lease_seconds", KUBELET_LEASE_SECONDS),
               "node_grace_seconds": state.get("node_grace_seconds")}
        if state.get("real_nodes"):
            from nodewright_sim.realnodes import RealNodes
            out["real_nodes"] = RealNodes(self).status()
        return out
