"""A simulated boot of a node's host root: the kernel's runtime state (``/proc/sys``,
``/proc/cmdline``, ``/sys``) rebuilt from its defaults and the persisted configuration,
then the units default.target pulls in started by the simulated init; and the GPU
hardware faults a boot can bring."""

from __future__ import annotations

import math
import os
import re
import shutil
import stat
import subprocess
import uuid

import yaml

from nodewright_sim.hostlayout import (
    DEFAULT_KERNEL,
    DEFAULT_MEMORY_MIB,
    HERE,
    SIM_DIR,
    HostRootError,
    node_env,
    read_file,
)

BASE_CMDLINE = "ro quiet"
SIM_CPUS = 4  # cpufreq directories per node; the Node object reports the real count
INIT = "/usr/lib/nodewright-sim/_init"
GPU_FAULTS = "run/nodewright-sim/gpu-faults"
GPU_FAULTS_NEXT_BOOT = "etc/nodewright-sim/gpu-faults.next-boot"
KMSG = "run/nodewright-sim/kmsg"
GPU_FAULT_KINDS = ("missing", "ecc", "nvlink-down", "dcgm", "xid")


def sysctl_defaults():
    return yaml.safe_load(read_file(os.path.join(HERE, "sysctl_defaults.yaml")))


def _kernel_value(value):
    """A multi-number parameter reads back TAB-separated, as the kernel prints it."""
    value = str(value)
    if re.fullmatch(r"-?\d+(\s+-?\d+)+", value.strip()):
        return "\t".join(value.split())
    return value


def _sysctl_path(root, key):
    return os.path.join(root, "proc/sys", *key.split("."))


def _mknod(path, major, minor):
    if os.path.lexists(path):
        os.unlink(path)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        open(path, "w").close()


def _cmdline_from_grub_cfg(root, kernel):
    for cfg_path in ("boot/grub/grub.cfg", "boot/grub2/grub.cfg"):
        cfg = read_file(os.path.join(root, cfg_path))
        m = re.search(r"^\s*linux\s+(\S+)\s+(.*)$", cfg, re.M)
        if m:
            return "BOOT_IMAGE=%s %s" % (m.group(1), " ".join(m.group(2).split()))
    return "BOOT_IMAGE=/boot/vmlinuz-%s root=/dev/sda1 %s" % (kernel, BASE_CMDLINE)


_SIZE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text):
    m = re.fullmatch(r"(\d+)([KMGT]?)", text.strip(), re.I)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * _SIZE[m.group(2).upper()]


def crash_kernel_size(cmdline, memory_bytes):
    """The memory the kernel reserves for a crash kernel: the last crashkernel= of the
    command line, SIZE[@OFFSET] or RANGE:SIZE,... ranges chosen by the memory size
    (and ,high / ,low). 0 when there is none or it does not parse (the kernel ignores it)."""
    spec = None
    for token in cmdline.split():
        if token.startswith("crashkernel="):
            spec = token.split("=", 1)[1]
    if not spec:
        return 0
    spec = re.sub(r",(high|low)$", "", spec).split("@", 1)[0]
    try:
        if ":" not in spec:
            return _size(spec)
        for item in spec.split(","):
            span, size = item.split(":", 1)
            start, _, end = span.partition("-")
            if _size(start) <= memory_bytes and (not end or memory_bytes < _size(end)):
                return _size(size)
    except ValueError:
        return 0
    return 0


def gpu_fault(root, kind, value="", next_boot=False):
    """Make the node's GPUs fail a check, as hardware does: ``missing N`` (the last N
    GPUs are gone from nvidia-smi), ``ecc Disabled``, ``nvlink-down I`` (GPU I's links
    inactive), ``dcgm fail`` (dcgmi diag fails), ``xid CODE`` (an NVRM Xid in the
    kernel log). Now, until the next boot clears it, or (``next_boot``) from the next
    boot on, as a GPU that falls off the bus at a reboot."""
    if kind not in GPU_FAULT_KINDS:
        raise HostRootError("unknown GPU fault %r (one of %s)" % (kind, ", ".join(GPU_FAULT_KINDS)))
    line = ("%s %s" % (kind, value)).strip() + "\n"
    if next_boot:
        path = os.path.join(root, GPU_FAULTS_NEXT_BOOT)
    elif kind == "xid":
        path = os.path.join(root, KMSG)
        line = "kernel: NVRM: Xid (PCI:0000:18:00): %s, pid=4242, name=python3, GPU has fallen off the bus.\n" \
            % (value or "79")
    else:
        path = os.path.join(root, GPU_FAULTS)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fh.write(line)


