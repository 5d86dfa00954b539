# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodewright.fleet.nvidia_tuning role, run by ansible-playbook against a
temporary host root (connection: local, no cluster).

Most read-back checks get their observations from ``nvidia_tuning_observed`` and the
host's facts from ``nvidia_tuning_host_facts`` instead of a host, so they need no shell
inside the host root; the last test runs the role's commands in a chroot of a simulator
host root and reads every setting back from it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.filter.tuning import load_profiles
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import CMDLINE_PROBE
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import cmdline_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    GRUB_FILE,
    MODPROBE_FILE,
    MODULES_FILE,
    STATE_FILE,
    SYSCTL_FILE,
    WANTS_FILE,
)

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
PROFILES = load_profiles()
GB200_LABELS = {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.compute.major": "10",
                "nvidia.com/gpu.compute.minor": "0", "kubernetes.io/arch": "arm64"}
OS_RELEASE = {
    "ubuntu-22.04": 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n',
    "ubuntu-24.04": 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n',
    "cos": 'NAME="Container-Optimized OS"\nID=cos\nVERSION_ID=117\n',
}


class HostRoot(object):
    """A temporary host root and a way to run the role against it."""

    def __init__(self, tmp_path, os_name):
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        (self.root / "etc").mkdir(parents=True)
        (self.root / "etc" / "os-release").write_text(OS_RELEASE[os_name])
        self.runs = 0

    def path(self, rel):
        return self.root / rel

    def files(self):
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if not p.is_dir())

    def state(self):
        return json.loads(self.path(STATE_FILE).read_text())

    def run(self, role_vars, tasks_from="main", check_mode=False):
        """Run the role; return (rc, output, facts) where facts holds the role's results."""
        self.runs += 1
        out = self.tmp / ("facts-%d.json" % self.runs)
        play = [{
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": dict({"ansible_python_interpreter": sys.executable,
                          "nvidia_tuning_host_root": str(self.root),
                          "nvidia_tuning_update_bootloader": False,
                          "nvidia_tuning_update_initramfs": False,
                          "nvidia_tuning_apply_sysctls": False,
                          "nvidia_tuning_read_host": False,
                          "nvidia_tuning_reload_systemd": False}, **role_vars),
            "tasks": [
                {"name": "Run the role", "ansible.builtin.include_role": {
                    "name": "nodewright.fleet.nvidia_tuning", "tasks_from": tasks_from}},
                {"name": "Hand the results to the test", "changed_when": False, "check_mode": False,
                 "ansible.builtin.copy": {"dest": str(out), "mode": "0644", "content": (
                     "{{ {'interrupt': nvidia_tuning_interrupt | default(None),"
                     " 'diff': nvidia_tuning_diff | default(None),"
                     " 'check': nvidia_tuning_check | default(None),"
                     " 'profile': nvidia_tuning_profile | default(None)} | to_json }}")}},
            ],
        }]
        playbook = self.tmp / ("play-%d.yml" % self.runs)
        playbook.write_text(yaml.safe_dump(play, sort_keys=False))
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(self.tmp / "ansible-tmp"),
                   ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_DEPRECATION_WARNINGS="0")
        cmd = [PLAYBOOK, "-i", "localhost,", str(playbook)] + (["--check"] if check_mode else [])
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        output = proc.stdout + proc.stderr
        facts = json.loads(out.read_text()) if out.exists() else None
        return proc.returncode, output, facts


def changed(output):
    return int(re.search(r"localhost\s*:.*changed=(\d+)", output).group(1))


def observed_ok(profile):
    """What a host reports once every setting of ``profile`` is in effect."""
    observed = {}
    for sid, setting in profile["settings"].items():
        if setting["mechanism"] == "module":
            observed[sid] = "loaded"
        elif setting["mechanism"] == "gpu":
            observed[sid] = "Enabled" if setting["key"] == "persistence" else "active"
        elif setting["mechanism"] != "cmdline":
            observed[sid] = setting["value"]
    observed[CMDLINE_PROBE] = "BOOT_IMAGE=/boot/vmlinuz ro " + " ".join(cmdline_tokens(profile))
    return observed


