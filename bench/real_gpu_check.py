#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Read-only check of NodeWright's GPU code against a real NVIDIA driver.

On a machine with NVIDIA GPUs it runs the commands NodeWright runs on a node (nothing
that changes the GPUs or the host) and feeds their real output to the product's own
parsers: accelerator detection (``node/gpu.py``, ``nvidia-smi --query-gpu=name,compute_cap``),
and every check of the GPU health gate (``node/gpu_health.py``: GPU count, persistence and
ECC mode, NVLink, Xid errors in the kernel log, the DCGM diagnostic where installed), so
that the simulator's stand-ins can be held to the real formats. It prints a report and,
with ``--out DIR``, writes ``report.json`` and each command's raw output there.

    python3 bench/real_gpu_check.py --out /tmp/gpu-check

Needs nothing but Python 3 and the repository; no simulator, no Ansible.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def importable_collection():
    """Make ``ansible_collections.nodewright.fleet`` importable from this checkout."""
    root = tempfile.mkdtemp(prefix="nodewright-gpu-check-")
    os.makedirs(os.path.join(root, "ansible_collections", "nodewright"))
    os.symlink(REPO, os.path.join(root, "ansible_collections", "nodewright", "fleet"))
    sys.path.insert(0, root)


def run(argv, timeout=120):
    """``(rc, output)`` of a read-only command; rc None when it cannot be started."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "%s: %s" % (type(exc).__name__, exc)
    return proc.returncode, proc.stdout + (proc.stderr if proc.returncode else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="directory for report.json and the raw outputs")
    parser.add_argument("--dcgm-level", type=int, default=1, help="dcgmi diag level where DCGM is installed (1: quick)")
    args = parser.parse_args(argv)
    importable_collection()
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
    from ansible_collections.nodewright.fleet.plugins.module_utils.node import gpu, gpu_health

    raw = {}
    report = {"host": platform.node(), "arch": platform.machine(), "checks": {}}
    name_rc, names = raw["name_compute_cap"] = run(["nvidia-smi", "--query-gpu=name,compute_cap",
                                                    "--format=csv,noheader"])
    try:
        detected = gpu.detect_accelerator_from_nvidia_smi(names, platform.machine()) if name_rc == 0 else None
        report["checks"]["accelerator"] = {"ok": detected is not None, "detected": detected,
                                           "error": None if detected else "nvidia-smi exit %s" % name_rc}
    except NodeWrightError as exc:
        report["checks"]["accelerator"] = {"ok": False, "error": str(exc)}

    query = raw["health_query"] = run(gpu_health.QUERY)
    gpus = gpu_health.parse_query(query[1]) if query[0] == 0 else []
    nvlink = raw["nvlink_status"] = run(gpu_health.NVLINK)
    kernel = raw["kernel_log"] = run(gpu_health.KERNEL_LOG)
    has_dcgm = run(gpu_health.HAS_DCGMI)[0] == 0
    dcgm = raw["dcgm_diag"] = run(gpu_health.dcgm_diag(args.dcgm_level), timeout=600) if has_dcgm else None
    gate = {"persistence_mode": None, "ecc_mode": None, "dcgm_level": args.dcgm_level}
    failures = gpu_health.judge(gate, len(gpus), query, nvlink=nvlink if nvlink[0] is not None else None,
                                kernel_log=kernel if kernel[0] == 0 else None,
                                dcgm=dcgm if dcgm is not None else None)
    report["checks"]["health_query"] = {"ok": query[0] == 0 and bool(gpus), "gpus": gpus,
                                        "lines": len([ln for ln in query[1].splitlines() if ln.strip()])
                                        if query[0] == 0 else 0}
    report["checks"]["nvlink"] = {"ran": nvlink[0] is not None, "rc": nvlink[0],
                                  "links": sum(1 for ln in nvlink[1].splitlines() if ln.strip().startswith("Link ")),
                                  "down": gpu_health.down_links(nvlink[1]) if nvlink[0] == 0 else None}
    report["checks"]["kernel_log"] = {"readable": kernel[0] == 0, "xids": gpu_health.xids(kernel[1])
                                      if kernel[0] == 0 else None, "rc": kernel[0]}
    report["checks"]["dcgm"] = {"installed": has_dcgm, "rc": dcgm[0] if dcgm else None}
    report["gate"] = {"failures": failures, "healthy": not failures}
    # Every line of the query must have parsed into a GPU: a format the parser does not
    # read would make a healthy node look as if it lost GPUs.
    report["parsers_read_everything"] = query[0] == 0 and report["checks"]["health_query"]["lines"] == len(gpus)

    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "report.json"), "w") as fh:
            fh.write(text + "\n")
        for key, value in raw.items():
            if value is not None:
                with open(os.path.join(args.out, key + ".txt"), "w") as fh:
                    fh.write("# rc %s\n%s" % (value[0], value[1]))
    return 0 if report["checks"]["accelerator"]["ok"] and report["parsers_read_everything"] else 1


if __name__ == "__main__":
    sys.exit(main())
