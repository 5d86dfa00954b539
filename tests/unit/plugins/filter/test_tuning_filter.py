# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The tuning filter plugin: every filter documented, validation errors as filter
errors, the filters end to end, and the profiles it loads (bad files, site layers)."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.nodewright.fleet.plugins.filter import tuning as tuning_filter
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import shipped
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import NOOP
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import STATE_FILE

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

FILTERS = tuning_filter.FilterModule().filters()


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_every_filter_is_documented(name):
    path = os.path.join(REPO, "plugins", "filter", name + ".yml")
    with open(path) as handle:
        doc = yaml.safe_load(handle)
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["short_description"]
    assert "_input" in doc["DOCUMENTATION"]["options"]
    assert "nodewright.fleet." + name in doc["EXAMPLES"]
    assert "_value" in doc["RETURN"]


def test_filters_turn_validation_errors_into_filter_errors():
    with pytest.raises(AnsibleFilterError, match="unknown accelerator 'a100'"):
        FILTERS["tuning_profile"]("a100", "performance", "ubuntu-24.04")
    with pytest.raises(AnsibleFilterError, match="supported"):
        FILTERS["tuning_detect_accelerator"]({"nvidia.com/gpu.product": "Tesla-T4"})


def test_filters_end_to_end():
    profile = FILTERS["tuning_profile"]("h100", "inference", "ubuntu-22.04", options={"acs_override": True})
    assert profile["settings"]["cmdline:acs_redirect"]["layer"] == "options/acs-override"
    diff = FILTERS["tuning_diff"]({}, profile)
    assert FILTERS["tuning_merge_interrupts"]([diff["interrupt"], NOOP])["type"] == "reboot"
    state = FILTERS["tuning_state"](profile, diff["interrupt"])
    assert FILTERS["tuning_uninstall_paths"](state)[:len(state["files"])] == state["files"]
    assert STATE_FILE in FILTERS["tuning_uninstall_paths"]({})
    assert FILTERS["tuning_detect_cloud"]({}) == ""
    assert FILTERS["tuning_os_from_os_release"]("ID=debian\nVERSION_ID=12\n") == "debian-12"
    assert FILTERS["tuning_detect_accelerator_smi"]("NVIDIA B200, 10.0")["accelerator"] == "b200"
    assert FILTERS["tuning_check"](profile, {}, "live")["ok"] is False


def test_load_profiles_reports_bad_files(tmp_path):
    (tmp_path / "base.yml").write_text("- not\n- a mapping\n")
    with pytest.raises(AnsibleFilterError, match="is not a mapping"):
        tuning_filter.load_profiles(str(tmp_path))
    with pytest.raises(AnsibleFilterError, match="does not exist"):
        tuning_filter.load_profiles(str(tmp_path / "missing"))


def test_site_layers_can_extend_the_shipped_ones(tmp_path):
    site = tmp_path / "profiles"
    subprocess.run(["cp", "-r", shipped.PROFILES_DIR, str(site)], check=True)
    (site / "intents" / "batchEtl.yml").write_text(textwrap.dedent("""\
        description: Site intent for data preparation jobs.
        inherits: [intents/performance]
        settings:
          sysctl:
            vm.dirty_ratio: {value: 40, why: Buffer large sequential writes before flushing.}
        """))
    profile = FILTERS["tuning_profile"]("h100", "batchEtl", "ubuntu-24.04", profiles_dir=str(site))
    assert profile["settings"]["sysctl:vm.dirty_ratio"]["layer"] == "intents/batchEtl"
