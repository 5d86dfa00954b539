"""The files of a real node's directory (``nodes/<node>``): its record
(``realnode.json``), the machine's Python in its host root, the CNI, containerd and
kubelet configurations, and the tail of its logs for error messages."""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys

from nodewright_sim import hostroot
from nodewright_sim.realmachine import run_command

NODE_FILE = "realnode.json"


def link_tree(src, dst):
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
    out = run_command([real, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['stdlib']); "
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
        hostroot.copy_libraries(binary, root)


def cni_config(node_dir, index, prefix):
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


def kubelet_config(ip, cgroup, pki_dir, node_dir):
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


def log_tail(path, lines=5):
    try:
        with open(path, errors="replace") as fh:
            text = fh.read().splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return " | ".join(t.strip()[:300] for t in text) or "(empty log)"
