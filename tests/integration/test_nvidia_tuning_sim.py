# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodewright.fleet.nvidia_tuning role on simulator nodes of every GPU family.

Each node has its own host root where the role's commands really run (chroot): the
accelerator is detected from the Node's labels read from the API and from the
nvidia-smi stand-in, the role reads the host before resolving (MLNX_OFED's ofed_info on
the pools with InfiniBand: nvidia_peermem; elsewhere DMA-BUF; the kernel's defaults for
the node's memory; Ubuntu's 10-map-count.conf, which is never lowered), update-grub
regenerates the boot configuration, update-initramfs rebuilds the initramfs the driver
loads from, and the safe sequence reboots the node (the reboot stand-in and the
simulator's supervisor: NotReady, new bootID, Ready), after which the check reads
/proc/cmdline, the driver options, sysctls and modules back. A second run changes
nothing; a sysctl-only change restarts systemd-sysctl and does not reboot.

The check reads every setting back, as on a real host: ``systemctl show`` reports
containerd's limits from the drop-in the role wrote, the governor unit runs at boot
and sets every CPU's cpufreq governor, nvidia-persistenced turns persistence mode on,
the power-profile unit requests the Blackwell profile, and on HGX boards Fabric
Manager runs; nothing is skipped.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from k8s_helpers import host_result, wait_for
from nodewright_sim import hostroot
from nodewright_sim.fleet import INFINIBAND

from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import (
    cmdline_tokens,
    managed_paths,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    DEFAULT_POWER_PROFILE_COMMAND,
    STATE_FILE,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import render_files

pytestmark = pytest.mark.integration

RES = "nvidia-tuning-sim"
# One node per family, each with another intent, so every intent is exercised too.
INTENTS = {"h100": "performance", "h200": "inference", "gh200": "multiNodeTraining", "b200": "multiNodeInference",
           "gb200": "multiNodeTraining", "b300": "inference", "gb300": "performance"}


def ready(sim, name):
    return any(c.type == "Ready" and c.status == "True" for c in sim.core.read_node(name).status.conditions or [])


def boot_id(sim, name):
    return sim.core.read_node(name).status.node_info.boot_id


def read(sim, node, path):
    with open(os.path.join(sim.host_root(node), path.lstrip("/"))) as fh:
        return fh.read()


def recap_changed(proc, host):
    found = re.search(r"^%s\s*:.*changed=(\d+)" % re.escape(host), proc.stdout, re.M)
    assert found, proc.stdout[-3000:]
    return int(found.group(1))


@pytest.fixture(scope="module")
def families(sim):
    """pool -> a new node of that pool, Ready."""
    nodes = {pool: sim.add_nodes(pool, 1)[0] for pool in INTENTS}
    for name in nodes.values():
        wait_for(lambda name=name: ready(sim, name), what="%s Ready" % name)
    return nodes


def labels_by_host(sim, nodes):
    """The nodes' labels as the API has them (GPU Feature Discovery's, set by the simulator)."""
    return {name: dict(sim.core.read_node(name).metadata.labels or {}) for name in nodes}


def role(tasks_from="main", **role_vars):
    role_vars.setdefault("nvidia_tuning_host_root", "{{ nodewright_host_root }}")
    return {"name": "NVIDIA tuning (%s)" % tasks_from, "ansible.builtin.include_role": {
        "name": "nodewright.fleet.nvidia_tuning", "tasks_from": tasks_from}, "vars": role_vars}


def report(name, expression):
    return {"name": name, "ansible.builtin.debug": {"msg": expression}}


TUNE_VARS = {"nvidia_tuning_node_labels": "{{ node_labels[inventory_hostname] }}",
             "nvidia_tuning_intent": "{{ intents[inventory_hostname] }}",
             "nvidia_tuning_extra": "{{ extra | default({}) }}"}


def test_accelerator_detected_from_labels_and_from_nvidia_smi(sim, tmp_path, families):
    hosts = sorted(families.values())
    play = {"vars": {"node_labels": labels_by_host(sim, hosts)}, "tasks": [
        role(nvidia_tuning_node_labels="{{ node_labels[inventory_hostname] }}"),
        report("From the labels", "{{ nvidia_tuning_profile.accelerator }}"),
        role(nvidia_tuning_node_labels={}),
        report("From nvidia-smi", "{{ nvidia_tuning_profile.accelerator }}"),
    ]}
    # Check mode: the detection commands run, nothing is written.
    proc = sim.playbook(tmp_path, play, hosts=hosts, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for pool, node in families.items():
        assert host_result(proc, node, "From the labels")["msg"] == pool
        assert host_result(proc, node, "From nvidia-smi")["msg"] == pool
        assert "nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader" in read(
            sim, node, "/var/lib/nodewright-sim/actions.log")
        assert not os.path.exists(os.path.join(sim.host_root(node), STATE_FILE))


def test_every_family_is_tuned_rebooted_and_checked(sim, tmp_path, families):
    hosts = sorted(families.values())
    pools = {node: pool for pool, node in families.items()}
    (tmp_path / "tune.yml").write_text(yaml.safe_dump([
        role(**TUNE_VARS),
        report("Tuned", "{{ {'interrupt': nvidia_tuning_interrupt, 'changes': nvidia_tuning_diff.changes | length,"
                        " 'profile': nvidia_tuning_profile} }}"),
    ], sort_keys=False))
    (tmp_path / "check.yml").write_text(yaml.safe_dump([
        role("check", **TUNE_VARS),
        report("Checked", "{{ nvidia_tuning_check }}"),
    ], sort_keys=False))
    play_vars = {"node_labels": labels_by_host(sim, hosts), "intents": {n: INTENTS[pools[n]] for n in hosts}}
    safe_update = {"name": "Tune each node safely", "ansible.builtin.include_role": {
        "name": "nodewright.fleet.safe_update"}, "vars": {
        "safe_update_resource": RES, "safe_update_drain_timeout": 60, "safe_update_reboot_timeout": 120,
        "safe_update_work_tasks": str(tmp_path / "tune.yml"),
        "safe_update_post_interrupt_tasks": str(tmp_path / "check.yml"),
        "safe_update_interrupt": "{{ nvidia_tuning_interrupt | default({'type': 'noop'}) }}"}}
    before = {n: boot_id(sim, n) for n in hosts}

    proc = sim.playbook(tmp_path, {"vars": play_vars, "tasks": [safe_update]}, hosts=hosts)
    assert proc.returncode == 0, proc.stdout[-5000:]
    for node in hosts:
        pool, intent = pools[node], INTENTS[pools[node]]
        tuned = host_result(proc, node, "Tuned")["msg"]
        # The profile the role resolved with what it read on the host (the peer-memory
        # provider, the memory, the current limits).
        resolved = tuned["profile"]
        assert (resolved["name"], resolved["accelerator"]) == ("%s/%s on ubuntu-24.04" % (pool, intent), pool)
        assert tuned["interrupt"] == {"type": "reboot", "services": []}, node
        assert tuned["changes"] == len(resolved["settings"])
        multi_node = intent in ("multiNodeTraining", "multiNodeInference")
        # nvidia_peermem only where the host has MLNX_OFED (pools with InfiniBand), loaded at boot.
        peermem = multi_node and pool in INFINIBAND
        assert ("module:nvidia_peermem" in resolved["settings"]) is peermem, node
        if multi_node:
            assert resolved["decisions"]["gpudirect"]["value"] == ("peermem" if peermem else "dmabuf")
        if peermem:
            assert "nvidia_peermem " in read(sim, node, "/proc/modules")
        # The files the profile asks for, byte for byte.
        for spec in render_files(resolved, DEFAULT_POWER_PROFILE_COMMAND):
            assert read(sim, node, spec["path"]) == spec["content"], (node, spec["path"])
        # Rebooted: a new boot ID, and the kernel runs with the parameters and driver options.
        assert boot_id(sim, node) != before[node], node
        cmdline = read(sim, node, "/proc/cmdline").split()
        assert all(token in cmdline for token in cmdline_tokens(resolved)), (node, cmdline)
        # Driver options: rebuilt into the initramfs before the reboot, in effect after it.
        for setting in resolved["settings"].values():
            if setting["mechanism"] == "modprobe":
                assert "%s=%s" % (setting["option"], setting["value"]) in read(
                    sim, node, "/boot/initrd.img-%s" % hostroot.DEFAULT_KERNEL), (node, setting["id"])
                assert read(sim, node, "/sys/module/%s/parameters/%s" % (setting["module"], setting["option"])
                            ).strip() == setting["value"], (node, setting["id"])
        # Ubuntu 24.04's 1048576 map areas are never lowered (the GB trays' 262144).
        assert read(sim, node, "/proc/sys/vm/max_map_count").strip() == "1048576", node
        checked = host_result(proc, node, "Checked")["msg"]
        assert checked["ok"] and checked["phase"] == "post-interrupt", checked["summary"]
        assert checked["unverified"] == [], checked["unverified"]
        assert len(checked["verified"]) == len(resolved["settings"])
        root = sim.host_root(node)
        assert hostroot.run(root, "cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor | sort -u").stdout == \
            "performance\n"
        assert hostroot.run(root, "systemctl show containerd -p LimitNOFILE --value").stdout == "1048576\n"
        if "gpu:fabricmanager" in resolved["settings"]:
            assert hostroot.run(root, "systemctl is-active nvidia-fabricmanager").stdout == "active\n"
        assert json.loads(read(sim, node, STATE_FILE))["pending_interrupt"] == NOOP
        assert "init_on_alloc=0" in cmdline
    for pool in ("gh200", "gb200", "gb300"):
        node = families[pool]
        assert "iommu.passthrough=1" in read(sim, node, "/proc/cmdline")
        assert "acpi_power_meter.force_cap_on=y" in read(sim, node, "/proc/cmdline")
        assert read(sim, node, "/proc/sys/kernel/watchdog").strip() == "0"
        # CDMM on Grace Blackwell; GH200 keeps the GPU's NUMA node unless asked.
        cdmm = "/sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode"
        assert (read(sim, node, cdmm).strip() == "driver") if pool != "gh200" else \
            not os.path.exists(os.path.join(sim.host_root(node), cdmm.lstrip("/")))
    gb200 = host_result(proc, families["gb200"], "Tuned")["msg"]["profile"]
    assert "sysctl:vm.max_map_count" in {s["id"] for s in gb200["skipped"]}
    assert "iommu=pt" in read(sim, families["b300"], "/proc/cmdline")
    # Bare-metal HGX with a multi-node intent: ACS redirection off.
    assert "pci=disable_acs_redir=pci:0:0" in read(sim, families["b200"], "/proc/cmdline")
    assert "pci=disable_acs_redir" not in read(sim, families["b300"], "/proc/cmdline")
    # Inference reserves no huge pages unless asked.
    assert "hugepages=" not in read(sim, families["h200"], "/proc/cmdline")

    assert "update-initramfs -u -k all" in read(sim, families["gb200"], "/var/lib/nodewright-sim/actions.log")

    # A second run changes nothing and asks for nothing.
    again = sim.playbook(tmp_path, {"vars": play_vars, "tasks": [
        role(**TUNE_VARS), report("Tuned", "{{ nvidia_tuning_interrupt }}")]}, hosts=hosts)
    assert again.returncode == 0, again.stdout[-3000:]
    for node in hosts:
        assert recap_changed(again, node) == 0, node
        assert host_result(again, node, "Tuned")["msg"] == NOOP

    # A sysctl-only change restarts systemd-sysctl; the node does not reboot.
    node = families["h100"]
    booted = boot_id(sim, node)
    extra = {"settings": {"sysctl": {"vm.swappiness": {"value": 10, "why": "a site's own choice"}}}}
    changed = sim.playbook(tmp_path, {"vars": dict(play_vars, extra=extra), "tasks": [safe_update]}, hosts=[node])
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert host_result(changed, node, "Tuned")["msg"]["interrupt"] == {"type": "service",
                                                                        "services": ["systemd-sysctl"]}
    assert host_result(changed, node, "Checked")["msg"]["ok"]
    assert read(sim, node, "/proc/sys/vm/swappiness").strip() == "10"
    assert boot_id(sim, node) == booted
    assert "systemctl daemon-reload" in read(sim, node, "/var/lib/nodewright-sim/actions.log")

    # Removing the tuning takes every file away and the parameters out of the boot configuration.
    removed = sim.playbook(tmp_path, {"vars": play_vars, "tasks": [
        role(nvidia_tuning_state="absent", **TUNE_VARS), report("Tuned", "{{ nvidia_tuning_interrupt }}")]},
        hosts=[node])
    assert removed.returncode == 0, removed.stdout[-3000:]
    assert host_result(removed, node, "Tuned")["msg"]["type"] == "reboot"
    for path in managed_paths():
        assert not os.path.exists(os.path.join(sim.host_root(node), path)), path
    assert "iommu=pt" not in read(sim, node, "/boot/grub/grub.cfg")