@pytest.fixture
def ubuntu(tmp_path):
    return HostRoot(tmp_path, "ubuntu-24.04")


def test_apply_rerun_check_and_converge(ubuntu):
    role_vars = {"nvidia_tuning_node_labels": GB200_LABELS, "nvidia_tuning_intent": "inference",
                 "nvidia_tuning_options": {"inference_hugepages": True}}
    rc, output, facts = ubuntu.run(role_vars)
    assert rc == 0, output
    assert facts["interrupt"] == {"type": "reboot", "services": []}
    assert facts["profile"]["name"] == "gb200/inference on ubuntu-24.04"
    assert ubuntu.files() == sorted([
        "etc/os-release", STATE_FILE, SYSCTL_FILE, GRUB_FILE, MODPROBE_FILE, MODULES_FILE,
        WANTS_FILE, "etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf",
        "etc/systemd/system/nodewright-cpu-governor.service",
        "etc/systemd/system/nodewright-gpu-power-profile.service"])
    grub = ubuntu.path(GRUB_FILE).read_text()
    assert ('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }init_on_alloc=0 '
            'console=tty0 console=ttyS0,115200n8 iommu.passthrough=1 numa_balancing=disable '
            'acpi_power_meter.force_cap_on=y earlycon hugepagesz=2M hugepages=8192 hugepagesz=1G hugepages=2"') in grub
    sysctl = ubuntu.path(SYSCTL_FILE).read_text()
    assert "\nvm.swappiness = 1\n" in sysctl and "kernel.sched" not in sysctl
    assert ("options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_GrdmaPciTopoCheckOverride=1"
            in ubuntu.path(MODPROBE_FILE).read_text())
    dropin = ubuntu.path("etc/systemd/system/containerd.service.d/90-nodewright-nvidia.conf").read_text()
    assert "[Service]\n" in dropin and "\nLimitSTACK=67108864\n" in dropin
    assert "--profile-id 6" in ubuntu.path("etc/systemd/system/nodewright-gpu-power-profile.service").read_text()
    assert ubuntu.state()["pending_interrupt"]["type"] == "reboot"

    # Nothing changed, but the reboot has not been verified yet: it is still due.
    rc, output, facts = ubuntu.run(role_vars)
    assert rc == 0, output
    assert changed(output) == 0, output
    assert facts["interrupt"]["type"] == "reboot" and not facts["diff"]["changed"]

    # After the reboot everything is in effect: the check passes and clears what was due.
    rc, output, facts = ubuntu.run(dict(role_vars, nvidia_tuning_observed=observed_ok(facts["profile"])),
                                   tasks_from="check")
    assert rc == 0, output
    assert facts["check"]["ok"] and facts["check"]["failed"] == []
    assert ubuntu.state()["pending_interrupt"] == NOOP

    rc, output, facts = ubuntu.run(role_vars)
    assert rc == 0, output
    assert changed(output) == 0, output
    assert facts["interrupt"] == NOOP


def test_check_names_each_setting_that_did_not_take_effect(ubuntu):
    profile = resolve_profile("h100", "inference", "ubuntu-24.04", options={"inference_hugepages": True},
                              profiles=PROFILES)
    observed = observed_ok(profile)
    observed["sysctl:vm.swappiness"] = "60"
    observed[CMDLINE_PROBE] = "BOOT_IMAGE=/boot/vmlinuz ro"
    rc, output, facts = ubuntu.run({"nvidia_tuning_accelerator": "h100", "nvidia_tuning_intent": "inference",
                                    "nvidia_tuning_options": {"inference_hugepages": True},
                                    "nvidia_tuning_observed": observed}, tasks_from="check")
    assert rc != 0
    assert "sysctl:vm.swappiness: expected 1, observed 60 (from intents/inference)" in output
    assert "cmdline:hugepages_2M: expected hugepagesz=2M hugepages=8192" in output
    assert "cmdline:init_on_alloc" in output

    # Before a deferred reboot only the live settings count.
    observed["sysctl:vm.swappiness"] = "1"
    rc, output, facts = ubuntu.run({"nvidia_tuning_accelerator": "h100", "nvidia_tuning_intent": "inference",
                                    "nvidia_tuning_options": {"inference_hugepages": True},
                                    "nvidia_tuning_observed": observed, "nvidia_tuning_check_phase": "live"},
                                   tasks_from="check")
    assert rc == 0, output
    assert "cmdline:hugepages_2M" in facts["check"]["pending_reboot"]


