# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The GPU health gate: a node's GPUs are checked before it returns to work.

A NodeWright resource's ``gpuHealthGate`` (opt-in) asks, after the packages and the
interrupt and before the uncordon, that:

- ``nvidia-smi`` sees as many GPUs as the node's allocatable ``nvidia.com/gpu`` had
  before maintenance (a GPU that fell off the bus at the reboot is missing here);
- each GPU's persistence mode and ECC mode are as the gate asks (``persistenceMode``,
  ``eccMode``; unchecked when not set);
- the kernel log of this boot has no NVIDIA Xid (``NVRM: Xid``);
- every NVLink the GPUs have is up (``nvidia-smi nvlink --status``; a product
  without NVLink lists no link and passes);
- ``dcgmi diag -r N`` passes where DCGM is installed (``dcgmDiagLevel``, 1 by
  default, 0 for none).

A node that fails stays cordoned and is marked erroring with every check that
failed. Parsing and judging are pure functions over the commands' output.
"""

from __future__ import annotations

import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

GPU_RESOURCE = "nvidia.com/gpu"
MODES = ("Enabled", "Disabled")
FIELDS = ("enabled", "persistenceMode", "eccMode", "dcgmDiagLevel")
DEFAULT_DCGM_LEVEL = 1

QUERY = ["nvidia-smi", "--query-gpu=index,persistence_mode,ecc.mode.current", "--format=csv,noheader"]
NVLINK = ["nvidia-smi", "nvlink", "--status"]
KERNEL_LOG = ["journalctl", "-k", "-b", "--no-pager", "-q"]
# Hosts without journald (minimal images, some GPU VMs) have the kernel's ring buffer.
KERNEL_RING = ["dmesg"]
HAS_DCGMI = ["sh", "-c", "command -v dcgmi"]


def dcgm_diag(level):
    return ["dcgmi", "diag", "-r", str(level)]


_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")
_LINK = re.compile(r"^\s*Link (\d+): (.*)$")
_GPU = re.compile(r"^GPU (\d+):")


def parse_gate(value, where="spec.gpuHealthGate"):
    """The gate's settings (``enabled``, ``persistence_mode``, ``ecc_mode``,
    ``dcgm_level``), or None when it is not enabled; ValidationError names the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError("must be a mapping", field=where,
                              hint="e.g. gpuHealthGate: {enabled: true, persistenceMode: Enabled, eccMode: Enabled}")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise ValidationError("unknown field(s) %s" % ", ".join(unknown), field=where,
                              hint="allowed: %s" % ", ".join(FIELDS))
    enabled = value.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ValidationError("must be true or false", field=where + ".enabled")
    for key in ("persistenceMode", "eccMode"):
        if key in value and value[key] not in MODES:
            raise ValidationError("must be Enabled or Disabled, got %r" % (value[key],), field="%s.%s" % (where, key))
    level = value.get("dcgmDiagLevel", DEFAULT_DCGM_LEVEL)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 4:
        raise ValidationError("must be a whole number 0-4 (0: no DCGM diagnostic), got %r" % (level,),
                              field=where + ".dcgmDiagLevel")
    if not enabled:
        return None
    return {"persistence_mode": value.get("persistenceMode"), "ecc_mode": value.get("eccMode"),
            "dcgm_level": level}


