# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Intent-based NVIDIA host tuning: detection, profile resolution, diffs and checks.

Profiles are data (YAML layers shipped in ``roles/nvidia_tuning/files/profiles``).
Everything but the last section is pure and stdlib only: the layers come in as plain
dicts. The last section (controller side) reads the shipped layers and renders the
role's templates, for the filter plugin and for the ``nvidia-tuning`` package, whose
profile is resolved on the controller (see "The nvidia-tuning package" below).

A *layer* is a mapping::

    description: text
    inherits: [platforms/grace]          # other layers, applied first
    meta: {family: blackwell, arch: arm64, ...}
    settings:
      sysctl:   {vm.swappiness: {value: 1, why: ...}}
      cmdline:  {init_on_alloc: {value: init_on_alloc=0, why: ...}}
      module:   {ib_umad: {why: ...}}
      modprobe: {nvidia: {NVreg_CoherentGPUMemoryMode: {value: driver, why: ...}}}
      dropin:   {containerd.service: {LimitMEMLOCK: {value: infinity, why: ...}}}
      governor: {cpu: {value: performance, why: ...}}
      gpu:      {persistence: {value: enabled, why: ...}}
    remove: {"cmdline:hugepages_1G": why}   # explicit removal, the only way to drop
    constraints: {...}                      # os/ and clouds/ layers only
    activate: {option: value}               # options/ layers only
    requires: {arch: [...], reason: ...}    # options/ layers only

Layers merge setting by setting (``<mechanism>:<key>``): a later layer overrides a
value, never a whole group, so an intent cannot lose its parent's 1G huge pages by
redefining a neighbouring setting. Order: ``base``, the accelerator's chain
(platforms first), the intent's chain, the OS, the cloud, the active options, and
the caller's ``extra`` layer.

Interrupts use the package vocabulary ``{type: reboot|restartAllServices|service|
noop, services: [...]}``; only a changed kernel command line or a changed option of
a driver that loads at boot asks for a reboot.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

# --------------------------------------------------------------------------------------
# Vocabulary

MECHANISMS = ("cmdline", "sysctl", "module", "modprobe", "dropin", "governor", "gpu")
_GROUPED = ("modprobe", "dropin")
LAYER_KINDS = {
    "base": "base", "platforms": "platform", "accelerators": "accelerator",
    "intents": "intent", "os": "os", "clouds": "cloud", "options": "option",
}
EXPLICIT_KINDS = ("option", "extra")

OPTION_SPECS = {
    "acs_override": {"type": bool, "default": False,
                     "help": "turn PCIe ACS redirection off (x86-64 HGX only; weakens isolation)"},
    "driver_source": {"choices": ("host", "gpu-operator"), "default": "host",
                      "help": "who loads the NVIDIA driver"},
    "page_size": {"choices": ("4k", "64k"), "default": "4k",
                  "help": "kernel page size (arm64 64K kernels have no 1G huge pages)"},
    "form_factor": {"choices": ("auto", "sxm", "pcie"), "default": "auto",
                    "help": "GPU board form factor; auto takes it from the accelerator"},
    "power_profile": {"type": bool, "default": True,
                      "help": "request the intent's Blackwell workload power profile"},
}

GPU_KEYS = ("persistence", "fabricmanager", "workload_power_profile")
# What the power-profile unit runs ({profile_id}: NVML's number, {profile}: its name);
# the syntax depends on the driver release, so the role and the package take another.
DEFAULT_POWER_PROFILE_COMMAND = "/usr/bin/nvidia-smi workload-power-profile --set --profile-id {profile_id}"

# NVML nvmlPowerProfileType_t (Blackwell and newer).
POWER_PROFILES = {
    "MAX_P": 0, "MAX_Q": 1, "COMPUTE": 2, "MEMORY_BOUND": 3, "NETWORK": 4, "BALANCED": 5,
    "LLM_INFERENCE": 6, "LLM_TRAINING": 7, "RBM": 8, "DCPCIE": 9, "HMMA_SPARSE": 10,
    "HMMA_DENSE": 11, "SYNC_BALANCED": 12, "HPC": 13, "MIG": 14,
}

# Keys that look like sysctls in old tuning guides but are not sysctls on the
# kernels NodeWright supports (all >= 5.14): since 5.13 the CFS tunables live in
# debugfs (/sys/kernel/debug/sched/), and since 6.6 (EEVDF) most are gone.
KNOWN_NON_SYSCTLS = {
    "kernel.sched_latency_ns": "moved to debugfs (sched/latency_ns) in 5.13, removed by EEVDF in 6.6",
    "kernel.sched_min_granularity_ns": "moved to debugfs (sched/min_granularity_ns) in 5.13, "
                                       "replaced by sched/base_slice_ns in 6.6",
    "kernel.sched_wakeup_granularity_ns": "moved to debugfs in 5.13, removed by EEVDF in 6.6",
    "kernel.sched_migration_cost_ns": "moved to debugfs (sched/migration_cost_ns) in 5.13",
    "kernel.sched_nr_migrate": "moved to debugfs (sched/nr_migrate) in 5.13",
    "kernel.sched_tunable_scaling": "moved to debugfs (sched/tunable_scaling) in 5.13",
}

INTERRUPT_TYPES = ("noop", "service", "restartAllServices", "reboot")
_INTERRUPT_RANK = {t: i for i, t in enumerate(INTERRUPT_TYPES)}
NOOP = {"type": "noop", "services": []}

# Files written on the host, relative to the host root (one home for every path).
FILE_PREFIX = "90-nodewright-nvidia"
SYSCTL_FILE = "etc/sysctl.d/%s.conf" % FILE_PREFIX
GRUB_FILE = "etc/default/grub.d/%s.cfg" % FILE_PREFIX
MODPROBE_FILE = "etc/modprobe.d/%s.conf" % FILE_PREFIX
MODULES_FILE = "etc/modules-load.d/%s.conf" % FILE_PREFIX
WANTS_FILE = "etc/systemd/system/multi-user.target.d/%s.conf" % FILE_PREFIX
GOVERNOR_UNIT = "nodewright-cpu-governor.service"
POWER_PROFILE_UNIT = "nodewright-gpu-power-profile.service"
STATE_FILE = "etc/nodewright/nvidia-tuning.json"
SYSTEMD_UNIT_DIR = "etc/systemd/system"
SYSTEMD_NETWORK_DIR = "etc/systemd/network"

GPU_UNITS = {
    "persistence": "nvidia-persistenced.service",
    "fabricmanager": "nvidia-fabricmanager.service",
    "workload_power_profile": POWER_PROFILE_UNIT,
}

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
_ACCEL_BY_NAME = {a["name"]: a for a in ACCELERATORS}

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"

_ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_SYSCTL_KEY_RE = re.compile(r"^[a-z0-9_][a-z0-9_\-]*(\.[A-Za-z0-9_\-]+)+$")
_CMDLINE_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.\-]+(=[^\s\"']+)?$")
_MODULE_RE = re.compile(r"^[a-z0-9_\-]+$")
_OPTION_RE = re.compile(r"^[A-Za-z0-9_]+$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9@_.\-]+\.(service|socket|target|mount|timer|link|network|netdev)$")
_DIRECTIVE_RE = re.compile(r"^[A-Z][A-Za-z0-9]+$")
# Kernel parameters that may legitimately appear more than once on a command line.
_REPEATABLE_PARAMS = ("console", "pci", "hugepagesz", "hugepages")


def _where(layer, mechanism, key=None):
    return "%s: settings.%s%s" % (layer, mechanism, "." + key if key else "")


# --------------------------------------------------------------------------------------
# Detection


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
            major, _, minor = compute.partition(".")
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


def detect_cloud(labels):
    """``eks``, ``gke`` or None, from the node's labels."""
    for key in (labels or {}):
        if key.startswith("eks.amazonaws.com/"):
            return "eks"
        if key.startswith("cloud.google.com/gke-"):
            return "gke"
    return None


_OS_MAP = (("ubuntu", "22.04", "ubuntu-22.04"), ("ubuntu", "24.04", "ubuntu-24.04"),
           ("debian", "12", "debian-12"), ("rhel", "9", "rhel-9"))


def os_from_os_release(text):
    """The tuning OS name (``ubuntu-24.04``, ``rhel-9``, ``cos`` ...) from /etc/os-release."""
    fields = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            fields[key] = value.strip().strip("\"'")
    os_id = fields.get("ID", "").lower()
    like = fields.get("ID_LIKE", "").lower().split()
    version = fields.get("VERSION_ID", "")
    if os_id == "cos":
        return "cos"
    ids = [os_id] + like
    for want_id, want_version, name in _OS_MAP:
        if want_id in ids and (version == want_version or
                               (want_id in ("rhel", "debian") and version.split(".")[0] == want_version)):
            return name
    raise ValidationError(
        "unsupported operating system %s %s (%s)" % (
            fields.get("ID", "?"), version or "?", fields.get("PRETTY_NAME", "no PRETTY_NAME")),
        field="os", hint="supported: %s, cos; or set nvidia_tuning_os" % ", ".join(
            n for _, _, n in _OS_MAP))


# Kubernetes reports the OS as status.nodeInfo.osImage (PRETTY_NAME of os-release).
_OS_IMAGES = (
    (re.compile(r"^container-optimized os\b"), "cos"),
    (re.compile(r"^ubuntu 22\.04\b"), "ubuntu-22.04"),
    (re.compile(r"^ubuntu 24\.04\b"), "ubuntu-24.04"),
    (re.compile(r"^debian gnu/linux 12\b"), "debian-12"),
    (re.compile(r"^(red hat enterprise linux|rocky linux|almalinux|centos stream|oracle linux server) 9\b"),
     "rhel-9"),
)


def os_from_os_image(text):
    """The tuning OS name from a node's ``status.nodeInfo.osImage`` (``Ubuntu 24.04.1 LTS``)."""
    image = " ".join(str(text or "").lower().split())
    for pattern, name in _OS_IMAGES:
        if pattern.match(image):
            return name
    raise ValidationError(
        "unsupported operating system %r (the node's status.nodeInfo.osImage)" % (text or ""),
        field="os", hint="supported: %s, cos; or set os explicitly" % ", ".join(n for _, _, n in _OS_MAP))


def os_release_match(os_name):
    """``(ID, VERSION_ID)`` that /etc/os-release of a host running ``os_name`` shows; the
    ID may also come from ID_LIKE, and VERSION_ID may add a minor version (``9.4``)."""
    if os_name == "cos":
        return ("cos", "")
    for want_id, want_version, name in _OS_MAP:
        if name == os_name:
            return (want_id, want_version)
    raise ValidationError("unknown os %r" % (os_name,), field="os")


# --------------------------------------------------------------------------------------
# Interrupts


def interrupt(kind, services=()):
    """An interrupt dict; ``service`` needs at least one service."""
    if kind not in INTERRUPT_TYPES:
        raise ValidationError("unknown interrupt type %r" % (kind,), field="interrupt.type",
                              hint="one of: %s" % ", ".join(INTERRUPT_TYPES))
    services = sorted(set(services)) if kind == "service" else []
    if kind == "service" and not services:
        raise ValidationError("a service interrupt names at least one service",
                              field="interrupt.services")
    return {"type": kind, "services": services}


def merge_interrupts(*interrupts):
    """Merge interrupts: reboot > restartAllServices > service (union of services) > noop."""
    flat = []
    for item in interrupts:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        elif item:
            flat.append(item)
    best, services = "noop", set()
    for item in flat:
        kind = item.get("type") or "noop"
        if kind not in _INTERRUPT_RANK:
            raise ValidationError("unknown interrupt type %r" % (kind,), field="interrupt.type",
                                  hint="one of: %s" % ", ".join(INTERRUPT_TYPES))
        if kind == "service":
            services.update(item.get("services") or [])
        if _INTERRUPT_RANK[kind] > _INTERRUPT_RANK[best]:
            best = kind
    if best == "service":
        return {"type": "service", "services": sorted(services)}
    return {"type": best, "services": []}


def _apply_interrupt(setting):
    """What makes an added or changed setting take effect."""
    mech = setting["mechanism"]
    if setting.get("reboot"):
        return interrupt("reboot")
    if mech == "sysctl":
        return interrupt("service", ["systemd-sysctl"])
    if mech == "module":
        return interrupt("service", ["systemd-modules-load"])
    if mech == "dropin":
        unit = setting["unit"]
        if unit.endswith(".service"):
            return interrupt("service", [unit[:-len(".service")]])
        return dict(NOOP)
    if mech == "governor":
        return interrupt("service", [GOVERNOR_UNIT[:-len(".service")]])
    if mech == "gpu":
        return interrupt("service", [GPU_UNITS[setting["key"]][:-len(".service")]])
    return dict(NOOP)


def _removal_interrupt(setting):
    """What a removed setting needs, and whether its effect lingers until a reboot."""
    mech = setting.get("mechanism")
    if setting.get("reboot"):
        return interrupt("reboot"), None
    if mech == "dropin" and str(setting.get("unit", "")).endswith(".service"):
        return interrupt("service", [setting["unit"][:-len(".service")]]), None
    notes = {
        "sysctl": "the kernel keeps the value until the next reboot",
        "module": "the module stays loaded until the next reboot",
        "governor": "the CPUs keep the governor until the next reboot",
        "gpu": "the GPU keeps this state until the next reboot or driver reload",
        "dropin": "existing links keep the setting until the next reboot",
    }
    return dict(NOOP), notes.get(mech, "takes effect at the next reboot")


# --------------------------------------------------------------------------------------
# Profile resolution


def _kind_of(name):
    if name == "base":
        return "base"
    if name == "extra":
        return "extra"
    return LAYER_KINDS.get(name.split("/", 1)[0])


def catalog(profiles):
    """Valid names per kind: ``{'accelerator': [...], 'intent': [...], ...}``."""
    out = {"accelerator": [], "intent": [], "os": [], "cloud": [], "platform": [], "option": []}
    for name in sorted(profiles or {}):
        kind = _kind_of(name)
        if kind in out:
            out[kind].append(name.split("/", 1)[1])
    return out


def _layer(profiles, name, needed_by=None):
    if name not in profiles:
        raise ValidationError(
            "profile layer %r does not exist" % name, field=needed_by or "profiles",
            hint="layers: %s" % ", ".join(sorted(profiles)))
    layer = profiles[name]
    if not isinstance(layer, dict):
        raise ValidationError("profile layer %r is not a mapping" % name, field=name)
    return layer


def _linearize(profiles, name, out, stack=()):
    if name in stack:
        raise ValidationError("profile layers inherit in a cycle: %s" % " -> ".join(stack + (name,)),
                              field=name)
    if name in out:
        return
    layer = _layer(profiles, name, needed_by=stack[-1] if stack else None)
    parents = layer.get("inherits") or []
    if isinstance(parents, str):
        parents = [parents]
    for parent in parents:
        _linearize(profiles, parent, out, stack + (name,))
    if name not in out:
        out.append(name)


def _pick(profiles, kind, value, field):
    names = catalog(profiles)[kind]
    if value not in names:
        raise ValidationError(
            "unknown %s %r" % (kind, value), field=field,
            hint="valid: %s" % ", ".join(names))
    return next(n for n in profiles if _kind_of(n) == kind and n.split("/", 1)[1] == value)


def normalize_options(options):
    """Validate ``options`` and fill the defaults; unknown options list the valid ones."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_SPECS))
    if unknown:
        raise ValidationError(
            "unknown option(s) %s" % ", ".join(unknown), field="options",
            hint="valid: %s" % "; ".join("%s (%s)" % (k, v["help"]) for k, v in sorted(OPTION_SPECS.items())))
    out = {}
    for key, spec in OPTION_SPECS.items():
        value = options.get(key, spec["default"])
        if value is None:
            value = spec["default"]
        if spec.get("type") is bool:
            if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
                value = value.lower() in ("true", "yes", "on", "1")
            if not isinstance(value, bool):
                raise ValidationError("option %s must be true or false, got %r" % (key, value),
                                      field="options." + key)
        elif value not in spec["choices"]:
            raise ValidationError("option %s must be one of %s, got %r"
                                  % (key, ", ".join(spec["choices"]), value), field="options." + key)
        out[key] = value
    return out


def _matches(condition, context):
    """``condition`` maps a context key to a value or a list of accepted values."""
    for key, want in (condition or {}).items():
        if key in ("reason",):
            continue
        have = context.get(key)
        wanted = want if isinstance(want, (list, tuple)) else [want]
        have_list = have if isinstance(have, (list, tuple)) else [have]
        if not any(h in wanted for h in have_list):
            return False
    return True


def _text(value, where):
    if isinstance(value, bool) or value is None:
        raise ValidationError("expected a string or a number, got %r" % (value,), field=where,
                              hint="quote YAML words such as 'off' or 'yes'")
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v, where) for v in value)
    if isinstance(value, float):
        raise ValidationError("expected an integer or a string, got %r" % (value,), field=where)
    return " ".join(str(value).split())


def _entry(mech, raw, where):
    if isinstance(raw, dict):
        entry = dict(raw)
        if "value" not in entry and mech != "module":
            raise ValidationError("setting has no value", field=where)
        return entry
    return {"value": raw}


def _normalize_setting(mech, key, raw, layer, group=None):
    where = _where(layer, mech, (group + "." if group else "") + key)
    entry = _entry(mech, raw, where)
    setting = {"mechanism": mech, "layer": layer, "why": entry.get("why") or ""}
    if entry.get("only") is not None:
        setting["only"] = entry["only"]
    if mech == "sysctl":
        if not _SYSCTL_KEY_RE.match(key):
            raise ValidationError("%r is not a sysctl key" % key, field=where)
        if key in KNOWN_NON_SYSCTLS:
            raise ValidationError(
                "%s is not a sysctl on the kernels NodeWright supports: %s" % (key, KNOWN_NON_SYSCTLS[key]),
                field=where, hint="leave it out; 'sysctl --system' fails on unknown keys")
        setting.update(key=key, value=_text(entry["value"], where), reboot=False)
    elif mech == "cmdline":
        value = _text(entry["value"], where)
        tokens = value.split()
        if not tokens:
            raise ValidationError("empty kernel parameter", field=where)
        for token in tokens:
            if not _CMDLINE_TOKEN_RE.match(token):
                raise ValidationError("%r is not a kernel parameter (name or name=value)" % token,
                                      field=where)
        _check_hugepage_pairs(tokens, where)
        setting.update(key=key, value=value, tokens=tokens, reboot=True)
    elif mech == "module":
        if not _MODULE_RE.match(key):
            raise ValidationError("%r is not a kernel module name" % key, field=where)
        if entry.get("value", True) is not True:
            raise ValidationError("a module entry only loads the module; drop it with 'remove'",
                                  field=where)
        setting.update(key=key, value="loaded", reboot=False)
    elif mech == "modprobe":
        if not _MODULE_RE.match(group) or not _OPTION_RE.match(key):
            raise ValidationError("invalid module option %s %s" % (group, key), field=where)
        setting.update(key="%s/%s" % (group, key), module=group, option=key,
                       value=_text(entry["value"], where), reboot=bool(entry.get("reboot", True)))
    elif mech == "dropin":
        if not _UNIT_RE.match(group) or not _DIRECTIVE_RE.match(key):
            raise ValidationError("invalid systemd drop-in %s %s" % (group, key), field=where)
        setting.update(key="%s/%s" % (group, key), unit=group, directive=key,
                       section=_unit_section(group), value=_text(entry["value"], where), reboot=False)
    elif mech == "governor":
        if key != "cpu":
            raise ValidationError("the governor setting is named 'cpu'", field=where)
        setting.update(key=key, value=_text(entry["value"], where), reboot=False)
    elif mech == "gpu":
        if key not in GPU_KEYS:
            raise ValidationError("unknown GPU setting %r" % key, field=where,
                                  hint="valid: %s" % ", ".join(GPU_KEYS))
        value = _text(entry["value"], where)
        if key == "workload_power_profile":
            if value not in POWER_PROFILES:
                raise ValidationError("unknown workload power profile %r" % value, field=where,
                                      hint="valid: %s" % ", ".join(sorted(POWER_PROFILES)))
            setting["profile_id"] = POWER_PROFILES[value]
        elif value != "enabled":
            raise ValidationError("%s can only be 'enabled'; drop it with 'remove'" % key, field=where)
        setting.update(key=key, value=value, reboot=False)
    setting["id"] = "%s:%s" % (mech, setting["key"])
    return setting


def _unit_section(unit):
    suffix = unit.rsplit(".", 1)[-1]
    return {"service": "Service", "socket": "Socket", "target": "Unit", "mount": "Mount",
            "timer": "Timer", "link": "Link", "network": "Network", "netdev": "NetDev"}[suffix]


def _check_hugepage_pairs(tokens, where):
    size = None
    for token in tokens:
        name = token.split("=", 1)[0]
        if name == "hugepagesz":
            if size is not None:
                raise ValidationError("hugepagesz=%s has no hugepages= count" % size, field=where)
            size = token.split("=", 1)[-1]
        elif name == "hugepages":
            if size is None:
                raise ValidationError("hugepages= must follow its hugepagesz=", field=where)
            size = None
    if size is not None:
        raise ValidationError("hugepagesz=%s has no hugepages= count" % size, field=where)


def _layer_settings(layer_name, layer):
    settings = layer.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValidationError("settings must be a mapping", field=layer_name + ": settings")
    out = []
    for mech, group in settings.items():
        if mech not in MECHANISMS:
            raise ValidationError("unknown mechanism %r" % (mech,), field=_where(layer_name, mech),
                                  hint="valid: %s" % ", ".join(MECHANISMS))
        if not isinstance(group, dict):
            raise ValidationError("must be a mapping", field=_where(layer_name, mech))
        for key, raw in group.items():
            key = str(key)
            if mech in _GROUPED:
                if not isinstance(raw, dict):
                    raise ValidationError("must map option names to values",
                                          field=_where(layer_name, mech, key))
                for sub, sub_raw in raw.items():
                    out.append(_normalize_setting(mech, str(sub), sub_raw, layer_name, group=key))
            else:
                out.append(_normalize_setting(mech, key, raw, layer_name))
    return out


def _removals(layer_name, layer):
    remove = layer.get("remove") or {}
    if isinstance(remove, (list, tuple)):
        raise ValidationError("'remove' maps each setting id (or glob) to the reason",
                              field=layer_name + ": remove")
    if not isinstance(remove, dict):
        raise ValidationError("'remove' must be a mapping", field=layer_name + ": remove")
    for pattern, reason in remove.items():
        if not reason:
            raise ValidationError("removing %s needs a reason" % pattern, field=layer_name + ": remove")
    return remove


def _context(accel_layer, accelerator, intent, os_name, cloud, platforms, options):
    meta = accel_layer.get("meta") or {}
    form_factor = options["form_factor"]
    if form_factor == "auto":
        form_factor = meta.get("form_factor", "sxm")
    return {
        "accelerator": accelerator, "family": meta.get("family"), "arch": meta.get("arch"),
        "platform": platforms, "intent": intent, "os": os_name, "cloud": cloud,
        "form_factor": form_factor, "driver_source": options["driver_source"],
        "page_size": options["page_size"],
    }


def resolve_profile(accelerator, intent, os, cloud=None, options=None, *, profiles, extra=None):
    """Merge the layers for one node and return the settings it should have.

    ``profiles`` maps layer names (``base``, ``accelerators/h100``, ``intents/inference``,
    ``os/cos``, ``clouds/gke``, ``options/acs-override`` ...) to layer dicts.
    ``options`` are validated against ``OPTION_SPECS``; ``extra`` is a caller's layer
    (``settings`` and ``remove``) applied last. Raises ``ValidationError`` for unknown
    names (listing the valid ones), for an explicit request the platform refuses (a
    kernel command line on COS), and for malformed data.

    Returns a dict with the inputs, ``layers`` (in merge order), ``settings`` (id ->
    setting with ``mechanism``, ``key``, ``value``, ``reboot``, ``interrupt``,
    ``layer``, ``why``), ``skipped`` and ``removed`` (each with the reason),
    ``bootloader``, ``reapply_every_boot``, ``reboot`` and ``files`` (what to render).
    """
    if not isinstance(profiles, dict) or not profiles:
        raise ValidationError("no tuning profiles were loaded", field="profiles",
                              hint="pass the layers loaded by nodewright.fleet.tuning_profile")
    accelerator = str(accelerator or "").lower()
    cloud = (str(cloud).lower() if cloud else None) or None
    if cloud == "none":
        cloud = None
    opts = normalize_options(options)
    accel_name = _pick(profiles, "accelerator", accelerator, "accelerator")
    intent_name = _pick(profiles, "intent", intent, "intent")
    os_name = _pick(profiles, "os", os, "os")
    cloud_name = _pick(profiles, "cloud", cloud, "cloud") if cloud else None

    chain = ["base"] if "base" in profiles else []
    _linearize(profiles, accel_name, chain)
    platforms = [n.split("/", 1)[1] for n in chain if _kind_of(n) == "platform"]
    accel_layer = profiles[accel_name]
    context = _context(accel_layer, accelerator, intent, os, cloud, platforms, opts)
    for name in (intent_name, os_name) + ((cloud_name,) if cloud_name else ()):
        _linearize(profiles, name, chain)

    os_meta = profiles[os_name].get("meta") or {}
    required_cloud = os_meta.get("requires_cloud")
    if required_cloud and cloud != required_cloud:
        if cloud is None:
            cloud = required_cloud
            context["cloud"] = cloud
            cloud_name = _pick(profiles, "cloud", cloud, "cloud")
            _linearize(profiles, cloud_name, chain)
        else:
            raise ValidationError("%s runs only on %s, not %s" % (os, required_cloud, cloud),
                                  field="cloud")

    option_layers = []
    for name in sorted(profiles):
        if _kind_of(name) != "option":
            continue
        layer = profiles[name]
        activate = layer.get("activate") or {}
        if not activate:
            raise ValidationError("option layer has no 'activate'", field=name)
        if all(opts.get(k) == v for k, v in activate.items()):
            requires = layer.get("requires")
            if requires and not _matches(requires, context):
                raise ValidationError(
                    "%s does not apply to %s on %s" % (
                        ", ".join("%s=%s" % kv for kv in activate.items()), accelerator, os),
                    field="options", hint=requires.get("reason"))
            option_layers.append(name)
    for name in option_layers:
        _linearize(profiles, name, chain)

    layers = [(n, profiles[n]) for n in chain]
    if extra:
        if not isinstance(extra, dict):
            raise ValidationError("extra must be a mapping with 'settings' and 'remove'", field="extra")
        unknown = sorted(set(extra) - {"settings", "remove"})
        if unknown:
            raise ValidationError("extra accepts 'settings' and 'remove', not %s" % ", ".join(unknown),
                                  field="extra")
        layers.append(("extra", extra))

    merged, removed = {}, []
    constraints = []
    for name, layer in layers:
        for setting in _layer_settings(name, layer):
            if not _matches(setting.pop("only", None), context):
                continue
            merged[setting["id"]] = setting
        for pattern, reason in _removals(name, layer).items():
            for sid in [s for s in merged if fnmatch.fnmatchcase(s, pattern)]:
                removed.append({"id": sid, "layer": name, "reason": reason,
                                "value": merged[sid]["value"], "from": merged[sid]["layer"]})
                del merged[sid]
        if layer.get("constraints"):
            constraints.append((name, layer["constraints"]))

    skipped = []
    # The most specific layer (cloud after OS) gives the reason first.
    for name, rules in reversed(constraints):
        for sid in list(merged):
            reason = _violation(merged[sid], rules)
            if reason is None:
                continue
            setting = merged[sid]
            if _kind_of(setting["layer"]) in EXPLICIT_KINDS:
                raise ValidationError(
                    "%s (asked for by %s) is refused on %s: %s" % (sid, setting["layer"], os, reason),
                    field=setting["layer"], hint=rules.get("hint"))
            skipped.append({"id": sid, "layer": setting["layer"], "by": name, "reason": reason,
                            "value": setting["value"]})
            del merged[sid]

    _check_cmdline_conflicts(merged)
    for setting in merged.values():
        setting["interrupt"] = _apply_interrupt(setting)

    bootloader = dict(os_meta.get("bootloader") or {"method": "none"})
    reapply = any((layer.get("meta") or {}).get("reapply_every_boot") for _, layer in layers)
    resolved = {
        "accelerator": accelerator, "family": context["family"], "arch": context["arch"],
        "form_factor": context["form_factor"], "platforms": platforms,
        "intent": intent, "os": os, "cloud": cloud, "options": opts,
        "layers": [n for n, _ in layers],
        "settings": merged, "skipped": skipped, "removed": removed,
        "bootloader": bootloader, "reapply_every_boot": bool(reapply),
        "reboot": any(s["reboot"] for s in merged.values()),
        "name": "%s/%s on %s%s" % (accelerator, intent, os, " (%s)" % cloud if cloud else ""),
    }
    resolved["files"] = render_plan(resolved)
    return resolved


def _violation(setting, rules):
    for pattern, reason in (rules.get("forbid") or {}).items():
        if fnmatch.fnmatchcase(setting["id"], pattern):
            return reason
    allowed = rules.get("mechanisms")
    if allowed is not None and setting["mechanism"] not in allowed:
        return (rules.get("reasons") or {}).get(setting["mechanism"]) or rules.get("reason") or (
            "%s settings are not possible here" % setting["mechanism"])
    allow = rules.get("sysctl_allow")
    if setting["mechanism"] == "sysctl" and allow is not None and not any(
            fnmatch.fnmatchcase(setting["key"], p) for p in allow):
        return rules.get("sysctl_reason") or "%s is not an allowed sysctl here" % setting["key"]
    if rules.get("never_reboot") and setting["reboot"]:
        return rules.get("never_reboot_reason") or "this platform is never rebooted for tuning"
    return None


def _check_cmdline_conflicts(settings):
    seen = {}
    sizes = {}
    for sid, setting in settings.items():
        if setting["mechanism"] != "cmdline":
            continue
        for token in setting["tokens"]:
            name, _, value = token.partition("=")
            if name == "hugepagesz":
                if value in sizes:
                    raise ValidationError(
                        "huge pages of size %s are set by both %s and %s" % (value, sizes[value], sid),
                        field=setting["layer"],
                        hint="override the existing setting id instead of adding a second one")
                sizes[value] = sid
                continue
            if token in seen.get(name, {}):
                raise ValidationError("kernel parameter %s is set by both %s and %s"
                                      % (token, seen[name][token], sid), field=setting["layer"])
            if name in seen and name not in _REPEATABLE_PARAMS:
                other = next(iter(seen[name].values()))
                raise ValidationError(
                    "kernel parameter %s conflicts: %s sets %s, %s sets %s" % (
                        name, other, next(iter(seen[name])), sid, token), field=setting["layer"],
                    hint="override the existing setting id instead of adding a second one")
            seen.setdefault(name, {})[token] = sid


# --------------------------------------------------------------------------------------
# What to write on the host


def _by_mech(settings, mech):
    return [s for s in settings.values() if s["mechanism"] == mech]


def dropin_path(unit):
    """Where NodeWright's drop-in for ``unit`` lives, relative to the host root."""
    base = SYSTEMD_NETWORK_DIR if unit.endswith((".link", ".network", ".netdev")) else SYSTEMD_UNIT_DIR
    return "%s/%s.d/%s.conf" % (base, unit, FILE_PREFIX)


def render_plan(resolved):
    """The files a resolved profile writes: path, template, mechanism data, setting ids."""
    settings = resolved["settings"]
    files = []

    def entries(items):
        return [{"id": s["id"], "key": s["key"], "value": s["value"], "layer": s["layer"],
                 "why": s["why"]} for s in items]

    sysctls = _by_mech(settings, "sysctl")
    if sysctls:
        files.append({"path": SYSCTL_FILE, "template": "sysctl.conf.j2", "kind": "sysctl",
                      "entries": entries(sysctls), "settings": [s["id"] for s in sysctls]})
    cmdline = _by_mech(settings, "cmdline")
    if cmdline and resolved["bootloader"].get("method") == "grub-dropin":
        files.append({"path": GRUB_FILE, "template": "grub.cfg.j2", "kind": "cmdline",
                      "tokens": cmdline_tokens(resolved), "entries": entries(cmdline),
                      "settings": [s["id"] for s in cmdline]})
    modprobe = _by_mech(settings, "modprobe")
    if modprobe:
        modules = {}
        for s in modprobe:
            modules.setdefault(s["module"], []).append(
                {"option": s["option"], "value": s["value"], "layer": s["layer"], "why": s["why"]})
        files.append({"path": MODPROBE_FILE, "template": "modprobe.conf.j2", "kind": "modprobe",
                      "modules": [{"name": m, "options": o} for m, o in modules.items()],
                      "settings": [s["id"] for s in modprobe]})
    modules = _by_mech(settings, "module")
    if modules:
        files.append({"path": MODULES_FILE, "template": "modules-load.conf.j2", "kind": "module",
                      "entries": entries(modules), "settings": [s["id"] for s in modules]})
    units = {}
    for s in _by_mech(settings, "dropin"):
        units.setdefault(s["unit"], []).append(s)
    for unit, items in units.items():
        files.append({"path": dropin_path(unit), "template": "dropin.conf.j2", "kind": "dropin",
                      "unit": unit, "section": items[0]["section"],
                      "entries": [dict(e, directive=s["directive"]) for e, s in zip(entries(items), items)],
                      "settings": [s["id"] for s in items]})
    wants = []
    governor = settings.get("governor:cpu")
    if governor:
        files.append({"path": "%s/%s" % (SYSTEMD_UNIT_DIR, GOVERNOR_UNIT), "template": "cpu-governor.service.j2",
                      "kind": "governor", "governor": governor["value"], "settings": [governor["id"]]})
        wants.append((GOVERNOR_UNIT, governor["id"]))
    power = settings.get("gpu:workload_power_profile")
    if power:
        files.append({"path": "%s/%s" % (SYSTEMD_UNIT_DIR, POWER_PROFILE_UNIT),
                      "template": "gpu-power-profile.service.j2", "kind": "gpu",
                      "profile": power["value"], "profile_id": power["profile_id"],
                      "settings": [power["id"]]})
    for key in GPU_KEYS:
        if "gpu:" + key in settings:
            wants.append((GPU_UNITS[key], "gpu:" + key))
    if wants:
        files.append({"path": WANTS_FILE, "template": "wants.conf.j2", "kind": "wants",
                      "units": [u for u, _ in wants], "settings": [sid for _, sid in wants]})
    return files


def cmdline_tokens(resolved_or_settings):
    """Kernel parameters in merge order."""
    settings = _settings_of(resolved_or_settings)
    tokens = []
    for setting in settings.values():
        if setting.get("mechanism") == "cmdline":
            tokens.extend(setting.get("tokens") or str(setting.get("value", "")).split())
    return tokens


def managed_paths():
    """Every fixed path the role may write (drop-ins are found by name at uninstall)."""
    return [SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE, WANTS_FILE,
            "%s/%s" % (SYSTEMD_UNIT_DIR, GOVERNOR_UNIT), "%s/%s" % (SYSTEMD_UNIT_DIR, POWER_PROFILE_UNIT),
            STATE_FILE]


# --------------------------------------------------------------------------------------
# Diffs


def _settings_of(value):
    if not value:
        return {}
    if isinstance(value, dict) and isinstance(value.get("settings"), dict):
        return value["settings"]
    if isinstance(value, dict):
        return value
    raise ValidationError("expected a resolved profile or a settings mapping, got %s"
                          % type(value).__name__, field="settings")


def _norm(value):
    return " ".join(str(value).split())


def diff_settings(old, new, reapply=()):
    """Which settings changed between ``old`` and ``new`` and the interrupt they need.

    ``old``/``new`` are resolved profiles or their ``settings`` mappings (``old`` is
    usually the state recorded on the host; empty means nothing applied yet).
    ``reapply`` lists setting ids whose files were rewritten although the setting
    did not change (drift); they get their interrupt again, except a reboot.

    Returns ``changed``, ``added``/``removed``/``modified`` (ids), ``changes`` (one
    entry per id with old and new value and its interrupt), ``interrupt`` (merged),
    ``reboot``, ``lingering`` (removed settings whose effect stays until a reboot)
    and ``cmdline`` (``add``/``remove`` tokens for bootloader tools).
    """
    old_s, new_s = _settings_of(old), _settings_of(new)
    added = [sid for sid in new_s if sid not in old_s]
    removed = [sid for sid in old_s if sid not in new_s]
    modified = [sid for sid in new_s if sid in old_s and (
        _norm(old_s[sid].get("value")) != _norm(new_s[sid].get("value"))
        or bool(old_s[sid].get("reboot")) != bool(new_s[sid].get("reboot")))]
    changes, interrupts, lingering = [], [], []
    for sid in added + modified:
        it = _apply_interrupt(new_s[sid])
        interrupts.append(it)
        changes.append({"id": sid, "change": "added" if sid in added else "modified",
                        "old": old_s.get(sid, {}).get("value"), "new": new_s[sid]["value"],
                        "interrupt": it})
    for sid in removed:
        it, note = _removal_interrupt(old_s[sid])
        interrupts.append(it)
        changes.append({"id": sid, "change": "removed", "old": old_s[sid].get("value"), "new": None,
                        "interrupt": it})
        if note:
            lingering.append({"id": sid, "value": old_s[sid].get("value"), "note": note})
    for sid in reapply or ():
        if sid in new_s and sid not in added and sid not in modified:
            it = _apply_interrupt(new_s[sid])
            if it["type"] != "reboot":
                interrupts.append(it)
                changes.append({"id": sid, "change": "reapplied", "old": new_s[sid]["value"],
                                "new": new_s[sid]["value"], "interrupt": it})
    merged = merge_interrupts(interrupts)
    new_tokens = cmdline_tokens(new_s)
    old_tokens = cmdline_tokens(old_s)
    return {
        "changed": bool(added or removed or modified),
        "added": added, "removed": removed, "modified": modified,
        "changes": changes, "interrupt": merged, "reboot": merged["type"] == "reboot",
        "lingering": lingering,
        "cmdline": {"add": [t for t in new_tokens if t not in old_tokens],
                    "remove": [t for t in old_tokens if t not in new_tokens],
                    "desired": new_tokens},
    }


# --------------------------------------------------------------------------------------
# Read-back checks

CMDLINE_PROBE = "proc:cmdline"
MISSING = "<missing>"
UNAVAILABLE = "<unavailable>"


def probes(resolved_or_settings):
    """The observations a check needs: one per setting, plus ``proc:cmdline``."""
    settings = _settings_of(resolved_or_settings)
    out = [sid for sid, s in settings.items() if s["mechanism"] != "cmdline"]
    if any(s["mechanism"] == "cmdline" for s in settings.values()):
        out.append(CMDLINE_PROBE)
    return out


def parse_observations(text):
    """Parse ``<probe>\\t<value>`` lines printed by the role's observe script."""
    observed = {}
    for line in str(text or "").splitlines():
        probe, sep, value = line.partition("\t")
        if sep and probe:
            observed[probe.strip()] = value.strip()
    return observed


def _expected(setting):
    mech = setting["mechanism"]
    if mech == "module":
        return "loaded"
    if mech == "gpu":
        return "Enabled" if setting["key"] == "persistence" else "active"
    return setting["value"]


# How an observation is judged, one word per rule; the nvidia-tuning package's shell
# comparator (packages/nvidia-tuning/steps/tune.sh) implements the same words.
CHECK_RULES = ("eq", "tokens", "enabled", "governor", "skip")


def _rule(setting):
    mech = setting["mechanism"]
    if mech == "cmdline":
        return "tokens"
    if mech == "gpu" and setting["key"] == "persistence":
        return "enabled"
    if mech == "governor":
        return "governor"
    return "eq"


def _skip_reason(sid, skip):
    for pattern, reason in sorted((skip or {}).items()):
        if fnmatch.fnmatchcase(sid, pattern):
            return " ".join(str(reason or "skipped").split())
    return None


def check_expectations(resolved_or_settings, skip=None):
    """What each setting must read back as: one row per setting with ``id``, ``probe``
    (see ``probes``), ``rule`` (one of ``CHECK_RULES``), ``expected`` and, for a
    setting matched by a glob of ``skip`` (setting-id glob -> reason), rule ``skip``
    with the ``reason``."""
    rows = []
    for sid, setting in _settings_of(resolved_or_settings).items():
        probe = CMDLINE_PROBE if setting["mechanism"] == "cmdline" else sid
        expected = setting["value"] if setting["mechanism"] == "cmdline" else _expected(setting)
        row = {"id": sid, "probe": probe, "rule": _rule(setting), "expected": " ".join(str(expected).split()),
               "layer": setting.get("layer", ""), "why": setting.get("why", ""), "reboot": bool(setting.get("reboot"))}
        reason = _skip_reason(sid, skip)
        if reason:
            row.update(rule="skip", reason=reason)
        rows.append(row)
    return rows


def judge(rule, expected, observed):
    """``ok``, ``failed`` or ``unverified`` for one observation (None: not observed)."""
    if rule == "skip":
        return "unverified"
    if observed is None:
        return "failed"
    if rule == "tokens":
        seen = set(str(observed).split())
        return "ok" if all(t in seen for t in str(expected).split()) else "failed"
    if rule == "enabled":
        return "ok" if set(str(observed).split()) == {"Enabled"} else "failed"
    if rule == "governor" and observed == UNAVAILABLE:
        return "unverified"
    return "ok" if _norm(observed) == _norm(expected) else "failed"


def check_settings(resolved_or_settings, observed, phase="post-interrupt", skip=None):
    """Compare what the host reports with what the profile asks for.

    ``observed`` maps probe ids (see ``probes``) to what the host reported.
    ``phase`` is ``post-interrupt`` (everything must be in effect) or ``live``
    (settings that need a reboot are reported as ``pending_reboot``). A governor the
    host cannot report (VMs without cpufreq) is ``unverified``, not a failure, and so
    is a setting matched by a glob of ``skip`` (setting-id glob -> reason: what the
    host cannot report).
    """
    if phase not in ("post-interrupt", "live"):
        raise ValidationError("unknown check phase %r" % (phase,), field="phase",
                              hint="post-interrupt or live")
    observed = observed or {}
    failed, pending, unverified, verified = [], [], [], []
    for row in check_expectations(resolved_or_settings, skip):
        got = observed.get(row["probe"])
        verdict = judge(row["rule"], row["expected"], got)
        if verdict == "ok":
            verified.append(row["id"])
        elif verdict == "unverified":
            unverified.append({"id": row["id"], "reason": row.get("reason")
                               or "the host exposes no cpufreq governor"})
        elif phase == "live" and row["reboot"]:
            pending.append(row["id"])
        else:
            failed.append({"id": row["id"], "expected": row["expected"],
                           "observed": "<not observed>" if got is None else got, "layer": row["layer"],
                           "why": row["why"]})
    lines = ["%s: expected %s, observed %s (from %s)" % (f["id"], f["expected"], f["observed"], f["layer"])
             for f in failed]
    return {
        "ok": not failed, "phase": phase, "failed": failed, "pending_reboot": pending,
        "unverified": unverified, "verified": verified,
        "summary": ("%d setting(s) did not take effect: %s" % (len(failed), "; ".join(lines)))
        if failed else "all %d setting(s) in effect" % len(verified),
    }


def state_record(resolved, pending_interrupt=None):
    """What the role records on the host: the applied settings, files and pending interrupt."""
    settings = copy.deepcopy(_settings_of(resolved))
    return {
        "version": 1,
        "profile": {k: resolved.get(k) for k in ("accelerator", "intent", "os", "cloud", "options")},
        "settings": settings,
        "files": [f["path"] for f in resolved.get("files", [])],
        "bootloader": resolved.get("bootloader") or {"method": "none"},
        "pending_interrupt": merge_interrupts(pending_interrupt or NOOP),
    }


# --------------------------------------------------------------------------------------
# The nvidia-tuning package: the profile is resolved on the controller and handed to
# the host as package config, because package steps run in a plain shell on the node.
#
# Config keys the controller adds (user keys come from the package's defaultConfig):
#   resolved.profile        tab-separated lines: name, arch (uname -m), os (os-release ID
#                           and VERSION_ID), bootloader (method, update command), cmdline
#                           (the kernel parameters), and per file "file KEY PATH FLAGS
#                           DRIFT REMOVAL" (flags: reload, bootloader; the interrupt words
#                           for a file edited on the host and for a removed file)
#   resolved.file.<name>    each file's content, as the role writes it
#   resolved.checks         per setting: id, probe, rule and expected value (tab separated)
#   resolved.reboot, resolved.service.<unit>, resolved.noop
#                           the settings' values, grouped by the interrupt a change needs;
#                           the package's configInterrupts name these keys, so the planner
#                           derives a node's interrupt from the groups whose values changed

PACKAGE_NAME = "nvidia-tuning"
RESOLVED_PREFIX = "resolved."
KEY_PROFILE = RESOLVED_PREFIX + "profile"
KEY_CHECKS = RESOLVED_PREFIX + "checks"
KEY_REBOOT = RESOLVED_PREFIX + "reboot"
KEY_NOOP = RESOLVED_PREFIX + "noop"
KEY_FILE_PREFIX = RESOLVED_PREFIX + "file."
KEY_SERVICE_PREFIX = RESOLVED_PREFIX + "service."
_KEY_UNSAFE_RE = re.compile(r"[^-._a-zA-Z0-9]")
# uname -m of a host of each architecture.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def _key_part(text):
    return _KEY_UNSAFE_RE.sub("_", str(text))


def interrupt_words(value):
    """``noop``, ``reboot``, ``restartAllServices`` or ``service <unit>...`` (the words a
    package step writes to $NODEWRIGHT_INTERRUPT_FILE)."""
    value = merge_interrupts(value or NOOP)
    return " ".join([value["type"]] + value["services"])


def group_key(setting):
    """The config key holding ``setting``'s value: named after the interrupt that
    applies a change of it."""
    it = setting.get("interrupt") or _apply_interrupt(setting)
    if it["type"] == "reboot":
        return KEY_REBOOT
    if it["type"] == "service":
        return KEY_SERVICE_PREFIX + _key_part("_".join(it["services"]))
    return KEY_NOOP


def file_key(spec):
    """The config key holding one rendered file (``resolved.file.sysctl``,
    ``resolved.file.dropin.containerd.service``)."""
    return KEY_FILE_PREFIX + _key_part(spec["kind"] + ("." + spec["unit"] if spec.get("unit") else ""))


def _file_interrupts(spec, settings):
    """What the host needs when the file is rewritten although its settings did not
    change (edited on the host), and when it is removed; never a reboot: reboots are
    planned before the node is drained, from the settings' groups."""
    items = [settings[sid] for sid in spec["settings"] if sid in settings]
    drift = merge_interrupts([_apply_interrupt(s) for s in items if not s.get("reboot")])
    removal = merge_interrupts([_removal_interrupt(s)[0] for s in items if not s.get("reboot")])
    return drift, removal


def package_config(resolved, files, skip=None):
    """The controller-rendered config keys for a resolved profile.

    ``files`` are the profile's files with their rendered ``content`` (see
    ``render_files``); ``skip`` maps setting-id globs to the reason a host cannot
    report them (their checks are reported as unverified). Returns key -> text.
    """
    settings = resolved["settings"]
    config = {}
    groups = {}
    for sid in sorted(settings):
        groups.setdefault(group_key(settings[sid]), []).append("%s\t%s" % (sid, settings[sid]["value"]))
    for key, lines in groups.items():
        config[key] = "\n".join(lines) + "\n"
    bootloader = resolved.get("bootloader") or {"method": "none"}
    os_id, os_version = os_release_match(resolved["os"])
    lines = ["# NVIDIA tuning resolved by NodeWright on the controller; the package's steps read it.",
             "name\t%s" % resolved["name"],
             "arch\t%s" % MACHINES[resolved["arch"]],
             "os\t%s\t%s" % (os_id, os_version),
             "bootloader\t%s" % "\t".join([bootloader.get("method", "none")] + list(bootloader.get("update_command") or [])),
             "cmdline\t%s" % " ".join(cmdline_tokens(resolved))]
    for spec in files:
        key = file_key(spec)
        if key in config:
            raise ValidationError("two files of profile %s share the config key %s" % (resolved["name"], key),
                                  field="files")
        config[key] = spec["content"]
        flags = [f for f, on in (("reload", spec["path"].startswith("etc/systemd/")),
                                 ("bootloader", spec["kind"] == "cmdline")) if on]
        drift, removal = _file_interrupts(spec, settings)
        lines.append("file\t%s\t%s\t%s\t%s\t%s" % (key, spec["path"], ",".join(flags) or "-",
                                                   interrupt_words(drift), interrupt_words(removal)))
    config[KEY_PROFILE] = "\n".join(lines) + "\n"
    checks = []
    for row in check_expectations(resolved, skip):
        checks.append("\t".join((row["id"], row["probe"], row["rule"],
                                 row.get("reason") or row["expected"] or "-")))
    config[KEY_CHECKS] = "\n".join(checks) + "\n"
    return config


def _json_mapping(value, key):
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ValidationError("config %s must be a JSON object, got %r (%s)" % (key, value, exc), field=key,
                              hint='e.g. {"acs_override": true}' if key == "options" else None)
    if not isinstance(parsed, dict):
        raise ValidationError("config %s must be a JSON object, got %r" % (key, value), field=key)
    return parsed


def node_facts(node):
    """What resolving a profile needs from a Node as the API returns it."""
    meta = node.get("metadata") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return {"name": meta.get("name"), "labels": dict(meta.get("labels") or {}), "os_image": info.get("osImage")}


def dropin_units(profiles):
    """Every systemd unit that some shipped layer gives a drop-in."""
    units = set()
    for name, layer in (profiles or {}).items():
        for setting in _layer_settings(name, layer):
            if setting["mechanism"] == "dropin":
                units.add(setting["unit"])
    return sorted(units)


def _node_inputs(user, node, where):
    """Accelerator, OS, cloud and options for one node (None: no node, all explicit)."""
    def wanted(key):
        value = str(user.get(key) or "auto").strip()
        return None if value == "auto" else value

    labels = node["labels"] if node else {}
    options = _json_mapping(user.get("options"), "options")
    accelerator, os_name, cloud = wanted("accelerator"), wanted("os"), wanted("cloud")
    warnings = []
    try:
        if not accelerator:
            detected = detect_accelerator(labels)
            accelerator, warnings = detected["accelerator"], detected["warnings"]
            if detected["form_factor"] == "pcie":
                options = dict({"form_factor": "pcie"}, **options)
        if not os_name:
            os_name = os_from_os_image(node.get("os_image") if node else None)
        if cloud is None:
            cloud = detect_cloud(labels)
    except ValidationError as exc:
        raise ValidationError("%s%s" % ("node %s: " % node["name"] if node else "", exc.message), field=where,
                              hint=exc.hint)
    return (accelerator, os_name, cloud, options), warnings


def plan_summary(resolved):
    """The settings a node would get, for people (``plan.yml``)."""
    return {
        "profile": resolved["name"], "accelerator": resolved["accelerator"], "os": resolved["os"],
        "cloud": resolved["cloud"], "reboot": resolved["reboot"],
        "interrupt": merge_interrupts([s["interrupt"] for s in resolved["settings"].values()]),
        "settings": [{"id": sid, "mechanism": s["mechanism"], "key": s["key"], "value": s["value"],
                      "reboot": bool(s["reboot"]), "interrupt": s["interrupt"]}
                     for sid, s in sorted(resolved["settings"].items(),
                                          key=lambda kv: (MECHANISMS.index(kv[1]["mechanism"]), kv[0]))],
        "skipped": [{"id": s["id"], "reason": s["reason"]} for s in resolved.get("skipped", [])],
    }


def resolve_package_spec(spec, package, nodes, profiles, render, where=None):
    """Render an nvidia-tuning package spec for the nodes it will run on.

    ``spec`` is a package spec (``name``, ``config`` with the user keys ...),
    ``package`` the loaded package (its ``defaultConfig`` names the user keys),
    ``nodes`` node facts (``node_facts``), ``render(resolved, power_profile_command)``
    returns the profile's files with their content. Every node must resolve to the
    same profile (one spec runs on all of them). Returns ``(spec, per_node)``: the spec
    with the ``resolved.*`` config keys, the ``interrupt`` of a first apply and the
    ``config_interrupts`` of the groups, and per node name the ``plan_summary``. With
    an ``auto`` input and no node the spec comes back unchanged.
    """
    where = where or "spec.packages.%s.configMap" % spec.get("name", PACKAGE_NAME)
    given = dict(spec.get("config") or {})
    user = package.effective_config({k: v for k, v in given.items() if not k.startswith(RESOLVED_PREFIX)})
    unknown = sorted(k for k in user if k not in package.default_config)
    if unknown:
        raise ValidationError("unknown config key(s) %s" % ", ".join(unknown), field=where,
                              hint="valid: %s" % ", ".join(sorted(package.default_config)))
    skip = _json_mapping(user.get("skip_checks"), "skip_checks")
    explicit = all(str(user.get(k) or "auto").strip() != "auto" for k in ("accelerator", "os"))
    targets = list(nodes or []) or ([None] if explicit else [])
    if not targets:
        return dict(spec), {}
    extra = _json_mapping(user.get("extra"), "extra") or None
    rendered, per_node, variants, cache = {}, {}, {}, {}
    for node in targets:
        inputs, warnings = _node_inputs(user, node, where)
        key = json.dumps(inputs, sort_keys=True)
        if key not in cache:
            accelerator, os_name, cloud, options = inputs
            try:
                resolved = resolve_profile(accelerator, user.get("intent") or "performance", os_name, cloud=cloud,
                                           options=options, profiles=profiles, extra=extra)
            except ValidationError as exc:
                raise ValidationError("%s%s" % ("node %s: " % node["name"] if node else "", exc.message),
                                      field=where, hint=exc.hint)
            config = package_config(resolved, render(resolved, user.get("power_profile_command")), skip)
            cache[key] = (resolved, config, json.dumps(config, sort_keys=True))
        resolved, config, identity = cache[key]
        rendered[identity] = (resolved, config)
        variants.setdefault(identity, []).append(node["name"] if node else None)
        if node:
            per_node[node["name"]] = dict(plan_summary(resolved), warnings=list(warnings))
    if len(variants) > 1:
        groups = "; ".join("%s (%s)" % (rendered[i][0]["name"], ", ".join(sorted(n for n in names if n)))
                           for i, names in sorted(variants.items(), key=lambda kv: rendered[kv[0]][0]["name"]))
        raise ValidationError(
            "the targeted nodes resolve to different NVIDIA tuning profiles: %s" % groups, field=where,
            hint="give each GPU pool its own NodeWright resource (spec.nodeSelectors), or set accelerator and os")
    resolved, config = next(iter(rendered.values()))
    groups = {}
    for setting in resolved["settings"].values():
        groups.setdefault(group_key(setting), []).append(setting["interrupt"])
    config_interrupts = {k: v.to_dict() for k, v in package.config_interrupts.items()}
    config_interrupts[KEY_REBOOT] = interrupt("reboot")
    for unit in dropin_units(profiles):
        if unit.endswith(".service"):
            service = interrupt("service", [unit[:-len(".service")]])
            config_interrupts[group_key({"interrupt": service})] = service
    for key, items in groups.items():
        if key != KEY_NOOP:
            config_interrupts[key] = merge_interrupts(items)
    out = dict(spec, config=dict(given, **config))
    out["config"] = {k: v for k, v in out["config"].items()
                     if not k.startswith(RESOLVED_PREFIX) or k in config}
    out.setdefault("interrupt", merge_interrupts([s["interrupt"] for s in resolved["settings"].values()]))
    out["config_interrupts"] = dict(config_interrupts, **(spec.get("config_interrupts") or {}))
    return out, per_node


# --------------------------------------------------------------------------------------
# Controller side: the shipped profiles and templates. Everything above is pure; these
# read files and need PyYAML and Jinja2, which come with Ansible on the controller.

ROLE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                         "roles", "nvidia_tuning"))
PROFILES_DIR = os.path.join(ROLE_DIR, "files", "profiles")
TEMPLATES_DIR = os.path.join(ROLE_DIR, "templates")
PACKAGE_DIR = os.path.normpath(os.path.join(ROLE_DIR, "..", "..", "packages", PACKAGE_NAME))