def boot(root):
    """Simulate a boot: the kernel's runtime state is rebuilt from its defaults and the
    persisted configuration, then the init starts the units default.target pulls in.

    Returns the new boot ID. Runtime-only changes (``sysctl -w``, ``modprobe`` without
    a modules-load.d entry, a governor written to sysfs, GPU persistence and power
    profiles) are gone. The kernel takes its command line from the GRUB configuration
    (and reserves crash-kernel memory when it asks for it), loads the GPU driver with
    its modprobe.d options; systemd-modules-load and systemd-sysctl then apply
    modules-load.d and sysctl.d, and every enabled or wanted unit starts (oneshot units
    run: a governor or power-profile service takes effect only when enabled). On COS,
    ``/etc`` is reset to its image first, as the real OS does.
    """
    env = node_env(root)
    if env.get("OS_ID") == "cos":
        keep = set(read_file(os.path.join(root, SIM_DIR, "etc-manifest")).split())
        for d, _, files in os.walk(os.path.join(root, "etc")):
            for f in files:
                if os.path.relpath(os.path.join(d, f), root) not in keep:
                    os.unlink(os.path.join(d, f))
    for d in ("run", "proc", "sys"):
        shutil.rmtree(os.path.join(root, d), ignore_errors=True)
    os.makedirs(os.path.join(root, "run/nodewright-sim/units"), exist_ok=True)
    # Hardware faults that show at this boot (a GPU that does not come back, an Xid).
    pending = os.path.join(root, GPU_FAULTS_NEXT_BOOT)
    if os.path.exists(pending):
        for line in read_file(pending).splitlines():
            kind, _, value = line.partition(" ")
            if kind:
                gpu_fault(root, kind, value)
        os.unlink(pending)
    next_kernel = os.path.join(root, SIM_DIR, "next-kernel")
    kernel = read_file(next_kernel).strip() or read_file(os.path.join(root, SIM_DIR, "kernel")).strip() or DEFAULT_KERNEL
    with open(os.path.join(root, SIM_DIR, "kernel"), "w") as fh:
        fh.write(kernel + "\n")
    values = dict(sysctl_defaults())
    values.update(memory_sysctl_defaults(env.get("MEMORY_KIB")))
    values["kernel.osrelease"] = kernel
    values["kernel.hostname"] = env.get("NODE_NAME", "node")
    boot_id = str(uuid.uuid4())
    values["kernel.random.boot_id"] = boot_id
    for key, value in values.items():
        path = _sysctl_path(root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(_kernel_value(value) + "\n")
    cmdline = _cmdline_from_grub_cfg(root, kernel)
    memory_mib = int(env.get("MEMORY_MIB") or DEFAULT_MEMORY_MIB)
    with open(os.path.join(root, "proc/cmdline"), "w") as fh:
        fh.write(cmdline + "\n")
    with open(os.path.join(root, "proc/meminfo"), "w") as fh:
        fh.write("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n"
                 % (memory_mib * 1024, memory_mib * 1000, memory_mib * 1000))
    # The GPU driver, loaded for the hardware with its modprobe.d options.
    gpus = int(env.get("GPU_COUNT") or 0)
    modules = ["nvidia", "nvidia_uvm", "nvidia_modeset"] if gpus else []
    with open(os.path.join(root, "proc/modules"), "w") as fh:
        for m in modules:
            fh.write("%s 16384 0 - Live 0x0000000000000000\n" % m)
    options = {}
    for name in sorted(os.listdir(os.path.join(root, "etc/modprobe.d"))) if os.path.isdir(
            os.path.join(root, "etc/modprobe.d")) else ():
        for line in read_file(os.path.join(root, "etc/modprobe.d", name)).splitlines():
            parts = line.split("#")[0].split()
            if len(parts) >= 3 and parts[0] == "options":
                options.setdefault(parts[1].replace("-", "_"), []).extend(parts[2:])
    options.update(initramfs_options(root, kernel))
    for m in modules:
        pdir = os.path.join(root, "sys/module", m, "parameters")
        os.makedirs(pdir, exist_ok=True)
        for opt in options.get(m, []):
            k, _, v = opt.partition("=")
            with open(os.path.join(pdir, k), "w") as fh:
                fh.write(v + "\n")
    dev = os.path.join(root, "dev")
    for name in os.listdir(dev) if os.path.isdir(dev) else ():
        if name.startswith("nvidia"):
            os.unlink(os.path.join(dev, name))
    if gpus:
        _mknod(os.path.join(dev, "nvidiactl"), 195, 255)
        _mknod(os.path.join(dev, "nvidia-modeset"), 195, 254)
        _mknod(os.path.join(dev, "nvidia-uvm"), 511, 0)
        for i in range(gpus):
            _mknod(os.path.join(dev, "nvidia%d" % i), 195, i)
    # cpufreq: the driver's default governor until something writes another.
    if env.get("MACHINE") == "aarch64":
        driver, governors, governor = "cppc_cpufreq", "conservative ondemand userspace powersave performance " \
                                                      "schedutil", "schedutil"
    else:
        driver, governors, governor = "intel_pstate", "performance powersave", "powersave"
    for cpu in range(SIM_CPUS):
        gdir = os.path.join(root, "sys/devices/system/cpu/cpu%d/cpufreq" % cpu)
        os.makedirs(gdir, exist_ok=True)
        for name, value in (("scaling_governor", governor), ("scaling_available_governors", governors),
                            ("scaling_driver", driver)):
            with open(os.path.join(gdir, name), "w") as fh:
                fh.write(value + "\n")
    kdir = os.path.join(root, "sys/kernel")
    os.makedirs(kdir, exist_ok=True)
    for name, value in (("kexec_crash_size", crash_kernel_size(cmdline, memory_mib << 20)),
                        ("kexec_crash_loaded", 0), ("kexec_loaded", 0)):
        with open(os.path.join(kdir, name), "w") as fh:
            fh.write("%d\n" % value)
    with open(os.path.join(root, SIM_DIR, "actions.log"), "a") as fh:
        fh.write("boot %s kernel=%s\n" % (boot_id, kernel))
    init = subprocess.run(["chroot", root, "/bin/sh", INIT], capture_output=True, text=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}, timeout=300)
    if init.returncode != 0:
        raise HostRootError("the simulated init of %s failed (exit %d): %s" % (
            root, init.returncode, (init.stderr or init.stdout).strip()[-500:]))
    return boot_id


