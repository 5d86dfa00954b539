# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Read-back checks: the probes, the rows the comparator reads, parsing what the
host scripts print, and the check's result from the verdicts."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import (
    CHECK_RULES,
    CMDLINE_PROBE,
    check_expectations,
    check_result,
    checks_text,
    observations_text,
    parse_observations,
    parse_verdict,
    probes,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import layer_settings

pytestmark = pytest.mark.unit


def settings(**groups):
    out = {s["id"]: s for s in layer_settings("intents/test", {"settings": groups})}
    return out


SETTINGS = settings(
    sysctl={"net.ipv4.tcp_rmem": {"value": "4096 131072  268435456", "why": "buffers"}},
    cmdline={"init_on_alloc": "init_on_alloc=0", "iommu": "iommu=pt"},
    module={"tcp_bbr": True},
    modprobe={"nvidia": {"NVreg_CoherentGPUMemoryMode": "driver"}},
    dropin={"containerd.service": {"LimitMEMLOCK": "infinity"}},
    governor={"cpu": "performance"},
    gpu={"persistence": "enabled", "fabricmanager": "enabled", "workload_power_profile": "MAX_P"},
)


def rows_by_id(rows):
    return {row["id"]: row for row in rows}


# ------------------------------------------------------------------ probes

def test_one_probe_per_setting_and_one_for_the_command_line():
    got = probes(SETTINGS)
    assert got == [sid for sid in SETTINGS if not sid.startswith("cmdline:")] + [CMDLINE_PROBE]
    assert probes({"settings": SETTINGS}) == got


@pytest.mark.parametrize("value,expected", [
    ({}, []), (None, []),
    (settings(sysctl={"vm.swappiness": 1}), ["sysctl:vm.swappiness"]),
    (settings(cmdline={"a": "a=1", "b": "b"}), [CMDLINE_PROBE]),
])
def test_probes_edge_cases(value, expected):
    assert probes(value) == expected


# ------------------------------------------------------------------ expectations

@pytest.mark.parametrize("sid,probe,rule,expected", [
    ("sysctl:net.ipv4.tcp_rmem", "sysctl:net.ipv4.tcp_rmem", "eq", "4096 131072 268435456"),
    ("cmdline:init_on_alloc", CMDLINE_PROBE, "tokens", "init_on_alloc=0"),
    ("module:tcp_bbr", "module:tcp_bbr", "eq", "loaded"),
    ("modprobe:nvidia/NVreg_CoherentGPUMemoryMode", "modprobe:nvidia/NVreg_CoherentGPUMemoryMode", "eq",
     "driver"),
    ("dropin:containerd.service/LimitMEMLOCK", "dropin:containerd.service/LimitMEMLOCK", "eq", "infinity"),
    ("governor:cpu", "governor:cpu", "governor", "performance"),
    ("gpu:persistence", "gpu:persistence", "enabled", "Enabled"),
    ("gpu:fabricmanager", "gpu:fabricmanager", "eq", "active"),
    ("gpu:workload_power_profile", "gpu:workload_power_profile", "eq", "active"),
])
def test_what_each_setting_must_read_back_as(sid, probe, rule, expected):
    row = rows_by_id(check_expectations(SETTINGS))[sid]
    assert (row["probe"], row["rule"], row["expected"]) == (probe, rule, expected)
    assert row["rule"] in CHECK_RULES
    assert row["layer"] == "intents/test"
    assert row["reboot"] is (sid.startswith(("cmdline:", "modprobe:")))
    assert "reason" not in row


def test_a_row_keeps_the_reason_the_setting_exists():
    row = rows_by_id(check_expectations(SETTINGS))["sysctl:net.ipv4.tcp_rmem"]
    assert row["why"] == "buffers"


def test_a_row_tolerates_a_setting_without_layer_or_why():
    rows = check_expectations({"sysctl:vm.swappiness": {"mechanism": "sysctl", "key": "vm.swappiness",
                                                        "value": "1"}})
    assert rows == [{"id": "sysctl:vm.swappiness", "probe": "sysctl:vm.swappiness", "rule": "eq",
                     "expected": "1", "layer": "", "why": "", "reboot": False}]