def allocatable_gpus(node):
    """The node's allocatable ``nvidia.com/gpu`` (0 without any)."""
    value = (((node or {}).get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def parse_query(text):
    """``nvidia-smi --query-gpu=index,persistence_mode,ecc.mode.current`` -> [(index, persistence, ecc)]."""
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append((int(parts[0]), parts[1], parts[2]))
    return gpus


def down_links(text):
    """``nvidia-smi nvlink --status`` -> ["GPU g link l: state"] for every link not up."""
    down, gpu = [], None
    for line in (text or "").splitlines():
        m = _GPU.match(line)
        if m:
            gpu = int(m.group(1))
            continue
        m = _LINK.match(line)
        if m and ("inactive" in m.group(2).lower() or "down" in m.group(2).lower()):
            down.append("GPU %s link %s: %s" % (gpu, m.group(1), m.group(2).strip()))
    return down


def xids(text):
    """Xid errors in a kernel log -> ["Xid N (PCI)"]."""
    return ["Xid %s (%s)" % (m.group(2), m.group(1)) for m in _XID.finditer(text or "")]


def read_kernel_log(run):
    """``((rc, output), note)``: the kernel log of this boot through ``run(argv)`` -> ``(rc,
    output)``, from journald or else the ring buffer; ``(None, note)`` when neither can be
    read, the note saying that Xid errors were not checked (the gate says so, rather than
    passing as if it had looked)."""
    first = run(KERNEL_LOG)
    if first[0] == 0:
        return first, None
    ring = run(KERNEL_RING)
    if ring[0] == 0:
        return ring, None
    return None, "Xid errors not checked: the kernel log cannot be read (journalctl -k: exit %s; dmesg: exit %s)" % (
        first[0], ring[0])


def judge(gate, expected, query, nvlink=None, kernel_log=None, dcgm=None):
    """Every failed check as ``{"check", "message"}``; [] when the GPUs are healthy.

    ``expected``: GPUs the node had before maintenance; ``query``/``nvlink``/``kernel_log``:
    ``(rc, output)`` of QUERY, NVLINK and KERNEL_LOG; ``dcgm``: ``(rc, output)`` of the
    diagnostic, or None where DCGM is not installed or the gate asks for none."""
    failures = []
    rc, out = query
    gpus = parse_query(out) if rc == 0 else []
    if rc != 0:
        failures.append({"check": "nvidia-smi", "message": "nvidia-smi failed (exit %s): %s"
                         % (rc, " ".join((out or "").split())[:300] or "no output")})
    elif len(gpus) != expected:
        failures.append({"check": "gpu-count", "message": "nvidia-smi sees %d GPU(s), the node had %d (allocatable "
                                                          "%s before maintenance)" % (len(gpus), expected,
                                                                                      GPU_RESOURCE)})
    for key, label, pos in (("persistence_mode", "persistence mode", 1), ("ecc_mode", "ECC mode", 2)):
        want = gate.get(key)
        if want and gpus:
            wrong = ["GPU %d: %s" % (g[0], g[pos]) for g in gpus if g[pos] != want]
            if wrong:
                failures.append({"check": key.replace("_", "-"), "message": "%s is not %s on %s"
                                 % (label, want, ", ".join(wrong))})
    if nvlink is not None:
        nrc, nout = nvlink
        if nrc != 0:
            failures.append({"check": "nvlink", "message": "nvidia-smi nvlink --status failed (exit %s)" % nrc})
        else:
            down = down_links(nout)
            if down:
                failures.append({"check": "nvlink", "message": "NVLink down: %s" % ", ".join(down)})
    if kernel_log is not None:
        found = xids(kernel_log[1])
        if found:
            failures.append({"check": "xid", "message": "Xid error(s) in the kernel log since the boot: %s"
                             % ", ".join(found)})
    if dcgm is not None:
        drc, dout = dcgm
        if drc != 0 or re.search(r"\bFail\b", dout or ""):
            failed = [" ".join(line.split()) for line in (dout or "").splitlines() if re.search(r"\bFail\b", line)]
            failures.append({"check": "dcgm", "message": "dcgmi diag -r %d failed (exit %s)%s"
                             % (gate["dcgm_level"], drc, (": " + "; ".join(failed[:5])) if failed else "")})
    return failures


def summary(failures):
    return "; ".join(f["message"] for f in failures)


def check(run, gate, expected, node):
    """The gate on ``node``, expecting ``expected`` GPUs: ``run(argv) -> (rc, output)`` runs a
    command on its host. The task result: failed, with ``gpu_failures``, when the GPUs fail."""
    query = run(QUERY)
    nvlink = run(NVLINK) if query[0] == 0 else None
    kernel_log, unchecked = read_kernel_log(run)
    dcgm = None
    if gate.get("dcgm_level") and run(HAS_DCGMI)[0] == 0:
        dcgm = run(dcgm_diag(gate["dcgm_level"]))
    failures = judge(gate, expected, query, nvlink, kernel_log, dcgm)
    checked = "%d GPU(s)%s" % (expected, ", DCGM level %d" % gate["dcgm_level"] if dcgm is not None else "")
    if failures:
        return {"failed": True, "changed": False, "gpu_failures": failures,
                "msg": "node %s failed its GPU health gate: %s; it stays cordoned for triage"
                       % (node, summary(failures))}
    return {"changed": False, "msg": "GPU health gate passed (%s)%s" % (checked, "; " + unchecked if unchecked else "")}
