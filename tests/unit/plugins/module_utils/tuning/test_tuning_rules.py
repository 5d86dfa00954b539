# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The rules every resolved NVIDIA tuning profile keeps, over every accelerator x
intent x OS x cloud and what may be known about the node: no nvidia_peermem without a
peer-memory provider, no limit sysctl below the node's value, no host-side driver
settings where the GPU Operator runs the driver. And the settings and options that
implement them: decisions with reasons, the floor rule, RegistryDwords merging, the
initramfs, COS."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.files import modprobe_tokens
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.floors import (
    LIMIT_SYSCTLS,
    baseline,
    kernel_default,
    lowers,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import (
    PACKAGE_NAME,
    memory_kib,
    node_facts,
    reapplies_every_boot,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import (
    load_profiles,
    package_spec_for_nodes,
    render_files,
)

pytestmark = pytest.mark.unit

PROFILES = load_profiles()
ACCELERATORS = ("h100", "h200", "gh200", "b200", "gb200", "b300", "gb300")
INTENTS = ("performance", "inference", "multiNodeTraining", "multiNodeInference")
PLATFORMS = [(os_name, cloud) for os_name in ("ubuntu-22.04", "ubuntu-24.04", "debian-12", "rhel-9")
             for cloud in (None, "eks", "gke")] + [("cos", "gke")]
TRAY_KIB = 960 * 1048576
# What may be known about a node: nothing; a host with MLNX_OFED and GDRCopy and limits
# raised by the site; a host without a peer-memory provider; the GPU Operator's driver.
HOSTS = {
    "unknown": None,
    "mofed": {"driver_source": "host", "peer_memory": "MLNX_OFED_LINUX-24.10-1.1.4.0", "gdrdrv": True,
              "memory_kib": TRAY_KIB,
              "sysctl": {"vm.max_map_count": "2097152", "net.core.rmem_max": "1073741824",
                         "fs.inotify.max_user_instances": "1048576", "net.ipv4.tcp_rmem": "4096 262144 33554432"}},
    "inbox": {"driver_source": "host", "peer_memory": "", "gdrdrv": False, "memory_kib": 2 * 1024 * 1048576},
    "gpu-operator": {"driver_source": "gpu-operator", "driver_reason": "nvidia.com/gpu.deploy.driver=true",
                     "peer_memory": "MLNX_OFED_LINUX-24.10-1.1.4.0", "gdrdrv": True, "memory_kib": TRAY_KIB},
}
DRIVER_SETTINGS = ("modprobe:nvidia/", "module:nvidia_peermem", "module:gdrdrv", "gpu:")


def resolve(accelerator, intent="performance", os_name="ubuntu-24.04", **kwargs):
    return resolve_profile(accelerator, intent, os_name, profiles=PROFILES, **kwargs)


@pytest.mark.parametrize("host", sorted(HOSTS))
@pytest.mark.parametrize("os_name,cloud", PLATFORMS)
@pytest.mark.parametrize("intent", INTENTS)
@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_every_profile_keeps_the_rules(accelerator, intent, os_name, cloud, host):
    facts = HOSTS[host]
    r = resolve(accelerator, intent, os_name, cloud=cloud, host=facts)
    got = r["settings"]
    multi_node = intent in ("multiNodeTraining", "multiNodeInference")
    operator = bool(facts) and facts["driver_source"] == "gpu-operator"

    # 1. nvidia_peermem only where a peer-memory provider exists, never on EFA or GKE
    # networking, never from the host under the GPU Operator.
    if "module:nvidia_peermem" in got:
        assert facts and facts["peer_memory"] and cloud is None and not operator and multi_node
    else:
        assert not (facts and facts["peer_memory"] and cloud is None and not operator and multi_node
                    and os_name != "cos")
    if multi_node:
        decided = r["decisions"]["gpudirect"]
        assert decided["value"] in ("peermem", "dmabuf", "gpu-operator") and decided["reason"]
        assert (decided["value"] == "peermem") is ("module:nvidia_peermem" in got)

    # 2. No limit sysctl NodeWright writes lowers what the node has, its distribution
    # sets or its kernel computes for its memory; each says what it replaces.
    distro = (PROFILES["os/" + os_name].get("meta") or {}).get("sysctl_defaults")
    for sid, setting in got.items():
        if setting["mechanism"] != "sysctl" or setting["key"] not in LIMIT_SYSCTLS:
            continue
        base = baseline(setting["key"], facts, distro)
        if base:
            assert not lowers(setting["value"], base["value"]), (sid, setting["value"], base)
            assert (setting["current"], setting["current_source"]) == (base["value"], base["source"])
    for skipped in r["skipped"]:
        if skipped.get("by") == "floor":
            assert skipped["reason"].startswith("would lower ")

    # 3. Under the GPU Operator no host-side driver settings, nothing for the initramfs.
    if operator or cloud == "gke":
        assert not [sid for sid in got if sid.startswith(DRIVER_SETTINGS)], sid
        assert not [f for f in r["files"] if f["kind"] == "modprobe"]
    if operator and cloud != "gke":
        assert r["decisions"]["driver_source"] == {"value": "gpu-operator", "explicit": False,
                                                   "reason": "nvidia.com/gpu.deploy.driver=true"}

    # The plan can say every decision taken.
    assert all(d["reason"] for d in r["decisions"].values())


def test_a_tray_keeps_the_distribution_map_count_and_the_kernel_memory_defaults():
    r = resolve("gb200", "multiNodeTraining", "ubuntu-24.04", host={"memory_kib": TRAY_KIB})
    skipped = {s["id"]: s["reason"] for s in r["skipped"]}
    assert skipped["sysctl:vm.max_map_count"] == ("would lower vm.max_map_count from 1048576 (Ubuntu 24.04's "
                                                  "/etc/sysctl.d/10-map-count.conf) to 262144")
    assert resolve("gb200", "multiNodeTraining", "ubuntu-22.04")["settings"]["sysctl:vm.max_map_count"][
        "value"] == "262144"
    # What the kernel computes for 960 GiB (Skyhook's 65536 and 524288 would have lowered them).
    assert kernel_default("vm.min_free_kbytes", TRAY_KIB)[0] == "126909"
    assert kernel_default("fs.inotify.max_user_watches", TRAY_KIB)[0] == "1048576"
    assert kernel_default("kernel.threads-max", TRAY_KIB) == ("7864320", "the kernel's default for 960 GiB of memory")
    site = {"settings": {"sysctl": {"vm.min_free_kbytes": {"value": 65536, "why": "a site layer"}}}}
    with pytest.raises(ValidationError, match=r"would lower vm.min_free_kbytes from 126909 \(the kernel's default "
                                              r"for 960 GiB of memory\) to 65536"):
        resolve("gb200", "performance", host={"memory_kib": TRAY_KIB}, extra=site)
    site["settings"]["sysctl"]["vm.min_free_kbytes"]["force"] = True
    forced = resolve("gb200", "performance", host={"memory_kib": TRAY_KIB}, extra=site)
    assert forced["settings"]["sysctl:vm.min_free_kbytes"]["force"] is True
    # A value NodeWright wrote itself is not the node's own.
    again = resolve("gb200", "multiNodeTraining", "ubuntu-22.04",
                    host={"sysctl": {"vm.max_map_count": "524288"}, "applied": {"vm.max_map_count": "524288"}})
    assert again["settings"]["sysctl:vm.max_map_count"]["value"] == "262144"
    raised = resolve("gb200", "multiNodeTraining", "ubuntu-22.04", host={"sysctl": {"vm.max_map_count": "524288"}})
    assert "sysctl:vm.max_map_count" not in raised["settings"]


def test_the_tcp_read_buffers_keep_the_kernel_default_middle_value():
    r = resolve("h100", "multiNodeTraining")
    assert r["settings"]["sysctl:net.ipv4.tcp_rmem"]["value"] == "4096 131072 268435456"
    assert r["settings"]["sysctl:net.ipv4.tcp_rmem"]["current"] == "4096 131072 6291456"


def test_peermem_dmabuf_and_the_gpu_operator_decisions():
    mofed = {"peer_memory": "MLNX_OFED_LINUX-24.10-1.1.4.0"}
    assert "module:nvidia_peermem" in resolve("h100", "multiNodeTraining", host=mofed)["settings"]
    assert resolve("h100", "multiNodeTraining", host=mofed)["decisions"]["gpudirect"]["reason"] == (
        "the host has a peer-memory provider (MLNX_OFED_LINUX-24.10-1.1.4.0)")
    none = resolve("h100", "multiNodeTraining", host={"peer_memory": ""})
    assert none["decisions"]["gpudirect"] == {"value": "dmabuf", "explicit": False, "reason": (
        "no peer-memory provider on the host (no MLNX_OFED or DOCA-OFED)")}
    with pytest.raises(ValidationError, match="nvidia_peermem cannot load on this host"):
        resolve("h100", "multiNodeTraining", options={"gpudirect": "peermem"}, host={"peer_memory": ""})
    # Explicit peermem where the provider is unknown: the host's preflight checks it.
    assert "module:nvidia_peermem" in resolve("h100", "multiNodeTraining",
                                              options={"gpudirect": "peermem"})["settings"]
    with pytest.raises(ValidationError, match="multi-node intents"):
        resolve("h100", "inference", options={"gpudirect": "peermem"})
    with pytest.raises(ValidationError, match="GPU Operator loads it"):
        resolve("h100", "multiNodeTraining", options={"gpudirect": "peermem", "driver_source": "gpu-operator"})
    assert "gpudirect" not in resolve("h100", "performance")["decisions"]


def test_cdmm_gdrcopy_and_grace_extras():
    gh200 = resolve("gh200", "multiNodeTraining")
    assert "modprobe:nvidia/NVreg_CoherentGPUMemoryMode" not in gh200["settings"]
    assert "R615" in gh200["decisions"]["cdmm"]["reason"]
    on = resolve("gh200", "multiNodeTraining", options={"cdmm": "on"})
    assert on["settings"]["modprobe:nvidia/NVreg_CoherentGPUMemoryMode"]["layer"] == "options/cdmm-on"
    assert resolve("gh200", options={"cdmm": True})["options"]["cdmm"] == "on"  # YAML's on
    off = resolve("gb200", "multiNodeTraining", options={"cdmm": "off"})
    assert "modprobe:nvidia/NVreg_CoherentGPUMemoryMode" not in off["settings"]
    with pytest.raises(ValidationError, match="Grace superchips"):
        resolve("h100", options={"cdmm": "on"})
    # GDRCopy where CDMM is on and it is installed; refused where it is known not to be.
    assert "module:gdrdrv" in resolve("gb200", "inference", host={"gdrdrv": True})["settings"]
    assert "module:gdrdrv" not in resolve("gb200", "inference", host={"gdrdrv": False})["settings"]
    assert "module:gdrdrv" not in resolve("gh200", "inference", host={"gdrdrv": True})["settings"]
    assert "module:gdrdrv" not in resolve("gb200", "inference",
                                          host={"gdrdrv": True, "driver_source": "gpu-operator"})["settings"]
    with pytest.raises(ValidationError, match="gdrdrv module is not installed"):
        resolve("gb200", options={"gdrcopy": "on"}, host={"gdrdrv": False})
    for accelerator in ("gh200", "gb200", "gb300"):
        r = resolve(accelerator)
        assert r["settings"]["cmdline:acpi_power_meter"]["value"] == "acpi_power_meter.force_cap_on=y"
        assert r["settings"]["sysctl:kernel.watchdog"]["value"] == "0"
    assert "sysctl:kernel.watchdog" not in resolve("h100")["settings"]


def test_ibgda_merges_registry_keys_into_one_parameter():
    r = resolve("gb200", "multiNodeInference", options={"ibgda": True},
                extra={"settings": {"modprobe": {"nvidia": {"NVreg_RegistryDwords.RMForceStaticBar1": {
                    "value": 1, "why": "a site's registry key"}}}}})
    settings = r["settings"]
    assert settings["modprobe:nvidia/NVreg_EnableStreamMemOPs"]["value"] == "1"
    assert settings["modprobe:nvidia/NVreg_RegistryDwords.PeerMappingOverride"]["dword"] == "PeerMappingOverride"
    tokens = modprobe_tokens([s for s in settings.values() if s["mechanism"] == "modprobe"])
    assert [t for t in tokens if t.startswith("NVreg_RegistryDwords")] == [
        'NVreg_RegistryDwords="PeerMappingOverride=1;RMForceStaticBar1=1;"']
    content = next(f for f in render_files(r) if f["kind"] == "modprobe")["content"]
    assert 'NVreg_RegistryDwords="PeerMappingOverride=1;RMForceStaticBar1=1;"' in content
    assert content.count("NVreg_RegistryDwords=") == 1
    with pytest.raises(ValidationError, match="holds several keys"):
        resolve("h100", extra={"settings": {"modprobe": {"nvidia": {"NVreg_RegistryDwords": "A=1;"}}}})
    with pytest.raises(ValidationError, match="multi-node intents"):
        resolve("h100", "inference", options={"ibgda": True})
    with pytest.raises(ValidationError, match="kernelModuleConfig"):
        resolve("h100", "multiNodeTraining", options={"ibgda": True, "driver_source": "gpu-operator"})
    relaxed = resolve("h100", options={"relaxed_ordering": True})
    assert relaxed["settings"]["modprobe:nvidia/NVreg_EnablePCIERelaxedOrderingMode"]["value"] == "1"


def test_the_initramfs_follows_the_os():
    for os_name, method, command in (("ubuntu-24.04", "initramfs-tools", ["update-initramfs", "-u", "-k", "all"]),
                                     ("debian-12", "initramfs-tools", ["update-initramfs", "-u", "-k", "all"]),
                                     ("rhel-9", "dracut", ["dracut", "-f", "--regenerate-all"]),
                                     ("cos", "none", [])):
        r = resolve("gb200", "performance", os_name)
        assert r["initramfs"]["method"] == method
        assert r["initramfs"].get("update_command", []) == command
        assert [f["initramfs"] for f in r["files"] if f["kind"] == "modprobe"] == ([] if os_name == "cos" else [True])


def test_cos_follows_gkes_node_system_config_and_reapplies_every_boot():
    r = resolve("h100", "multiNodeTraining", "cos")
    skipped = {s["id"]: s["reason"] for s in r["skipped"]}
    for key in ("net.ipv4.tcp_max_syn_backlog", "net.core.default_qdisc", "net.ipv4.conf.all.arp_announce"):
        assert "LinuxNodeConfig.sysctls" in skipped["sysctl:" + key], key
    assert "sysctl:net.core.rmem_max" in r["settings"] and "sysctl:net.core.netdev_max_backlog" in r["settings"]
    assert all(s["applied_on_write"] and s["interrupt"]["type"] == "noop" for s in r["settings"].values())
    spec, _ = package_spec_for_nodes({"name": PACKAGE_NAME, "config": {"intent": "multiNodeTraining"}}, [{
        "name": "cos-0", "os_image": "Container-Optimized OS from Google",
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "cloud.google.com/gke-nodepool": "gpu"}}])
    assert reapplies_every_boot(spec["name"], spec["config"])
    ubuntu, _ = package_spec_for_nodes({"name": PACKAGE_NAME, "config": {"accelerator": "h100", "os": "ubuntu-24.04"}},
                                       [])
    assert not reapplies_every_boot(ubuntu["name"], ubuntu["config"]) and not reapplies_every_boot("sysctl", {})


def test_node_facts_carry_the_memory_and_the_gpu_operators_label():
    node = {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.deploy.driver": "true"}},
            "status": {"capacity": {"memory": "960Gi"}, "nodeInfo": {"osImage": "Ubuntu 24.04.1 LTS"}}}
    assert node_facts(node)["memory_kib"] == TRAY_KIB
    assert memory_kib("2113708Ki") == 2113708 and memory_kib("1Ti") == 1073741824 and memory_kib("x") is None
    spec, per_node = package_spec_for_nodes({"name": PACKAGE_NAME, "config": {"intent": "multiNodeTraining"}}, [
        dict(node_facts(node), labels={"nvidia.com/gpu.product": "NVIDIA-GB200", "kubernetes.io/arch": "arm64",
                                       "nvidia.com/gpu.deploy.driver": "true"})])
    decisions = {d["option"]: d for d in per_node["n"]["decisions"]}
    assert decisions["driver_source"]["value"] == "gpu-operator"
    assert "DaemonSet runs on this node" in decisions["driver_source"]["reason"]
    assert "resolved.file.modprobe" not in spec["config"]
    threads = next(s for s in per_node["n"]["settings"] if s["id"] == "sysctl:kernel.threads-max")
    assert threads["current"] == "7864320"


def test_the_reconciler_finds_the_nodes_that_booted_again_since_their_settings_were_applied():
    import dataclasses

    from nodewright_cli.reconcile_work import rebooted_since_applied
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import PackageSpec, ResourcePlan

    spec, _ = package_spec_for_nodes({"name": PACKAGE_NAME, "config": {"accelerator": "h100", "os": "cos"}}, [])

    def node(name, boot, status="complete"):
        import json
        return {"metadata": {"name": name, "annotations": {"nodewright.io/state-cos": json.dumps(
            {"status": status, "packages": {}})}}, "status": {"nodeInfo": {"bootID": boot}}}

    nodes = [node("a", "b1"), node("b", "b2"), node("c", "b9", status="in_progress"), node("d", "b4")]
    resource = {"metadata": {"name": "cos"}, "status": {"nodeBootIds": {"a": "b1", "b": "b1", "c": "b1"}}}
    described = ResourcePlan("cos", None, targets=["a", "b", "c", "d"], packages=[PackageSpec.from_dict(spec)])
    assert rebooted_since_applied({"rollouts": [(resource, described)]}, nodes) == {"b": ["cos"]}
    ubuntu = dataclasses.replace(described, packages=[PackageSpec("sysctl")])
    assert rebooted_since_applied({"rollouts": [(resource, ubuntu)]}, nodes) == {}
    paused = dataclasses.replace(described, paused=True)
    assert rebooted_since_applied({"rollouts": [(resource, paused)]}, nodes) == {}
