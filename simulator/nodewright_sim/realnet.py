"""The network of the simulator's real nodes: one network namespace per simulator.

The kubelets, their container runtimes and every pod of the real nodes live in a
network namespace of their own, so the bridges, pod interfaces, addresses, routes and
per-namespace kernel settings (``net.ipv4.ip_forward``) that a node's CNI creates never
touch the machine's network. One veth pair links it to the machine: the machine side
routes the simulator's pod range into the namespace (the API server reaches the
kubelets and pod IPs that way), and the namespace side carries the node IPs.

This process holds the namespace: it enters a new one at start, waits until the
simulator has configured it, then forwards two addresses in the namespace to the
API server, which listens on the machine's loopback only:

* ``127.0.0.1:<api port>``: what the kubelets' kubeconfigs name, as on the machine;
* ``<service IP>:443``: the ``kubernetes`` Service that pods reach in-cluster (what
  kube-proxy would do on a real cluster).

Each forwarded connection is made from a thread that has entered the machine's
namespace; the namespace and its veth pair disappear with the last process in it.

    python -m nodewright_sim.realnet STATE_DIR
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
_libc = ctypes.CDLL(None, use_errno=True)


def unshare(flags):
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "unshare: %s" % os.strerror(err))


def setns(fd, nstype):
    if _libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: %s" % os.strerror(err))


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _handle(client, upstream, machine_fd):
    try:
        setns(machine_fd, CLONE_NEWNET)  # this thread only: the upstream socket is the machine's
        up = socket.create_connection(upstream, timeout=10)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    other = threading.Thread(target=_pipe, args=(up, client), daemon=True)
    other.start()
    _pipe(client, up)
    other.join()
    client.close()
    up.close()


def _serve(listener, upstream, machine_fd):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_handle, args=(client, upstream, machine_fd), daemon=True).start()


def main(state_dir):
    net_dir = os.path.join(state_dir, "realnet")
    machine_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    unshare(CLONE_NEWNET)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with open(os.path.join(net_dir, "netns-ready"), "w") as fh:
        fh.write("%d\n" % os.getpid())
    go = os.path.join(net_dir, "configured.json")
    deadline = time.time() + 120
    while not os.path.exists(go):
        if time.time() > deadline or not os.path.isdir(net_dir):
            return 1
        time.sleep(0.05)
    with open(go) as fh:
        cfg = json.load(fh)
    upstream = ("127.0.0.1", int(cfg["apiserver_port"]))
    listeners = []
    for host, port in cfg["listen"]:
        ls = socket.create_server((host, int(port)), backlog=128)
        listeners.append(ls)
        threading.Thread(target=_serve, args=(ls, upstream, machine_fd), daemon=True).start()
    with open(os.path.join(net_dir, "listening"), "w") as fh:
        fh.write("ok\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
