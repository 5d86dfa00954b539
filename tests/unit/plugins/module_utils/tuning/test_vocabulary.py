# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The shared tuning vocabulary: the option table, the host paths, and the helpers
over settings."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import vocabulary
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    FILE_PREFIX,
    GPU_KEYS,
    GPU_UNITS,
    GROUPED,
    LAYER_KINDS,
    MECHANISMS,
    OPTION_SPECS,
    POWER_PROFILES,
    field_path,
    norm,
    settings_of,
)

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ settings_of

SETTINGS = {"sysctl:vm.swappiness": {"mechanism": "sysctl", "key": "vm.swappiness", "value": "1"}}


@pytest.mark.parametrize("value,expected", [
    (None, {}),
    ({}, {}),
    ([], {}),
    ("", {}),
    (SETTINGS, SETTINGS),
    ({"settings": SETTINGS, "accelerator": "h100"}, SETTINGS),
    # A settings mapping whose own key happens to be "settings" but is no mapping stays as it is.
    ({"settings": "x"}, {"settings": "x"}),
])
def test_settings_of_accepts_a_resolved_profile_or_its_settings(value, expected):
    assert settings_of(value) == expected


def test_settings_of_returns_the_profiles_own_mapping():
    resolved = {"settings": dict(SETTINGS)}
    assert settings_of(resolved) is resolved["settings"]


@pytest.mark.parametrize("value,kind", [(["sysctl:vm.swappiness"], "list"), ("settings", "str"), (3, "int")])
def test_settings_of_refuses_anything_else(value, kind):
    with pytest.raises(ValidationError) as err:
        settings_of(value)
    assert str(err.value) == "settings: expected a resolved profile or a settings mapping, got %s" % kind


# ------------------------------------------------------------------ small helpers

@pytest.mark.parametrize("layer,mechanism,key,expected", [
    ("intents/inference", "sysctl", "vm.swappiness", "intents/inference: settings.sysctl.vm.swappiness"),
    ("extra", "cmdline", None, "extra: settings.cmdline"),
    ("base", "dropin", "", "base: settings.dropin"),
])
def test_field_path(layer, mechanism, key, expected):
    assert field_path(layer, mechanism, key) == expected


@pytest.mark.parametrize("value,expected", [
    ("4096\t131072  6291456\n", "4096 131072 6291456"),
    ("  performance ", "performance"),
    (1, "1"),
    ("", ""),
    (None, "None"),
])
def test_norm_collapses_whitespace(value, expected):
    assert norm(value) == expected


# ------------------------------------------------------------------ the tables agree

def test_options_have_a_default_among_their_choices_and_a_help_text():
    for name, spec in OPTION_SPECS.items():
        assert spec["help"], name
        if "choices" in spec:
            assert spec["default"] in spec["choices"], name
        elif spec["type"] is bool:
            assert isinstance(spec["default"], bool), name
        else:
            assert spec["type"] == "auto_bool" and spec["default"] == "auto", name


def test_grouped_mechanisms_and_layer_kinds():
    assert set(GROUPED) <= set(MECHANISMS)
    assert set(vocabulary.EXPLICIT_KINDS) == {"option", "extra"}
    assert sorted(LAYER_KINDS.values()) == ["accelerator", "base", "cloud", "intent", "option", "os",
                                            "platform"]


def test_every_gpu_setting_has_a_unit_and_the_power_profiles_are_nvml_numbers():
    assert set(GPU_UNITS) == set(GPU_KEYS)
    assert all(unit.endswith(".service") for unit in GPU_UNITS.values())
    assert GPU_UNITS["workload_power_profile"] == vocabulary.POWER_PROFILE_UNIT
    assert sorted(POWER_PROFILES.values()) == list(range(len(POWER_PROFILES)))
    assert POWER_PROFILES["MAX_P"] == 0 and POWER_PROFILES["LLM_TRAINING"] == 7
    assert "{profile_id}" in vocabulary.DEFAULT_POWER_PROFILE_COMMAND


def test_host_paths_are_relative_and_carry_the_prefix():
    paths = [vocabulary.SYSCTL_FILE, vocabulary.GRUB_FILE, vocabulary.MODPROBE_FILE, vocabulary.MODULES_FILE,
             vocabulary.WANTS_FILE]
    for path in paths:
        assert not path.startswith("/") and FILE_PREFIX in path, path
    assert vocabulary.SYSCTL_FILE == "etc/sysctl.d/90-nodewright-nvidia.conf"
    assert vocabulary.STATE_FILE == "etc/nodewright/nvidia-tuning.json"


def test_the_known_non_sysctls_are_scheduler_tunables_with_the_reason():
    for key, reason in vocabulary.KNOWN_NON_SYSCTLS.items():
        assert key.startswith("kernel.sched_") and "debugfs" in reason, key
