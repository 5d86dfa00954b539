#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The floor of a no-op rollout: the least any tool must do per node, with nothing
else. One Python process, 25 threads; per node three Node PATCHes (in progress, the
package's state, done) and one exec inside the node's host root (chroot) that writes a
state file. No health gate, no waves, no drain, no status, no error handling beyond
counting failures.

    python bench/floor.py --kubeconfig PATH [--selector type=kwok] [--threads 25]

Prints one JSON line: nodes, done, failed, wall_s.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

from kubernetes import client, config

HOST_ROOT = "sim.nodewright.io/host-root"
LABEL = "bench.nodewright.io/floor"
STATE_FILE = "/var/lib/nodewright-floor/state"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    ap.add_argument("--selector", default="type=kwok")
    ap.add_argument("--threads", type=int, default=25)
    args = ap.parse_args()
    start = time.time()
    config.load_kube_config(args.kubeconfig)
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = args.threads
    core = client.CoreV1Api(client.ApiClient(cfg))
    resp = core.list_node(label_selector=args.selector, _preload_content=False, _headers={
        "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
    nodes = [(item["metadata"]["name"], (item["metadata"].get("annotations") or {}).get(HOST_ROOT))
             for item in json.loads(resp.data).get("items") or []]

    def patch(name, body):
        resp = core.patch_node(name, body, _preload_content=False)
        resp.read()  # the whole response, before the connection goes back to the pool
        resp.release_conn()

    def one(node):
        name, root = node
        patch(name, {"metadata": {"labels": {LABEL: "in-progress"}}})
        proc = subprocess.run(["chroot", root, "/bin/sh", "-c", "mkdir -p %s && echo done > %s"
                               % (os.path.dirname(STATE_FILE), STATE_FILE)],
                              env={"PATH": PATH, "HOME": "/root"}, capture_output=True)
        if proc.returncode != 0:
            raise RuntimeError("%s: %s" % (name, proc.stderr.decode(errors="replace").strip()))
        patch(name, {"metadata": {"annotations": {LABEL + "-state": json.dumps({"noop": "1.0.0"})}}})
        patch(name, {"metadata": {"labels": {LABEL: "done"}}})

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.threads) as pool:
        for node, fut in zip(nodes, [pool.submit(one, n) for n in nodes]):
            try:
                fut.result()
            except Exception as exc:  # counted, then reported
                failed.append("%s: %s %s" % (node[0], type(exc).__name__, str(exc)[:300]))
    print(json.dumps({"nodes": len(nodes), "done": len(nodes) - len(failed), "failed": failed[:5],
                      "wall_s": round(time.time() - start, 2)}))
    return 1 if failed or not nodes else 0


if __name__ == "__main__":
    sys.exit(main())
