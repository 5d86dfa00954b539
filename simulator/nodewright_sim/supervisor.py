"""The simulator's supervisor: performs node reboots.

A reboot is requested from inside a node's host root (the ``reboot`` stand-in) or by
``nodewright-sim reboot NODE``; both leave a request file in the host root. The
supervisor then powers the node off (kwok marks it NotReady), waits the reboot
delay, boots the host root (runtime state rebuilt from persisted configuration,
new boot ID) and powers the node on (kwok marks it Ready with the new bootID).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import threading
import time

from kubernetes import client, config

from nodewright_sim import hostroot

POWER = "sim.nodewright.io/power"
BOOT_ID = "sim.nodewright.io/boot-id"


def reboot_node(core, name, root, delay):
    core.patch_node(name, {"metadata": {"annotations": {POWER: "off"}}})
    time.sleep(delay)
    new_id = hostroot.boot(root)
    core.patch_node(name, {"metadata": {"annotations": {POWER: None, BOOT_ID: new_id}}})
    return new_id


def main(state_dir):
    with open(os.path.join(state_dir, "state.json")) as fh:
        delay = float(json.load(fh).get("reboot_delay", 3.0))
    core = client.CoreV1Api(config.new_client_from_config(config_file=os.path.join(state_dir, "kubeconfig")))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    busy = set()
    lock = threading.Lock()

    def worker(name, root):
        try:
            if os.path.exists(os.path.join(state_dir, "nodes", name, "realnode.json")):
                from nodewright_sim.realnodes import reboot_real_node
                new_id = reboot_real_node(state_dir, name, delay)
            else:
                new_id = reboot_node(core, name, root, delay)
            print("rebooted %s boot_id=%s" % (name, new_id), flush=True)
        except Exception as exc:  # keep supervising the other nodes
            print("reboot of %s failed: %s" % (name, exc), flush=True)
        finally:
            with lock:
                busy.discard(name)

    pattern = os.path.join(state_dir, "nodes", "*", "root", hostroot.REBOOT_REQUEST)
    while not stop.is_set():
        # Every node's request file is looked for each pass: a fleet of thousands is
        # looked at less often (0.5 s up to 1,000 nodes, 2.5 s at 5,000).
        try:
            interval = max(0.5, len(os.listdir(os.path.join(state_dir, "nodes"))) / 2000.0)
        except OSError:
            interval = 0.5
        for request in glob.glob(pattern):
            root = request[: -len(hostroot.REBOOT_REQUEST) - 1]
            name = os.path.basename(os.path.dirname(root))
            with lock:
                if name in busy:
                    continue
                busy.add(name)
            os.unlink(request)
            threading.Thread(target=worker, args=(name, root), daemon=True).start()
        stop.wait(interval)


if __name__ == "__main__":
    main(sys.argv[1])
