# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Real kubelet nodes and the machine under them: ``nodewright-sim down`` leaves no
process, mount, cgroup, link or kernel setting of them behind, and a machine that cannot
run them (runtime packages missing, runc unable to start containers, capabilities
missing) is told why before anything is changed. This file sorts before
test_real_nodes.py, whose session-wide simulator with real nodes must not run yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client, config
from nodewright_sim import hostroot, ociimage
from nodewright_sim.cluster import Cluster

from k8s_helpers import wait_for

pytestmark = pytest.mark.integration

# --------------------------------------------------------------------------- up and down, bad machines

SIM_CLI = os.path.join(os.path.dirname(sys.executable), "nodewright-sim")


def sim_cli(name, *args, env=None, prefix=()):
    return subprocess.run(list(prefix) + [SIM_CLI, "--name", name] + list(args), capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=600)


def machine_state(name):
    """What simulator ``name`` could leave on this machine. The mounts and cgroups of other
    simulators (the suite's other pytest process runs one beside this file) are left out:
    they come and go on their own."""
    from nodewright_sim.cluster import state_root
    from nodewright_sim.realcgroups import CGROUP_TOP

    def others(path, top):
        head = path.split(top + "/", 1)
        return len(head) == 2 and head[1].split("/", 1)[0] != name
    def listing(path):
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None
    with open("/proc/self/mountinfo") as fh:
        mounts = sorted(point for point in (line.split()[4] for line in fh) if not others(point, state_root()))
    cgroups = sorted(dirpath for dirpath, _d, _f in os.walk("/sys/fs/cgroup")
                     if not others(dirpath, "/" + CGROUP_TOP))
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    sysctls = {k: open("/proc/sys/" + k.replace(".", "/")).read().strip() for k in (
        "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
        "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")}
    # What a kubelet, containerd and the CNI plugins write by default (other developers'
    # package installs may change the rest of these directories meanwhile).
    runtime_paths = {"/run": {"containerd", "netns", "runc", "mount", "nodewright-sim"},
                     "/var/lib": {"kubelet", "cni", "containerd"}, "/var/log": {"pods", "containers"},
                     "/opt": {"containerd", "cni"}, "/etc": {"cni", "containerd", "kubernetes"}}
    return {"mounts": mounts, "cgroups": cgroups, "links": sorted(os.listdir("/sys/class/net")),
            "routes": sorted(routes.splitlines()), "sysctls": sysctls,
            "dirs": {d: sorted(set(listing(d) or ()) & names) for d, names in runtime_paths.items()}}


