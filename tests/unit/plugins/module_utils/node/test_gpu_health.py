# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The GPU health gate's setting and its judgement of the commands' output."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gpu_health

pytestmark = pytest.mark.unit

QUERY_OK = (0, "0, Enabled, Enabled\n1, Enabled, Enabled\n")
NVLINK_OK = (0, "GPU 0: NVIDIA H100 (UUID: a)\n\t Link 0: 26.562 GB/s\nGPU 1: NVIDIA H100 (UUID: b)\n"
                "\t Link 0: 26.562 GB/s\n")
GATE = {"persistence_mode": None, "ecc_mode": None, "dcgm_level": 1}


def test_the_gate_is_off_unless_enabled_and_refuses_what_it_cannot_check():
    assert gpu_health.parse_gate(None) is None
    assert gpu_health.parse_gate({"enabled": False, "eccMode": "Enabled"}) is None
    assert gpu_health.parse_gate({"enabled": True}) == {"persistence_mode": None, "ecc_mode": None, "dcgm_level": 1}
    assert gpu_health.parse_gate({"enabled": True, "persistenceMode": "Enabled", "eccMode": "Disabled",
                                  "dcgmDiagLevel": 0}) == {"persistence_mode": "Enabled", "ecc_mode": "Disabled",
                                                           "dcgm_level": 0}
    for value, words in (({"enabled": "yes"}, "spec.gpuHealthGate.enabled: must be true or false"),
                         ({"enabled": True, "eccMode": "on"}, "spec.gpuHealthGate.eccMode: must be Enabled or "
                                                              "Disabled"),
                         ({"enabled": True, "dcgmDiagLevel": 5}, "spec.gpuHealthGate.dcgmDiagLevel"),
                         ({"enabled": True, "xid": False}, "unknown field(s) xid")):
        with pytest.raises(ValidationError) as exc:
            gpu_health.parse_gate(value)
        assert words in str(exc.value)


def test_healthy_gpus_pass():
    assert gpu_health.judge(GATE, 2, QUERY_OK, NVLINK_OK, (0, "kernel: eth0 up\n"), (0, "| Memory | Pass |")) == []


def test_a_missing_gpu_is_named_with_the_count_the_node_had():
    (failure,) = gpu_health.judge(GATE, 8, (0, "0, Enabled, Enabled\n"), (0, ""), (0, ""))
    assert failure == {"check": "gpu-count", "message": "nvidia-smi sees 1 GPU(s), the node had 8 (allocatable "
                                                        "nvidia.com/gpu before maintenance)"}


def test_nvidia_smi_failing_is_a_failure_with_its_words():
    (failure,) = gpu_health.judge(GATE, 2, (9, "NVIDIA-SMI has failed because it couldn't communicate"), None,
                                  (0, ""))
    assert failure["check"] == "nvidia-smi" and "exit 9" in failure["message"]


def test_persistence_and_ecc_are_checked_only_when_asked():
    query = (0, "0, Disabled, Enabled\n1, Enabled, Disabled\n")
    assert gpu_health.judge(GATE, 2, query, NVLINK_OK, (0, "")) == []
    gate = dict(GATE, persistence_mode="Enabled", ecc_mode="Enabled")
    assert [f["message"] for f in gpu_health.judge(gate, 2, query, NVLINK_OK, (0, ""))] == [
        "persistence mode is not Enabled on GPU 0: Disabled", "ECC mode is not Enabled on GPU 1: Disabled"]


def test_an_inactive_nvlink_and_an_xid_are_named():
    nvlink = (0, NVLINK_OK[1].replace("Link 0: 26.562 GB/s\nGPU 1", "Link 0: <inactive>\nGPU 1"))
    log = (0, "kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n")
    assert [f["message"] for f in gpu_health.judge(GATE, 2, QUERY_OK, nvlink, log)] == [
        "NVLink down: GPU 0 link 0: <inactive>",
        "Xid error(s) in the kernel log since the boot: Xid 79 (PCI:0000:18:00)"]
    # A product without NVLink lists no link.
    assert gpu_health.judge(GATE, 2, QUERY_OK, (0, "GPU 0: L40S (UUID: a)\nGPU 1: L40S (UUID: b)\n"), (0, "")) == []


def test_a_failed_dcgm_diagnostic_names_the_failed_tests():
    out = "| Deployment | Pass |\n| Memory     | Fail |\n"
    (failure,) = gpu_health.judge(dict(GATE, dcgm_level=3), 2, QUERY_OK, NVLINK_OK, (0, ""), (226, out))
    assert failure == {"check": "dcgm", "message": "dcgmi diag -r 3 failed (exit 226): | Memory | Fail |"}


def test_allocatable_gpus_reads_the_node():
    assert gpu_health.allocatable_gpus({"status": {"allocatable": {"nvidia.com/gpu": "8"}}}) == 8
    assert gpu_health.allocatable_gpus({"status": {"allocatable": {"cpu": "4"}}}) == 0
    assert gpu_health.allocatable_gpus(None) == 0


def test_the_kernel_log_comes_from_journald_else_the_ring_buffer_else_the_gate_says_it_did_not_look():
    xid = "[ 12.3] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"

    def host(answers):
        calls = []

        def run(argv):
            calls.append(argv[0])
            return answers[argv[0]]
        return run, calls

    run, calls = host({"journalctl": (0, xid), "dmesg": (0, "")})
    assert gpu_health.read_kernel_log(run) == ((0, xid), None) and calls == ["journalctl"]
    # A GPU VM without journald (an H200 host read this way): the ring buffer has the Xid.
    run, calls = host({"journalctl": (127, "sh: journalctl: not found"), "dmesg": (0, xid)})
    log, note = gpu_health.read_kernel_log(run)
    assert note is None and gpu_health.xids(log[1]) == ["Xid 79 (PCI:0000:18:00)"] and calls == ["journalctl", "dmesg"]
    run, calls = host({"journalctl": (127, ""), "dmesg": (1, "dmesg: read kernel buffer failed: Operation not permitted")})
    log, note = gpu_health.read_kernel_log(run)
    assert log is None
    assert note == "Xid errors not checked: the kernel log cannot be read (journalctl -k: exit 127; dmesg: exit 1)"
    assert gpu_health.judge({}, 1, (0, "0, Enabled, Enabled\n"), kernel_log=log) == []


def test_check_runs_the_gate_on_the_host_and_says_what_it_checked():
    ran = []
    outputs = {tuple(gpu_health.QUERY): QUERY_OK, tuple(gpu_health.NVLINK): NVLINK_OK,
               tuple(gpu_health.HAS_DCGMI): (1, "")}

    def run(argv):
        ran.append(tuple(argv))
        return outputs.get(tuple(argv), (0, ""))
    result = gpu_health.check(run, GATE, 2, "h100-0")
    assert not result.get("failed") and result["msg"].startswith("GPU health gate passed (2 GPU(s))")
    assert ran[:2] == [tuple(gpu_health.QUERY), tuple(gpu_health.NVLINK)]
    assert tuple(gpu_health.HAS_DCGMI) in ran  # dcgm_level asks whether dcgmi is there

    # A GPU gone after the reboot: failed, naming the node, the count in the failures.
    outputs[tuple(gpu_health.QUERY)] = (0, "0, Enabled, Enabled\n")
    result = gpu_health.check(run, GATE, 2, "h100-0")
    assert result["failed"] and result["gpu_failures"]
    assert result["msg"].startswith("node h100-0 failed its GPU health gate:")
