# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright report FILE``: renders the page beside the report, prints it, and says clearly
what is wrong with a file that is no run report."""

from __future__ import annotations

import json
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
try:
    import nodewright_cli  # noqa: F401
except ImportError:  # not installed into the virtualenv yet (make venv does it)
    sys.path.insert(0, os.path.join(REPO, "cli"))

from nodewright_cli import cli  # noqa: E402

pytestmark = pytest.mark.unit

REPORT = {"started": 100.0, "finished": 110.0, "playbook": "rollout.yml",
          "hosts": {"n1": {"outcome": "ok", "timeline": []},
                    "n2": {"outcome": "failed", "failed_task": "Drain the node", "msg": "PDB web blocks it\nmore"}}}


def test_report_writes_the_page_beside_the_json_and_summarises(tmp_path, capsys):
    path = tmp_path / "nodewright-report.json"
    path.write_text(json.dumps(REPORT))
    assert cli.main(["report", str(path), "--no-cluster"]) == 0
    out = capsys.readouterr().out
    assert "nodes per outcome: failed 1, ok 1" in out
    assert "n2 failed at 'Drain the node': PDB web blocks it" in out and "more" not in out
    page = tmp_path / "nodewright-report.html"
    assert "page: %s" % page in out
    assert 'data-node="n2" data-outcome="failed"' in page.read_text()


def test_report_prints_the_page(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(REPORT))
    assert cli.main(["report", str(path), "--print"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")
    assert not (tmp_path / "r.html").exists()
    (tmp_path / "r.html").write_text("<!DOCTYPE html><p>kept</p>")
    assert cli.main(["report", str(tmp_path / "r.html"), "--print"]) == 0
    assert capsys.readouterr().out == "<!DOCTYPE html><p>kept</p>"


@pytest.mark.parametrize("content,message", [
    (None, "cannot read the run report"),
    ("not json", "is not a JSON run report"),
    ('{"hosts": []}', "is not a NodeWright run report: it has no 'hosts' mapping"),
])
def test_report_refuses_what_is_no_run_report(tmp_path, capsys, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["report", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nodewright report: error: ") and message in err
    assert not (tmp_path / "x.html").exists()