def processes_of(name):
    """Processes that belong to simulator ``name`` (by cgroup or command line). A zombie
    (ended, waiting for its new parent, the machine's init, to reap it) holds nothing
    and is left out."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open("/proc/%s/cgroup" % pid) as fh:
                cg = fh.read()
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "nodewright-sim/%s/" % name in cg or "/nodewright-sim/%s" % name in cmd:
            found.append((int(pid), cmd[:120]))
    return found


def test_down_removes_every_process_mount_cgroup_and_link_of_the_real_nodes(tmp_path):
    # Before test_real_nodes.py (this file sorts first): no other simulator with real nodes
    # runs, so the kernel settings the kubelet changed are restored by this down.
    name = "rn-clean-%d" % os.getpid()
    before = machine_state(name)
    up = sim_cli(name, "up", "--profile", "bare", "--nodes", "0", "--real-nodes", "1")
    try:
        assert up.returncode == 0, up.stderr
        assert "real nodes (kubelet + containerd) Ready" in up.stdout
        cluster = Cluster(name)
        core = client.CoreV1Api(config.new_client_from_config(config_file=cluster.kubeconfig))
        core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {
            "nodeName": "h100-real-0000", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": ociimage.BUSYBOX_IMAGE, "command": ["sh", "-c", "sleep 100000"]}],
            "volumes": [{"name": "e", "emptyDir": {}}]}})
        wait_for(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", timeout=60,
                 what="a pod on the real node")
        status = json.loads(sim_cli(name, "status").stdout)
        node = status["real_nodes"]["h100-real-0000"]
        assert node["running"] and node["processes"] >= 4  # boot process, containerd, kubelet, a shim
        assert processes_of(name)
        assert open("/proc/sys/vm/overcommit_memory").read().strip() == "1"  # the kubelet's setting
    finally:
        down = sim_cli(name, "down")
    assert down.returncode == 0, down.stderr
    after = machine_state(name)
    assert processes_of(name) == []
    for key in before:
        assert after[key] == before[key], key
    assert not os.path.exists(Cluster(name).dir)


def test_up_without_the_runtime_packages_names_them_and_changes_nothing(tmp_path):
    name = "rn-nopkg-%d" % os.getpid()
    tools = tmp_path / "bin"
    tools.mkdir()
    # What host roots need stays (hostroot.PREREQUISITES); the runtime's packages do not.
    for tool in ("nsenter", "ip", "sh", "setsid", "busybox", "file") + tuple(c for c, _ in hostroot.PREREQUISITES):
        path = subprocess.run(["sh", "-c", "command -v %s" % tool], capture_output=True, text=True).stdout.strip()
        if path:
            os.symlink(path, tools / tool)
    env = dict(os.environ, PATH=str(tools), NODEWRIGHT_SIM_NO_INSTALL="1")
    before = machine_state(name)
    proc = sim_cli(name, "up", "--profile", "bare", "--nodes", "0", "--real-nodes", "2", env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nodewright-sim: real nodes need containerd, containerd-shim-runc-v2, ctr, runc, "
                               "which are missing: install Debian's containerd, runc, containernetworking-plugins")
    assert "apt-get install containerd runc containernetworking-plugins" in lines[0]
    assert not os.path.exists(Cluster(name).dir)
    assert machine_state(name) == before
    # Without --real-nodes none of it is needed.
    proc = sim_cli(name, "up", "--profile", "bare", "--nodes", "0", env=env)
    try:
        assert proc.returncode == 0, proc.stderr
    finally:
        assert sim_cli(name, "down", env=env).returncode == 0


def test_a_machine_where_runc_cannot_start_containers_gets_the_reason_and_nothing_is_left(tmp_path):
    name = "rn-norunc-%d" % os.getpid()
    runc = subprocess.run(["sh", "-c", "command -v runc"], capture_output=True, text=True).stdout.strip()
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\n"
                    "case \"$1\" in spec) exec %s \"$@\";; esac\n"
                    "case \" $* \" in *\" run \"*) echo 'runc run failed: unable to start container process: "
                    "error during container init: permission denied' >&2; exit 1;; esac\nexit 0\n" % runc)
    fake.chmod(0o755)
    before = machine_state(name)
    proc = sim_cli(name, "up", "--profile", "bare", "--nodes", "0", "--real-nodes", "1",
                   env=dict(os.environ, NODEWRIGHT_SIM_RUNC=str(fake)))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nodewright-sim: runc cannot start containers on this machine (runc run failed: "
                               "unable to start container process: error during container init: permission "
                               "denied); real nodes need root with namespaces, cgroups and seccomp allowed")
    assert lines[0].endswith("or leave out --real-nodes")
    assert not os.path.exists(Cluster(name).dir)
    assert processes_of(name) == []
    after = machine_state(name)
    for key in before:
        assert after[key] == before[key], key


def test_a_process_without_the_capabilities_is_told_which_are_missing():
    name = "rn-nocap-%d" % os.getpid()
    proc = sim_cli(name, "up", "--real-nodes", "1", prefix=["setpriv", "--bounding-set=-sys_admin", "--"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "nodewright-sim: real nodes need the capabilities CAP_SYS_ADMIN, which this process lacks; run as root "
        "with all capabilities (a privileged container), or leave out --real-nodes")
    assert not os.path.exists(Cluster(name).dir)
