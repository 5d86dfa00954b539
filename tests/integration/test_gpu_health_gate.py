# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The GPU health gate after a reboot: a GPU that does not come back, an Xid in the
kernel log, an NVLink down, a failed DCGM diagnostic each keep their node cordoned,
erroring, with what failed; the healthy node returns to work. The simulator's
nvidia-smi, journalctl and dcgmi answer as the node's hardware would, told to fail
at the next boot as a GPU that falls off the bus at a reboot."""

from __future__ import annotations

import pytest
from nodewright_sim import hostroot

from fleet_helpers import Fleet

pytestmark = pytest.mark.integration

FAULTS = [("missing", "1"), ("xid", "79"), ("nvlink-down", "3"), ("dcgm", "fail")]


def test_each_gpu_fault_after_the_reboot_keeps_its_node_cordoned_with_the_reason(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, [("h100", 5)])
    nodes = sorted(fleet.nodes)
    for node, (kind, value) in zip(nodes, FAULTS):
        hostroot.gpu_fault(sim.host_root(node), kind, value, next_boot=True)
    healthy = nodes[4]
    res = "gpu-gate-" + fleet.label
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "interruptionBudget": {"count": 5},
        "gpuHealthGate": {"enabled": True, "eccMode": "Enabled", "dcgmDiagLevel": 2},
        "packages": {"sysctl": {"version": "1.0.0", "configMap": {"vm.max_map_count": "262144"},
                                "interrupt": {"type": "reboot"}}}})

    plan = fleet.playbook("plan.yml", "-e", "nodewright_resource=%s" % res)
    assert plan.returncode == 0, plan.stdout[-3000:]
    assert ("GPU health gate before each uncordon: every GPU back, no Xid since the boot, NVLink up, ECC Enabled, "
            "dcgmi diag -r 2 where DCGM is installed") in plan.stdout, plan.stdout[-3000:]

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-4000:]
    hosts = proc.report["hosts"]
    expected = {
        nodes[0]: "nvidia-smi sees 7 GPU(s), the node had 8 (allocatable nvidia.com/gpu before maintenance)",
        nodes[1]: "Xid error(s) in the kernel log since the boot: Xid 79 (PCI:0000:18:00)",
        nodes[2]: "NVLink down: GPU 3 link 0: <inactive>",
        nodes[3]: "dcgmi diag -r 2 failed (exit 226): | Memory | Fail |",
    }
    for node, words in expected.items():
        assert hosts[node]["outcome"] == "failed", (node, hosts[node])
        assert "failed its GPU health gate: %s" % words in hosts[node]["msg"], hosts[node]["msg"]
        obj = sim.core.read_node(node)
        assert obj.spec.unschedulable, "%s must stay cordoned for triage" % node
        assert fleet.node_labels(node)["nodewright.io/status-%s" % res] == "erroring"
        conditions = {c.type: c for c in obj.status.conditions or []}
        erroring = conditions["nodewright.io/Erroring"]
        assert erroring.status == "True" and words in erroring.message, (erroring.status, erroring.message)
    # Only the fault each node was given: the other checks passed there.
    assert "Xid" not in hosts[nodes[0]]["msg"] and "NVLink" not in hosts[nodes[1]]["msg"]
    # The healthy node passed every check and is back at work.
    assert hosts[healthy]["outcome"] == "ok", hosts[healthy]
    assert not sim.core.read_node(healthy).spec.unschedulable
    assert fleet.node_labels(healthy)["nodewright.io/status-%s" % res] == "complete"
    steps = [t["task"] for t in hosts[healthy]["timeline"]]
    assert steps.index("Check the GPUs before the node returns to work") < \
        steps.index("Uncordon the node (only NodeWright's own cordon)"), steps