def load_profiles(profiles_dir=None):
    """Read every ``*.yml`` layer under ``profiles_dir``; names are paths without ``.yml``."""
    import yaml

    root = os.path.abspath(profiles_dir or PROFILES_DIR)
    if not os.path.isdir(root):
        raise ValidationError("tuning profiles directory %s does not exist" % root, field="profiles_dir",
                              hint="the profiles ship with the collection's nvidia_tuning role; resolve them on "
                                   "the controller, where the collection is installed")
    layers = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            stem, ext = os.path.splitext(filename)
            if ext not in (".yml", ".yaml"):
                continue
            path = os.path.join(dirpath, filename)
            name = os.path.relpath(os.path.join(dirpath, stem), root).replace(os.sep, "/")
            try:
                with open(path) as handle:
                    data = yaml.safe_load(handle) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ValidationError("cannot read tuning profile %s: %s" % (path, exc), field="profiles_dir")
            if not isinstance(data, dict):
                raise ValidationError("tuning profile %s is not a mapping" % path, field="profiles_dir")
            if name in layers:
                raise ValidationError("tuning profile %s is defined twice (.yml and .yaml)" % name,
                                      field="profiles_dir")
            layers[name] = data
    return layers


def render_files(resolved, power_profile_command=None, templates_dir=None):
    """The profile's files (``render_plan``) with their ``content``, rendered from the
    role's templates: the role and the package write the same bytes."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir or TEMPLATES_DIR), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    out = []
    for spec in resolved["files"]:
        content = env.get_template(spec["template"]).render(
            nvidia_tuning_profile=resolved, item=spec,
            nvidia_tuning_power_profile_command=power_profile_command or DEFAULT_POWER_PROFILE_COMMAND)
        out.append(dict(spec, content=content if content.endswith("\n") else content + "\n"))
    return out


def package_spec_for_nodes(spec, nodes, package=None, profiles_dir=None, templates_dir=None):
    """``resolve_package_spec`` with the shipped profiles, templates and package."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package

    package = package or load_package(spec.get("src") or PACKAGE_DIR)
    profiles = load_profiles(profiles_dir)
    return resolve_package_spec(spec, package, nodes, profiles,
                                lambda resolved, command: render_files(resolved, command, templates_dir))
