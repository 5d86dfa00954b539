"""The simulator's side of the real nodes' network: a free /16 for the node IPs and
pods, the veth pair that links the machine to the network namespace that
``realnet`` holds, and the addresses and routes on both sides (``RealNet``)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time

from nodewright_sim.cluster import SimulatorError
from nodewright_sim.realmachine import machine_lock, run_command

SERVICE_IP = "10.0.0.1"


def _routes_overlap(net):
    out = run_command(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
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
        with machine_lock():  # two simulators must not pick the same network
            index = allocate_network()
            veth, peer = "nws%d" % index, "nwsp%d" % index
            run_command(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
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
            run_command(["ip", "link", "set", peer, "netns", str(pid)])
            run_command(["ip", "addr", "add", "%s.0.1/24" % prefix, "dev", veth])
            run_command(["ip", "link", "set", veth, "up"])
            run_command(["ip", "route", "add", "%s.0.0/16" % prefix, "via", "%s.0.2" % prefix, "dev", veth])
            inside = ["nsenter", "--net=/proc/%d/ns/net" % pid, "--"]
            run_command(inside + ["ip", "link", "set", "lo", "up"])
            run_command(inside + ["ip", "addr", "add", SERVICE_IP + "/32", "dev", "lo"])
            run_command(inside + ["ip", "addr", "add", "%s.0.2/24" % prefix, "dev", peer])
            run_command(inside + ["ip", "link", "set", peer, "up"])
            run_command(inside + ["ip", "route", "add", "default", "via", "%s.0.1" % prefix])
            # Forwarding between the node bridges and the veth, inside the namespace only.
            run_command(inside + ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
            port = state["ports"]["apiserver"]
            cfg = {"apiserver_port": port, "listen": [["127.0.0.1", port], [SERVICE_IP, 443]]}
            with open(os.path.join(self.dir, "configured.json"), "w") as fh:
                json.dump(cfg, fh)
            self._wait(os.path.join(self.dir, "listening"), proc, "the API server forwarding of the real nodes")
        except BaseException:
            run_command(["ip", "link", "del", veth], check=False)
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