def test_refused_request_fails_before_touching_the_host(ubuntu):
    rc, output, _ = ubuntu.run({"nvidia_tuning_node_labels": GB200_LABELS,
                                "nvidia_tuning_options": {"acs_override": True}})
    assert rc != 0
    assert "x86-64 HGX" in output
    assert ubuntu.files() == ["etc/os-release"]


def test_cos_tunes_sysctls_only_and_never_reboots(tmp_path):
    cos = HostRoot(tmp_path, "cos")
    role_vars = {"nvidia_tuning_accelerator": "h100", "nvidia_tuning_intent": "multiNodeTraining"}
    rc, output, facts = cos.run(role_vars)
    assert rc == 0, output
    assert facts["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    assert facts["profile"]["cloud"] == "gke" and facts["profile"]["reapply_every_boot"]
    assert cos.files() == sorted(["etc/os-release", SYSCTL_FILE, STATE_FILE])
    sysctl = cos.path(SYSCTL_FILE).read_text()
    assert "net.core.rmem_max = 536870912" in sysctl and "tcp_congestion_control" not in sysctl

    rc, output, facts = cos.run(dict(role_vars, nvidia_tuning_intent="inference"))
    assert rc == 0, output
    assert facts["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}
    assert "sysctl:net.core.rmem_max" in [item["id"] for item in facts["diff"]["lingering"]]
    assert "vm.swappiness = 1" in cos.path(SYSCTL_FILE).read_text()

    # /etc is wiped at reboot: the next run applies everything again, still without a reboot.
    for rel in (SYSCTL_FILE, STATE_FILE):
        cos.path(rel).unlink()
    rc, output, facts = cos.run(dict(role_vars, nvidia_tuning_intent="inference"))
    assert rc == 0, output
    assert facts["interrupt"] == {"type": "service", "services": ["systemd-sysctl"]}


def test_uninstall_removes_every_file_it_wrote(tmp_path):
    host = HostRoot(tmp_path, "ubuntu-22.04")
    (host.root / "etc" / "systemd" / "system" / "containerd.service.d").mkdir(parents=True)
    (host.root / "etc" / "systemd" / "system" / "containerd.service.d" / "10-site.conf").write_text(
        "[Service]\nLimitCORE=0\n")
    role_vars = {"nvidia_tuning_accelerator": "b200", "nvidia_tuning_intent": "multiNodeTraining",
                 "nvidia_tuning_cloud": "eks"}
    rc, output, facts = host.run(role_vars)
    assert rc == 0, output
    assert "etc/systemd/network/99-default.link.d/90-nodewright-nvidia.conf" in host.files()

    rc, output, facts = host.run(dict(role_vars, nvidia_tuning_state="absent"))
    assert rc == 0, output
    assert facts["interrupt"] == {"type": "reboot", "services": []}
    assert host.files() == ["etc/os-release", "etc/systemd/system/containerd.service.d/10-site.conf"]
    assert not (host.root / "etc" / "systemd" / "network" / "99-default.link.d").exists()
    assert not (host.root / "etc" / "systemd" / "system" / "multi-user.target.d").exists()

    rc, output, facts = host.run(dict(role_vars, nvidia_tuning_state="absent"))
    assert rc == 0, output
    assert changed(output) == 0, output
    assert facts["interrupt"] == NOOP


def test_check_mode_writes_nothing(ubuntu):
    rc, output, facts = ubuntu.run({"nvidia_tuning_node_labels": GB200_LABELS}, check_mode=True)
    assert rc == 0, output
    assert facts["interrupt"]["type"] == "reboot"
    assert ubuntu.files() == ["etc/os-release"]


def test_switching_options_removes_files_no_longer_needed(ubuntu):
    role_vars = {"nvidia_tuning_accelerator": "gb200"}
    rc, output, _ = ubuntu.run(role_vars)
    assert rc == 0, output
    assert ubuntu.path(MODPROBE_FILE).exists()

    rc, output, facts = ubuntu.run(dict(role_vars, nvidia_tuning_options={"driver_source": "gpu-operator"}))
    assert rc == 0, output
    assert not ubuntu.path(MODPROBE_FILE).exists()
    assert not ubuntu.path("etc/systemd/system/nodewright-gpu-power-profile.service").exists()
    assert "Wants=nodewright-cpu-governor.service\n" in ubuntu.path(WANTS_FILE).read_text()
    # Removing driver options needs the driver reloaded, i.e. a reboot.
    assert facts["interrupt"]["type"] == "reboot"
    assert "modprobe:nvidia/NVreg_CoherentGPUMemoryMode" in facts["diff"]["removed"]


# ------------------------------------------------------------------ a simulator host root in a chroot

GB200_HOST = {"name": "gb200-0000", "arch": "arm64", "gpu_name": "NVIDIA GB200", "compute_cap": "10.0",
              "gpu_count": 4, "gpu_memory_mib": 189471, "memory_mib": 983040}


def test_detect_apply_and_check_on_a_simulator_host_root(tmp_path, base_image):
    """The role's commands in a chroot of a simulator GB200 host root: the accelerator
    from nvidia-smi, update-grub, update-initramfs, daemon-reload; after the simulated reboot every
    setting reads back from the host (kernel, driver, systemd, cpufreq, GPUs), and a
    setting changed at run time is named."""
    from nodewright_sim import hostroot

    host = HostRoot(tmp_path, "ubuntu-24.04")
    host.root = tmp_path / "gb200"
    hostroot.create(str(host.root), base_image, GB200_HOST)
    # The host's facts are read in the chroot too (no peer-memory provider on this host: DMA-BUF).
    # update-initramfs too (the role's default): the simulated boot loads the driver
    # with the options its initramfs carries, as a real one does.
    role_vars = {"nvidia_tuning_intent": "multiNodeTraining", "nvidia_tuning_update_bootloader": True,
                 "nvidia_tuning_update_initramfs": True, "nvidia_tuning_reload_systemd": True,
                 "nvidia_tuning_read_host": True}
    rc, output, facts = host.run(role_vars)
    assert rc == 0, output
    assert facts["profile"]["accelerator"] == "gb200" and facts["profile"]["arch"] == "arm64"
    assert "does not match" not in output
    assert facts["interrupt"]["type"] == "reboot"

    rc, output, facts = host.run(role_vars, tasks_from="check")
    assert rc != 0, output
    assert "did not take effect" in output and "sysctl:net.core.rmem_max" in output

    hostroot.boot(str(host.root))
    profile = resolve_profile("gb200", "multiNodeTraining", "ubuntu-24.04", profiles=PROFILES)
    rc, output, facts = host.run(role_vars, tasks_from="check")
    assert rc == 0, output
    assert facts["check"]["ok"], facts["check"]["summary"]
    assert len(facts["check"]["verified"]) == len(profile["settings"]) and not facts["check"]["unverified"]
    assert host.state()["pending_interrupt"] == NOOP

    assert hostroot.run(str(host.root), "sysctl -w fs.inotify.max_user_instances=128").returncode == 0
    rc, output, _ = host.run(role_vars, tasks_from="check")
    assert rc != 0
    assert "sysctl:fs.inotify.max_user_instances: expected 65535, observed 128" in output
