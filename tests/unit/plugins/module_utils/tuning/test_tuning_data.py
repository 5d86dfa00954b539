# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The shipped tuning profiles, the role's constants, the read-back script and the
tuning docs stay consistent with each other."""

from __future__ import annotations

import os
import stat
import subprocess
import textwrap

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.filter import tuning as tuning_filter
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import ACCELERATORS, ACCELERATOR_NAMES
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.checks import (
    MISSING,
    UNAVAILABLE,
    parse_observations,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.layers import (
    catalog,
    kind_of,
    layer_settings,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    FILE_PREFIX,
    GRUB_FILE,
    KNOWN_NON_SYSCTLS,
    OPTION_SPECS,
    STATE_FILE,
)

from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.decide import host_facts, host_probes
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.floors import LIMIT_SYSCTLS

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
ROLE = os.path.join(REPO, "roles", "nvidia_tuning")
PROFILES = tuning_filter.load_profiles()


def _all_settings():
    for name, layer in PROFILES.items():
        for setting in layer_settings(name, layer):
            yield name, setting


def test_every_shipped_setting_says_why():
    missing = ["%s %s" % (name, s["id"]) for name, s in _all_settings() if len(s["why"]) < 20]
    assert missing == []


def test_every_layer_has_a_description_and_known_kind():
    for name, layer in PROFILES.items():
        assert kind_of(name) in ("base", "platform", "accelerator", "intent", "os", "cloud", "option"), name
        assert layer.get("description"), name
        for parent in layer.get("inherits") or []:
            assert parent in PROFILES, (name, parent)


def test_accelerator_profiles_match_the_detection_table():
    assert sorted(catalog(PROFILES)["accelerator"]) == sorted(ACCELERATOR_NAMES)
    for accel in ACCELERATORS:
        meta = PROFILES["accelerators/" + accel["name"]]["meta"]
        assert (meta["family"], meta["arch"], meta["form_factor"], meta["compute_capability"]) == (
            accel["family"], accel["arch"], accel["form_factor"], accel["compute"]), accel["name"]


def test_option_layers_cover_the_option_specs():
    activated = {k for name, layer in PROFILES.items() if kind_of(name) == "option"
                 for k in layer["activate"]}
    assert activated == set(OPTION_SPECS)


def test_role_constants_match_module_utils():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    assert role_vars["nvidia_tuning__state_file"] == STATE_FILE
    assert role_vars["nvidia_tuning__grub_file"] == GRUB_FILE
    assert role_vars["nvidia_tuning__dropin_name"] == FILE_PREFIX + ".conf"
    assert role_vars["nvidia_tuning__noop"] == NOOP
    assert role_vars["nvidia_tuning__host_probes"] == host_probes(LIMIT_SYSCTLS)
    templates = set(os.listdir(os.path.join(ROLE, "templates")))
    for accelerator in ACCELERATOR_NAMES:
        for spec in resolve_profile(accelerator, "multiNodeInference", "ubuntu-24.04", cloud="eks",
                                      profiles=PROFILES)["files"]:
            assert spec["template"] in templates


def test_argument_specs_list_every_intent_and_option():
    with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    main = specs["main"]["options"]
    assert main["nvidia_tuning_intent"]["choices"] == sorted(catalog(PROFILES)["intent"], key=[
        "performance", "inference", "multiNodeTraining", "multiNodeInference"].index)
    for option in OPTION_SPECS:
        assert option in " ".join(main["nvidia_tuning_options"]["description"])
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    for name in defaults:
        assert name in main or name in specs["check"]["options"], name


def test_docs_cover_every_setting_and_correction():
    with open(os.path.join(REPO, "docs", "nvidia-tuning.md")) as handle:
        docs = handle.read()
    for _, setting in _all_settings():
        key = setting["key"].split("/")[-1] if setting["mechanism"] in ("modprobe", "dropin") else setting["key"]
        shown = setting["value"] if setting["mechanism"] == "cmdline" else key
        assert shown in docs, setting["id"]
    for key in KNOWN_NON_SYSCTLS:
        assert key in docs
    for accelerator in ACCELERATOR_NAMES:
        assert accelerator.upper() in docs


# ------------------------------------------------------------------ the read-back script

def _stub(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_observe_script_prints_one_line_per_probe(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "sysctl", textwrap.dedent("""\
        case "$2" in
          net.ipv4.tcp_rmem) printf '4096\\t87380\\t268435456\\n' ;;
          vm.swappiness) echo 1 ;;
          *) echo "sysctl: cannot stat /proc/sys/$2: No such file or directory" >&2; exit 255 ;;
        esac
        """))
    _stub(bin_dir, "systemctl", textwrap.dedent("""\
        case "$1" in
          show) echo infinity ;;
          is-active) echo inactive; exit 3 ;;
        esac
        """))
    _stub(bin_dir, "nvidia-smi", "printf 'Enabled\\nEnabled\\n'\n")
    with open(os.path.join(REPO, "packages", "nvidia-tuning", "steps", "observe.sh")) as handle:
        script = handle.read()
    probes = ["sysctl:net.ipv4.tcp_rmem", "sysctl:vm.swappiness", "sysctl:kernel.sched_latency_ns",
              "module:definitely_not_a_module", "dropin:containerd.service/LimitMEMLOCK",
              "gpu:persistence", "gpu:fabricmanager", "proc:cmdline", "governor:cpu",
              "modprobe:not_a_module/opt", "bogus:x"]
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir)
    out = subprocess.run(["/bin/sh", "-c", script, "nodewright-observe"] + probes, env=env,
                         capture_output=True, text=True, check=True).stdout
    observed = parse_observations(out)
    assert list(observed) == probes
    assert observed["sysctl:net.ipv4.tcp_rmem"] == "4096 87380 268435456"
    assert observed["sysctl:vm.swappiness"] == "1"
    assert observed["sysctl:kernel.sched_latency_ns"] == MISSING
    assert observed["module:definitely_not_a_module"] == "absent"
    assert observed["dropin:containerd.service/LimitMEMLOCK"] == "infinity"
    assert observed["gpu:persistence"] == "Enabled"
    assert observed["gpu:fabricmanager"] == "inactive"
    assert observed["proc:cmdline"]
    assert observed["governor:cpu"]  # a governor list or <unavailable>, never empty
    assert observed["modprobe:not_a_module/opt"] == "<module not loaded>"
    assert observed["bogus:x"] == "<unknown probe>"


def test_observe_script_reports_the_host_facts_and_registry_keys(tmp_path):
    root = tmp_path / "root"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "ofed_info", 'echo "MLNX_OFED_LINUX-24.10-1.1.4.0:"\n')
    _stub(bin_dir, "modinfo", "exit 1\n")
    with open(os.path.join(REPO, "packages", "nvidia-tuning", "steps", "observe.sh")) as handle:
        script = handle.read()
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir)
    probes = ["host:peer_memory", "host:gdrdrv", "host:memory", "host:driver_container"]
    out = subprocess.run(["/bin/sh", "-c", script, "nodewright-observe"] + probes, env=env,
                         capture_output=True, text=True, check=True).stdout
    observed = parse_observations(out)
    assert observed["host:peer_memory"] == "MLNX_OFED_LINUX-24.10-1.1.4.0"
    assert observed["host:gdrdrv"] == "absent"
    assert observed["host:memory"].isdigit()  # this machine's MemTotal
    assert observed["host:driver_container"] in ("present", "absent")
    facts = host_facts(observed, labels={"nvidia.com/gpu.deploy.driver": "true"},
                       applied={"vm.swappiness": "1"})
    assert facts["peer_memory"] == "MLNX_OFED_LINUX-24.10-1.1.4.0" and facts["gdrdrv"] is False
    assert facts["driver_source"] == "gpu-operator" and facts["applied"] == {"vm.swappiness": "1"}
    # One key of NVreg_RegistryDwords, as /sys/module shows the parameter.
    params = root / "sys" / "module" / "nvidia" / "parameters"
    params.mkdir(parents=True)
    (params / "NVreg_RegistryDwords").write_text('"RMForceStaticBar1=1;PeerMappingOverride=1;"\n')
    chrooted = script.replace("/sys/module", str(root / "sys" / "module")).replace(
        "/proc/driver/nvidia/params", str(root / "none"))
    out = subprocess.run(["/bin/sh", "-c", chrooted, "nodewright-observe",
                          "modprobe:nvidia/NVreg_RegistryDwords.PeerMappingOverride",
                          "modprobe:nvidia/NVreg_RegistryDwords.Missing"], env=env,
                         capture_output=True, text=True, check=True).stdout
    observed = parse_observations(out)
    assert observed["modprobe:nvidia/NVreg_RegistryDwords.PeerMappingOverride"] == "1"
    assert observed["modprobe:nvidia/NVreg_RegistryDwords.Missing"] == UNAVAILABLE
