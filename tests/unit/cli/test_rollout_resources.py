# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pure parts of `nodewright rollout --resources`: arguments, the plan read from the
planning play's events, the inventory's hosts, the controller's plays, exit statuses."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLLOUT_YML = os.path.join(REPO, "playbooks", "rollout.yml")


@pytest.fixture(scope="module")
def rollout():
    from nodewright_cli import rollout
    return rollout


@pytest.fixture(scope="module")
def runner():
    from nodewright_cli import runner
    return runner


def parse(argv):
    from nodewright_cli.cli import build_parser
    return build_parser().parse_args(["rollout"] + argv)


# --------------------------------------------------------------------------- arguments


def test_resources_needs_no_playbook_and_no_policy(rollout):
    args = parse(["--resources", "-i", "fleet.yml", "--resource", "gpu-host-tuning"])
    assert args.resources and args.playbook is None and args.resource == "gpu-host-tuning"
    assert rollout.argument_problems(args) == []
    assert rollout.argument_problems(parse(["my-rollout.yml", "--resources", "-i", "fleet.yml"])) == []


@pytest.mark.parametrize("argv", [
    ["--resources", "--policy", "p.yml", "-i", "fleet.yml"],
    ["--resources", "--policy-name", "canary", "-i", "fleet.yml"],
    ["site.yml", "-i", "fleet.yml"],
])
def test_a_policy_or_resources_exactly_one(argv):
    with pytest.raises(SystemExit):
        parse(argv)


@pytest.mark.parametrize("argv, problem", [
    (["-i", "a.yml", "--policy", "p.yml"], "give the PLAYBOOK to run on each wave, or --resources"),
    (["site.yml", "-i", "a.yml", "--policy", "p.yml", "--resource", "r"], "--resource NAME goes with --resources"),
    (["--resources", "-i", "a.yml", "--state-resource", "r"], "--state-resource does not go with --resources"),
    (["--resources", "-i", "a.yml", "--hosts", "gpu"], "--hosts does not go with --resources"),
    (["--resources", "-i", "a.yml", "--dry-run"], "--dry-run does not go with --resources: ansible-playbook "
                                                  "nodewright.fleet.plan"),
])
def test_argument_problems(rollout, argv, problem):
    problems = rollout.argument_problems(parse(argv))
    assert len(problems) == 1 and problems[0].startswith(problem)
    with pytest.raises(NodeWrightError):
        rollout.cmd_rollout(parse(argv))


# --------------------------------------------------------------------------- the plan from the events


def _event(kind, res, host="localhost", task=None):
    from nodewright_cli.runner import DESIRED_TASK
    return {"event": kind, "event_data": {"task": task or DESIRED_TASK, "host": host, "res": res}}


def test_desired_result_is_the_registered_result(runner):
    res = {"rollouts": [{"name": "a"}], "blocked": [], "conflicts": [], "changed": False,
           "invocation": {"module_args": {"name": None}}, "_ansible_no_log": False}
    events = [_event("runner_on_ok", res), _event("runner_on_ok", {"msg": "2 resource(s)"}, task="Say what will happen")]
    assert runner.is_desired_result(events[0]) and not runner.is_desired_result(events[1])
    assert runner.desired_result(events) == {"rollouts": [{"name": "a"}], "blocked": [], "conflicts": [],
                                             "changed": False}


@pytest.mark.parametrize("events", [
    [],
    [_event("runner_on_failed", {"failed": True, "msg": "bad resource"})],
    [_event("runner_on_ok", {"rollouts": []}, host="n1")],
    [_event("runner_on_ok", "not a result")],
])
def test_no_desired_result(runner, events):
    assert runner.desired_result(events) is None


def test_other_tasks_are_not_the_plan(runner):
    assert not runner.is_desired_result(_event("runner_on_ok", {}, task="Say what will happen"))
    assert not runner.is_desired_result({"event": "runner_on_start", "event_data": {"task": runner.DESIRED_TASK}})


@pytest.mark.parametrize("status, rc, report, desired, expected", [
    ("successful", 0, {"hosts": {"localhost": {"outcome": "ok"}}}, {"rollouts": []}, None),
    ("failed", 2, {"hosts": {"localhost": {"outcome": "failed", "failed_task": "Stop when resources conflict",
                                           "msg": "a and b both set vm.swappiness"}}}, None,
     (2, "rollout.yml stopped at 'Stop when resources conflict': a and b both set vm.swappiness")),
    ("failed", 4, None, None, (1, "rollout.yml's planning play could not run (failed, rc 4)")),
    ("successful", 0, {"hosts": {}}, None,
     (1, "rollout.yml's planning play gave no plan (no result of 'Read NodeWright resources, validate them and "
         "plan every node')")),
])
def test_plan_problem(rollout, status, rc, report, desired, expected):
    assert rollout.plan_problem(status, rc, report, desired) == expected


