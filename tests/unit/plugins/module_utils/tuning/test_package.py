# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nvidia-tuning package: its profile resolved on the controller into package config
(tuning.resolve_package_spec), and its steps on a simulator host root through the whole
lifecycle with the package runner - apply and reboot, rerun, a sysctl-only change, a
change that needs nothing, a file edited on the host, upgrade, uninstall, grubby hosts
and hosts that do not match the profile. No cluster: the runner works on the root
directly, and the simulated boot stands in for the safe sequence's reboot."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess

import pytest
import yaml
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import (
    StepFailed,
    check_packages,
    run_packages,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import ACCELERATOR_NAMES
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import (
    CHECK_RULES,
    CMDLINE_PROBE,
    UNAVAILABLE,
    check_expectations,
    checks_text,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import cmdline_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import (
    KEY_CHECKS,
    KEY_NOOP,
    KEY_PROFILE,
    KEY_REBOOT,
    KEY_SERVICE_PREFIX,
    PACKAGE_NAME,
    RESOLVED_PREFIX,
    file_key,
    group_key,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    DEFAULT_POWER_PROFILE_COMMAND,
    GRUB_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    SYSCTL_FILE,
    WANTS_FILE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import (
    PACKAGE_DIR,
    PROFILES_DIR,
    ROLE_DIR,
    load_profiles,
    package_spec_for_nodes,
    render_files,
)
from ansible_collections.nodewright.fleet.plugins.plugin_utils.tuning_files import VERDICT_SCRIPT, check_settings

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
SRC = os.path.join(REPO, "packages", "nvidia-tuning")
PACKAGE = load_package(SRC)
PROFILES = load_profiles()
VERDICT = os.path.join(SRC, "steps", "verdict.sh")
RESOURCE = "tune"
NOOP = {"type": "noop", "services": []}
REBOOT = {"type": "reboot", "services": []}
UBUNTU = "Ubuntu 24.04.1 LTS"
# What a site passes as skip_checks for hosts that cannot report a setting (the
# simulator reports every one).
VM_SKIP = {"governor:*": "virtual machines without cpufreq expose no CPU governor"}
GB200 = {"name": "gb200-0000", "os_image": UBUNTU,
         "labels": {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.compute.major": "10",
                    "nvidia.com/gpu.compute.minor": "0", "kubernetes.io/arch": "arm64"}}
H100 = {"name": "h100-0000", "os_image": UBUNTU,
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/arch": "amd64"}}
HOSTS = {"gb200": {"name": "gb200-0000", "arch": "arm64", "gpu_name": "NVIDIA GB200", "compute_cap": "10.0",
                   "gpu_count": 4, "gpu_memory_mib": 189471, "memory_mib": 983040},
         "h100": {"name": "h100-0000", "arch": "amd64", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0",
                  "gpu_count": 8, "gpu_memory_mib": 81559, "memory_mib": 2097152, "nvswitch_count": 4}}


def spec_for(node, **config):
    for key in ("options", "extra"):
        if isinstance(config.get(key), dict):
            config[key] = json.dumps(config[key])
    spec = {"name": PACKAGE_NAME, "src": SRC, "config": config}
    rendered, per_node = package_spec_for_nodes(spec, [node] if node else [], package=PACKAGE)
    return rendered, per_node


# ------------------------------------------------------------------ resolution on the controller

def test_config_groups_settings_by_the_interrupt_a_change_needs():
    spec, per_node = spec_for(GB200, intent="multiNodeTraining")
    config = spec["config"]
    resolved = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    assert per_node["gb200-0000"]["profile"] == resolved["name"]
    reboot = dict(line.split("\t") for line in config[KEY_REBOOT].splitlines())
    assert reboot["cmdline:hugepages_1G"] == "hugepagesz=1G hugepages=2"
    assert reboot["modprobe:nvidia/NVreg_CoherentGPUMemoryMode"] == "driver"
    assert "sysctl:vm.overcommit_memory\t1" in config["resolved.service.systemd-sysctl"]
    # Ubuntu 24.04's 1048576 map areas are not lowered to the profile's 262144.
    assert "sysctl:vm.max_map_count" not in config["resolved.service.systemd-sysctl"]
    profile = config[KEY_PROFILE].splitlines()
    assert "initramfs\tinitramfs-tools\tupdate-initramfs\t-u\t-k\tall" in profile
    assert "floor\tnet.core.rmem_max\t536870912" in profile
    assert not [line for line in profile if line.startswith("requires\t")]  # no peer memory known: DMA-BUF
    assert [line.split("\t")[3] for line in profile if line.startswith("file\tresolved.file.modprobe\t")] == [
        "initramfs"]
    assert "dropin:containerd.service/LimitMEMLOCK\tinfinity" in config["resolved.service.containerd"]
    # Every setting is in exactly one group, and the group's interrupt is the setting's.
    grouped = [line.split("\t")[0] for key, text in config.items()
               if key == KEY_REBOOT or key.startswith(KEY_SERVICE_PREFIX) or key == KEY_NOOP
               for line in text.splitlines()]
    assert sorted(grouped) == sorted(resolved["settings"])
    for sid, setting in resolved["settings"].items():
        key = group_key(setting)
        assert spec["config_interrupts"].get(key, NOOP) == setting["interrupt"], sid
    assert spec["interrupt"] == REBOOT
    # A removed group of kernel parameters still reboots; a removed containerd drop-in restarts it.
    assert spec["config_interrupts"][KEY_REBOOT] == REBOOT
    assert spec["config_interrupts"]["resolved.service.containerd"]["services"] == ["containerd"]


def test_files_are_the_bytes_the_role_writes():
    spec, _ = spec_for(GB200, intent="inference", options={"inference_hugepages": True})
    resolved = resolve_profile("gb200", "inference", "ubuntu-24.04", options={"inference_hugepages": True},
                               profiles=PROFILES, host={"driver_source": "host"})
    files = render_files(resolved, DEFAULT_POWER_PROFILE_COMMAND)
    manifest = [line.split("\t") for line in spec["config"][KEY_PROFILE].splitlines() if line.startswith("file\t")]
    assert [(m[1], m[2]) for m in manifest] == [(file_key(f), f["path"]) for f in files]
    for f in files:
        assert spec["config"][file_key(f)] == f["content"]
    grub = spec["config"]["resolved.file.cmdline"]
    assert grub.endswith('hugepagesz=2M hugepages=8192 hugepagesz=1G hugepages=2"\n')
    assert "--profile-id 6" in spec["config"]["resolved.file.gpu"]
    assert "arch\taarch64" in spec["config"][KEY_PROFILE].splitlines()
    assert "os\tubuntu\t24.04" in spec["config"][KEY_PROFILE].splitlines()


def test_a_why_text_changes_the_file_but_not_the_settings(tmp_path):
    site = tmp_path / "profiles"
    shutil.copytree(PROFILES_DIR, str(site))
    text = (site / "base.yml").read_text()
    assert "Zeroing every page when it is allocated" in text
    (site / "base.yml").write_text(text.replace("Zeroing every page when it is allocated",
                                                "Zeroing each page as it is allocated"))
    before, _ = spec_for(GB200)
    after, _ = package_spec_for_nodes({"name": PACKAGE_NAME, "src": SRC, "config": {}}, [GB200],
                                      package=PACKAGE, profiles_dir=str(site))
    changed = sorted(k for k in set(before["config"]) | set(after["config"])
                     if before["config"].get(k) != after["config"].get(k))
    assert changed == ["resolved.file.cmdline"]  # no reboot: the reboot group is unchanged


def test_nodes_resolve_from_labels_and_os_image_and_must_agree():
    _, per_node = spec_for(None, accelerator="h200", os="ubuntu-22.04")
    assert per_node == {}
    spec, _ = spec_for(None, accelerator="h200", os="ubuntu-22.04")
    assert "h200/performance on ubuntu-22.04" in spec["config"][KEY_PROFILE]
    untouched, _ = spec_for(None)
    assert not any(k.startswith(RESOLVED_PREFIX) for k in untouched["config"])

    with pytest.raises(ValidationError) as info:
        package_spec_for_nodes({"name": PACKAGE_NAME, "src": SRC, "config": {}}, [GB200, H100], package=PACKAGE)
    message = str(info.value)
    assert "resolve to different NVIDIA tuning profiles" in message
    assert "gb200/performance on ubuntu-24.04 (gb200-0000)" in message and "(h100-0000)" in message
    assert "its own NodeWright resource" in message

    eks = dict(GB200, labels=dict(GB200["labels"], **{"eks.amazonaws.com/nodegroup": "gpu"}))
    _, per_node = spec_for(eks)
    assert per_node["gb200-0000"]["cloud"] == "eks"
    pcie = dict(H100, labels=dict(H100["labels"], **{"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}))
    _, per_node = spec_for(pcie)
    assert "gpu:fabricmanager" not in [s["id"] for s in per_node["h100-0000"]["settings"]]


@pytest.mark.parametrize("config,node,message", [
    ({"accelarator": "gb200"}, GB200, "unknown config key(s) accelarator"),
    ({"options": "acs_override=true"}, GB200, "config options must be a JSON object"),
    ({"options": '{"acs_override": true}'}, GB200, "x86-64 HGX"),
    ({"intent": "training"}, GB200, "unknown intent 'training'"),
    ({}, dict(GB200, os_image="Amazon Linux 2023"), "node gb200-0000: os: unsupported operating system"),
    ({}, dict(GB200, labels={}), "node gb200-0000: accelerator: cannot tell which NVIDIA accelerator"),
    ({"os": "cos", "extra": {"settings": {"cmdline": {"x": {"value": "quiet", "why": "wanted"}}}}}, GB200,
     "refused on cos"),
])
def test_bad_config_fails_before_any_node_is_touched(config, node, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_for(node, **config)


def test_the_plan_shows_each_nodes_settings():
    resource = yaml.safe_load(open(os.path.join(REPO, "deploy", "examples", "nodewright-nvidia-tuning.yaml")))
    policy = yaml.safe_load(open(os.path.join(REPO, "deploy", "examples", "deploymentpolicy-gpu-canary.yaml")))
    nodes = [{"metadata": {"name": n["name"], "labels": dict(n["labels"]), "creationTimestamp": "2026-01-01T00:00:00Z"},
              "status": {"nodeInfo": {"osImage": n["os_image"]}}} for n in (GB200, H100)]
    # As the playbooks read it: the serialized plan.
    plan = desired_state.describe(resource, nodes, {"gpu-canary": policy}, [os.path.join(REPO, "packages")]).to_dict()
    assert plan["targets"] == ["gb200-0000"]
    node = plan["nodes"]["gb200-0000"]
    assert node["actions"] == {"nvidia-tuning": "apply"} and node["interrupt"]["type"] == "reboot"
    tuned = node["nvidia_tuning"]
    assert tuned["profile"] == "gb200/multiNodeTraining on ubuntu-24.04"
    settings = {s["id"]: s for s in tuned["settings"]}
    assert settings["cmdline:numa_balancing"]["reboot"] and not settings["sysctl:net.core.rmem_max"]["reboot"]
    assert settings["sysctl:net.core.rmem_max"]["value"] == "536870912"
    spec = plan["packages"][0]
    assert spec["config"]["intent"] == "multiNodeTraining" and KEY_PROFILE in spec["config"]

    import jinja2
    template = open(os.path.join(REPO, "playbooks", "templates", "plan.txt.j2")).read()
    text = jinja2.Environment(trim_blocks=True).from_string(template).render(
        nodewright_plan={"rollouts": [plan], "blocked": []})
    lines = text.splitlines()
    at = lines.index("  gb200-0000: nvidia-tuning apply 1.1.0; interrupt reboot")
    assert lines[at + 1] == "    nvidia-tuning gb200/multiNodeTraining on ubuntu-24.04: %d settings, %d need a reboot" % (
        len(tuned["settings"]), len([s for s in tuned["settings"] if s["reboot"]]))
    assert "      cmdline: hugepages_1G = hugepagesz=1G hugepages=2 (reboot)" in lines
    # A limit shows the node's value it replaces; one that would lower it is left out, saying why.
    assert ("      sysctl: net.ipv4.tcp_rmem = 4096 131072 6291456 (the kernel's default) -> 4096 131072 268435456 "
            "(no reboot)") in lines
    assert ("      skipped sysctl:vm.max_map_count: would lower vm.max_map_count from 1048576 (Ubuntu 24.04's "
            "/etc/sysctl.d/10-map-count.conf) to 262144") in lines
    assert "      modprobe: nvidia/NVreg_CoherentGPUMemoryMode = driver (reboot)" in lines
    assert ("      decided gpudirect = dmabuf: no peer-memory provider known for this node; set gpudirect peermem "
            "for hosts with MLNX_OFED or DOCA-OFED (the package's preflight checks it)") in lines
    assert "      decided acs_override = false: not an x86-64 HGX node" in lines
    assert "      initramfs: rebuilt (update-initramfs -u -k all) when the driver options change, before the reboot" \
        in lines


def test_filters_for_direct_use_and_for_the_role():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.nodewright.fleet.plugins.filter.tuning import FilterModule

    filters = FilterModule().filters()
    spec = filters["tuning_package_spec"]({"name": "nvidia-tuning", "config": {"intent": "inference"}},
                                          labels=GB200["labels"], os_image=UBUNTU, node="gb200-0000")
    assert set(spec) == {"name", "config", "interrupt", "config_interrupts"}
    assert "gb200/inference on ubuntu-24.04" in spec["config"][KEY_PROFILE]
    assert spec["interrupt"] == REBOOT
    with pytest.raises(AnsibleFilterError, match="node gb200-0000: os: unsupported operating system"):
        filters["tuning_package_spec"]({"config": {}}, labels=GB200["labels"], os_image="Windows Server 2022",
                                       node="gb200-0000")
    resolved = filters["tuning_profile"]("h100", "performance", "ubuntu-24.04")
    files = filters["tuning_render_files"](resolved, "/opt/power --profile {profile}")
    assert [f["path"] for f in files] == [f["path"] for f in resolved["files"]]
    assert all(f["content"].startswith("# Managed by NodeWright (NVIDIA tuning)") for f in files)


# ------------------------------------------------------------------ the one comparator

def _verdict(tmp_path, spec, observed):
    """verdict.sh on the checks the package carries, as its post-interrupt step runs it."""
    (tmp_path / "checks").write_text(spec["config"][KEY_CHECKS])
    (tmp_path / "observed").write_text("".join("%s\t%s\n" % kv for kv in observed.items()))
    return subprocess.run(["sh", VERDICT, str(tmp_path / "checks"), str(tmp_path / "observed")],
                          capture_output=True, text=True)


def observed_ok(resolved):
    observed = {}
    for row in check_expectations(resolved):
        if row["probe"] == CMDLINE_PROBE:
            continue
        observed[row["probe"]] = "Enabled Enabled" if row["rule"] == "enabled" else row["expected"]
    observed[CMDLINE_PROBE] = "BOOT_IMAGE=/boot/vmlinuz ro " + " ".join(cmdline_tokens(resolved)) + " quiet"
    return observed


# What the host reports (None: not at all) -> the settings that did not take effect.
VERDICTS = [
    ({}, []),
    ({"sysctl:vm.overcommit_memory": "0"}, ["sysctl:vm.overcommit_memory"]),
    ({"sysctl:net.ipv4.tcp_wmem": "4096\t65536   268435456"}, []),
    ({CMDLINE_PROBE: "BOOT_IMAGE=/boot/vmlinuz ro quiet"},
     ["cmdline:acpi_power_meter", "cmdline:earlycon", "cmdline:hugepages_1G", "cmdline:hugepages_2M",
      "cmdline:init_on_alloc",
      "cmdline:iommu", "cmdline:numa_balancing", "cmdline:serial_console"]),
    ({"gpu:persistence": "Enabled Disabled"}, ["gpu:persistence"]),
    ({"gpu:persistence": ""}, ["gpu:persistence"]),
    ({"governor:cpu": UNAVAILABLE}, []),
    ({"governor:cpu": "performance powersave"}, ["governor:cpu"]),
    ({"modprobe:nvidia/NVreg_GrdmaPciTopoCheckOverride": "<module not loaded>"},
     ["modprobe:nvidia/NVreg_GrdmaPciTopoCheckOverride"]),
    ({"sysctl:vm.overcommit_memory": None}, ["sysctl:vm.overcommit_memory"]),
]


@pytest.mark.parametrize("change,failed", VERDICTS)
@pytest.mark.parametrize("skip", [{}, VM_SKIP])
def test_one_verdict_for_the_package_and_the_role(tmp_path, change, failed, skip):
    """The package's post-interrupt step and the role's check (check_settings) both judge
    with verdict.sh, on the same rows."""
    spec, _ = spec_for(GB200, intent="multiNodeTraining", skip_checks=json.dumps(skip))
    resolved = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    assert spec["config"][KEY_CHECKS] == checks_text(check_expectations(resolved, skip))
    observed = observed_ok(resolved)
    for probe, value in change.items():
        if value is None:
            del observed[probe]
        else:
            observed[probe] = value
    failed = [sid for sid in failed if not any(fnmatch.fnmatchcase(sid, glob) for glob in skip)]
    role = check_settings(resolved, observed, skip=skip)
    assert sorted(f["id"] for f in role["failed"]) == sorted(failed)
    proc = _verdict(tmp_path, spec, observed)
    assert proc.returncode == (1 if failed else 0), proc.stdout + proc.stderr
    assert sorted(line.split("\t")[1] for line in proc.stdout.splitlines() if line.startswith("failed\t")) == \
        sorted(failed)
    unverified = sorted(u["id"] for u in role["unverified"])
    assert sorted(line.split("\t")[1] for line in proc.stdout.splitlines()
                  if line.startswith("unverified\t")) == unverified
    if not failed:
        assert proc.stdout.splitlines()[-1] == "summary\tall %d setting(s) in effect%s" % (
            len(role["verified"]), ", %d unverified" % len(unverified) if unverified else "")


# ------------------------------------------------------------------ on a simulator host root

@pytest.fixture(scope="module")
def base_image(tmp_path_factory):
    return hostroot.BaseImage(str(tmp_path_factory.mktemp("base") / "img")).prepare()


def host(tmp_path, base_image, kind="gb200"):
    root = str(tmp_path / kind)
    hostroot.create(root, base_image, HOSTS[kind])
    return root


def run(root, spec, **kw):
    return run_packages([spec] if spec else [], host_root=root, resource=RESOURCE, **kw)


def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


def exists(root, path):
    return os.path.lexists(os.path.join(root, path.lstrip("/")))


def sh(root, command):
    return hostroot.run(root, command).stdout.strip()


def interrupt_and_verify(root, result):
    """What the safe sequence does between the two phases; returns the post-interrupt run."""
    interrupt = result["interrupt"]
    if interrupt["type"] == "reboot":
        hostroot.boot(root)
    for service in interrupt["services"]:
        assert hostroot.run(root, "systemctl restart %s" % service).returncode == 0, service
    done = run(root, None, phase="post-interrupt")
    assert done["state"]["status"] == "complete", done
    return done


def step_output(result, stage):
    return "".join(s["stdout_tail"] for r in result["results"] for s in r["steps"] if s["stage"] == stage)


def test_lifecycle_on_a_host_root(tmp_path, base_image):
    root = host(tmp_path, base_image)
    spec, _ = spec_for(GB200, intent="multiNodeTraining")
    applied = run(root, spec)
    assert [r["stages"] for r in applied["results"]] == [["apply", "config"]]
    assert applied["interrupt"] == REBOOT
    resolved = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    for f in render_files(resolved, DEFAULT_POWER_PROFILE_COMMAND):
        assert read(root, f["path"]) == f["content"], f["path"]
    assert "numa_balancing=disable" in read(root, "/boot/grub/grub.cfg")
    assert "numa_balancing=disable" not in read(root, "/proc/cmdline")
    with pytest.raises(StepFailed, match="has not rebooted"):
        run(root, None, phase="post-interrupt")

    # The driver options are in the initramfs, which the driver loads from.
    assert "options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_GrdmaPciTopoCheckOverride=1" in read(
        root, "/boot/initrd.img-%s" % hostroot.DEFAULT_KERNEL)
    done = interrupt_and_verify(root, applied)
    verified = step_output(done, "post-interrupt-check")
    assert "all %d setting(s) in effect" % len(resolved["settings"]) in verified and "unverified" not in verified
    assert "numa_balancing=disable" in read(root, "/proc/cmdline")
    assert read(root, "/sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode").strip() == "driver"
    assert sh(root, "sysctl -n net.core.rmem_max") == "536870912"

    again = run(root, spec)
    assert not again["changed"] and again["interrupt"] == NOOP

    # A sysctl-only change restarts systemd-sysctl, no reboot.
    boot = hostroot.boot_id(root)
    swappy, _ = spec_for(GB200, intent="multiNodeTraining",
                         extra={"settings": {"sysctl": {"vm.swappiness": {"value": 10, "why": "site choice"}}}})
    changed = run(root, swappy)
    assert [(r["action"], r["stages"]) for r in changed["results"]] == [("config", ["config"])]
    assert changed["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    interrupt_and_verify(root, changed)
    assert sh(root, "sysctl -n vm.swappiness") == "10" and hostroot.boot_id(root) == boot

    # Dropping the power profile needs nothing: its unit goes, the GPU keeps the profile until a reboot.
    quiet, _ = spec_for(GB200, intent="multiNodeTraining", options={"power_profile": False},
                        extra={"settings": {"sysctl": {"vm.swappiness": {"value": 10, "why": "site choice"}}}})
    dropped = run(root, quiet)
    assert dropped["interrupt"] == NOOP and dropped["state"]["status"] == "complete"
    assert not exists(root, "/etc/systemd/system/nodewright-gpu-power-profile.service")
    assert "nodewright-gpu-power-profile" not in read(root, "/etc/systemd/system/multi-user.target.d/"
                                                           "90-nodewright-nvidia.conf")
    assert "daemon-reload" in read(root, "/var/lib/nodewright-sim/actions.log")

    # A file edited on the host is written again at the next change, with its restart.
    with open(os.path.join(root, "etc/sysctl.d/90-nodewright-nvidia.conf"), "a") as fh:
        fh.write("vm.swappiness = 60\n")
    rechecked, _ = spec_for(GB200, intent="multiNodeTraining", options={"power_profile": False},
                            extra={"settings": {"sysctl": {"vm.swappiness": {"value": 11, "why": "site choice"}}}})
    redone = run(root, rechecked)
    assert redone["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    assert "edited on this host" in step_output(redone, "config")
    assert "vm.swappiness = 60" not in read(root, "/etc/sysctl.d/90-nodewright-nvidia.conf")
    interrupt_and_verify(root, redone)

    # A new package version is applied with the whole profile's interrupt.
    newer = str(tmp_path / "nvidia-tuning-1.2.0")
    shutil.copytree(SRC, newer)
    manifest = json.load(open(os.path.join(newer, "package.json")))
    manifest["version"] = "1.2.0"
    json.dump(manifest, open(os.path.join(newer, "package.json"), "w"))
    upgraded = run(root, dict(rechecked, src=newer))
    assert [(r["action"], r["stages"]) for r in upgraded["results"]] == [("upgrade", ["upgrade", "config"])]
    assert upgraded["interrupt"] == REBOOT
    interrupt_and_verify(root, upgraded)

    removed = run_packages([{"name": PACKAGE_NAME, "state": "absent"}], host_root=root, resource=RESOURCE)
    assert removed["state"] == {"packages": {}, "status": "complete"}
    for path in (SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE, WANTS_FILE):
        assert not exists(root, path), path
    assert not exists(root, "/etc/systemd/system/containerd.service.d")
    assert "numa_balancing" not in read(root, "/boot/grub/grub.cfg")
    hostroot.boot(root)
    assert "numa_balancing" not in read(root, "/proc/cmdline")


def test_a_driver_option_change_rebuilds_the_initramfs_and_takes_effect_after_the_reboot(tmp_path, base_image):
    root = host(tmp_path, base_image)
    spec, _ = spec_for(GB200, intent="multiNodeTraining")
    interrupt_and_verify(root, run(root, spec))
    option = "/sys/module/nvidia/parameters/NVreg_EnablePCIERelaxedOrderingMode"
    assert not exists(root, option)

    relaxed, _ = spec_for(GB200, intent="multiNodeTraining", options={"relaxed_ordering": True})
    changed = run(root, relaxed)
    assert changed["interrupt"] == REBOOT  # planned from the reboot group, before the node is touched
    assert "rebuilding the initramfs (update-initramfs): update-initramfs -u -k all" in step_output(changed, "config")
    image = read(root, "/boot/initrd.img-%s" % hostroot.DEFAULT_KERNEL)
    assert "NVreg_EnablePCIERelaxedOrderingMode=1" in image
    interrupt_and_verify(root, changed)
    assert read(root, option).strip() == "1"

    # The same option written without a rebuild never reaches the driver: what the
    # simulated boot loads is what the initramfs carries.
    with open(os.path.join(root, "etc/modprobe.d/50-site.conf"), "w") as fh:
        fh.write("options nvidia NVreg_EnableResizableBar=1\n")
    hostroot.boot(root)
    assert not exists(root, "/sys/module/nvidia/parameters/NVreg_EnableResizableBar")
    # An initramfs not built from the options in place is drift: the check stage says so.
    os.unlink(os.path.join(root, "var/lib/nodewright/data/%s/nvidia-tuning/initramfs" % RESOURCE))
    drift = check_packages(host_root=root, resource=RESOURCE)
    assert [(d["name"], d["stage"]) for d in drift["drifted"]] == [(PACKAGE_NAME, "config-check")]
    assert "initramfs was not rebuilt" in drift["drifted"][0]["message"]


def test_the_host_refuses_a_limit_below_its_own_value_unless_forced(tmp_path, base_image):
    root = host(tmp_path, base_image)
    # Raised on the host by someone else (the controller cannot know): read before writing.
    assert hostroot.run(root, "sysctl -w net.core.rmem_max=1073741824").returncode == 0
    spec, _ = spec_for(GB200, intent="multiNodeTraining")
    with pytest.raises(StepFailed, match="net.core.rmem_max is 1073741824 on this host, the profile would lower it "
                                         "to 536870912; NodeWright never lowers a limit"):
        run(root, spec)
    assert not exists(root, SYSCTL_FILE)
    forced, _ = spec_for(GB200, intent="multiNodeTraining", extra={"settings": {"sysctl": {"net.core.rmem_max": {
        "value": 536870912, "force": True, "why": "the site lowers it on purpose"}}}})
    assert "floor\tnet.core.rmem_max\t" not in forced["config"][KEY_PROFILE]
    interrupt_and_verify(root, run(root, forced))
    assert sh(root, "sysctl -n net.core.rmem_max") == "536870912"
    # What NodeWright wrote itself is not the host's own value: back to the profile's value is fine.
    interrupt_and_verify(root, run(root, spec))


def test_nvidia_peermem_needs_a_peer_memory_provider_on_the_host(tmp_path, base_image):
    spec, per_node = spec_for(GB200, intent="multiNodeTraining", options={"gpudirect": "peermem"})
    assert "requires\tpeer-memory\tnvidia_peermem" in spec["config"][KEY_PROFILE].splitlines()
    assert {"option": "gpudirect", "value": "peermem", "reason": "options.gpudirect", "explicit": True} in \
        per_node["gb200-0000"]["decisions"]
    plain = host(tmp_path, base_image)
    with pytest.raises(StepFailed, match="needs a peer-memory provider \\(MLNX_OFED or DOCA-OFED\\) that this host "
                                         "does not have"):
        run(plain, spec)
    assert not exists(plain, MODULES_FILE)
    mofed = str(tmp_path / "mofed")
    hostroot.create(mofed, base_image, dict(HOSTS["gb200"], mofed=True))
    applied = run(mofed, spec)
    assert "peer-memory provider for nvidia_peermem: MLNX_OFED_LINUX-24.10-1.1.4.0" in step_output(applied, "apply")
    assert "nvidia_peermem" in read(mofed, MODULES_FILE)
    gdrcopy, _ = spec_for(GB200, intent="multiNodeTraining", options={"gdrcopy": "on"})
    with pytest.raises(StepFailed, match="loads gdrdrv, which is not installed on this host"):
        run(plain, gdrcopy)


def test_cos_gets_sysctls_only_and_never_a_reboot(tmp_path, base_image):
    root = str(tmp_path / "cos")
    hostroot.create(root, base_image, dict(HOSTS["h100"], os_id="cos"))
    node = dict(H100, os_image="Container-Optimized OS from Google",
                labels=dict(H100["labels"], **{"cloud.google.com/gke-nodepool": "gpu"}))
    spec, per_node = spec_for(node, intent="multiNodeTraining")
    assert per_node["h100-0000"]["cloud"] == "gke" and not per_node["h100-0000"]["reboot"]
    assert per_node["h100-0000"]["reapply_every_boot"]
    assert KEY_REBOOT not in spec["config"]
    # Written and applied at once (sysctl -p): nothing to restart, so nothing to drain for.
    assert spec["interrupt"] == NOOP
    applied = run(root, spec)
    assert applied["interrupt"] == NOOP
    assert sh(root, "sysctl -n net.core.rmem_max") == "536870912"
    written = [line.split("\t")[2] for line in read(root, "/var/lib/nodewright/data/%s/nvidia-tuning/files" % RESOURCE).splitlines()]
    assert written == [SYSCTL_FILE]
    assert not exists(root, GRUB_FILE) and not exists(root, MODPROBE_FILE)
    # No interrupt, so no post-interrupt check: the config check reads the settings back.
    resolved = resolve_profile("h100", "multiNodeTraining", "cos", profiles=PROFILES)
    assert {s["mechanism"] for s in resolved["settings"].values()} == {"sysctl"}
    assert "all %d setting(s) in effect" % len(resolved["settings"]) in step_output(applied, "config-check")
    assert sh(root, "sysctl -n net.ipv4.tcp_congestion_control") == "cubic"  # GKE rejects bbr on GPU nodes


def test_a_host_that_does_not_match_the_profile_is_refused(tmp_path, base_image):
    root = host(tmp_path, base_image, "h100")
    spec, _ = spec_for(GB200)
    with pytest.raises(StepFailed, match="is for aarch64 hosts, this host is x86_64"):
        run(root, spec)
    assert not exists(root, SYSCTL_FILE)
    rhel, _ = spec_for(None, accelerator="h100", os="rhel-9")
    with pytest.raises(StepFailed, match="is for rhel 9, this host runs ubuntu"):
        run(root, rhel)
    bare, _ = spec_for(None)
    bare["config"] = {"accelerator": "h100"}
    with pytest.raises(StepFailed, match="no resolved.profile"):
        run(root, bare)


# grubby as the tests need it: --args/--remove-args on every entry, --info shows them.
GRUBBY = """#!/bin/sh
state=/var/lib/grubby.args
touch "$state"
case "$*" in --info=*) echo "args=\\"ro $(tr '\\n' ' ' < "$state")\\""; exit 0 ;; esac
echo "$*" >> /var/lib/grubby.log
for a in "$@"; do
  case "$a" in
    --args=*) for t in ${a#--args=}; do grep -qx -- "$t" "$state" || echo "$t" >> "$state"; done ;;
    --remove-args=*) for t in ${a#--remove-args=}; do grep -vx -- "$t" "$state" > "$state.new" || true
                                                     mv "$state.new" "$state"; done ;;
  esac
done
"""


def test_grubby_hosts_get_kernel_parameters_on_every_boot_entry(tmp_path, base_image):
    root = host(tmp_path, base_image, "h100")
    with open(os.path.join(root, "etc/os-release"), "w") as fh:
        fh.write('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n')
    os.makedirs(os.path.join(root, "usr/local/bin"), exist_ok=True)
    with open(os.path.join(root, "usr/local/bin/grubby"), "w") as fh:
        fh.write(GRUBBY)
    os.chmod(os.path.join(root, "usr/local/bin/grubby"), 0o755)
    performance, _ = spec_for(None, accelerator="h100", os="rhel-9")
    assert run(root, performance)["interrupt"] == REBOOT
    assert not exists(root, GRUB_FILE)
    inference, _ = spec_for(None, accelerator="h100", os="rhel-9", intent="inference",
                            options={"inference_hugepages": True})
    assert run(root, inference)["interrupt"] == REBOOT
    run_packages([{"name": PACKAGE_NAME, "state": "absent"}], host_root=root, resource=RESOURCE)
    assert read(root, "/var/lib/grubby.args") == ""
    calls = read(root, "/var/lib/grubby.log").splitlines()
    assert calls[0] == "--update-kernel=ALL --args=init_on_alloc=0 console=tty0 console=ttyS0,115200n8 iommu=pt"
    assert calls[1] == ("--update-kernel=ALL --args=init_on_alloc=0 console=tty0 console=ttyS0,115200n8 iommu=pt "
                        "hugepagesz=2M hugepages=8192")
    assert calls[2] == ("--update-kernel=ALL --remove-args=init_on_alloc=0 console=tty0 console=ttyS0,115200n8 "
                        "iommu=pt hugepagesz=2M hugepages=8192")
    assert len(calls) == 3


# ------------------------------------------------------------------ one home for shared pieces

def test_package_and_role_share_their_pieces():
    # One read-back script and one comparator, the package's; the role runs them too.
    shipped = [os.path.relpath(os.path.join(d, f), REPO) for top in ("roles", "packages", "plugins")
               for d, _, names in os.walk(os.path.join(REPO, top)) for f in names if f in ("observe.sh", "verdict.sh")]
    assert sorted(shipped) == ["packages/nvidia-tuning/steps/observe.sh", "packages/nvidia-tuning/steps/verdict.sh"]
    with open(os.path.join(ROLE_DIR, "vars", "main.yml")) as fh:
        role_vars = yaml.safe_load(fh)
    observe = role_vars["nvidia_tuning__observe_script"].replace("{{ role_path }}", ROLE_DIR)
    assert os.path.realpath(observe) == os.path.realpath(os.path.join(SRC, "steps", "observe.sh"))
    assert os.path.realpath(VERDICT_SCRIPT) == os.path.realpath(VERDICT)
    with open(os.path.join(ROLE_DIR, "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    assert defaults["nvidia_tuning_power_profile_command"] == DEFAULT_POWER_PROFILE_COMMAND
    assert PACKAGE.default_config["power_profile_command"] == DEFAULT_POWER_PROFILE_COMMAND
    assert PACKAGE.config_interrupts[KEY_REBOOT].to_dict() == REBOOT
    assert PACKAGE.interrupt.to_dict() == NOOP
    assert os.path.realpath(PACKAGE_DIR) == os.path.realpath(SRC)
    assert set(CHECK_RULES) >= {row["rule"] for accel in ACCELERATOR_NAMES
                                  for row in check_expectations(resolve_profile(
                                      accel, "multiNodeInference", "ubuntu-24.04", profiles=PROFILES), VM_SKIP)}
