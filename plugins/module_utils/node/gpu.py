# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which NVIDIA GPU a node has: the labels GPU Feature Discovery (and GKE) set, the
accelerators NodeWright knows, and detection from the labels or from ``nvidia-smi``.

The inventory's GPU facts (``node/facts.py``) and NVIDIA tuning (``tuning/``) both use
it. Stdlib only.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

# GPU Feature Discovery labels (and GKE's accelerator label).
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"

# Accelerators in match order: GH200 before H200, GB300 before B300, GB200 before B200
# (a product name such as "NVIDIA-GH200-480GB" contains "H200").
ACCELERATORS = (
    {"name": "gh200", "family": "hopper", "arch": "arm64", "compute": "9.0", "form_factor": "superchip"},
    {"name": "h200", "family": "hopper", "arch": "amd64", "compute": "9.0", "form_factor": "sxm"},
    {"name": "h100", "family": "hopper", "arch": "amd64", "compute": "9.0", "form_factor": "sxm"},
    {"name": "gb300", "family": "blackwell", "arch": "arm64", "compute": "10.3", "form_factor": "superchip"},
    {"name": "b300", "family": "blackwell", "arch": "amd64", "compute": "10.3", "form_factor": "sxm"},
    {"name": "gb200", "family": "blackwell", "arch": "arm64", "compute": "10.0", "form_factor": "superchip"},
    {"name": "b200", "family": "blackwell", "arch": "amd64", "compute": "10.0", "form_factor": "sxm"},
)
ACCELERATOR_NAMES = tuple(a["name"] for a in ACCELERATORS)

_ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def normalize_arch(arch):
    """``x86_64``/``amd64`` -> ``amd64``; ``aarch64``/``arm64`` -> ``arm64``; else None."""
    if not arch:
        return None
    return _ARCH_ALIASES.get(str(arch).strip().lower())


def _match_product(product):
    text = str(product or "").upper().replace(" ", "-")
    for accel in ACCELERATORS:
        if accel["name"].upper() in text:
            return accel
    return None


def _form_factor(accel, product):
    text = str(product or "").upper()
    if accel["form_factor"] == "sxm" and ("PCIE" in text or "NVL" in text.replace("NVLINK", "")):
        return "pcie"
    return accel["form_factor"]


def _from_compute(major, minor, arch):
    if major is None or arch is None:
        return []
    compute = "%s.%s" % (major, minor if minor is not None else 0)
    return [a for a in ACCELERATORS if a["compute"] == compute and a["arch"] == arch]


def _result(accel, product, compute, arch, source, warnings):
    if compute and compute != accel["compute"]:
        warnings.append("compute capability %s does not match %s (%s)"
                        % (compute, accel["name"].upper(), accel["compute"]))
    if arch and arch != accel["arch"]:
        warnings.append("node architecture %s does not match %s (%s)"
                        % (arch, accel["name"].upper(), accel["arch"]))
    return {
        "accelerator": accel["name"], "family": accel["family"], "arch": accel["arch"],
        "form_factor": _form_factor(accel, product), "product": product or None,
        "compute_capability": compute or accel["compute"], "source": source,
        "warnings": warnings,
    }


def _undetectable(detected, hint):
    seen = ", ".join("%s=%r" % kv for kv in detected.items()) or "no GPU information"
    raise ValidationError(
        "cannot tell which NVIDIA accelerator this is (detected: %s); supported: %s"
        % (seen, ", ".join(ACCELERATOR_NAMES)), field="accelerator", hint=hint)


def detect_accelerator(labels):
    """Tell the accelerator from GPU Feature Discovery labels.

    Uses ``nvidia.com/gpu.product`` first, then GKE's ``cloud.google.com/gke-accelerator``,
    then the compute capability with ``kubernetes.io/arch``. Returns a dict with
    ``accelerator``, ``family``, ``arch``, ``form_factor``, ``product``,
    ``compute_capability``, ``source`` and ``warnings``; raises ``ValidationError``
    saying what was detected when nothing matches.
    """
    labels = labels or {}
    if not isinstance(labels, dict):
        raise ValidationError("node labels must be a mapping, got %s" % type(labels).__name__,
                              field="labels")
    product = labels.get(LABEL_PRODUCT)
    major, minor = labels.get(LABEL_MAJOR), labels.get(LABEL_MINOR)
    compute = "%s.%s" % (major, minor if minor is not None else 0) if major is not None else None
    arch = normalize_arch(labels.get(LABEL_ARCH))
    warnings = []
    for source in (LABEL_PRODUCT, LABEL_GKE_ACCELERATOR):
        accel = _match_product(labels.get(source))
        if accel:
            return _result(accel, labels.get(source), compute, arch, source, warnings)
    candidates = _from_compute(major, minor, arch)
    if len(candidates) == 1:
        return _result(candidates[0], product, compute, arch, "compute capability", warnings)
    detected = {k: labels[k] for k in (LABEL_PRODUCT, LABEL_GKE_ACCELERATOR, LABEL_FAMILY,
                                       LABEL_MAJOR, LABEL_MINOR, LABEL_ARCH) if k in labels}
    hint = "set nvidia_tuning_accelerator explicitly"
    if len(candidates) > 1:
        hint = ("compute capability %s on %s fits %s; set nvidia_tuning_accelerator explicitly"
                % (compute, arch, " or ".join(a["name"] for a in candidates)))
    _undetectable(detected, hint)


def detect_accelerator_from_nvidia_smi(output, arch=None):
    """Tell the accelerator from ``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader``.

    Extra columns (such as ``pci.device_id``) are ignored. ``arch`` is the host's
    ``uname -m`` (optional). Every GPU of the host must be the same accelerator.
    """
    arch = normalize_arch(arch)
    rows = []
    for line in str(output or "").splitlines():
        cols = [c.strip() for c in line.split(",")]
        if not cols or not cols[0]:
            continue
        rows.append((cols[0], cols[1] if len(cols) > 1 and cols[1] else None))
    if not rows:
        raise ValidationError("nvidia-smi listed no GPU", field="accelerator",
                              hint="is the NVIDIA driver loaded? or set nvidia_tuning_accelerator")
    found = {}
    for name, compute in rows:
        accel = _match_product(name)
        if accel is None and compute and arch:
            major, dummy, minor = compute.partition(".")
            cands = _from_compute(major, minor or "0", arch)
            accel = cands[0] if len(cands) == 1 else None
        if accel is None:
            _undetectable({"name": name, "compute_cap": compute, "arch": arch},
                          "set nvidia_tuning_accelerator explicitly")
        found.setdefault(accel["name"], (accel, name, compute))
    if len(found) > 1:
        raise ValidationError(
            "the host mixes accelerators: %s" % ", ".join(
                "%s (%s)" % (v[1], k) for k, v in sorted(found.items())),
            field="accelerator", hint="tune such hosts with an explicit nvidia_tuning_accelerator")
    accel, name, compute = next(iter(found.values()))
    return _result(accel, name, compute, arch, "nvidia-smi", [])