@pytest.mark.parametrize("status, halted, failed, code", [
    ("complete", [], set(), 0),
    ("waiting", [], set(), 0),
    ("incomplete", [], set(), 0),
    ("incomplete", [], {"n1"}, 2),
    ("halted", ["canary halted"], {"n1"}, 2),
    ("error", [], set(), 1),
    ("interrupted", [], {"n1"}, 130),
])
def test_exit_status_is_ansible_playbooks(rollout, status, halted, failed, code):
    assert rollout.resources_exit(status, halted, failed) == code


# --------------------------------------------------------------------------- inventory and playbook


def test_inventory_hosts_leave_localhost_out(rollout):
    data = {"_meta": {"hostvars": {"h100-0000": {"k8s_node": {}}, "localhost": {}}},
            "all": {"children": ["ungrouped", "gpu"]},
            "gpu": {"hosts": ["h100-0000", "h100-0001"]},
            "ungrouped": {"hosts": ["localhost", "gb200-0000"]}}
    assert rollout.inventory_hosts(data) == ["h100-0000", "h100-0001", "gb200-0000"]
    assert rollout.inventory_hosts({"_meta": {"hostvars": {}}}) == []


def test_controller_plays_of_rollout_yml(rollout):
    with open(ROLLOUT_YML) as fh:
        plays = yaml.safe_load(fh)
    local, name = rollout.controller_plays(plays)
    assert name == "Roll out, wave by wave"
    assert [p["name"] for p in local] == ["Read the desired state", "Publish the resources' status"]
    tasks = [t["name"] for t in local[0]["tasks"]]
    assert "Read NodeWright resources, validate them and plan every node" in tasks
    assert rollout.SUMMARY_TASK in tasks
    # The rollout play runs under the strategy unless the caller names another.
    rollout_play = [p for p in plays if p["hosts"] == "all"][0]
    assert rollout_play["strategy"] == "{{ nodewright_rollout_strategy | default('nodewright.fleet.rollout') }}"


@pytest.mark.parametrize("plays", [
    {"hosts": "all"},
    [{"hosts": "all", "tasks": []}],
    [{"hosts": "localhost"}, {"hosts": "all"}, {"hosts": "gpu"}],
])
def test_controller_plays_refuse_another_shape(rollout, plays):
    with pytest.raises(NodeWrightError):
        rollout.controller_plays(plays)


def test_planning_playbook_keeps_reading_next_to_the_original(rollout, tmp_path):
    args = parse(["--resources", "-i", "fleet.yml"])
    args.kubeconfig = args.context = None
    cli = rollout.ResourcesCli(args)
    assert os.path.samefile(cli.playbook, ROLLOUT_YML)
    path, name = cli.planning_playbook(str(tmp_path))
    with open(path) as fh:
        plays = yaml.safe_load(fh)
    assert name == "Roll out, wave by wave" and [p["hosts"] for p in plays] == ["localhost", "localhost"]
    assert plays[0]["vars"]["nodewright_package_dirs"] == ["%s/../packages" % os.path.dirname(cli.playbook)]
    assert cli.extravars() == {"nodewright_rollout_driver": "wave_runner",
                               "nodewright_rollout_strategy": "ansible.builtin.linear"}
    args.resource = "gpu-host-tuning"
    assert cli.extravars()["nodewright_resource"] == "gpu-host-tuning"


def test_pin_playbook_dir(rollout):
    value = {"a": ["{{ playbook_dir }}/../packages", 3], "b": "{{ other }}"}
    assert rollout.pin_playbook_dir(value, "/c/playbooks") == {"a": ["/c/playbooks/../packages", 3],
                                                              "b": "{{ other }}"}


def _load_as_extra_vars(path):
    """A vars file as ``-e @FILE`` loads it (trusted as a template from ansible-core 2.19 on)."""
    from ansible.parsing.dataloader import DataLoader
    try:
        return DataLoader().load_from_file(path, trusted_as_template=True)
    except TypeError:
        return DataLoader().load_from_file(path)


def test_desired_state_is_never_a_template(rollout, tmp_path):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    desired = {"rollouts": [{"name": "a", "packages": [{"config": {"motd": "{{ lookup('env', 'HOME') }}"}}],
                             "priority": 100, "paused": False, "work": ["n1"]}]}
    path = rollout.write_unsafe_vars(str(tmp_path / "desired.yml"), {"nodewright_rollout_desired": desired})
    loaded = _load_as_extra_vars(path)
    assert loaded == {"nodewright_rollout_desired": desired}
    templated = Templar(loader=DataLoader()).template(loaded["nodewright_rollout_desired"])
    assert templated["rollouts"][0]["packages"][0]["config"]["motd"] == "{{ lookup('env', 'HOME') }}"
    assert templated["rollouts"][0]["priority"] == 100 and templated["rollouts"][0]["paused"] is False
    # The same data in a plain vars file would be a template.
    (tmp_path / "plain.yml").write_text(yaml.safe_dump(desired))
    plain = Templar(loader=DataLoader()).template(_load_as_extra_vars(str(tmp_path / "plain.yml")))
    assert plain["rollouts"][0]["packages"][0]["config"]["motd"] == os.environ["HOME"]


