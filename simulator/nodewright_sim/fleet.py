"""GPU fleets for the simulator: node pools with the labels GPU Feature Discovery
sets, and workloads that exercise a safe drain (Deployments with PDBs, DaemonSets,
Jobs standing for training runs, standalone pods)."""

from __future__ import annotations

import concurrent.futures
import datetime
import fcntl
import hashlib
import json
import os
import time
import uuid

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from nodewright_sim import hostroot
from nodewright_sim.cluster import SimulatorError

K8S_VERSION_FALLBACK = "v1.36.3"

# Facts per GPU product, as GPU Feature Discovery and nvidia-smi report them; HGX
# boards (x86-64, eight SXM GPUs) have NVSwitches, which Fabric Manager sets up.
GPUS = {
    "h100": dict(product="NVIDIA-H100-80GB-HBM3", smi="NVIDIA H100 80GB HBM3", family="hopper",
                 major="9", minor="0", count=8, memory=81559, arch="amd64", cpu="224", mem="2Ti", nvswitches=4),
    "h200": dict(product="NVIDIA-H200", smi="NVIDIA H200", family="hopper", major="9", minor="0",
                 count=8, memory=143771, arch="amd64", cpu="224", mem="2Ti", nvswitches=4),
    "gh200": dict(product="NVIDIA-GH200-480GB", smi="NVIDIA GH200 480GB", family="hopper", major="9",
                  minor="0", count=1, memory=97871, arch="arm64", cpu="72", mem="480Gi"),
    "b200": dict(product="NVIDIA-B200", smi="NVIDIA B200", family="blackwell", major="10", minor="0",
                 count=8, memory=183359, arch="amd64", cpu="224", mem="4Ti", nvswitches=2),
    "gb200": dict(product="NVIDIA-GB200", smi="NVIDIA GB200", family="blackwell", major="10", minor="0",
                  count=4, memory=189471, arch="arm64", cpu="144", mem="960Gi"),
    "b300": dict(product="NVIDIA-B300-SXM6-AC", smi="NVIDIA B300 SXM6 AC", family="blackwell", major="10",
                 minor="3", count=8, memory=275040, arch="amd64", cpu="224", mem="4Ti", nvswitches=2),
    "gb300": dict(product="NVIDIA-GB300", smi="NVIDIA GB300", family="blackwell", major="10", minor="3",
                  count=4, memory=284208, arch="arm64", cpu="144", mem="960Gi"),
}

# Profiles: pool -> share of the fleet, and the node count when none is given.
PROFILES = {
    "dev": {"nodes": 6, "pools": {"h100": 2, "h200": 1, "b200": 1, "gb200": 2}, "workloads": "light"},
    "mixed": {"nodes": 24, "pools": {"h100": 8, "h200": 6, "b200": 4, "gb200": 6}, "workloads": "full"},
    "large": {"nodes": 200, "pools": {"h100": 80, "h200": 50, "b200": 30, "gb200": 40}, "workloads": "full"},
    "all-gpus": {"nodes": 7, "pools": {g: 1 for g in GPUS}, "workloads": "light"},
    "bare": {"nodes": 4, "pools": {"h100": 2, "gb200": 2}, "workloads": "none"},
}

# Pools whose hosts have InfiniBand and MLNX_OFED (a peer-memory provider for
# nvidia_peermem); the others network over Ethernet with the inbox drivers.
# Up to this many nodes are created one after the other (in index order), more in parallel.
SERIAL_CREATE = 64
INFINIBAND = ("h100", "h200", "b200", "b300", "gb200", "gb300")

# The GPU Operator schedules its driver DaemonSet on nodes with this label.
GPU_OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
GPU_OPERATOR_NAMESPACE = "gpu-operator"

# Node images: what the Node reports as status.nodeInfo.osImage, and the host root's OS.
OS_IMAGES = {"ubuntu": "Ubuntu 24.04.1 LTS", "cos": "Container-Optimized OS from Google"}

ZONES = ("zone-a", "zone-b", "zone-c")

LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# What kwok reports for a node it plays (its NodeConditions and --node-ip, cluster.py).
KWOK_NODE_IP = "10.240.0.1"
NODE_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
)
NON_INTERRUPTIBLE_LABEL = ("app.kubernetes.io/component", "training")


def profile_names():
    return sorted(PROFILES)


