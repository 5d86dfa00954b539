"""``nodewright-sim``: run the local GPU-fleet simulator.

    nodewright-sim up [--profile dev|mixed|large|all-gpus|bare] [--nodes N] [--real-nodes N] [--name NAME]
    nodewright-sim down | status | kubeconfig
    nodewright-sim reboot NODE [--wait]
    nodewright-sim add-nodes --pool POOL --count N [--taint KEY=VALUE:EFFECT]
    nodewright-sim host-root NODE | exec NODE -- COMMAND [ARG...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from nodewright_sim import hostroot
from nodewright_sim.cluster import KUBELET_LEASE_SECONDS, Cluster, SimulatorError, heartbeat_settings, rss_kib
from nodewright_sim.fleet import GPUS, PROFILES, Fleet, create_fleet, profile_names
from nodewright_sim.realnodes import RealNodes, preflight


def _parse_taint(text):
    try:
        kv, effect = text.rsplit(":", 1)
        key, _, value = kv.partition("=")
    except ValueError:
        raise SimulatorError("a taint is KEY[=VALUE]:EFFECT, got %r" % text)
    if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise SimulatorError("taint effect must be NoSchedule, PreferNoSchedule or NoExecute, got %r" % effect)
    return {"key": key, "value": value, "effect": effect}


def cmd_up(args):
    cluster = Cluster(args.name)
    if args.profile not in PROFILES:
        raise SimulatorError("unknown fleet profile %r; known profiles: %s" % (args.profile, ", ".join(profile_names())))
    # What this machine must have is checked before anything starts (the binaries by up()).
    hostroot.check_prerequisites()
    if args.real_nodes < 0:
        raise SimulatorError("--real-nodes must be zero or more")
    if args.real_nodes:
        preflight(cluster.dir)  # before anything starts: a machine that cannot run them changes nothing
    t0 = time.time()
    nodes = args.nodes if args.nodes is not None else PROFILES[args.profile]["nodes"]
    state = cluster.up(apiserver_port=args.port, reboot_delay=args.reboot_delay, kubelet_access=bool(args.real_nodes),
                       fleet_size=max(nodes, args.max_nodes or 0))
    t1 = time.time()
    try:
        result = create_fleet(cluster, args.profile, args.nodes, wait=not args.no_wait, timeout=args.timeout)
        if args.real_nodes:
            t_real = time.time()
            result["real_nodes"] = RealNodes(cluster).up(args.real_nodes, pool=args.real_pool, timeout=args.timeout)
            result["real_nodes_seconds"] = round(time.time() - t_real, 1)
    except BaseException:
        cluster.down()
        raise
    t2 = time.time()
    state = cluster.load()
    result.update({"kubeconfig": cluster.kubeconfig, "server": state["server"],
                   "control_plane_seconds": round(t1 - t0, 1), "fleet_seconds": round(t2 - t1, 1),
                   "total_seconds": round(t2 - t0, 1),
                   "control_plane_rss_mib": rss_kib(state["pids"].values()) // 1024})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("simulator %r up in %.1fs (control plane %.1fs, fleet %.1fs): %d nodes %s, %s pods; "
              "control plane RSS %d MiB" % (args.name, result["total_seconds"], result["control_plane_seconds"],
                                            result["fleet_seconds"], result["nodes"], result["pools"],
                                            result.get("pods", "?"), result["control_plane_rss_mib"]))
        if args.real_nodes:
            print("real nodes (kubelet + containerd) Ready in %.1fs: %s" % (result["real_nodes_seconds"],
                                                                        ", ".join(result["real_nodes"])))
        print("export KUBECONFIG=%s" % cluster.kubeconfig)


def cmd_down(args):
    stopped = Cluster(args.name).down()
    print("simulator %r %s" % (args.name, "stopped" if stopped else "was not running"))


def cmd_status(args):
    cluster = Cluster(args.name)
    st = cluster.status()
    if st.get("running"):
        st["control_plane_rss_mib"] = rss_kib(p["pid"] for n, p in st["processes"].items() if n != "realnet") // 1024
    print(json.dumps(st, indent=2))
    return 0 if st.get("running") else 1


def _require_running(cluster):
    if not cluster.running():
        raise SimulatorError("simulator %r is not running; start it with `nodewright-sim up`" % cluster.name)


def cmd_kubeconfig(args):
    cluster = Cluster(args.name)
    _require_running(cluster)
    print(cluster.kubeconfig)


def cmd_restart(args):
    cluster = Cluster(args.name)
    took = cluster.restart(args.process, down_seconds=args.down)
    print("%s restarted (%.1fs without it)" % (args.process, took))
    return 0


def cmd_reboot(args):
    cluster = Cluster(args.name)
    _require_running(cluster)
    fleet = Fleet(cluster)
    root = fleet.host_root(args.node)
    if not os.path.isdir(root):
        raise SimulatorError("node %r has no host root in simulator %r" % (args.node, args.name))
    before = fleet.core.read_node(args.node).status.node_info.boot_id
    req = os.path.join(root, hostroot.REBOOT_REQUEST)
    os.makedirs(os.path.dirname(req), exist_ok=True)
    with open(req, "w") as fh:
        fh.write("%d\n" % time.time())
    if not args.wait:
        print("reboot of %s requested" % args.node)
        return
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        node = fleet.core.read_node(args.node)
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        if node.status.node_info.boot_id != before and ready:
            print("%s rebooted: bootID %s -> %s" % (args.node, before, node.status.node_info.boot_id))
            return
        time.sleep(0.5)
    raise SimulatorError("%s did not come back Ready with a new bootID within %ds" % (args.node, args.timeout))


def cmd_add_nodes(args):
    cluster = Cluster(args.name)
    _require_running(cluster)
    if not args.no_host_root:
        hostroot.check_prerequisites()
    fleet = Fleet(cluster)
    names = fleet.add_nodes(args.pool, args.count, taints=[_parse_taint(t) for t in args.taint or []],
                            host_roots=not args.no_host_root, managed=not args.unmanaged)
    print("\n".join(names))
    lease = (cluster.load() or {}).get("node_lease_seconds", KUBELET_LEASE_SECONDS)
    if not args.unmanaged and len(names) > 100:
        total = len(fleet.node_names("type=kwok"))
        if heartbeat_settings(total)[0] > lease:
            print("nodewright-sim: warning: %d nodes now renew their Leases every %d s, about %d writes a second; "
                  "on a small machine they may flap between Ready and Unknown. For a fleet this size start the "
                  "simulator with `up --max-nodes %d`." % (total, lease // 4, total * 4 // lease, total),
                  file=sys.stderr)


def cmd_host_root(args):
    cluster = Cluster(args.name)
    root = Fleet(cluster).host_root(args.node) if cluster.running() else None
    if not root or not os.path.isdir(root):
        raise SimulatorError("node %r has no host root in simulator %r" % (args.node, args.name))
    print(root)


def cmd_exec(args):
    cluster = Cluster(args.name)
    _require_running(cluster)
    root = Fleet(cluster).host_root(args.node)
    if not os.path.isdir(root):
        raise SimulatorError("node %r has no host root" % args.node)
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        raise SimulatorError("exec needs a command: nodewright-sim exec NODE -- COMMAND [ARG...]")
    sys.stdout.flush()
    return hostroot.run_argv(root, argv).returncode


def build_parser():
    p = argparse.ArgumentParser(prog="nodewright-sim", description=__doc__.split("\n")[0])
    p.add_argument("--name", default=os.environ.get("NODEWRIGHT_SIM_NAME", "default"),
                   help="simulator instance name (several can run side by side)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the control plane and create a GPU fleet")
    up.add_argument("--profile", default="dev", help="fleet profile: %s" % ", ".join(profile_names()))
    up.add_argument("--nodes", type=int, help="number of nodes (default: the profile's)")
    up.add_argument("--real-nodes", type=int, default=0,
                    help="nodes run by a real kubelet and containerd beside the kwok fleet (default 0; needs root)")
    up.add_argument("--real-pool", default="h100", choices=sorted(GPUS),
                    help="GPU pool of the real nodes (labels, GPU capacity; default h100)")
    up.add_argument("--max-nodes", type=int,
                    help="the most nodes this simulator will have, add-nodes included (default: --nodes); "
                         "a fleet of more than 500 renews its nodes' Leases less often")
    up.add_argument("--port", type=int, help="kube-apiserver port (default: a free one)")
    up.add_argument("--reboot-delay", type=float, default=3.0, help="seconds a simulated reboot takes")
    up.add_argument("--timeout", type=int, default=300, help="seconds to wait for the fleet to be ready")
    up.add_argument("--no-wait", action="store_true", help="do not wait for nodes and workloads")
    up.add_argument("--json", action="store_true")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop every process and remove the state").set_defaults(func=cmd_down)
    sub.add_parser("status", help="show processes, ports, versions").set_defaults(func=cmd_status)
    sub.add_parser("kubeconfig", help="print the kubeconfig path").set_defaults(func=cmd_kubeconfig)
    rs = sub.add_parser("restart", help="stop a control-plane process and start it again (kube-apiserver, etcd, "
                                        "kube-controller-manager, kube-scheduler, kwok)")
    rs.add_argument("process")
    rs.add_argument("--down", type=float, default=0.0, help="seconds to stay down before starting again")
    rs.set_defaults(func=cmd_restart)
    rb = sub.add_parser("reboot", help="reboot a node (NotReady, new bootID, Ready)")
    rb.add_argument("node")
    rb.add_argument("--wait", action="store_true")
    rb.add_argument("--timeout", type=int, default=60)
    rb.set_defaults(func=cmd_reboot)
    an = sub.add_parser("add-nodes", help="add nodes to a pool")
    an.add_argument("--pool", required=True, choices=sorted(GPUS))
    an.add_argument("--count", type=int, default=1)
    an.add_argument("--taint", action="append", help="KEY[=VALUE]:EFFECT, repeatable")
    an.add_argument("--no-host-root", action="store_true", help="API objects only (for scale tests)")
    an.add_argument("--unmanaged", action="store_true", help="kwok does not manage these nodes")
    an.set_defaults(func=cmd_add_nodes)
    hr = sub.add_parser("host-root", help="print a node's host root directory")
    hr.add_argument("node")
    hr.set_defaults(func=cmd_host_root)
    ex = sub.add_parser("exec", help="run a command in a node's host root")
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_exec)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
    except SimulatorError as exc:
        print("nodewright-sim: %s" % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
