# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodewright.fleet.rollout strategy and `nodewright rollout`, end to end.

Plays run with ansible-playbook against plain hostnames (local connection) whose labels
are in ``nodewright_node_labels``; the waves are read back from the run report that the
nodewright.fleet.report callback writes. Only the DeploymentPolicy read by name and the
labels read from Node objects need the simulator.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
STRATEGY = "nodewright.fleet.rollout"
DEPRECATION = "Use of strategy plugins not included in ansible.builtin are deprecated"

BATCH_TASK = {"name": "batch", "ansible.builtin.debug": {"var": "ansible_play_batch"}}
FACT_TASK = {"name": "fact", "ansible.builtin.debug": {"var": "nodewright_rollout"}}
FAIL_TASK = {"name": "maybe fail", "ansible.builtin.fail": {"msg": "patch failed on {{ inventory_hostname }}"},
             "when": "fail_me | default(false)"}


def fixed(size, **extra):
    return {"fixed": dict(initialBatch=size, **extra)}


def env_for(tmp_path, deprecation_warnings=False):
    env = dict(os.environ)
    env.update({"ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
                "ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
                "NODEWRIGHT_REPORT_PATH": str(tmp_path / "report.json"),
                "NODEWRIGHT_REPORT_TASKS": "1", "ANSIBLE_LOCALHOST_WARNING": "false",
                "ANSIBLE_DEPRECATION_WARNINGS": "true" if deprecation_warnings else "false",
                "ANSIBLE_NOCOLOR": "1"})
    return env


def write_inventory(tmp_path, hosts):
    """``hosts``: name → host variables; labels go in as ``labels``."""
    inv = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                   "hosts": {}}}
    for host, variables in hosts.items():
        variables = dict(variables)
        variables["nodewright_node_labels"] = variables.pop("labels", {})
        inv["all"]["hosts"][host] = variables
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def run_rollout(tmp_path, hosts, policy, tasks=(BATCH_TASK, FACT_TASK, FAIL_TASK), play_vars=None, handlers=None,
                plays_after=(), strategy=STRATEGY, play_extra=None, deprecation_warnings=False):
    inventory = write_inventory(tmp_path, hosts)
    play = {"name": "roll", "hosts": "all", "gather_facts": False, "strategy": strategy,
            "vars": dict(play_vars or {}), "tasks": list(tasks)}
    if policy is not None:
        play["vars"]["nodewright_rollout_policy"] = policy
    if handlers:
        play["handlers"] = handlers
    play.update(play_extra or {})
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play] + list(plays_after), sort_keys=False))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env_for(tmp_path, deprecation_warnings),
                          cwd=str(tmp_path))
    try:
        proc.json = json.loads((tmp_path / "report.json").read_text())
    except (OSError, ValueError):
        proc.json = None
    return proc


def rollout_of(proc):
    assert proc.json and proc.json.get("rollout"), proc.stdout + proc.stderr
    return proc.json["rollout"][0]


def waves(proc):
    return [w["nodes"] for w in rollout_of(proc)["waves"]]


def task_results(proc, task):
    return {e["host"]: e["result"] for e in proc.json["tasks"] if e["task"] == task and e["status"] != "skipped"}


def recap_hosts(proc):
    out = proc.stdout.split("PLAY RECAP")[-1]
    return sorted(line.split()[0] for line in out.splitlines() if ": ok=" in line)


def hosts_named(count, prefix="n", **extra):
    return {"%s%02d" % (prefix, i): dict(extra) for i in range(1, count + 1)}


# --------------------------------------------------------------------------- wave membership


def test_fixed_waves_run_the_whole_play_per_wave(tmp_path):
    proc = run_rollout(tmp_path, hosts_named(6), {"default": {"budget": {"count": 2}, "strategy": fixed(2)}})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert waves(proc) == [["n01", "n02"], ["n03", "n04"], ["n05", "n06"]]
    batches = task_results(proc, "batch")
    facts = task_results(proc, "fact")
    for number, members in enumerate(waves(proc), start=1):
        for host in members:
            assert batches[host]["ansible_play_batch"] == members
            assert facts[host]["nodewright_rollout"] == {"wave": number, "compartment": "__default__",
                                                         "wave_size": 2, "policy": "inline"}
            assert proc.json["hosts"][host]["wave"] == number
    rollout = rollout_of(proc)
    assert rollout["status"] == "complete" and rollout["untouched"] == []
    assert [d["status"] for d in rollout["decisions"]] == ["wave", "wave", "wave", "complete"]
    assert "NODEWRIGHT WAVE 2" in proc.stdout