def split_counts(pools, total):
    """Distribute ``total`` nodes over pools proportionally (largest remainder)."""
    weight = sum(pools.values())
    raw = {p: total * w / weight for p, w in pools.items()}
    counts = {p: int(v) for p, v in raw.items()}
    for p in sorted(raw, key=lambda p: (counts[p] - raw[p], p))[: total - sum(counts.values())]:
        counts[p] += 1
    return counts


def memory_mib(quantity):
    """A Kubernetes memory quantity (2Ti, 960Gi) in MiB."""
    units = {"Ki": 1.0 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 ** 2}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(float(quantity[:-len(suffix)]) * factor)
    return int(quantity) // (1 << 20)


def memory_kib(quantity):
    """KiB in a memory quantity such as ``960Gi`` or ``2Ti``."""
    units = {"Ki": 1, "Mi": 1024, "Gi": 1024 ** 2, "Ti": 1024 ** 3}
    return int(quantity[:-2]) * units[quantity[-2:]]


def api_client(kubeconfig):
    return config.new_client_from_config(config_file=kubeconfig)


def node_manifest(name, pool, index, boot_id, k8s_version, root=None, managed=True):
    g = GPUS[pool]
    zone = ZONES[index % len(ZONES)]
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": g["arch"],
        "node.kubernetes.io/instance-type": "sim-%s-x%d" % (pool, g["count"]),
        "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "sim-region",
        "nodepool": pool, "type": "kwok",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": g["product"],
        "nvidia.com/gpu.family": g["family"], "nvidia.com/gpu.compute.major": g["major"],
        "nvidia.com/gpu.compute.minor": g["minor"], "nvidia.com/gpu.count": str(g["count"]),
        "nvidia.com/gpu.memory": str(g["memory"]), "nvidia.com/gpu.machine": "sim-%s" % pool,
    }
    if pool.startswith("gb"):
        # NVL72-style NVLink domains: 18 trays of 4 GPUs per rack.
        labels["nvidia.com/gpu.clique"] = "%s-rack-%d.1" % (pool, index // 18)
    annotations = {"sim.nodewright.io/boot-id": boot_id, "node.alpha.kubernetes.io/ttl": "0"}
    if managed:
        annotations["kwok.x-k8s.io/node"] = "fake"
    if root:
        annotations["sim.nodewright.io/host-root"] = root
    capacity = {"cpu": g["cpu"], "memory": g["mem"], "pods": "110", "ephemeral-storage": "7Ti",
                "nvidia.com/gpu": str(g["count"])}
    body = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "nodeInfo": {"architecture": g["arch"], "bootID": boot_id, "kernelVersion": hostroot.DEFAULT_KERNEL,
                         "osImage": "Ubuntu 24.04.1 LTS", "containerRuntimeVersion": "containerd://1.7.27",
                         "kubeletVersion": k8s_version, "kubeProxyVersion": k8s_version,
                         "operatingSystem": "linux", "machineID": uuid.uuid4().hex,
                         "systemUUID": str(uuid.uuid4())},
        },
    }
    if managed:
        # Registered Ready, with the status kwok's node-initialize stage would write next
        # (kwok-stages.yaml): at fleet size that write per node is a good part of the
        # control plane's work. kwok plays the node from then on (Lease, heartbeats,
        # power off and on).
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body["status"].update({
            "conditions": [{"lastHeartbeatTime": now, "lastTransitionTime": now, "type": t, "status": st,
                            "reason": reason, "message": message} for t, st, reason, message in NODE_CONDITIONS],
            "addresses": [{"address": KWOK_NODE_IP, "type": "InternalIP"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "phase": "Running"})
    return body


class Fleet(object):
    def __init__(self, cluster):
        self.cluster = cluster
        self.api = api_client(cluster.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.base = None

    @property
    def nodes_dir(self):
        return os.path.join(self.cluster.dir, "nodes")

    def host_root(self, node):
        return os.path.join(self.nodes_dir, node, "root")

    def _k8s_version(self):
        state = self.cluster.load() or {}
        v = (state.get("versions") or {}).get("kube-apiserver", "")
        return v.split()[-1] if v.startswith("Kubernetes") else K8S_VERSION_FALLBACK

    def node_names(self, label_selector=None):
        """Names of the nodes (metadata only: cheap at fleet size)."""
        resp = self.core.list_node(label_selector=label_selector, _preload_content=False, _headers={
            "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
        return [item["metadata"]["name"] for item in json.loads(resp.data).get("items") or []]

    def existing_indices(self, pool):
        prefix = pool + "-"
        names = self.node_names("nodepool=%s" % pool)
        return {int(n[len(prefix):]) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()}

    def add_nodes(self, pool, count, taints=(), host_roots=True, managed=True, workers=16, infiniband=None,
                  gpu_operator_driver=False, os_id="ubuntu"):
        """``infiniband``: hosts with InfiniBand and MLNX_OFED (default: the pool's,
        ``INFINIBAND``). ``gpu_operator_driver``: the GPU Operator's driver DaemonSet runs
        on these nodes (its label on them, the DaemonSet in its namespace). ``os_id``:
        ``ubuntu``, or ``cos`` for GKE nodes on Container-Optimized OS (a GKE node pool
        label, /etc wiped at every boot)."""
        if os_id not in OS_IMAGES:
            raise SimulatorError("unknown node OS %r; known: %s" % (os_id, ", ".join(sorted(OS_IMAGES))))
        if pool not in GPUS:
            raise SimulatorError("unknown pool %r; known pools: %s" % (pool, ", ".join(sorted(GPUS))))
        if host_roots and self.base is None:
            self.base = hostroot.BaseImage(os.path.join(self.cluster.dir, "base-root")).prepare()
        used = self.existing_indices(pool)
        indices = []
        i = 0
        while len(indices) < count:
            if i not in used:
                indices.append(i)
            i += 1
        version = self._k8s_version()
        g = GPUS[pool]

        def facts(name):
            return {"name": name, "arch": g["arch"], "gpu_name": g["smi"],
                    "compute_cap": "%s.%s" % (g["major"], g["minor"]), "gpu_count": g["count"],
                    "gpu_memory_mib": g["memory"], "memory_mib": memory_mib(g["mem"]),
                    "nvswitch_count": g.get("nvswitches", 0),
                    "memory_kib": memory_kib(g["mem"]), "os_id": os_id,
                    "mofed": (pool in INFINIBAND if infiniband is None else infiniband) and os_id != "cos"}

        # Nodes of one pool boot to the same state: one template is booted, then copied per node.
        template = self.template(facts(hostroot.TEMPLATE_NAME)) if host_roots and count else None

        def prepare(index):
            name = "%s-%04d" % (pool, index)
            root = None
            if host_roots:
                root = self.host_root(name)
                boot_id = template.clone(root, name)
            else:
                boot_id = str(uuid.uuid4())
            body = node_manifest(name, pool, index, boot_id, version, root, managed)
            if gpu_operator_driver:
                body["metadata"]["labels"][GPU_OPERATOR_DRIVER_LABEL] = "true"
            if os_id == "cos":
                body["status"]["nodeInfo"]["osImage"] = OS_IMAGES["cos"]
                body["metadata"]["labels"]["cloud.google.com/gke-nodepool"] = pool
                body["metadata"]["labels"]["cloud.google.com/gke-os-distribution"] = "cos"
            if taints:
                body["spec"]["taints"] = [dict(t) for t in taints]
            return body

        def create(body):
            # The response is not read into the client's models: at fleet size that costs
            # more than the request itself.
            resp = self.core.create_node(body, _preload_content=False)
            resp.read()
            resp.release_conn()
            return body["metadata"]["name"]

        if gpu_operator_driver:
            self.ensure_gpu_operator_driver()
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool_exec:
            bodies = list(pool_exec.map(prepare, indices))
            if count <= SERIAL_CREATE:
                # A small fleet joins in index order, so its creationTimestamps (whole seconds)
                # never put a later index first: the batch order is the same in every simulator.
                return [create(body) for body in bodies]
            return list(pool_exec.map(create, bodies))

    def template(self, node):
        """The booted template host root of nodes with these facts (one per simulator
        and kind of node, made once; ``hostroot.Template``)."""
        key = hashlib.sha256(json.dumps(node, sort_keys=True).encode()).hexdigest()[:16]
        path = os.path.join(self.cluster.dir, "templates", key)
        os.makedirs(path, exist_ok=True)
        layers = os.path.join(self.cluster.dir, "layers")
        with open(os.path.join(path, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another add-nodes may be making the same one
            # Real nodes run in mount namespaces of their own, where overlay mounts made
            # later do not appear: a pod there (the reconciler, the node connection) must
            # see the host roots themselves, so a simulator with real nodes copies them.
            mode = "copy" if (self.cluster.load() or {}).get("kubelet_access") else None
            if (mode or os.environ.get(hostroot.HOST_ROOTS_ENV)) != "copy":
                with open(layers + ".lock", "w") as layers_lock:
                    fcntl.flock(layers_lock, fcntl.LOCK_EX)
                    hostroot.mount_tmpfs(layers)  # the nodes' own layers in memory, where allowed
            return hostroot.Template(os.path.join(path, "root"), self.base, node, layers=layers, mode=mode)

    def ensure_gpu_operator_driver(self):
        """The GPU Operator's driver DaemonSet (nvidia-driver-daemonset in gpu-operator),
        on every node labelled nvidia.com/gpu.deploy.driver=true, as the operator runs it."""
        self._ensure_namespace(GPU_OPERATOR_NAMESPACE)
        labels = {"app": "nvidia-driver-daemonset", "app.kubernetes.io/component": "nvidia-driver"}
        template = self._pod_template(labels, {GPU_OPERATOR_DRIVER_LABEL: "true"}, tolerate_all=True)
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
              "metadata": {"name": "nvidia-driver-daemonset", "namespace": GPU_OPERATOR_NAMESPACE},
              "spec": {"selector": {"matchLabels": labels}, "template": template}}
        try:
            self.apps.create_namespaced_daemon_set(GPU_OPERATOR_NAMESPACE, ds)
        except ApiException as exc:
            if exc.status != 409:
                raise

    # --- workloads -----------------------------------------------------------
    def _ensure_namespace(self, name):
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.core.read_namespaced_service_account("default", name)
                return
            except ApiException:
                time.sleep(0.2)
        raise SimulatorError("the default ServiceAccount of namespace %s never appeared "
                             "(is the serviceaccount controller running?)" % name)

    @staticmethod
    def _pod_template(labels, node_selector=None, gpus=0, annotations=None, tolerate_all=False,
                      restart="Always"):
        container = {"name": "main", "image": "registry.invalid/sim/workload:1",
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
        if gpus:
            container["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
            container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
        spec = {"containers": [container], "restartPolicy": restart, "terminationGracePeriodSeconds": 5}
        if node_selector:
            spec["nodeSelector"] = node_selector
        if tolerate_all:
            spec["tolerations"] = [{"operator": "Exists"}]
        return {"metadata": {"labels": labels, "annotations": annotations or {}}, "spec": spec}

    def create_workloads(self, kind, counts):
        if kind == "none":
            return {}
        made = {"deployments": 0, "pdbs": 0, "daemonsets": 0, "jobs": 0, "pods": 0}
        for ns in ("workloads", "training", "gpu-monitoring"):
            self._ensure_namespace(ns)
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
              "metadata": {"name": "dcgm-exporter", "namespace": "gpu-monitoring"},
              "spec": {"selector": {"matchLabels": {"app": "dcgm-exporter"}},
                       "template": self._pod_template({"app": "dcgm-exporter"}, tolerate_all=True)}}
        self.apps.create_namespaced_daemon_set("gpu-monitoring", ds)
        made["daemonsets"] += 1
        for pool, n in sorted(counts.items()):
            if not n:
                continue
            replicas = max(2, n) if kind == "full" else max(1, n // 2)
            labels = {"app": "inference-%s" % pool}
            dep = {"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "inference-%s" % pool, "namespace": "workloads"},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                            "template": self._pod_template(labels, {"nodepool": pool}, gpus=1)}}
            self.apps.create_namespaced_deployment("workloads", dep)
            pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "inference-%s" % pool, "namespace": "workloads"},
                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}
            self.policy.create_namespaced_pod_disruption_budget("workloads", pdb)
            made["deployments"] += 1
            made["pdbs"] += 1
            if kind == "full":
                for j in range(max(1, n // 4)):
                    self.create_training_job("train-%s-%d" % (pool, j), pool, run_for="45s",
                                             gpus=max(1, GPUS[pool]["count"] // 2))
                    made["jobs"] += 1
        if kind == "full":
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "debug-shell", "namespace": "workloads", "labels": {"app": "debug"}},
                   "spec": self._pod_template({"app": "debug"})["spec"]}
            self.core.create_namespaced_pod("workloads", pod)
            made["pods"] += 1
        return made

    def create_training_job(self, name, pool=None, run_for="45s", gpus=4, namespace="training",
                            node_name=None):
        labels = {"app": name, NON_INTERRUPTIBLE_LABEL[0]: NON_INTERRUPTIBLE_LABEL[1]}
        selector = {"nodepool": pool} if pool else {}
        if node_name:
            selector = {"kubernetes.io/hostname": node_name}
        template = self._pod_template(labels, selector, gpus=gpus, annotations={"sim.nodewright.io/run-for": run_for},
                                      restart="Never")
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
               "spec": {"backoffLimit": 0, "template": template}}
        return self.batch.create_namespaced_job(namespace, job)

    # --- readiness -------------------------------------------------------------
    def ready_nodes(self, label_selector="type=kwok"):
        """How many nodes are Ready: the server's table of them (a few columns, not the
        objects, which is what keeps polling cheap at thousands of nodes)."""
        resp = self.core.list_node(label_selector=label_selector, resource_version="0", _preload_content=False,
                                   _headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"})
        table = json.loads(resp.data)
        column = [c["name"].lower() for c in table["columnDefinitions"]].index("status")
        return sum(1 for row in table.get("rows") or [] if row["cells"][column].split(",")[0] == "Ready")

    def tainted_ready_nodes(self, label_selector="type=kwok"):
        """Ready nodes that still carry the node lifecycle controller's not-ready or
        unreachable taint (nothing is scheduled there until it lifts it)."""
        out = []
        for node in self._raw_list(self.core.list_node, label_selector=label_selector, resource_version="0"):
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (node.get("status") or {}).get("conditions") or [])
            if ready and any(t.get("key") in LIFECYCLE_TAINTS for t in (node.get("spec") or {}).get("taints") or []):
                out.append(node["metadata"]["name"])
        return out

    def _raw_list(self, method, **kwargs):
        return json.loads(method(_preload_content=False, **kwargs).data).get("items") or []

    def wait_ready(self, expected_nodes, timeout=120):
        """Wait until the nodes are Ready and every workload pod is Running or done."""
        deadline = time.time() + timeout
        pending = None
        interval = min(2.0, 0.5 + expected_nodes / 2000.0)
        while time.time() < deadline:
            ready = self.ready_nodes()
            if ready >= expected_nodes and self.tainted_ready_nodes():
                ready = -1  # Ready, but the node lifecycle controller has yet to lift the not-ready taint
            if ready >= expected_nodes:
                pods = self._raw_list(self.core.list_pod_for_all_namespaces)
                pending = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Running", "Succeeded")]
                deployments = self._raw_list(self.apps.list_deployment_for_all_namespaces)
                short = [d for d in deployments if (d.get("status") or {}).get("readyReplicas", 0) <
                         (d.get("spec") or {}).get("replicas", 1)]
                if not pending and not short:
                    return {"nodes": ready, "pods": len(pods)}
            time.sleep(interval)
        raise SimulatorError("fleet not ready after %ds: %s" % (timeout, ", ".join(
            "%s/%s %s" % (p["metadata"]["namespace"], p["metadata"]["name"], (p.get("status") or {}).get("phase"))
            for p in (pending or [])[:10]) or "nodes not Ready"))


def create_fleet(cluster, profile="dev", nodes=None, wait=True, timeout=120):
    if profile not in PROFILES:
        raise SimulatorError("unknown fleet profile %r; known profiles: %s" % (profile, ", ".join(profile_names())))
    spec = PROFILES[profile]
    total = nodes if nodes is not None else spec["nodes"]
    if total < 0:
        raise SimulatorError("--nodes must be zero or more")
    counts = split_counts(spec["pools"], total)
    fleet = Fleet(cluster)
    for pool, n in sorted(counts.items()):
        if n:
            fleet.add_nodes(pool, n)
    made = fleet.create_workloads(spec["workloads"], counts)
    result = {"profile": profile, "nodes": total, "pools": counts, "workloads": made}
    if wait:
        result.update(fleet.wait_ready(total, timeout=timeout))
    return result
