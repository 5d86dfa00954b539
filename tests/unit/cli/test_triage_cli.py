# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Triage: a package's logs (also of a step running now) and a stage marked to run
again, on a host root and through the triage playbook the ``nodewright package``
commands run (ansible-runner, connection local); ``nodewright node`` from what a
node carries; ``nodewright version``."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time

import pytest
import yaml
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.package import triage as host_triage
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import run_packages

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHELLSCRIPT = os.path.join(REPO, "packages", "shellscript")
sys.path.insert(0, os.path.join(REPO, "cli"))
from nodewright_cli import triage  # noqa: E402

CONFIG = {"apply.sh": "echo applying; echo oops >&2", "apply_check.sh": "echo checking",
          "config.sh": "echo configured", "config_check.sh": "exit 0"}


def apply(root, config=CONFIG):
    return run_packages([{"src": SHELLSCRIPT, "name": "shellscript", "config": config}], host_root=root,
                        resource="r")


def test_logs_of_a_package_latest_per_step_by_stage_and_from_an_offset(root):
    apply(root)
    found = host_triage.read_logs(root, "r", "shellscript")
    assert found["version"] == "1.0.0" and found["running"] is None
    assert [(log["stage"], log["step"]) for log in found["logs"]] == [
        ("apply", "apply"), ("apply-check", "apply-check"), ("config", "config"), ("config-check", "config-check")]
    first = found["logs"][0]
    assert first["path"].startswith("/var/log/nodewright/r/shellscript/1.0.0/apply.apply.")
    assert "applying" in first["text"] and "oops" in first["text"] and "--- exit code 0" in first["text"]
    assert found["recorded"]["checks"]["apply-check"]["result"] == "passed"
    only = host_triage.read_logs(root, "r", "shellscript", stage="config")
    assert [log["step"] for log in only["logs"]] == ["config"]
    again = host_triage.read_logs(root, "r", "shellscript", stage="apply", offsets={first["path"]: first["size"]})
    assert again["logs"][0]["text"] == ""
    with pytest.raises(NodeWrightError):
        host_triage.read_logs(root, "r", "shellscript", stage="install")
    assert host_triage.read_logs(root, "r", "other")["logs"] == []


def test_the_logs_of_a_step_running_now_are_live(root):
    slow = dict(CONFIG, **{"apply.sh": "echo started; while [ ! -e /etc/go ]; do sleep 0.1; done; echo finished"})
    errors = []
    worker = threading.Thread(target=lambda: errors.append(apply(root, slow)))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            found = host_triage.read_logs(root, "r", "shellscript", stage="apply")
            if found["running"] and found["logs"] and "started" in found["logs"][0]["text"]:
                break
            assert time.monotonic() < deadline, "the step did not start"
            time.sleep(0.1)
        (live,) = found["logs"]
        assert live["live"] and found["running"]["step"] == "apply"
    finally:
        hostroot.run(root, "touch /etc/go")
        worker.join()
    done = host_triage.read_logs(root, "r", "shellscript", stage="apply")
    assert not done["logs"][0]["live"] and "finished" in done["logs"][0]["text"] and done["running"] is None


def test_a_rerun_mark_on_the_host_runs_the_stage_again_at_the_next_run(root):
    apply(root)
    state = host_triage.mark_rerun_on_host(root, "r", "shellscript", "config")
    assert state["packages"]["shellscript"]["rerun"] == "config" and state["status"] == "in_progress"
    again = apply(root)
    assert [(r["action"], r["stages"]) for r in again["results"]] == [("rerun", ["config"])]
    assert again["state"]["status"] == "complete"


def args_for(tmp_path, root, **extra):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "nodewright_host_root": root}}}}))
    values = dict(inventory=str(inventory), connection="local", workdir=str(tmp_path / "work"), kubeconfig=None,
                  context=None)
    values.update(extra)
    return argparse.Namespace(**values)


