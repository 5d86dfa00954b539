# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The maintain action's drain settings: every drainConfig field of a resource reaches
an option of its own, with node_drain's default, and each is taken from the task, else
the play's safe_update_ variable, else the resource's drainConfig, else the default."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.action.maintain import DEFAULTS, DRAIN_KEYS, ActionModule
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import resources
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan
from ansible_collections.nodewright.fleet.plugins.modules import maintain as maintain_module
from ansible_collections.nodewright.fleet.plugins.modules import node_drain

pytestmark = pytest.mark.unit

# drainConfig field -> (a value the resource may set, as drain_options gives it, and another)
SAMPLES = {"timeout": (120, 300), "gracePeriod": (5, 7), "deleteEmptyDirData": (True, False),
           "force": (True, False), "ignoreDaemonSets": (False, True), "disableEviction": (True, False)}


def test_every_drain_config_field_has_a_maintain_option_with_node_drains_default():
    assert set(SAMPLES) == set(resources.DRAIN_FIELDS)
    for field in resources.DRAIN_FIELDS:
        drain_option = resources.DRAIN_OPTIONS[field]
        option = DRAIN_KEYS.get(drain_option)
        assert option, "drainConfig.%s (node_drain's %s) reaches no maintain option" % (field, drain_option)
        assert option in DEFAULTS and option in maintain_module.ARGUMENT_SPEC, option
        assert DEFAULTS[option] == node_drain.ARGUMENT_SPEC[drain_option].get("default"), option
        assert maintain_module.ARGUMENT_SPEC[option]["type"] == node_drain.ARGUMENT_SPEC[drain_option]["type"]


def test_every_drain_option_is_documented():
    import yaml
    documented = yaml.safe_load(maintain_module.DOCUMENTATION)["options"]
    for option in DRAIN_KEYS.values():
        assert option in documented, option
        assert documented[option].get("default") == maintain_module.ARGUMENT_SPEC[option].get("default"), option


@pytest.fixture
def action():
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    action = ActionModule.__new__(ActionModule)
    action._templar = Templar(loader=DataLoader())
    action._args = {}
    return action


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_a_drain_setting_comes_from_the_task_then_the_play_then_the_resource(action, field):
    """Precedence, one level removed at a time: task option > safe_update_ variable >
    drainConfig (desired_state's ``drain``) > the default."""
    drain_option = resources.DRAIN_OPTIONS[field]
    option = DRAIN_KEYS[drain_option]
    from_resource, other = SAMPLES[field]
    entry = ResourcePlan("r", None, drain=resources.drain_options({field: _as_config(field, from_resource)}))
    assert entry.drain == {drain_option: from_resource}
    task_vars = {"safe_update_" + option: other}
    action._args = {option: other}
    assert action._setting(option, task_vars, entry) == other
    action._args = {}
    assert action._setting(option, task_vars, entry) == other
    assert action._setting(option, {}, entry) == from_resource
    assert action._setting(option, {}, ResourcePlan("r", None)) == DEFAULTS[option]
    assert action._setting(option, {}, None) == DEFAULTS[option]
    # A variable that is null (the role's default for the grace period) does not hide the resource's.
    assert action._setting(option, {"safe_update_" + option: None}, entry) == from_resource


def _as_config(field, value):
    """A drain_options value written as the resource writes it (durations as strings)."""
    return "%ds" % value if field in ("timeout", "gracePeriod") else value
