# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The retry budget and limits of a NodeWright resource (issue 29, item 5), through the
front door: a resource in the cluster, rollout.yml, the shellscript package whose scripts
count their runs in a file on the node's host root.

- a stage that fails twice and then succeeds completes within its budget (stageRetries);
- a stage that keeps failing stops at its budget, erroring with its attempts; a later run
  leaves the node alone and ends non-zero, until the package changes;
- a service restart that fails stops at interruptRestartLimit; a later run leaves the node
  alone until the limit is raised;
- a downgrade of a package with uninstall.enabled is refused until it is uninstalled.

Each case has its own node of one small fleet.
"""

from __future__ import annotations

import json

import pytest
from nodewright_sim import hostroot

from fleet_helpers import Fleet

pytestmark = pytest.mark.integration

CASES = ("flaky", "spent", "restart", "downgrade")


def counting(path, fails):
    """A script that counts its runs in ``path`` and fails the first ``fails`` of them."""
    return ("n=$(cat %s 2>/dev/null || echo 0); n=$((n + 1)); echo $n > %s\n"
            "[ \"$n\" -gt %d ] || { echo \"run $n fails\" >&2; exit 1; }\n" % (path, path, fails))


FLAKY_UNIT = """mkdir -p /etc/systemd/system /usr/local/bin
cat > /usr/local/bin/flaky-start <<'EOF'
#!/bin/sh
%s
EOF
chmod 755 /usr/local/bin/flaky-start
printf '[Unit]\\nDescription=flaky\\n[Service]\\nType=oneshot\\nExecStart=/usr/local/bin/flaky-start\\n' \\
  > /etc/systemd/system/flaky.service