@pytest.mark.parametrize("skip,skipped,reason", [
    ({"governor:cpu": "the hypervisor owns the CPU frequency"}, {"governor:cpu"},
     "the hypervisor owns the CPU frequency"),
    ({"gpu:*": "no GPU driver\n in this test"},
     {"gpu:persistence", "gpu:fabricmanager", "gpu:workload_power_profile"}, "no GPU driver in this test"),
    ({"sysctl:net.*": None}, {"sysctl:net.ipv4.tcp_rmem"}, "skipped"),
    ({"GPU:*": "case matters"}, set(), None),
    (None, set(), None),
])
def test_skipped_settings_get_the_skip_rule_and_the_reason(skip, skipped, reason):
    rows = check_expectations(SETTINGS, skip=skip)
    assert {row["id"] for row in rows if row["rule"] == "skip"} == skipped
    assert {row.get("reason") for row in rows if row["rule"] == "skip"} <= {reason}


def test_the_first_matching_skip_pattern_in_sorted_order_gives_the_reason():
    rows = check_expectations(settings(gpu={"persistence": "enabled"}),
                              skip={"gpu:persistence": "exact", "gpu:*": "  any\n GPU  "})
    assert rows[0]["reason"] == "any GPU"


# ------------------------------------------------------------------ texts the scripts read and print

def test_checks_text_is_one_tab_separated_line_per_row():
    rows = check_expectations(settings(sysctl={"vm.swappiness": 1}, cmdline={"iommu": "iommu=pt"},
                                       governor={"cpu": "performance"}),
                              skip={"governor:cpu": "no cpufreq"})
    assert checks_text(rows) == ("sysctl:vm.swappiness\tsysctl:vm.swappiness\teq\t1\n"
                                 "cmdline:iommu\tproc:cmdline\ttokens\tiommu=pt\n"
                                 "governor:cpu\tgovernor:cpu\tskip\tno cpufreq\n")
    assert checks_text([]) == ""


def test_an_empty_expectation_is_written_as_a_dash():
    assert checks_text([{"id": "a", "probe": "a", "rule": "eq", "expected": ""}]) == "a\ta\teq\t-\n"


@pytest.mark.parametrize("text,expected", [
    ("sysctl:net.ipv4.tcp_rmem\t4096 87380 268435456\nproc:cmdline\tro quiet\nnoise\n",
     {"sysctl:net.ipv4.tcp_rmem": "4096 87380 268435456", "proc:cmdline": "ro quiet"}),
    # Values are split at the first tab only, and trimmed.
    ("sysctl:net.ipv4.tcp_rmem\t4096\t87380\t268435456\n",
     {"sysctl:net.ipv4.tcp_rmem": "4096\t87380\t268435456"}),
    (" module:x \t loaded \n", {"module:x": "loaded"}),
    ("\tno probe\n", {}),
    ("module:x\t\n", {"module:x": ""}),
    ("", {}), (None, {}),
    ("a\t1\na\t2\n", {"a": "2"}),
])
def test_parse_observations(text, expected):
    assert parse_observations(text) == expected


def test_observations_round_trip_through_their_text():
    observed = {"sysctl:net.ipv4.tcp_rmem": "4096\t87380  268435456", "module:x": "loaded", "gpu:y": None}
    text = observations_text(observed)
    assert text == "sysctl:net.ipv4.tcp_rmem\t4096 87380 268435456\nmodule:x\tloaded\n"
    assert parse_observations(text) == {"sysctl:net.ipv4.tcp_rmem": "4096 87380 268435456",
                                        "module:x": "loaded"}
    assert observations_text(None) == ""


@pytest.mark.parametrize("text,verdicts,summary", [
    ("ok\ta\nfailed\tb\nunverified\tc\tno governor here\nsummary\t2 of 3\tin effect\n",
     {"a": ("ok", None), "b": ("failed", None), "c": ("unverified", "no governor here")},
     "2 of 3\tin effect"),
    # A detail only counts for an unverified setting.
    ("failed\tb\tsome detail\nunverified\tc\n", {"b": ("failed", None), "c": ("unverified", None)}, None),
    ("ok\nmaybe\td\nnoise\n", {}, None),
    ("", {}, None), (None, {}, None),
])
def test_parse_verdict(text, verdicts, summary):
    assert parse_verdict(text) == (verdicts, summary)