def test_linear_delta_one_grows_by_one(tmp_path):
    policy = {"default": {"budget": {"percent": 100}, "strategy": {"linear": {"initialBatch": 1, "delta": 1}}}}
    proc = run_rollout(tmp_path, hosts_named(10), policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [len(w) for w in waves(proc)] == [1, 2, 3, 4]
    assert sum(waves(proc), []) == sorted(hosts_named(10))


def test_exponential_factor_two_doubles(tmp_path):
    policy = {"default": {"budget": {"percent": 100},
                          "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}}}}
    proc = run_rollout(tmp_path, hosts_named(8), policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert waves(proc) == [["n01"], ["n02", "n03"], ["n04", "n05", "n06", "n07"], ["n08"]]


def test_two_compartments_follow_their_own_strategies(tmp_path):
    # Labels may be templates over other host variables.
    hosts = dict(hosts_named(5, "h", labels={"gpu": "{{ gpu_model }}"}, gpu_model="h100"))
    hosts.update(hosts_named(7, "a", labels={"gpu": "a100"}))
    policy = {"default": {"budget": {"count": 1}},
              "compartments": [
                  {"name": "h100", "selector": "gpu=h100", "budget": {"percent": 100},
                   "strategy": {"linear": {"initialBatch": 1, "delta": 1}}},
                  {"name": "a100", "selector": {"matchLabels": {"gpu": "a100"}}, "budget": {"percent": 100},
                   "strategy": {"exponential": {"initialBatch": 1}}}]}
    proc = run_rollout(tmp_path, hosts, policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [w["compartments"] for w in rollout_of(proc)["waves"]] == [
        {"h100": ["h01"], "a100": ["a01"]},
        {"h100": ["h02", "h03"], "a100": ["a02", "a03"]},
        {"h100": ["h04", "h05"], "a100": ["a04", "a05", "a06", "a07"]},
    ]
    facts = task_results(proc, "fact")
    assert facts["h04"]["nodewright_rollout"]["compartment"] == "h100"
    assert facts["a07"]["nodewright_rollout"] == {"wave": 3, "compartment": "a100", "wave_size": 6,
                                                  "policy": "inline"}


def test_overlapping_selectors_take_the_tie_break(tmp_path):
    hosts = {"both-1": {"labels": {"gpu": "h100", "zone": "a"}},
             "both-2": {"labels": {"gpu": "h100", "zone": "a"}},
             "gpu-only": {"labels": {"gpu": "h100", "zone": "b"}},
             "zone-only": {"labels": {"gpu": "a100", "zone": "a"}}}
    policy = {"default": {"budget": {"count": 1}},
              "compartments": [
                  # The safer strategy wins: fixed beats exponential, whatever the order or the name.
                  {"name": "a-fast", "selector": "gpu=h100", "budget": {"percent": 100},
                   "strategy": {"exponential": {"initialBatch": 4}}},
                  {"name": "z-zone", "selector": "zone=a", "budget": {"count": 1}, "strategy": fixed(1)}]}
    proc = run_rollout(tmp_path, hosts, policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    compartments = {h: r["nodewright_rollout"]["compartment"] for h, r in task_results(proc, "fact").items()}
    assert compartments == {"both-1": "z-zone", "both-2": "z-zone", "zone-only": "z-zone", "gpu-only": "a-fast"}
    assert [w["compartments"] for w in rollout_of(proc)["waves"]] == [
        {"a-fast": ["gpu-only"], "z-zone": ["both-1"]}, {"z-zone": ["both-2"]}, {"z-zone": ["zone-only"]}]


# --------------------------------------------------------------------------- failures


def test_canary_failure_halts_and_leaves_every_other_node_untouched(tmp_path):
    hosts = hosts_named(10, labels={"pool": "gpu"})
    hosts["n01"]["fail_me"] = True
    policy = {"default": {"budget": {"count": 1}},
              "compartments": [{"name": "fleet", "selector": "pool=gpu", "budget": {"count": 4},
                                "strategy": {"exponential": {"initialBatch": 1, "failureThreshold": 1}}}]}
    # The halt ends the rollout's play; a later play (publishing status, say) still runs.
    after = [{"name": "publish status", "hosts": "localhost", "gather_facts": False,
              "tasks": [{"name": "status", "ansible.builtin.debug": {"msg": "halted"}}]}]
    proc = run_rollout(tmp_path, hosts, policy, plays_after=after)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "compartment 'fleet' halted after 1 consecutive failed batch(es)" in proc.stderr
    assert "9 node(s) were never admitted and are untouched" in proc.stderr
    assert recap_hosts(proc) == ["localhost", "n01"]
    assert sorted(proc.json["hosts"]) == ["localhost", "n01"]
    assert [(e["task"], e["host"]) for e in proc.json["tasks"] if e["host"] != "n01"] == [("status", "localhost")]
    rollout = rollout_of(proc)
    assert rollout["status"] == "halted" and waves(proc) == [["n01"]]
    assert rollout["untouched"] == ["n%02d" % i for i in range(2, 11)]
    assert rollout["compartments"]["fleet"]["batchState"]["shouldStop"] is True


def test_failures_past_the_safety_limit_do_not_halt(tmp_path):
    hosts = hosts_named(4)
    hosts["n03"]["fail_me"] = True
    policy = {"default": {"budget": {"count": 1}, "strategy": fixed(1, failureThreshold=1, safetyLimit=50)}}
    proc = run_rollout(tmp_path, hosts, policy)
    assert proc.returncode == 2  # a host failed; the rollout itself went on
    assert waves(proc) == [["n01"], ["n02"], ["n03"], ["n04"]]
    rollout = rollout_of(proc)
    assert rollout["status"] == "incomplete" and rollout["failed"] == ["n03"]
    assert rollout["waves"][2]["batches"]["__default__"]["batchFailed"] is True
    assert rollout["waves"][2]["batches"]["__default__"]["shouldStop"] is False
    assert "halted" not in proc.stderr
    assert recap_hosts(proc) == ["n01", "n02", "n03", "n04"]


def test_unreachable_hosts_count_as_failed(tmp_path):
    hosts = hosts_named(3)
    hosts["n02"].update(ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=1,
                        ansible_ssh_common_args="-o ConnectTimeout=5")
    policy = {"default": {"budget": {"count": 3}, "strategy": fixed(3)}}
    # debug runs on the controller; ping has to reach the host.
    proc = run_rollout(tmp_path, hosts, policy, tasks=[{"name": "reach", "ansible.builtin.ping": {}}])
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert rollout_of(proc)["waves"][0]["failed"] == ["n02"]
    assert proc.json["hosts"]["n02"]["outcome"] == "unreachable"


# --------------------------------------------------------------------------- handlers, windows, checks


def test_handlers_run_per_wave(tmp_path):
    notify = {"name": "change", "ansible.builtin.debug": {"msg": "changed"}, "changed_when": True,
              "notify": "restart agent"}
    handler = {"name": "restart agent", "ansible.builtin.debug": {"msg": "restarted {{ inventory_hostname }}"}}
    proc = run_rollout(tmp_path, hosts_named(4), {"default": {"budget": {"count": 2}, "strategy": fixed(2)}},
                       tasks=[notify], handlers=[handler])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Hosts of one wave finish a task in any order; the phases come in this order.
    order = [(e["task"], e["host"]) for e in proc.json["tasks"]]
    assert [task for task, _host in order] == ["change"] * 2 + ["restart agent"] * 2 + ["change"] * 2 + \
        ["restart agent"] * 2
    assert [{host for _task, host in order[i:i + 2]} for i in range(0, 8, 2)] == \
        [{"n01", "n02"}, {"n01", "n02"}, {"n03", "n04"}, {"n03", "n04"}]


def test_end_batch_ends_only_the_current_wave(tmp_path):
    end = {"name": "end wave", "ansible.builtin.meta": "end_batch", "when": "nodewright_rollout.wave == 1"}
    proc = run_rollout(tmp_path, hosts_named(4), {"default": {"budget": {"count": 2}, "strategy": fixed(2)}},
                       tasks=[BATCH_TASK, end, FACT_TASK])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert waves(proc) == [["n01", "n02"], ["n03", "n04"]]
    assert sorted(task_results(proc, "batch")) == ["n01", "n02", "n03", "n04"]
    assert sorted(task_results(proc, "fact")) == ["n03", "n04"]


def _closed_window():
    # A window on the day after tomorrow (UTC) is closed today and tomorrow alike.
    day = (datetime.datetime.now(datetime.timezone.utc).weekday() + 2) % 7
    return {"days": [("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[day]], "start": "00:00", "end": "00:01"}


def test_closed_maintenance_window_starts_no_wave(tmp_path):
    policy = {"default": {"budget": {"count": 2}, "strategy": fixed(2)}, "maintenanceWindows": [_closed_window()]}
    proc = run_rollout(tmp_path, hosts_named(3), policy, play_vars={"nodewright_rollout_wait_for_window": False})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert recap_hosts(proc) == [] and proc.json["hosts"] == {}
    rollout = rollout_of(proc)
    assert rollout["status"] == "waiting" and rollout["waves"] == []
    assert "outside every maintenance window" in rollout["reason"] and "the next opens at" in rollout["reason"]
    assert rollout["decisions"][0]["nextWindow"]
    assert "no wave started" in proc.stderr


def test_open_maintenance_window_lets_waves_start(tmp_path):
    policy = {"default": {"budget": {"count": 2}, "strategy": fixed(2)},
              "maintenanceWindows": [{"start": "00:00", "end": "24:00"}]}
    proc = run_rollout(tmp_path, hosts_named(3), policy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert waves(proc) == [["n01", "n02"], ["n03"]]


def test_serial_is_refused(tmp_path):
    proc = run_rollout(tmp_path, hosts_named(2), {"default": {"budget": {"count": 1}}}, play_extra={"serial": 1})
    assert proc.returncode != 0
    assert "sets serial: [1]" in proc.stderr and "remove serial from the play" in proc.stderr


@pytest.mark.parametrize("play_vars, expected", [
    ({}, "needs a DeploymentPolicy"),
    ({"nodewright_rollout_policy": {"default": {"budget": {"percent": 10, "count": 1}}}},
     "nodewright_rollout_policy.default.budget: sets both percent and count"),
    ({"nodewright_rollout_policy": {"default": {"budget": {"count": 1}}}, "nodewright_rollout_policy_name": "x"},
     "sets both nodewright_rollout_policy and nodewright_rollout_policy_name"),
])
def test_policy_problems_are_explained(tmp_path, play_vars, expected):
    proc = run_rollout(tmp_path, hosts_named(2), None, play_vars=play_vars)
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert recap_hosts(proc) == []


@pytest.mark.parametrize("plan, expected", [
    # A plan saved by a release that wrote another layout, or one this release never wrote.
    ({"schema": 2, "rollouts": [], "blocked": []}, "written with run plan schema 2; this collection reads schema 1"),
    ({"rollouts": [], "blocked": []}, "written with run plan schema (none)"),
    ({"schema": 1, "rollouts": [], "node_views": {}}, "unknown key(s) node_views (run plan schema 1)"),
])
def test_a_run_plan_this_release_cannot_read_is_refused_before_any_host_runs(tmp_path, plan, expected):
    proc = run_rollout(tmp_path, hosts_named(2), None, play_vars={"nodewright_rollout_desired": plan})
    assert proc.returncode != 0
    assert expected in proc.stderr and "plan again with this collection" in proc.stderr
    assert recap_hosts(proc) == []


def test_policy_may_be_templated_from_play_vars(tmp_path):
    play_vars = {"wave_size": 3, "nodewright_rollout_policy": {
        "default": {"budget": {"count": "{{ wave_size | int }}"}, "strategy": fixed("{{ wave_size | int }}")}}}
    proc = run_rollout(tmp_path, hosts_named(5), None, play_vars=play_vars)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [len(w) for w in waves(proc)] == [3, 2]


def test_deprecation_notice_is_printed_and_can_be_silenced(tmp_path):
    policy = {"default": {"budget": {"count": 1}}}
    loud = run_rollout(tmp_path, hosts_named(1), policy, deprecation_warnings=True)
    assert DEPRECATION in loud.stderr
    quiet = run_rollout(tmp_path, hosts_named(1), policy, deprecation_warnings=False)
    assert quiet.returncode == 0 and DEPRECATION not in quiet.stderr


# --------------------------------------------------------------------------- cluster reads (simulator)


def test_policy_by_name_and_labels_from_node_objects(sim, tmp_path):
    from kubernetes import client

    install = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "install_crds.yml")],
                             capture_output=True, text=True, env=dict(sim.env(), ANSIBLE_LOCALHOST_WARNING="false"))
    assert install.returncode == 0, install.stdout + install.stderr
    name = "rollout-test-%d" % os.getpid()
    body = {"apiVersion": "nodewright.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": name},
            "spec": {"default": {"budget": {"count": 2}, "strategy": {"fixed": {"initialBatch": 2}}},
                     "compartments": [{"name": "h100", "budget": {"count": 1}, "strategy": {"fixed": {}},
                                       "selector": {"matchLabels": {
                                           "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}]}}
    custom = client.CustomObjectsApi(sim.api)
    custom.create_cluster_custom_object("nodewright.io", "v1alpha1", "deploymentpolicies", body)
    try:
        nodes = ["h100-0000", "h100-0001", "b200-0000", "h200-0000"]
        play = {"strategy": STRATEGY, "vars": {"nodewright_rollout_policy_name": name},
                "tasks": [FACT_TASK]}
        # The simulator's inventory has no labels: they come from the Node objects.
        proc = sim.playbook(tmp_path, play, hosts=nodes)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rollout = rollout_of(proc)
        assert rollout["policy"]["source"] == "DeploymentPolicy/%s" % name
        assert [sorted(w["compartments"]) for w in rollout["waves"]] == [["__default__", "h100"],
                                                                        ["h100"]]
        assert [w["compartments"]["h100"] for w in rollout["waves"]] == [["h100-0000"], ["h100-0001"]]
        assert sorted(rollout["waves"][0]["compartments"]["__default__"]) == ["b200-0000", "h200-0000"]
        facts = task_results(proc, "fact")
        assert facts["h100-0001"]["nodewright_rollout"]["policy"] == "DeploymentPolicy/%s" % name

        missing = sim.playbook(tmp_path, dict(play, vars={"nodewright_rollout_policy_name": name + "-absent"}),
                               hosts=nodes)
        assert missing.returncode != 0
        assert "read DeploymentPolicy %s-absent: not found (404)" % name in missing.stderr
        stranger = sim.playbook(tmp_path, play, hosts=nodes + ["no-such-node"])
        assert stranger.returncode != 0
        assert "no Node of that name exists in the cluster: no-such-node" in stranger.stderr
    finally:
        custom.delete_cluster_custom_object("nodewright.io", "v1alpha1", "deploymentpolicies", name)


# --------------------------------------------------------------------------- the wave runner


def run_wave_runner(tmp_path, hosts, policy, *extra, tasks=(BATCH_TASK, FACT_TASK, FAIL_TASK)):
    inventory = write_inventory(tmp_path, hosts)
    (tmp_path / "site.yml").write_text(yaml.safe_dump(
        [{"name": "patch", "hosts": "all", "gather_facts": False, "tasks": list(tasks)}], sort_keys=False))
    (tmp_path / "policy.yml").write_text(yaml.safe_dump(policy))
    cmd = [os.path.join(BIN, "nodewright"), "rollout", str(tmp_path / "site.yml"),
           "-i", str(inventory), "--policy", str(tmp_path / "policy.yml"),
           "--report", str(tmp_path / "runner-report.json")] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(tmp_path), cwd=str(tmp_path))
    try:
        proc.json = json.loads((tmp_path / "runner-report.json").read_text())
    except (OSError, ValueError):
        proc.json = None
    return proc


def test_wave_runner_drives_the_same_engine_without_the_strategy(tmp_path):
    hosts = hosts_named(5)
    hosts["n03"]["fail_me"] = True
    policy = {"apiVersion": "nodewright.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "two"},
              "spec": {"default": {"budget": {"count": 2}, "strategy": fixed(2)}}}
    proc = run_wave_runner(tmp_path, hosts, policy)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert DEPRECATION not in proc.stdout + proc.stderr
    assert waves(proc) == [["n01", "n02"], ["n03", "n04"], ["n05"]]
    rollout = rollout_of(proc)
    assert rollout["driver"] == "wave_runner" and rollout["status"] == "incomplete"
    assert rollout["waves"][1]["failed"] == ["n03"] and rollout["failed"] == ["n03"]
    # The same report shape as the callback's: per-host outcome, failed task, wave.
    assert proc.json["hosts"]["n03"]["outcome"] == "failed"
    assert proc.json["hosts"]["n03"]["failed_task"] == "maybe fail"
    assert proc.json["hosts"]["n04"]["wave"] == 2 and proc.json["summary"] == {"ok": 4, "failed": 1}
    batches = task_results(proc, "batch")
    facts = task_results(proc, "fact")
    assert batches["n04"]["ansible_play_batch"] == ["n03", "n04"]
    assert facts["n05"]["nodewright_rollout"]["wave"] == 3
    assert "wave 2: 1 succeeded, 1 failed (n03)" in proc.stdout
    # Each node's steps count from the rollout's start: a later wave's start after an earlier wave's end.
    def span(host):
        steps = proc.json["hosts"][host]["timeline"]
        return steps[0]["start"], steps[-1]["start"] + steps[-1]["duration"]
    assert span("n01")[1] <= span("n03")[0] and span("n04")[1] <= span("n05")[0]
    page = (tmp_path / "runner-report.html").read_text()
    assert 'data-node="n03" data-outcome="failed"' in page and 'class="group wave" data-wave="3"' in page


def test_wave_runner_halts_and_dry_runs(tmp_path):
    hosts = hosts_named(4)
    hosts["n01"]["fail_me"] = True
    policy = {"default": {"budget": {"count": 1}, "strategy": fixed(1, failureThreshold=1)}}
    plan = run_wave_runner(tmp_path, hosts, policy, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[:4] == ["wave %d: __default__ [n0%d]" % (i, i) for i in range(1, 5)]
    halted = run_wave_runner(tmp_path, hosts, policy)
    assert halted.returncode == 2
    assert "default compartment halted after 1 consecutive failed batch(es)" in halted.stderr
    assert sorted(halted.json["hosts"]) == ["n01"]
    assert rollout_of(halted)["untouched"] == ["n02", "n03", "n04"]


def test_same_playbook_runs_under_the_wave_runner_without_loading_the_strategy(tmp_path):
    # strategy is templated: the wave runner sets nodewright_rollout_strategy=ansible.builtin.linear.
    tasks = [BATCH_TASK]
    inventory = write_inventory(tmp_path, hosts_named(3))
    play = {"name": "both ways", "hosts": "all", "gather_facts": False,
            "strategy": "{{ nodewright_rollout_strategy | default('nodewright.fleet.rollout') }}",
            "vars": {"nodewright_rollout_policy": {"default": {"budget": {"count": 2}, "strategy": fixed(2)}}},
            "tasks": tasks}
    (tmp_path / "site.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    (tmp_path / "policy.yml").write_text(yaml.safe_dump({"default": {"budget": {"count": 1}}}))
    env = env_for(tmp_path, deprecation_warnings=True)
    proc = subprocess.run([os.path.join(BIN, "nodewright"), "rollout", str(tmp_path / "site.yml"),
                           "-i", str(inventory), "--policy", str(tmp_path / "policy.yml"), "--show-output",
                           "--report", str(tmp_path / "r.json")], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert DEPRECATION not in proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [w["nodes"] for w in report["rollout"][0]["waves"]] == [["n01"], ["n02"], ["n03"]]
