# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pure parts of `nodewright rollout`: host lists, wave outcomes, policy files."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError

pytestmark = pytest.mark.unit

@pytest.fixture(scope="module")
def runner():
    from nodewright_cli import rollout
    return rollout


PLAYBOOK_LIST = """
playbook: site.yml

  play #1 (localhost): prepare\tTAGS: []
    pattern: ['localhost']
    hosts (1):
      localhost

  play #2 (gpu): patch\tTAGS: []
    pattern: ['gpu']
    hosts (3):
      h100-0001
      h100-0000
      localhost
"""

ADHOC_LIST = """  hosts (2):
    n01
    n02
"""


def test_parse_list_hosts(runner):
    assert runner.parse_list_hosts(PLAYBOOK_LIST) == ["localhost", "h100-0001", "h100-0000"]
    assert runner.parse_list_hosts(ADHOC_LIST) == ["n01", "n02"]
    assert runner.parse_list_hosts("  hosts (0):\n") == []


@pytest.mark.parametrize("stats, succeeded, failed", [
    ({"processed": {"a": 1, "b": 1, "c": 1}, "failures": {"b": 1}}, ["a", "c"], ["b"]),
    ({"processed": {"a": 1, "b": 1, "c": 1}, "dark": {"c": 1}, "failures": {"a": 0}}, ["a", "b"], ["c"]),
    # A host with no stats at all was lost track of: not a success.
    ({"processed": {"a": 1}}, ["a"], ["b", "c"]),
    (None, [], ["a", "b", "c"]),
])
def test_wave_outcome(runner, stats, succeeded, failed):
    outcome = runner.wave_outcome(["a", "b", "c"], stats)
    assert [h for h, o in outcome.items() if o == "ok"] == succeeded
    assert [h for h, o in outcome.items() if o == "failed"] == failed


def test_a_node_left_blocked_by_protected_pods_is_neither_done_nor_failed(runner):
    stats = {"processed": {"a": 1, "b": 1, "c": 1}, "failures": {"c": 1},
             "artifact_data": {"nodewright_blocked": {"b": ["training/train-0"], "c": ["training/train-1"]}}}
    # A failed host stays failed even if it was also named blocked.
    assert runner.wave_outcome(["a", "b", "c"], stats) == {"a": "ok", "b": "blocked", "c": "failed"}


def test_policy_file_as_resource_or_spec(runner, tmp_path):
    spec = {"default": {"budget": {"count": 2}, "strategy": {"linear": {"delta": 2}}}}
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(spec))
    (tmp_path / "resource.yml").write_text(yaml.safe_dump({
        "apiVersion": "nodewright.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "h100"},
        "spec": spec}))
    from_spec, source = runner.load_policy_file(str(tmp_path / "spec.yml"))
    assert source == "file %s" % (tmp_path / "spec.yml") and from_spec.default.strategy.delta == 2
    from_resource, source = runner.load_policy_file(str(tmp_path / "resource.yml"))
    assert source.startswith("DeploymentPolicy/h100") and from_resource.to_dict() == from_spec.to_dict()


def test_policy_file_errors_name_the_file_and_field(runner, tmp_path):
    (tmp_path / "bad.yml").write_text(yaml.safe_dump({"default": {"budget": {"percent": 0}}}))
    with pytest.raises(ValidationError) as info:
        runner.load_policy_file(str(tmp_path / "bad.yml"))
    assert str(info.value).startswith("%s: policy.default.budget.percent: must be from 1 to 100" % (tmp_path / "bad.yml"))


def test_arguments(runner):
    from nodewright_cli.cli import build_parser

    def parse_args(argv):
        return build_parser().parse_args(["rollout"] + argv)
    args = parse_args(["site.yml", "-i", "a.yml", "-i", "b.yml", "--policy", "p.yml", "-e", "x=1",
                       "--no-wait-for-window"])
    assert args.inventory == ["a.yml", "b.yml"] and args.extra_vars == ["x=1"] and not args.wait_for_window
    assert not args.admission
    with pytest.raises(SystemExit):
        parse_args(["site.yml", "-i", "a.yml", "--policy", "p.yml", "--policy-name", "q"])
    with pytest.raises(SystemExit):
        parse_args(["site.yml", "-i", "a.yml"])


def test_notify_flags_make_the_runs_notifier(runner):
    import argparse
    none = runner.load_notifier(argparse.Namespace(notify=[], notify_events=None))
    assert none is None
    n = runner.load_notifier(argparse.Namespace(notify=["json://hooks.example.com/x", "slack://A/B/C"],
                                                notify_events="halted, complete"))
    assert n.settings.urls == ["json://hooks.example.com/x", "slack://A/B/C"]
    assert list(n.settings.events) == ["halted", "complete"]
    with pytest.raises(ValidationError, match="--notify-events without --notify"):
        runner.load_notifier(argparse.Namespace(notify=[], notify_events="halted"))
    with pytest.raises(ValidationError, match="unknown event"):
        runner.load_notifier(argparse.Namespace(notify=["json://h/x"], notify_events="done"))
