# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright rollout``: any playbook, wave by wave, under a DeploymentPolicy - no
strategy plugin loaded.

The waves come from the same rollout driver the ``nodewright.fleet.rollout``
strategy uses (``module_utils/fleet/driver.py``); each wave is one ansible-runner run
of the playbook limited to the wave's hosts, with the strategy (if the play names it)
running as plain ``linear``. With ``--admission`` every wave is first reserved in the
cluster, exactly as the strategy reserves the waves of NodeWright resources.

    nodewright rollout site.yml -i inventory.yml --policy policy.yml
    nodewright rollout site.yml -i inventory.yml --policy-name gpu-canary --state-resource gpu-tuning
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

from nodewright_cli import collection, runner

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
    DEFAULT_TTL,
    FleetView,
    NodeInfo,
    ReservationRecord,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    INTERRUPTED,
    ClusterFleet,
    ResourceRollout,
    RolloutDriver,
    StaticFleet,
    plan_run,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import HALTED, WAITING, parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    KIND_DEPLOYMENT_POLICY,
    validate_deployment_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import (
    DRIVER_WAVE_RUNNER,
    FACT,
    VAR_DRIVER,
    RolloutRecord,
    RunHooks,
    StateKeeper,
    collect_nodes,
    fetch_deployment_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import RolloutState
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_html

EXIT_OK, EXIT_ERROR, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 130
_HOSTS_HEADER = re.compile(r"^(\s*)hosts \((\d+)\):\s*$")


def add_parser(sub):
    p = sub.add_parser("rollout", help="run a playbook wave by wave under a DeploymentPolicy (no strategy plugin)")
    p.add_argument("playbook", help="the playbook to run on each wave")
    p.add_argument("-i", "--inventory", action="append", required=True, help="inventory source (repeatable)")
    policy = p.add_mutually_exclusive_group(required=True)
    policy.add_argument("--policy", help="YAML file: a DeploymentPolicy resource or just its spec")
    policy.add_argument("--policy-name", help="name of a DeploymentPolicy resource in the cluster")
    p.add_argument("-l", "--limit", help="further limit the hosts (ansible --limit)")
    p.add_argument("--hosts", help="host pattern of the nodes to roll out (default: the playbook's hosts)")
    p.add_argument("-f", "--forks", type=int, default=None, help="parallel hosts within a wave")
    p.add_argument("-e", "--extra-vars", action="append", default=[], help="extra variables (repeatable)")
    p.add_argument("-C", "--check", action="store_true", help="run the playbook in check mode")
    p.add_argument("--report", default=os.environ.get("NODEWRIGHT_REPORT_PATH") or "nodewright-report.json",
                   help="where the JSON run report goes (default nodewright-report.json)")
    p.add_argument("--no-wait-for-window", dest="wait_for_window", action="store_false",
                   help="outside every maintenance window, stop and say when the next opens instead of waiting")
    p.add_argument("--state-resource", metavar="NAME",
                   help="keep the batch state in this NodeWright resource's status and resume from it")
    p.add_argument("--admission", action="store_true",
                   help="reserve each wave in the cluster: nodes cordoned, in progress or reserved by other runs "
                        "count against the policy's limits (the hosts must be Kubernetes nodes)")
    p.add_argument("--reservation-ttl", type=int, default=DEFAULT_TTL,
                   help="seconds a reservation outlives a run that stopped renewing it (default %d)" % DEFAULT_TTL)
    p.add_argument("--private-data-dir", help="ansible-runner directory for artifacts (kept)")
    p.add_argument("--keep-artifacts", action="store_true", help="keep the temporary artifacts directory")
    p.add_argument("--show-output", action="store_true", help="show ansible-playbook's output of each wave")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more ansible-playbook verbosity")
    p.add_argument("--dry-run", action="store_true",
                   help="print the waves the policy would make if every node succeeded, and exit")
    return p


def _tool(name):
    """An Ansible command next to this Python (a virtualenv), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else (shutil.which(name) or name)


def parse_list_hosts(text):
    """Host names, in order and without repeats, from ``--list-hosts`` output (every play)."""
    hosts = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        match = _HOSTS_HEADER.match(lines[n])
        n += 1
        if not match:
            continue
        for line in lines[n:n + int(match.group(2))]:
            name = line.strip()
            if name and name not in hosts:
                hosts.append(name)
        n += int(match.group(2))
    return hosts


def wave_outcome(wave_nodes, stats):
    """node -> ok | failed for a wave from ansible's per-host stats; a host with no stats
    at all is counted as failed, since losing track of a node is not a success."""
    stats = stats or {}
    processed = set(stats.get("processed") or {})
    bad = {h for h, n in (stats.get("failures") or {}).items() if n} | \
        {h for h, n in (stats.get("dark") or {}).items() if n}
    return {h: ("failed" if h in bad or h not in processed else "ok") for h in wave_nodes}


def load_policy_file(path):
    """A DeploymentPolicy from a YAML file: the resource, or just its spec."""
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    try:
        if isinstance(doc, dict) and doc.get("kind") == KIND_DEPLOYMENT_POLICY:
            validated = validate_deployment_policy(doc)
            return parse_policy(validated["spec"]), "DeploymentPolicy/%s (%s)" % (doc["metadata"]["name"], path)
        return parse_policy(doc, "policy"), "file %s" % path
    except ValidationError as exc:
        raise ValidationError(exc.message, hint=exc.hint, source=path)


class WaveHooks(RunHooks):
    """Runs each wave as one ansible-runner run limited to the wave's hosts."""

    def __init__(self, cli, records, keepers, workdir):
        super(WaveHooks, self).__init__(records, keepers, say=self._print)
        self.cli = cli
        self.workdir = workdir
        self.reports = []

    @staticmethod
    def _print(text, level="info"):
        if level in ("verbose",):
            return
        stream = sys.stderr if level in ("warn", "error") and "failed" not in text else sys.stdout
        print(text, file=stream, flush=True)

    def run_wave(self, wave):
        args = self.cli.args
        name = "wave-%03d" % wave.number
        workdir = os.path.join(self.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        limit_file = os.path.join(workdir, name + ".limit")
        with open(limit_file, "w") as fh:
            fh.write("\n".join(wave.nodes) + "\n")
        facts = {}
        for resource, engine_wave in wave.waves.items():
            for compartment, hosts in engine_wave.compartments.items():
                for host in hosts:
                    facts[host] = {FACT: {"wave": wave.number, "compartment": compartment,
                                          "wave_size": len(wave.nodes), "policy": self.records[resource].source}}
        wave_inventory = os.path.join(workdir, name + ".inventory.yml")
        with open(wave_inventory, "w") as fh:
            yaml.safe_dump({"all": {"hosts": facts}}, fh)
        env = {k: v for k, v in self.cli.env.items() if k == "PATH" or k.startswith(("ANSIBLE_", "NODEWRIGHT_",
                                                                                    "K8S_AUTH_"))}
        env.pop("NODEWRIGHT_REPORT_PATH", None)
        cmdline = []
        for extra in args.extra_vars:
            cmdline += ["-e", extra]
        if args.check:
            cmdline.append("--check")
        if args.verbose:
            cmdline.append("-" + "v" * args.verbose)
        result = runner.run_playbook(
            os.path.abspath(args.playbook), name, self.cli.inventories + [wave_inventory], workdir,
            extravars={VAR_DRIVER: DRIVER_WAVE_RUNNER, "nodewright_rollout_strategy": "ansible.builtin.linear"},
            limit="@" + limit_file, envvars=env, cmdline=cmdline, forks=args.forks, quiet=not args.show_output,
            project_dir=os.getcwd())
        if result.report:
            self.reports.append(result.report)
        if not result.stats:
            tail = ""
            stdout = os.path.join(result.artifacts, "stdout")
            try:
                with open(stdout, errors="replace") as fh:
                    tail = fh.read()[-1500:].strip()
            except OSError:
                pass
            raise NodeWrightError("wave %d: ansible-playbook ended (%s, rc %s) before it reported any host result%s"
                                  % (wave.number, result.status, result.rc, (": " + tail) if tail else ""),
                                  hint="the full output is in %s (kept with --private-data-dir)" % stdout)
        return wave_outcome(wave.nodes, result.stats)


class WaveRunnerCli(object):
    def __init__(self, args):
        self.args = args
        self.inventories = [os.path.abspath(i) if os.path.exists(i) else i for i in args.inventory]
        self.env = self._child_env()
        self.auth = {k: v for k, v in (("kubeconfig", args.kubeconfig), ("context", args.context)) if v}

    def _child_env(self):
        env = dict(os.environ)
        here = os.path.dirname(sys.executable)
        if os.access(os.path.join(here, "ansible-playbook"), os.X_OK):
            env["PATH"] = here + os.pathsep + env.get("PATH", "")
        env["ANSIBLE_COLLECTIONS_PATH"] = collection.collections_path(env)
        if self.args.kubeconfig:
            env["K8S_AUTH_KUBECONFIG"] = os.path.abspath(self.args.kubeconfig)
        if self.args.context:
            env["K8S_AUTH_CONTEXT"] = self.args.context
        return env

    def _common_args(self):
        out = []
        for inv in self.inventories:
            out += ["-i", inv]
        if self.args.limit:
            out += ["--limit", self.args.limit]
        for extra in self.args.extra_vars:
            out += ["-e", extra]
        return out

    def _run_tool(self, argv, what):
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, check=False)
        if proc.returncode != 0:
            raise NodeWrightError("%s failed (rc %d): %s" % (what, proc.returncode,
                                                             (proc.stderr or proc.stdout).strip()[-2000:]))
        return proc.stdout

    def target_hosts(self):
        if self.args.hosts:
            argv = [_tool("ansible"), self.args.hosts, "--list-hosts"] + self._common_args()
            what = "ansible %s --list-hosts" % self.args.hosts
        else:
            argv = [_tool("ansible-playbook"), os.path.abspath(self.args.playbook), "--list-hosts"] + \
                self._common_args()
            what = "ansible-playbook --list-hosts"
        hosts = parse_list_hosts(self._run_tool(argv, what))
        if not hosts:
            raise NodeWrightError("%s lists no hosts" % what, hint="check the inventory, --limit and --hosts")
        return hosts

    def host_variables(self):
        argv = [_tool("ansible-inventory"), "--list"]
        for inv in self.inventories:
            argv += ["-i", inv]
        data = json.loads(self._run_tool(argv, "ansible-inventory --list"))
        return (data.get("_meta") or {}).get("hostvars") or {}

    def policy(self):
        if self.args.policy_name:
            return fetch_deployment_policy(self.args.policy_name, self.auth), \
                "DeploymentPolicy/%s" % self.args.policy_name
        return load_policy_file(self.args.policy)

    def run(self):
        args = self.args
        policy, source = self.policy()
        hosts = self.target_hosts()
        variables = self.host_variables()
        nodes = collect_nodes(hosts, lambda h: variables.get(h) or {}, self.auth)
        name = args.state_resource or os.path.basename(args.playbook)
        view = FleetView([NodeInfo(name=n["name"], labels=n["labels"], created=n.get("creationTimestamp"),
                                   unschedulable=False, cordoned_by=None, statuses={}) for n in nodes])
        res = ResourceRollout(name, policy, targets=[n["name"] for n in nodes], work=[n["name"] for n in nodes],
                              source=source)
        if args.dry_run:
            driver, status, reason = plan_run([res], view)
            for wave in driver.waves:
                engine = wave.waves[name]
                print("wave %d: %s" % (wave.number, ", ".join(
                    "%s [%s]" % (comp, ", ".join(members)) for comp, members in engine.compartments.items())))
            print("then: %s (%s)" % (status, reason))
            return EXIT_OK
        record = RolloutRecord(os.path.basename(args.playbook), policy, source, nodes, driver=DRIVER_WAVE_RUNNER,
                               resource=args.state_resource)
        record.labelled = True
        keeper = None
        if args.state_resource:
            res.state, note, keeper = StateKeeper.resume(args.state_resource, policy, self.auth,
                                                         check_mode=args.check)
            if note:
                record.note(note)
                print("nodewright rollout: %s" % note, flush=True)
        else:
            res.state = RolloutState(policy)
        fleet = StaticFleet(view)
        holder = ""
        if args.admission:
            from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_api_client
            api = get_api_client(self.auth)
            record_lock = None if args.check else ReservationRecord(api, ttl=args.reservation_ttl,
                                                                    run="nodewright rollout %s" % args.playbook)
            fleet = ClusterFleet(api, record_lock, threaded=True)
            holder = record_lock.holder_id if record_lock is not None else ""
        started = time.time()
        workdir = args.private_data_dir or tempfile.mkdtemp(prefix="nodewright-rollout-")
        os.makedirs(workdir, exist_ok=True)
        print("nodewright rollout: %d node(s), policy %s, artifacts in %s" % (len(nodes), source, workdir),
              flush=True)
        hooks = WaveHooks(self, {name: record}, {name: keeper}, workdir)
        driver = RolloutDriver([res], fleet, hooks, holder_id=holder, wait_for_window=args.wait_for_window,
                               capacity_timeout=3600 if args.admission else 0)
        hooks.driver = driver
        code = EXIT_OK
        status, reason = INTERRUPTED, "the run was interrupted"
        try:
            status, reason = driver.run()
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        except NodeWrightError as exc:
            status, reason = "error", str(exc)
            print("nodewright rollout: %s" % exc, file=sys.stderr)
            code = EXIT_ERROR
        finally:
            hooks.finish(status, reason)
            self.write_report(record, res, hooks, started)
            if not args.private_data_dir and not args.keep_artifacts:
                shutil.rmtree(workdir, ignore_errors=True)
        if code != EXIT_OK:
            return code
        if record.status == HALTED:
            print(record.reason, file=sys.stderr)
            return EXIT_FAILED
        print("nodewright rollout: %s" % reason, flush=True)
        return EXIT_OK if status in ("complete", WAITING) else EXIT_FAILED

    def write_report(self, record, res, hooks, started):
        """The callback's report shape: hosts, tasks, summary, and the rollout entry."""
        report = {"version": 1, "started": started, "playbook": os.path.abspath(self.args.playbook),
                  "hosts": {}, "tasks": []}
        for one in hooks.reports:
            # Each wave's playbook counts its timeline from its own start: the report
            # counts every step from the rollout's start.
            shift = float(one.get("started") or started) - started
            for host, entry in (one.get("hosts") or {}).items():
                previous = report["hosts"].get(host)
                if previous is None or entry.get("outcome") != "ok":
                    entry = dict(entry)
                    entry["timeline"] = [dict(step, start=round(float(step.get("start") or 0.0) + shift, 3))
                                         for step in entry.get("timeline") or []]
                    report["hosts"][host] = entry
            report["tasks"].extend(one.get("tasks") or [])
        rollout = record.to_dict(res.state)
        for host, where in rollout["assignment"].items():
            if host in report["hosts"]:
                report["hosts"][host].update(where)
        summary = {}
        for entry in report["hosts"].values():
            summary[entry["outcome"]] = summary.get(entry["outcome"], 0) + 1
        report.update({"finished": time.time(), "summary": summary, "rollout": [rollout]})
        report["duration"] = round(report["finished"] - started, 2)
        path = self.args.report
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(report, fh, indent=2, sort_keys=True, default=str)
        os.replace(tmp, path)
        # The page beside it, as the report callback writes one (NODEWRIGHT_REPORT_HTML=false: none).
        if self.env.get("NODEWRIGHT_REPORT_HTML", "true").strip().lower() not in ("0", "false", "no", "off"):
            page = report_html.html_path(path)
            with open(page + ".tmp", "w") as fh:
                fh.write(report_html.render(json.loads(json.dumps(report, default=str))))
            os.replace(page + ".tmp", page)


def cmd_rollout(args):
    return WaveRunnerCli(args).run()
