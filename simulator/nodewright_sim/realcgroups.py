"""The cgroups of the real nodes: each node's processes, containers included, live
under ``nodewright-sim/<simulator>/<node>`` in every cgroup hierarchy (v1 or v2);
stopping a node kills what is there and removes the cgroups."""

from __future__ import annotations

import os
import signal
import time

from nodewright_sim.cluster import SimulatorError

CGROUP_TOP = "nodewright-sim"


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