def test_the_triage_playbook_reads_logs_and_marks_a_rerun_through_the_connection(root, tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", os.path.join(REPO, ".collections"))
    apply(root)
    args = args_for(tmp_path, root)
    found = triage.run_on_node(args, "node-1", {"nodewright_triage_phase": "logs", "nodewright_triage_resource": "r",
                                                "nodewright_triage_package": "shellscript",
                                                "nodewright_triage_stage": "apply-check"})
    assert [log["step"] for log in found["logs"]] == ["apply-check"] and "checking" in found["logs"][0]["text"]
    out = io.StringIO()
    triage._print_logs(found, {}, out)
    assert out.getvalue().startswith("==> apply-check apply-check (/var/log/nodewright/r/shellscript/1.0.0/")
    marked = triage.run_on_node(args, "node-1", {"nodewright_triage_phase": "rerun", "nodewright_triage_resource": "r",
                                                 "nodewright_triage_package": "shellscript",
                                                 "nodewright_triage_stage": "apply"})
    assert marked["changed"] and marked["state"]["packages"]["shellscript"]["rerun"] == "apply"
    with pytest.raises(NodeWrightError) as caught:
        triage.run_on_node(args, "node-1", {"nodewright_triage_phase": "rerun", "nodewright_triage_resource": "r",
                                            "nodewright_triage_package": "nope", "nodewright_triage_stage": "apply"})
    assert "package 'nope' is not recorded on the node" in str(caught.value)


def node(annotations=None, labels=None, unschedulable=False):
    return {"metadata": {"name": "gpu-1", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True"},
                                      {"type": markers.CONDITION_ERRORING, "status": "True",
                                       "message": "apply-check failed"}],
                       "nodeInfo": {"bootID": "b1"}}}


STATE = {"status": "erroring", "step": "Run the packages", "reason": "package shellscript 1.0.0: check failed",
         "packages": {"shellscript": {"version": "1.0.0", "stage": "apply", "state": "erroring", "checks": {
             "apply-check": {"result": "failed", "exitCode": 1, "step": "apply-check"}}}}}


def test_node_status_and_list_show_packages_checks_and_the_last_error():
    n = node({markers.state_annotation("r"): json.dumps(STATE), markers.state_annotation("bad"): "{oops"},
             {markers.status_label("r"): "erroring", markers.LABEL_STATUS: "erroring"})
    detail = triage.node_detail(n)
    pkg = detail["resources"]["r"]["packages"][0]
    assert (pkg["stage"], pkg["state"], pkg["checks"]["apply-check"]["exitCode"]) == ("apply", "erroring", 1)
    assert detail["resources"]["r"]["last_error"].startswith("package shellscript 1.0.0: check failed")
    assert "is malformed" in detail["resources"]["bad"]["error"]
    text = triage.render_detail(detail)
    assert "resource r: erroring at Run the packages" in text
    assert "shellscript 1.0.0: apply/erroring" in text and "checks: apply-check failed (exit 1)" in text
    assert "Erroring: apply-check failed" in text
    rows = triage.node_rows([n, node()])
    assert [r["node"] for r in rows] == ["gpu-1"]
    listed = triage.render_rows(rows)
    assert "gpu-1" in listed and "r:erroring" in listed and "bad:malformed" in listed
    assert triage.node_rows([n], resource="r")[0]["resources"].keys() == {"r"}


def test_the_resource_of_a_package_on_a_node():
    n = node({markers.state_annotation("r"): json.dumps(STATE), markers.state_annotation("s"): json.dumps(STATE)})
    with pytest.raises(NodeWrightError) as caught:
        triage.resource_for(n, "shellscript")
    assert "several resources on node gpu-1: r, s" in str(caught.value) and caught.value.hint == "give --resource"
    assert triage.resource_for(n, "shellscript", "s") == "s"
    with pytest.raises(NodeWrightError):
        triage.resource_for(n, "kdump")


def test_version_names_the_command_the_collection_and_ansible():
    out = io.StringIO()
    triage.cmd_version(argparse.Namespace(json=True), out)
    found = json.loads(out.getvalue())
    assert found["collection"] == "nodewright.fleet 0.1.0" and found["api"] == "nodewright.io/v1alpha1"
    assert found["nodewright-cli"] and found["ansible-core"]
