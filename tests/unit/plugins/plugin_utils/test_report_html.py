# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The run report's HTML page from report data alone: which rows go into which wave, which
steps are the safe sequence's, the page's sections, escaping, and old reports without a timeline."""

from __future__ import annotations

import re

import pytest

from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_html as rh

pytestmark = pytest.mark.unit

T0 = 1796140000.0


def step(task, action, start, duration, status="ok"):
    return {"task": task, "action": action, "start": start, "duration": duration, "status": status}


def report():
    ok_steps = [step("Cordon the node", "nodewright.fleet.node_cordon", 1, 0.5, "changed"),
                step("Drain the node", "nodewright.fleet.node_drain", 1.5, 3),
                step("Mark the node complete", "nodewright.fleet.node_state", 5, 0.2, "changed"),
                step("Uncordon the node (only NodeWright's own cordon)", "nodewright.fleet.node_cordon", 5.2, 0.3)]
    return {
        "started": T0, "finished": T0 + 30, "playbook": "playbooks/rollout.yml",
        "hosts": {
            "localhost": {"outcome": "ok", "timeline": [step("Read", "nodewright.fleet.desired_state", 0, 1)]},
            "n1": {"outcome": "ok", "timeline": ok_steps},
            "n2": {"outcome": "failed", "failed_task": "Fail with the reason", "msg": "exit 3 <on purpose>",
                   "timeline": [step("Plan and run the packages", "nodewright.fleet.package", 12, 2, "failed")]},
            "old": {"outcome": "ok", "first_seen": T0 + 20, "last_seen": T0 + 25},
        },
        "rollout": [{
            "play": "Roll out", "status": "halted", "reason": "compartment 'a' halted",
            "waves": [{"number": 1, "nodes": ["n1"], "compartments": {"a": ["n1"]},
                       "started": "2026-12-01T15:46:41+00:00", "finished": "2026-12-01T15:46:48+00:00"},
                      {"number": 2, "nodes": ["n2"], "compartments": {"a": ["n2"]}}],
            "assignment": {"n1": {"wave": 1, "compartment": "a"}, "n2": {"wave": 2, "compartment": "a"}},
            "decisions": [{"at": "2026-12-01T15:46:41+00:00", "status": "wave", "wave": 1, "reason": "wave 1"},
                          {"at": "2026-12-01T15:47:09+00:00", "status": "halted", "reason": "halted <a>",
                           "notes": ["compartment 'a' halted"]}],
            "compartments": {"a": {"matched": 3, "completed": 1, "progressPercent": 66, "ceiling": 1,
                                   "batchState": {"consecutiveFailures": 1, "shouldStop": True}}},
            "untouched": ["n3"],
        }],
    }


@pytest.mark.parametrize("path,page", [("out/report.json", "out/report.html"), ("report", "report.html"),
                                       ("r.txt", "r.txt.html")])
def test_the_page_goes_beside_the_json_file(path, page):
    assert rh.html_path(path) == page


@pytest.mark.parametrize("task,action,kind", [
    ("Cordon the node", "nodewright.fleet.node_cordon", "cordon"),
    ("Uncordon the node", "nodewright.fleet.node_cordon", "uncordon"),
    ("Drain the node", "nodewright.fleet.node_drain", "drain"),
    ("Wait", "node_wait_pods", "wait for pods"),
    ("Reboot through the host root", "ansible.builtin.command", "reboot"),
    ("Restart the services the packages asked for", "ansible.builtin.command", "restart"),
    ("Mark the node complete", "nodewright.fleet.node_state", None),
    ("Remember", "ansible.builtin.set_fact", None),
])
def test_step_kinds(task, action, kind):
    assert rh.step_kind({"task": task, "action": action}) == kind


def test_rows_go_into_their_waves_and_the_rest_apart():
    m = rh.model(report())
    titles = [g["title"] for g in m["groups"]]
    assert titles == ["controller", "wave 1", "wave 2", "not in a wave"]
    assert [r["name"] for r in m["groups"][1]["rows"]] == ["n1"]
    assert m["groups"][1]["span"] == (1.0, 8.0)
    assert m["groups"][2]["failed"] == ["n2"] and m["groups"][2]["span"] == (None, None)
    assert m["counts"] == {"ok": 2, "failed": 1} and m["nodes"] == 3
    assert [r["name"] for r in m["failures"]] == ["n2"]
    assert m["decisions"][1]["offset"] == 29.0
    # A report without a timeline still gives the node one bar, from its first to its last result.
    (old,) = m["groups"][3]["rows"]
    assert old["steps"] == [(20.0, 5.0, "ok", "the whole run", None)]


def test_the_page_has_every_section_and_escapes_what_it_shows():
    page = rh.render(report())
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert '<g class="group wave" data-wave="1">' in page and '<g class="group wave" data-wave="2">' in page
    assert 'data-node="n2" data-outcome="failed" data-compartment="a"' in page
    assert 'data-kind="drain" data-outcome="ok"' in page and 'data-kind="packages" data-outcome="failed"' in page
    assert '<g class="decision" data-status="halted">' in page
    assert 'id="failures"' in page and "exit 3 &lt;on purpose&gt;" in page and "<on purpose>" not in page
    assert "halted &lt;a&gt;" in page
    assert '<tr data-compartment="a">' in page and "halted</td>" in page
    assert '<span data-node="n3">n3</span>' in page
    assert '<span class="status halted">halted</span>' in page
    # Self-contained: nothing is loaded from elsewhere.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "<script" not in page


def test_a_report_without_a_rollout_or_nodes_still_renders():
    page = rh.render({"started": T0, "finished": T0 + 1, "hosts": {}})
    assert "0 node(s) ran: none" in page and 'id="failures">none' in page


def test_a_run_of_several_resources_says_the_worst_status_and_each_reason():
    both = report()
    first = dict(both["rollout"][0], resource="tuning", status="complete", reason="all 18 node(s) are complete")
    second = dict(both["rollout"][0], resource="gb200", status="halted", reason="compartment 'a' halted")
    both["rollout"] = [first, second]
    page = rh.render(both)
    assert '<span class="status halted">halted</span> tuning: all 18 node(s) are complete; ' \
           "gb200: compartment &#x27;a&#x27; halted" in page
    both["rollout"] = [first, dict(second, status="complete", reason="all 6 node(s) are complete")]
    assert '<span class="status complete">complete</span> tuning: all 18 node(s) are complete; ' \
           'gb200: all 6 node(s) are complete' in rh.render(both)