# ------------------------------------------------------------------ the check's result

ROWS = check_expectations(settings(sysctl={"vm.swappiness": {"value": 1, "why": "serving"}},
                                   cmdline={"iommu": "iommu=pt"}, governor={"cpu": "performance"}))


def test_everything_in_effect():
    result = check_result(ROWS, "ok\tsysctl:vm.swappiness\nok\tcmdline:iommu\nok\tgovernor:cpu\n", {})
    assert result == {"ok": True, "phase": "post-interrupt", "failed": [], "pending_reboot": [],
                      "unverified": [], "verified": ["sysctl:vm.swappiness", "cmdline:iommu", "governor:cpu"],
                      "summary": "all 3 setting(s) in effect"}


def test_failed_settings_are_named_with_what_was_observed():
    verdict = "failed\tsysctl:vm.swappiness\nfailed\tcmdline:iommu\nunverified\tgovernor:cpu\tno cpufreq\n"
    result = check_result(ROWS, verdict, {"sysctl:vm.swappiness": "60"})
    assert not result["ok"]
    assert result["failed"] == [
        {"id": "sysctl:vm.swappiness", "expected": "1", "observed": "60", "layer": "intents/test",
         "why": "serving"},
        {"id": "cmdline:iommu", "expected": "iommu=pt", "observed": "<not observed>", "layer": "intents/test",
         "why": ""},
    ]
    assert result["unverified"] == [{"id": "governor:cpu", "reason": "no cpufreq"}]
    assert result["summary"] == (
        "2 setting(s) did not take effect: "
        "sysctl:vm.swappiness: expected 1, observed 60 (from intents/test); "
        "cmdline:iommu: expected iommu=pt, observed <not observed> (from intents/test)")


def test_a_setting_the_verdict_does_not_name_failed():
    result = check_result(ROWS, "ok\tsysctl:vm.swappiness\nok\tgovernor:cpu\nsummary\twhatever\n",
                          {CMDLINE_PROBE: "ro quiet"})
    assert [f["id"] for f in result["failed"]] == ["cmdline:iommu"]
    assert result["failed"][0]["observed"] == "ro quiet"
    assert check_result(ROWS, "", None)["failed"][0]["observed"] == "<not observed>"


def test_live_phase_leaves_reboot_settings_pending():
    verdict = "ok\tsysctl:vm.swappiness\nfailed\tcmdline:iommu\nok\tgovernor:cpu\n"
    live = check_result(ROWS, verdict, {}, phase="live")
    assert live["ok"] and live["phase"] == "live"
    assert live["pending_reboot"] == ["cmdline:iommu"] and live["failed"] == []
    assert live["summary"] == "all 2 setting(s) in effect"
    # A setting that needs no reboot fails in the live phase too.
    assert not check_result(ROWS, "failed\tsysctl:vm.swappiness\n", {}, phase="live")["ok"]
    assert not check_result(ROWS, verdict, {})["ok"]


def test_an_unverified_setting_takes_the_skip_reason_or_a_default():
    rows = check_expectations(settings(governor={"cpu": "performance"}, sysctl={"vm.swappiness": 1}),
                              skip={"governor:*": "the hypervisor owns it"})
    result = check_result(rows, "unverified\tgovernor:cpu\nunverified\tsysctl:vm.swappiness\n", {})
    assert result["ok"]
    assert result["unverified"] == [{"id": "governor:cpu", "reason": "the hypervisor owns it"},
                                    {"id": "sysctl:vm.swappiness", "reason": "not verifiable here"}]


@pytest.mark.parametrize("phase", ["later", "", None, "Live"])
def test_an_unknown_phase_is_refused(phase):
    with pytest.raises(ValidationError) as err:
        check_result(ROWS, "", {}, phase=phase)
    assert err.value.field == "phase" and err.value.hint == "post-interrupt or live"
    assert err.value.reason == "unknown check phase %r" % (phase,)