""" % counting("/var/lib/flaky-starts", 2)


class RetryFleet(object):
    def __init__(self, sim, tmp):
        self.sim = sim
        self.fleet = Fleet(sim, tmp, [("h200", len(CASES))])
        self.node = dict(zip(CASES, sorted(self.fleet.nodes)))
        for case, node in self.node.items():
            sim.core.patch_node(node, {"metadata": {"labels": {"retry-case": case}}})

    def create(self, case, packages, **spec):
        name = "%s-%s" % (case, self.fleet.label)
        self.fleet.create("NodeWright", name, dict({
            "nodeSelectors": {"matchLabels": {"rollout-test": self.fleet.label, "retry-case": case}},
            "interruptionBudget": {"percent": 100}, "stageRetryBackoff": "1s", "packages": packages}, **spec))
        return name

    def patch(self, name, spec):
        self.fleet.custom.patch_cluster_custom_object("nodewright.io", "v1alpha1", "nodewrights", name, {"spec": spec})

    def rollout(self, name):
        proc = self.fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % name)
        proc.output = " ".join((proc.stdout + proc.stderr).split())
        return proc

    def host(self, case, command):
        return hostroot.run(self.sim.host_root(self.node[case]), command).stdout.strip()

    def state(self, case, name):
        annotations = self.sim.core.read_node(self.node[case]).metadata.annotations or {}
        return json.loads(annotations.get("nodewright.io/state-%s" % name) or "{}")

    def label(self, case, name):
        return self.fleet.node_labels(self.node[case]).get("nodewright.io/status-%s" % name)

    def status(self, name):
        return self.fleet.resource(name).get("status") or {}


def conditions(status):
    return {c["type"]: c for c in status.get("conditions") or []}


@pytest.fixture(scope="module")
def fleet(sim, tmp_path_factory):
    return RetryFleet(sim, tmp_path_factory.mktemp("retry-limits"))


def test_a_stage_that_fails_twice_then_succeeds_completes_within_its_budget(fleet):
    name = fleet.create("flaky", {"shellscript": {"version": "1.0.0", "configMap": {
        "apply.sh": counting("/var/lib/apply-runs", 2), "apply_check.sh": "test -s /var/lib/apply-runs\n"}}})
    proc = fleet.rollout(name)
    assert proc.returncode == 0, proc.output[-4000:]
    assert fleet.host("flaky", "cat /var/lib/apply-runs") == "3"
    assert fleet.label("flaky", name) == "complete"
    entry = fleet.state("flaky", name)["packages"]["shellscript"]
    assert (entry["state"], entry["attempts"]["apply"]) == ("complete", 3)
    status = fleet.status(name)
    assert status["status"] == "complete"
    assert status["nodeState"][fleet.node["flaky"]]["shellscript|1.0.0"]["attempts"]["apply"] == 3
    assert "RetryLimitReached" not in conditions(status)


def test_a_spent_budget_stops_the_stage_and_later_runs_leave_the_node_alone(fleet):
    node = fleet.node["spent"]
    always = {"apply.sh": counting("/var/lib/apply-runs", 99), "apply_check.sh": "true\n"}
    name = fleet.create("spent", {"shellscript": {"version": "1.0.0", "stageRetries": 1, "configMap": always}})
    failed = fleet.rollout(name)
    assert failed.returncode == 2, failed.output[-4000:]
    assert "stage apply failed 2 time(s): its retry budget is spent (stageRetries 1)" in failed.output
    assert fleet.host("spent", "cat /var/lib/apply-runs") == "2"
    assert fleet.label("spent", name) == "erroring"
    entry = fleet.state("spent", name)["packages"]["shellscript"]
    assert (entry["stage"], entry["state"], entry["attempts"]) == ("apply", "erroring", {"apply": 2})

    # The next run does not start the stage again: it says why and ends non-zero.
    again = fleet.rollout(name)
    assert again.returncode == 2, again.output[-4000:]
    assert "1 node(s) left alone" in again.output and "its whole retry budget (stageRetries 1)" in again.output
    assert fleet.host("spent", "cat /var/lib/apply-runs") == "2", "the stage ran again"
    status = fleet.status(name)
    assert status["status"] == "erroring" and status["nodeStatus"][node] == "erroring"
    assert status["nodeState"][node]["shellscript|1.0.0"]["attempts"] == {"apply": 2}
    cond = conditions(status)["RetryLimitReached"]
    assert cond["status"] == "True" and cond["message"].startswith("%s: stage apply of shellscript 1.0.0 failed 2 "
                                                                   "time(s)" % node)

    # A fixed script (changed config) is something new to try: it runs and completes.
    fleet.patch(name, {"packages": {"shellscript": {"configMap": {
        "apply.sh": "echo fixed > /var/lib/fixed\n", "apply_check.sh": "test -s /var/lib/fixed\n"}}}})
    fixed = fleet.rollout(name)
    assert fixed.returncode == 0, fixed.output[-4000:]
    assert fleet.label("spent", name) == "complete"
    status = fleet.status(name)
    assert status["status"] == "complete" and "RetryLimitReached" not in conditions(status)


def test_a_failing_service_restart_stops_at_its_restart_limit_until_the_limit_is_raised(fleet):
    node = fleet.node["restart"]
    name = fleet.create("restart", {"shellscript": {
        "version": "1.0.0", "interrupt": {"type": "service", "services": ["flaky"]},
        "configMap": {"apply.sh": FLAKY_UNIT, "apply_check.sh": "test -x /usr/local/bin/flaky-start\n"}}},
        interruptRestartLimit=1)
    failed = fleet.rollout(name)
    assert failed.returncode == 2, failed.output[-4000:]
    assert "it failed 2 time(s), its whole restart limit (interruptRestartLimit 1)" in failed.output
    assert fleet.host("restart", "cat /var/lib/flaky-starts") == "2"
    state = fleet.state("restart", name)
    assert (state["restarts"], state["restartLimitReached"]) == (1, True)
    assert fleet.label("restart", name) == "erroring"
    # The last try is the restart the limit allows, and the failure names it.
    assert "failed at 'Restart the services the packages asked for (restart 1 of 1)'" in failed.output

    again = fleet.rollout(name)
    assert again.returncode == 2, again.output[-4000:]
    assert "its whole restart limit (interruptRestartLimit 1)" in again.output
    assert fleet.host("restart", "cat /var/lib/flaky-starts") == "2", "restarted again past the limit"
    status = fleet.status(name)
    assert status["nodeState"][node]["shellscript|1.0.0"]["restarts"] == 1
    assert conditions(status)["RetryLimitReached"]["status"] == "True"

    # A raised limit lets the next run restart it: the third start succeeds.
    fleet.patch(name, {"interruptRestartLimit": 3})
    done = fleet.rollout(name)
    assert done.returncode == 0, done.output[-4000:]
    assert fleet.host("restart", "cat /var/lib/flaky-starts") == "3"
    assert fleet.label("restart", name) == "complete"
    assert fleet.state("restart", name).get("restartLimitReached") is None
    assert "RetryLimitReached" not in conditions(fleet.status(name))


def versioned_package(where, version):
    """A package directory ``dg`` at ``version``: apply writes the version to /etc/dg-version,
    uninstall removes it."""
    root = where / ("dg-" + version)
    (root / "steps").mkdir(parents=True)
    for script, body in (("apply.sh", "echo %s > /etc/dg-version" % version), ("check.sh", "test -s /etc/dg-version"),
                         ("uninstall.sh", "rm -f /etc/dg-version"), ("gone.sh", "test ! -e /etc/dg-version")):
        (root / "steps" / script).write_text("#!/bin/sh\nset -e\n%s\n" % body)
        (root / "steps" / script).chmod(0o755)
    stages = {"apply": "apply.sh", "apply-check": "check.sh", "uninstall": "uninstall.sh", "uninstall-check": "gone.sh"}
    (root / "package.json").write_text(json.dumps({"name": "dg", "version": version, "stages": {
        stage: [{"path": path}] for stage, path in stages.items()}}))
    return str(root)


def test_a_downgrade_is_refused_until_the_package_is_uninstalled(fleet, tmp_path):
    node = fleet.node["downgrade"]
    sources = {v: versioned_package(tmp_path, v) for v in ("1.0.0", "2.0.0")}

    def package(version, **extra):
        return {"dg": dict({"version": version, "source": sources[version], "uninstall": {"enabled": True}},
                           **extra)}

    name = fleet.create("downgrade", package("2.0.0"))
    first = fleet.rollout(name)
    assert first.returncode == 0, first.output[-4000:]
    assert fleet.host("downgrade", "cat /etc/dg-version") == "2.0.0"

    fleet.patch(name, {"packages": package("1.0.0")})
    planned = fleet.fleet.plan(name)
    (refused,) = planned["refused"]
    assert (refused["node"], refused["kind"]) == (node, "downgrade-refused")
    assert planned["work"] == [] and planned["nodes"][node]["actions"] == {"dg": "downgrade-refused"}
    proc = fleet.rollout(name)
    assert proc.returncode == 2, proc.output[-4000:]
    assert "downgrade of dg refused: the node has 2.0.0, the resource wants 1.0.0" in proc.output
    assert fleet.host("downgrade", "cat /etc/dg-version") == "2.0.0", "the node was touched"
    assert fleet.state("downgrade", name)["packages"]["dg"]["version"] == "2.0.0"
    status = fleet.status(name)
    assert status["status"] == "blocked" and status["nodeStatus"][node] == "blocked"
    cond = conditions(status)["DowngradeRefused"]
    assert cond["status"] == "True" and "uninstall it first (uninstall.apply: true" in cond["message"]

    # The way out: uninstall first, then the lower version is a fresh apply.
    fleet.patch(name, {"packages": package("1.0.0", uninstall={"enabled": True, "apply": True})})
    removed = fleet.rollout(name)
    assert removed.returncode == 0, removed.output[-4000:]
    assert fleet.host("downgrade", "test -e /etc/dg-version && echo there || echo gone") == "gone"
    assert fleet.state("downgrade", name).get("packages") == {}
    fleet.patch(name, {"packages": package("1.0.0", uninstall={"enabled": True, "apply": False})})
    done = fleet.rollout(name)
    assert done.returncode == 0, done.output[-4000:]
    assert fleet.host("downgrade", "cat /etc/dg-version") == "1.0.0"
    status = fleet.status(name)
    assert status["status"] == "complete" and "DowngradeRefused" not in conditions(status)
