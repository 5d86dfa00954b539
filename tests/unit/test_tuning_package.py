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

import json
import os
import shutil
import subprocess

import pytest
import yaml
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import desired_state
from ansible_collections.nodewright.fleet.plugins.module_utils import tuning as t
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import StepFailed, run_packages

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "packages", "nvidia-tuning")
PACKAGE = load_package(SRC)
PROFILES = t.load_profiles()
TUNE = os.path.join(SRC, "steps", "tune.sh")
RESOURCE = "tune"
NOOP = {"type": "noop", "services": []}
REBOOT = {"type": "reboot", "services": []}
UBUNTU = "Ubuntu 24.04.1 LTS"
# The simulator's stand-ins cannot report these (its systemctl has no unit properties,
# nothing runs units or links nvidia-persistenced to the GPUs' persistence mode).
SIM_SKIP = {"dropin:*": "no unit properties in the simulator", "gpu:*": "no GPU services in the simulator",
            "governor:*": "units do not run in the simulator"}
GB200 = {"name": "gb200-0000", "os_image": UBUNTU,
         "labels": {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.compute.major": "10",
                    "nvidia.com/gpu.compute.minor": "0", "kubernetes.io/arch": "arm64"}}
H100 = {"name": "h100-0000", "os_image": UBUNTU,
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/arch": "amd64"}}
HOSTS = {"gb200": {"name": "gb200-0000", "arch": "arm64", "gpu_name": "NVIDIA GB200", "compute_cap": "10.0",
                   "gpu_count": 4, "gpu_memory_mib": 189471},
         "h100": {"name": "h100-0000", "arch": "amd64", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0",
                  "gpu_count": 8, "gpu_memory_mib": 81559}}


def spec_for(node, **config):
    config.setdefault("skip_checks", json.dumps(SIM_SKIP))
    for key in ("options", "extra"):
        if isinstance(config.get(key), dict):
            config[key] = json.dumps(config[key])
    spec = {"name": t.PACKAGE_NAME, "src": SRC, "config": config}
    rendered, per_node = t.package_spec_for_nodes(spec, [node] if node else [], package=PACKAGE)
    return rendered, per_node


# ------------------------------------------------------------------ resolution on the controller

def test_config_groups_settings_by_the_interrupt_a_change_needs():
    spec, per_node = spec_for(GB200, intent="multiNodeTraining")
    config = spec["config"]
    resolved = t.resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    assert per_node["gb200-0000"]["profile"] == resolved["name"]
    reboot = dict(line.split("\t") for line in config[t.KEY_REBOOT].splitlines())
    assert reboot["cmdline:hugepages_1G"] == "hugepagesz=1G hugepages=2"
    assert reboot["modprobe:nvidia/NVreg_CoherentGPUMemoryMode"] == "driver"
    assert "sysctl:vm.max_map_count\t262144" in config["resolved.service.systemd-sysctl"]
    assert "dropin:containerd.service/LimitMEMLOCK\tinfinity" in config["resolved.service.containerd"]
    # Every setting is in exactly one group, and the group's interrupt is the setting's.
    grouped = [line.split("\t")[0] for key, text in config.items()
               if key == t.KEY_REBOOT or key.startswith(t.KEY_SERVICE_PREFIX) or key == t.KEY_NOOP
               for line in text.splitlines()]
    assert sorted(grouped) == sorted(resolved["settings"])
    for sid, setting in resolved["settings"].items():
        key = t.group_key(setting)
        assert spec["config_interrupts"].get(key, NOOP) == setting["interrupt"], sid
    assert spec["interrupt"] == REBOOT
    # A removed group of kernel parameters still reboots; a removed containerd drop-in restarts it.
    assert spec["config_interrupts"][t.KEY_REBOOT] == REBOOT
    assert spec["config_interrupts"]["resolved.service.containerd"]["services"] == ["containerd"]


def test_files_are_the_bytes_the_role_writes():
    spec, _ = spec_for(GB200, intent="inference")
    resolved = t.resolve_profile("gb200", "inference", "ubuntu-24.04", profiles=PROFILES)
    files = t.render_files(resolved, t.DEFAULT_POWER_PROFILE_COMMAND)
    manifest = [line.split("\t") for line in spec["config"][t.KEY_PROFILE].splitlines() if line.startswith("file\t")]
    assert [(m[1], m[2]) for m in manifest] == [(t.file_key(f), f["path"]) for f in files]
    for f in files:
        assert spec["config"][t.file_key(f)] == f["content"]
    grub = spec["config"]["resolved.file.cmdline"]
    assert grub.endswith('hugepagesz=2M hugepages=8192 hugepagesz=1G hugepages=2"\n')
    assert "--profile-id 6" in spec["config"]["resolved.file.gpu"]
    assert "arch\taarch64" in spec["config"][t.KEY_PROFILE].splitlines()
    assert "os\tubuntu\t24.04" in spec["config"][t.KEY_PROFILE].splitlines()


def test_a_why_text_changes_the_file_but_not_the_settings(tmp_path):
    site = tmp_path / "profiles"
    shutil.copytree(t.PROFILES_DIR, str(site))
    text = (site / "base.yml").read_text()
    assert "Zeroing every page when it is allocated" in text
    (site / "base.yml").write_text(text.replace("Zeroing every page when it is allocated",
                                                "Zeroing each page as it is allocated"))
    before, _ = spec_for(GB200)
    after, _ = t.package_spec_for_nodes({"name": t.PACKAGE_NAME, "src": SRC, "config": {
        "skip_checks": json.dumps(SIM_SKIP)}}, [GB200], package=PACKAGE, profiles_dir=str(site))
    changed = sorted(k for k in set(before["config"]) | set(after["config"])
                     if before["config"].get(k) != after["config"].get(k))
    assert changed == ["resolved.file.cmdline"]  # no reboot: the reboot group is unchanged


def test_nodes_resolve_from_labels_and_os_image_and_must_agree():
    _, per_node = spec_for(None, accelerator="h200", os="ubuntu-22.04")
    assert per_node == {}
    spec, _ = spec_for(None, accelerator="h200", os="ubuntu-22.04")
    assert "h200/performance on ubuntu-22.04" in spec["config"][t.KEY_PROFILE]
    untouched, _ = spec_for(None)
    assert not any(k.startswith(t.RESOLVED_PREFIX) for k in untouched["config"])

    with pytest.raises(ValidationError) as info:
        t.package_spec_for_nodes({"name": t.PACKAGE_NAME, "src": SRC, "config": {}}, [GB200, H100], package=PACKAGE)
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


@pytest.mark.parametrize("image,expected", [
    ("Ubuntu 24.04.1 LTS", "ubuntu-24.04"), ("Ubuntu 22.04.5 LTS", "ubuntu-22.04"),
    ("Debian GNU/Linux 12 (bookworm)", "debian-12"), ("Red Hat Enterprise Linux 9.4 (Plow)", "rhel-9"),
    ("Rocky Linux 9.5 (Blue Onyx)", "rhel-9"), ("Container-Optimized OS from Google", "cos"),
])
def test_os_from_os_image(image, expected):
    assert t.os_from_os_image(image) == expected


def test_the_plan_shows_each_nodes_settings():
    resource = yaml.safe_load(open(os.path.join(REPO, "deploy", "examples", "nodewright-nvidia-tuning.yaml")))
    policy = yaml.safe_load(open(os.path.join(REPO, "deploy", "examples", "deploymentpolicy-gpu-canary.yaml")))
    nodes = [{"metadata": {"name": n["name"], "labels": dict(n["labels"]), "creationTimestamp": "2026-01-01T00:00:00Z"},
              "status": {"nodeInfo": {"osImage": n["os_image"]}}} for n in (GB200, H100)]
    plan = desired_state.describe(resource, nodes, {"gpu-canary": policy}, [os.path.join(REPO, "packages")])
    assert plan["targets"] == ["gb200-0000"]
    node = plan["nodes"]["gb200-0000"]
    assert node["actions"] == {"nvidia-tuning": "apply"} and node["interrupt"]["type"] == "reboot"
    tuned = node["nvidia_tuning"]
    assert tuned["profile"] == "gb200/multiNodeTraining on ubuntu-24.04"
    settings = {s["id"]: s for s in tuned["settings"]}
    assert settings["cmdline:numa_balancing"]["reboot"] and not settings["sysctl:net.core.rmem_max"]["reboot"]
    assert settings["sysctl:net.core.rmem_max"]["value"] == "536870912"
    spec = plan["packages"][0]
    assert spec["config"]["intent"] == "multiNodeTraining" and t.KEY_PROFILE in spec["config"]

    import jinja2
    template = open(os.path.join(REPO, "playbooks", "templates", "plan.txt.j2")).read()
    text = jinja2.Environment(trim_blocks=True).from_string(template).render(
        nodewright_plan={"rollouts": [plan], "blocked": []})
    lines = text.splitlines()
    at = lines.index("  gb200-0000: nvidia-tuning apply 1.0.0; interrupt reboot")
    assert lines[at + 1] == "    nvidia-tuning gb200/multiNodeTraining on ubuntu-24.04: 38 settings, 9 need a reboot"
    assert "      cmdline: hugepages_1G = hugepagesz=1G hugepages=2 (reboot)" in lines
    assert "      sysctl: net.ipv4.tcp_rmem = 4096 87380 268435456 (no reboot)" in lines
    assert "      modprobe: nvidia/NVreg_CoherentGPUMemoryMode = driver (reboot)" in lines


def test_filters_for_direct_use_and_for_the_role():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.nodewright.fleet.plugins.filter.tuning import FilterModule

    filters = FilterModule().filters()
    spec = filters["tuning_package_spec"]({"name": "nvidia-tuning", "config": {"intent": "inference"}},
                                          labels=GB200["labels"], os_image=UBUNTU, node="gb200-0000")
    assert set(spec) == {"name", "config", "interrupt", "config_interrupts"}
    assert "gb200/inference on ubuntu-24.04" in spec["config"][t.KEY_PROFILE]
    assert spec["interrupt"] == REBOOT
    with pytest.raises(AnsibleFilterError, match="node gb200-0000: os: unsupported operating system"):
        filters["tuning_package_spec"]({"config": {}}, labels=GB200["labels"], os_image="Windows Server 2022",
                                       node="gb200-0000")
    resolved = filters["tuning_profile"]("h100", "performance", "ubuntu-24.04")
    files = filters["tuning_render_files"](resolved, "/opt/power --profile {profile}")
    assert [f["path"] for f in files] == [f["path"] for f in resolved["files"]]
    assert all(f["content"].startswith("# Managed by NodeWright (NVIDIA tuning)") for f in files)


# ------------------------------------------------------------------ the shell comparator

def _compare(tmp_path, spec, observed):
    (tmp_path / "checks").write_text(spec["config"][t.KEY_CHECKS])
    (tmp_path / "observed").write_text("".join("%s\t%s\n" % kv for kv in observed.items()))
    return subprocess.run(["sh", TUNE, "compare", str(tmp_path / "checks"), str(tmp_path / "observed")],
                          capture_output=True, text=True)


def observed_ok(resolved):
    observed = {}
    for row in t.check_expectations(resolved):
        if row["probe"] == t.CMDLINE_PROBE:
            continue
        observed[row["probe"]] = "Enabled Enabled" if row["rule"] == "enabled" else row["expected"]
    observed[t.CMDLINE_PROBE] = "BOOT_IMAGE=/boot/vmlinuz ro " + " ".join(t.cmdline_tokens(resolved)) + " quiet"
    return observed


@pytest.mark.parametrize("change", [
    {},
    {"sysctl:vm.max_map_count": "65530"},
    {"sysctl:net.ipv4.tcp_rmem": "4096\t87380   268435456"},
    {t.CMDLINE_PROBE: "BOOT_IMAGE=/boot/vmlinuz ro quiet"},
    {"gpu:persistence": "Enabled Disabled"},
    {"gpu:persistence": ""},
    {"governor:cpu": t.UNAVAILABLE},
    {"governor:cpu": "performance powersave"},
    {"module:nvidia_peermem": "absent", "modprobe:nvidia/NVreg_GrdmaPciTopoCheckOverride": "<module not loaded>"},
    {"sysctl:vm.max_map_count": None},
])
@pytest.mark.parametrize("skip", [{}, SIM_SKIP])
def test_shell_comparator_judges_like_check_settings(tmp_path, change, skip):
    spec, _ = spec_for(GB200, intent="multiNodeTraining", skip_checks=json.dumps(skip))
    resolved = t.resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    observed = observed_ok(resolved)
    for probe, value in change.items():
        if value is None:
            del observed[probe]
        else:
            observed[probe] = value
    expected = t.check_settings(resolved, observed, skip=skip)
    proc = _compare(tmp_path, spec, observed)
    assert (proc.returncode == 0) == expected["ok"], proc.stdout + proc.stderr
    for failure in expected["failed"]:
        assert failure["id"] + ": expected " in proc.stdout
    if expected["ok"]:
        assert "all %d setting(s) in effect" % len(expected["verified"]) in proc.stdout
        assert proc.stdout.count("unverified ") == len(expected["unverified"])


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
    resolved = t.resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    for f in t.render_files(resolved, t.DEFAULT_POWER_PROFILE_COMMAND):
        assert read(root, f["path"]) == f["content"], f["path"]
    assert "numa_balancing=disable" in read(root, "/boot/grub/grub.cfg")
    assert "numa_balancing=disable" not in read(root, "/proc/cmdline")
    with pytest.raises(StepFailed, match="has not rebooted"):
        run(root, None, phase="post-interrupt")

    done = interrupt_and_verify(root, applied)
    verified = step_output(done, "post-interrupt-check")
    assert "all 32 setting(s) in effect, 6 unverified" in verified
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
                            extra={"settings": {"sysctl": {"vm.swappiness": {"value": 10, "why": "site choice"}}}},
                            skip_checks=json.dumps(dict(SIM_SKIP, **{"module:*": "checked elsewhere"})))
    redone = run(root, rechecked)
    assert redone["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    assert "edited on this host" in step_output(redone, "config")
    assert "vm.swappiness = 60" not in read(root, "/etc/sysctl.d/90-nodewright-nvidia.conf")
    interrupt_and_verify(root, redone)

    # A new package version is applied with the whole profile's interrupt.
    newer = str(tmp_path / "nvidia-tuning-1.1.0")
    shutil.copytree(SRC, newer)
    manifest = json.load(open(os.path.join(newer, "package.json")))
    manifest["version"] = "1.1.0"
    json.dump(manifest, open(os.path.join(newer, "package.json"), "w"))
    upgraded = run(root, dict(rechecked, src=newer))
    assert [(r["action"], r["stages"]) for r in upgraded["results"]] == [("upgrade", ["upgrade", "config"])]
    assert upgraded["interrupt"] == REBOOT
    interrupt_and_verify(root, upgraded)

    removed = run_packages([{"name": t.PACKAGE_NAME, "state": "absent"}], host_root=root, resource=RESOURCE)
    assert removed["state"] == {"packages": {}, "status": "complete"}
    for path in (t.SYSCTL_FILE, t.GRUB_FILE, t.MODPROBE_FILE, t.MODULES_FILE, t.WANTS_FILE):
        assert not exists(root, path), path
    assert not exists(root, "/etc/systemd/system/containerd.service.d")
    assert "numa_balancing" not in read(root, "/boot/grub/grub.cfg")
    hostroot.boot(root)
    assert "numa_balancing" not in read(root, "/proc/cmdline")


def test_cos_gets_sysctls_only_and_never_a_reboot(tmp_path, base_image):
    root = str(tmp_path / "cos")
    hostroot.create(root, base_image, dict(HOSTS["h100"], os_id="cos"))
    node = dict(H100, os_image="Container-Optimized OS from Google",
                labels=dict(H100["labels"], **{"cloud.google.com/gke-nodepool": "gpu"}))
    spec, per_node = spec_for(node, intent="multiNodeTraining")
    assert per_node["h100-0000"]["cloud"] == "gke" and not per_node["h100-0000"]["reboot"]
    assert t.KEY_REBOOT not in spec["config"]
    applied = run(root, spec)
    assert applied["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    written = [line.split("\t")[2] for line in read(root, "/var/lib/nodewright/data/%s/nvidia-tuning/files" % RESOURCE).splitlines()]
    assert written == [t.SYSCTL_FILE]
    assert not exists(root, t.GRUB_FILE) and not exists(root, t.MODPROBE_FILE)
    done = interrupt_and_verify(root, applied)
    resolved = t.resolve_profile("h100", "multiNodeTraining", "cos", profiles=PROFILES)
    assert {s["mechanism"] for s in resolved["settings"].values()} == {"sysctl"}
    assert "all %d setting(s) in effect" % len(resolved["settings"]) in step_output(done, "post-interrupt-check")
    assert sh(root, "sysctl -n net.ipv4.tcp_congestion_control") == "cubic"  # GKE rejects bbr on GPU nodes


def test_a_host_that_does_not_match_the_profile_is_refused(tmp_path, base_image):
    root = host(tmp_path, base_image, "h100")
    spec, _ = spec_for(GB200)
    with pytest.raises(StepFailed, match="is for aarch64 hosts, this host is x86_64"):
        run(root, spec)
    assert not exists(root, t.SYSCTL_FILE)
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
    assert not exists(root, t.GRUB_FILE)
    inference, _ = spec_for(None, accelerator="h100", os="rhel-9", intent="inference")
    assert run(root, inference)["interrupt"] == REBOOT
    run_packages([{"name": t.PACKAGE_NAME, "state": "absent"}], host_root=root, resource=RESOURCE)
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
    with open(os.path.join(t.ROLE_DIR, "files", "observe.sh")) as a, \
            open(os.path.join(SRC, "steps", "observe.sh")) as b:
        assert a.read() == b.read(), "copy roles/nvidia_tuning/files/observe.sh to packages/nvidia-tuning/steps/"
    with open(os.path.join(t.ROLE_DIR, "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    assert defaults["nvidia_tuning_power_profile_command"] == t.DEFAULT_POWER_PROFILE_COMMAND
    assert PACKAGE.default_config["power_profile_command"] == t.DEFAULT_POWER_PROFILE_COMMAND
    assert PACKAGE.config_interrupts[t.KEY_REBOOT].to_dict() == REBOOT
    assert PACKAGE.interrupt.to_dict() == NOOP
    assert os.path.realpath(t.PACKAGE_DIR) == os.path.realpath(SRC)
    assert set(t.CHECK_RULES) >= {row["rule"] for accel in t.ACCELERATOR_NAMES
                                  for row in t.check_expectations(t.resolve_profile(
                                      accel, "multiNodeInference", "ubuntu-24.04", profiles=PROFILES), SIM_SKIP)}
