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

Where each part lives: ``realpreflight`` (what the machine needs), ``realmachine``
(the kernel-settings record), ``realnetwork`` (and ``realnet``, the namespace's
process), ``realcgroups``, ``realnodefiles`` (a node's configuration), ``realboot``
(the process of one boot, in the node's mount namespace); this module starts, stops
and reboots the nodes.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from nodewright_sim import hostroot, ociimage, pki
from nodewright_sim.cluster import SimulatorError, bin_dir, pid_alive, rss_kib
from nodewright_sim.realboot import unmount_under
from nodewright_sim.realcgroups import CGROUP_TOP, cgroup_pids, kill_cgroup, make_node_cgroups, node_cgroup, \
    remove_empty_parents
from nodewright_sim.realmachine import claim_machine, release_machine, run_command
from nodewright_sim.realnetwork import RealNet
from nodewright_sim.realnodefiles import CONTAINERD_CONFIG, NODE_FILE, cni_config, kubelet_config, link_tree, \
    log_tail, python_layer
from nodewright_sim.realpreflight import CNI_BIN, preflight, runc_smoke_test, runtime_binaries

DEFAULT_POOL = "h100"
REAL_LABEL = "sim.nodewright.io/real-node"


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
        link_tree(python_layer(self.cluster.dir), root)
        os.unlink(os.path.join(root, ".ready"))
        with open(os.path.join(root, "etc/machine-id"), "w") as fh:
            fh.write(boot_id.replace("-", "") + "\n")
        prefix = state["realnet"]["prefix"]
        ip = "%s.0.%d" % (prefix, 10 + index)
        run_command(["nsenter", "--net=/proc/%d/ns/net" % RealNet.netns_pid(state), "--", "ip", "addr", "add",
                     ip + "/24", "dev", "nwsp%d" % state["realnet"]["index"]])
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
        cni_conf = cni_config(d, index, prefix)
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
            json.dump(kubelet_config(ip, cgroup, pki_dir, d), fh, indent=2)
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
                                 "nodewright_sim.realboot", "boot", d, bin_dir()],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=d)
        log.close()
        info["pid"] = proc.pid
        info["boots"] += 1
        self._save_info(name, info)
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(d, "booted")):
            if proc.poll() is not None or os.path.exists(os.path.join(d, "boot-failed")):
                raise SimulatorError("real node %s did not boot: %s"
                                     % (name, log_tail(os.path.join(d, "logs", "boot.log"))))
            if time.time() > deadline:
                raise SimulatorError("real node %s did not boot within 60s: %s"
                                     % (name, log_tail(os.path.join(d, "logs", "boot.log"))))
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
        return run_command(self._ns_command(name, [ctr, "--address", "/run/containerd/containerd.sock",
                                                   "--namespace", "k8s.io"] + list(args)),
                           check=check, timeout=timeout)

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
                                         % (name, log_tail(os.path.join(self.node_dir(name), "logs", "kubelet.log"))))
            time.sleep(0.2)
        if pending:
            raise SimulatorError("real nodes %s were not Ready within %ds: %s" % (
                ", ".join(pending), timeout, log_tail(os.path.join(self.node_dir(pending[0]), "logs", "kubelet.log"))))

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
            run_command(["ip", "link", "del", net["veth"]], check=False)
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
            entry["rss_mib"] = rss_kib(pids) // 1024
            out[name] = entry
        return out


def reboot_real_node(state_dir, name, delay):
    """The supervisor's reboot of a real node (a reboot requested in its host root)."""
    from nodewright_sim.cluster import Cluster
    cluster = Cluster(os.path.basename(state_dir.rstrip("/")))
    cluster.dir, cluster.state_file = state_dir, os.path.join(state_dir, "state.json")
    return RealNodes(cluster).reboot(name, delay=delay)


def _machine_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
