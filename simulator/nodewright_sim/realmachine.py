"""What the real nodes of every simulator on this machine share.

* ``run_command``: a command on the machine; a failure is a SimulatorError with its output;
* ``machine_lock``: one simulator at a time, across simulators, where they share the
  machine (this record, the choice of a network);
* the kernel settings the kubelet changes (``KUBELET_SYSCTLS``): recorded before the
  first real node of any simulator starts and restored when the last one stops
  (``<state root>/real-nodes-machine.json``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess

from nodewright_sim.cluster import SimulatorError, pid_alive, state_root

KUBELET_SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")


def run_command(args, check=True, **kw):
    """Run a command of the machine; with ``check``, its failure is a SimulatorError
    that ends with what it printed."""
    proc = subprocess.run(args, capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        raise SimulatorError("%s failed: %s" % (" ".join(args), (proc.stderr or proc.stdout).strip()[-300:]))
    return proc


@contextlib.contextmanager
def machine_lock():
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
    with machine_lock():
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
    with machine_lock():
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
