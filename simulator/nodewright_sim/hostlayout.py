"""Where a node's host root keeps what the simulator itself writes there (the node's
facts, its kernel, the reboot request), and reading those files back."""

from __future__ import annotations

import os
import shlex

from nodewright_sim.cluster import SimulatorError

HERE = os.path.dirname(os.path.abspath(__file__))
SIM_DIR = "var/lib/nodewright-sim"
REBOOT_REQUEST = "run/nodewright-sim/reboot-requested"
NODE_ENV = "etc/nodewright-sim/node.env"
DEFAULT_KERNEL = "6.8.0-45-generic"
DEFAULT_MEMORY_MIB = 2 * 1024 * 1024
UNIT_DIR = "usr/lib/systemd/system"


class HostRootError(SimulatorError):
    pass


def read_file(path, default=""):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return default


def node_env(root):
    env = {}
    for line in read_file(os.path.join(root, NODE_ENV)).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = (shlex.split(v) or [""])[0]
    return env