def test_wave_facts_name_the_resource():
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import WaveRun

    class EngineWave(object):
        def __init__(self, compartments):
            self.compartments = compartments

    class Record(object):
        def __init__(self, source, resource):
            self.source, self.resource = source, resource

    wave = WaveRun(number=3, assignment={"h1": "tuning", "h2": "tuning", "g1": "nvidia"},
                   waves={"tuning": EngineWave({"__default__": ["h1", "h2"]}),
                          "nvidia": EngineWave({"grace-blackwell": ["g1"]})})
    records = {"tuning": Record("DeploymentPolicy/gpu-canary", "tuning"), "nvidia": Record("inline", None)}
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import wave_facts
    facts = wave_facts(wave, records)
    assert facts["h2"] == {"wave": 3, "compartment": "__default__", "wave_size": 3,
                           "policy": "DeploymentPolicy/gpu-canary", "resource": "tuning"}
    assert facts["g1"] == {"wave": 3, "compartment": "grace-blackwell", "wave_size": 3, "policy": "inline"}


# --------------------------------------------------------------------------- maintain under linear


@pytest.fixture
def maintain_action():
    """The maintain action with only what reading its variables needs; the run's published
    resources are cleared before and after."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    from ansible_collections.nodewright.fleet.plugins.action.maintain import ActionModule
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
    action = ActionModule.__new__(ActionModule)
    action._templar = Templar(loader=DataLoader())
    run_context.clear()
    yield action
    run_context.clear()


def _run_plan(*entries):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import ResourcePlan, RunPlan
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
    policy = parse_policy({"default": {"budget": {"count": 1}}})
    return RunPlan(rollouts=[ResourcePlan(name, policy, runtime_required=required) for name, required in entries])


def test_maintain_publishes_the_plays_resources_once(maintain_action):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
    desired = _run_plan(("a", False), ("b", True)).to_dict()
    assert maintain_action._resource_from_play({}, "a") is None and run_context.names() == []
    entry = maintain_action._resource_from_play({"nodewright_rollout_desired": desired}, "a")
    assert entry.name == "a" and entry.runtime_required is False
    assert run_context.names() == ["a", "b"] and run_context.setting("runtime_required") is True
    # Published once: a later task finds the run's resources in memory, as under the strategy.
    other = _run_plan(("c", False)).to_dict()
    assert maintain_action._resource_from_play({"nodewright_rollout_desired": other}, "c") is None
    assert run_context.names() == ["a", "b"]


def test_maintain_leaves_what_the_strategy_published(maintain_action):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
    run_context.publish(_run_plan(("a", False)))
    desired = _run_plan(("b", True)).to_dict()
    assert maintain_action._resource_from_play({"nodewright_rollout_desired": desired}, "b") is None
    assert run_context.names() == ["a"] and run_context.setting("runtime_required") is False


def test_maintain_refuses_a_play_plan_it_cannot_read(maintain_action):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_context
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import PlanError
    for bad, says in (("not a plan", "must be the result of nodewright.fleet.desired_state"),
                      (dict(_run_plan(("a", False)).to_dict(), schema=2), "written with run plan schema 2")):
        with pytest.raises(PlanError, match=says):
            maintain_action._resource_from_play({"nodewright_rollout_desired": bad}, "a")
        assert run_context.names() == []


def test_a_resource_that_could_not_be_rolled_out_ends_the_run_non_zero(rollout, capsys):
    cli = rollout.ResourcesCli(parse(["--resources", "-i", "inv.yml"]))
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import RunPlan
    desired = RunPlan(blocked=[{"name": "orphan", "reason": "DeploymentPolicy 'gone' does not exist"}])
    assert cli.blocked_exit(desired, rollout.EXIT_OK) == rollout.EXIT_FAILED
    assert "1 NodeWright resource(s) could not be rolled out: orphan: DeploymentPolicy 'gone' does not exist" \
        in capsys.readouterr().err
    # Nothing blocked, or the run already failed for another reason: the code stands.
    assert cli.blocked_exit(RunPlan(), rollout.EXIT_OK) == rollout.EXIT_OK
    assert cli.blocked_exit(desired, rollout.EXIT_FAILED) == rollout.EXIT_FAILED