def memory_sysctl_defaults(memory_kib):
    """What the kernel computes at boot from the node's memory (KiB): the min_free_kbytes
    reserve (sqrt(lowmem * 16), at most 256 MiB), inotify watches (1% of memory, at most
    1048576) and threads-max."""
    try:
        kib = int(memory_kib or 0)
    except ValueError:
        kib = 0
    if kib <= 0:
        return {}
    watch_cost = 1080  # an inotify mark and two inodes, 64-bit 6.8 kernel
    return {
        "vm.min_free_kbytes": str(max(128, min(math.isqrt(kib * 16), 262144))),
        "fs.inotify.max_user_watches": str(max(8192, min(kib * 1024 // 100 // watch_cost, 1048576))),
        "kernel.threads-max": str(max(20, min(kib * 1024 // (8 * 16384), 0x3fffffff))),
    }


def initramfs_options(root, kernel):
    """``{module: [options]}`` for the modules the initramfs of ``kernel`` carries: what
    they load with at boot, whatever /etc/modprobe.d says now."""
    for name in ("initrd.img-%s" % kernel, "initramfs-%s.img" % kernel):
        text = read_file(os.path.join(root, "boot", name), None)
        if text is None:
            continue
        options = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "module":
                options.setdefault(parts[1], [])
            elif len(parts) >= 3 and parts[0] == "options" and parts[1] in options:
                options[parts[1]].extend(parts[2:])
        return options
    return {}


def boot_id(root):
    return read_file(os.path.join(root, "proc/sys/kernel/random/boot_id")).strip()
