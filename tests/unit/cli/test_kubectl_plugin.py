# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""kubectl nodewright: each command in kubectl's conventions becomes the nodewright
command that does it."""

from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
try:
    import nodewright_cli  # noqa: F401
except ImportError:  # not installed into the virtualenv yet (make venv does it)
    sys.path.insert(0, os.path.join(REPO, "cli"))

from nodewright_cli import kubectl  # noqa: E402

pytestmark = pytest.mark.unit


def translate(*argv):
    return kubectl.translate(kubectl.build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("argv,expected,structured", [
    (["status"], ["status"], False),
    (["status", "gpu-tuning", "-o", "wide"], ["status", "--resource", "gpu-tuning"], False),
    (["status", "-o", "json"], ["status", "--json"], True),
    (["node", "list", "-l", "gpu-tuning", "-o", "yaml"], ["node", "list", "--resource", "gpu-tuning", "--json"], True),
    (["node", "status", "h100-0000", "-o", "json"], ["node", "status", "h100-0000", "--json"], True),
    (["package", "logs", "h100-0000", "sysctl", "--stage", "apply", "-f"],
     ["package", "logs", "h100-0000", "sysctl", "--stage", "apply", "-f"], False),
    (["pause", "gpu-tuning"], ["pause", "gpu-tuning"], False),
    (["resume", "gpu-tuning"], ["resume", "gpu-tuning"], False),
    (["reset", "h100-0000", "--resource", "gpu-tuning"], ["reset", "h100-0000", "--resource", "gpu-tuning"], False),
    (["reset", "h100-0000", "--package", "sysctl", "-y"], ["reset", "h100-0000", "--package", "sysctl", "--yes"],
     False),
    (["version", "-o", "yaml"], ["version", "--json"], True),
    (["--kubeconfig", "/k", "--context", "c", "status"], ["--kubeconfig", "/k", "--context", "c", "status"], False),
])
def test_each_command_becomes_the_nodewright_command(argv, expected, structured):
    nw_argv, env, is_structured = translate(*argv)
    assert (nw_argv, env, is_structured) == (expected, {}, structured)


def test_a_namespace_goes_to_the_node_pods_of_package_logs():
    nw_argv, env, _ = translate("-n", "ops", "package", "logs", "h100-0000", "sysctl")
    assert nw_argv == ["package", "logs", "h100-0000", "sysctl"]
    assert env == {"NODEWRIGHT_NAMESPACE": "ops"}


def test_a_namespace_elsewhere_is_refused_not_ignored():
    with pytest.raises(SystemExit) as caught:
        translate("-n", "ops", "pause", "gpu-tuning")
    assert "cluster-scoped" in str(caught.value)


def test_an_unknown_output_format_is_refused(capsys):
    with pytest.raises(SystemExit):
        translate("status", "-o", "table")
    assert "invalid choice" in capsys.readouterr().err


def test_yaml_output_is_the_json_output_as_yaml(monkeypatch, capsys):
    from nodewright_cli import cli

    def fake_main(argv):
        assert argv == ["version", "--json"]
        print('{"cli": "0.1.0", "collection": {"version": "0.1.0"}}')
        return 0
    monkeypatch.setattr(cli, "main", fake_main)
    assert kubectl.main(["version", "-o", "yaml"]) == 0
    assert capsys.readouterr().out == "cli: 0.1.0\ncollection:\n  version: 0.1.0\n"
