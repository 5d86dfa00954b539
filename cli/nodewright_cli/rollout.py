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

With ``--resources`` it runs the main job, ``playbooks/rollout.yml``, the same way: its
planning play first (every NodeWright resource read, validated and planned), then each
wave of every resource, each resource under its own DeploymentPolicy, reserved in the
cluster and with each resource's status written after every wave, as the strategy does.

    nodewright rollout --resources -i fleet.k8s_nodes.yml [--resource NAME]
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
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import (
    INTERRUPTED,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import HALTED, WAITING, parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    KIND_DEPLOYMENT_POLICY,
    validate_deployment_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_settings import (
    DRIVER_WAVE_RUNNER,
    FACT,
    VAR_DESIRED,
    VAR_DRIVER,
    VAR_K8S_AUTH,
    VAR_WAIT_FOR_WINDOW,
    STAT_BLOCKED,
    STAT_PAUSED,
    read_settings,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import (
    fetch_deployment_policy,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_builder import (
    admission_fleet,
    build_driver,
    plan_run,
    resources_from_desired,
    single_policy_run,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_nodes import collect_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import (
    wave_facts,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import (
    RunHooks,
    status_writer,
)
from ansible_collections.nodewright.fleet.plugins.plugin_utils import report_html

EXIT_OK, EXIT_ERROR, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 130
# How long a wave waits while other runs hold the capacity it needs (the strategy's default).
CAPACITY_TIMEOUT = 3600
_HOSTS_HEADER = re.compile(r"^(\s*)hosts \((\d+)\):\s*$")


def add_parser(sub):
    p = sub.add_parser("rollout", help="run a playbook wave by wave under a DeploymentPolicy, or roll the NodeWright "
                                       "resources out (--resources); no strategy plugin")
    p.add_argument("playbook", nargs="?",
                   help="the playbook to run on each wave (with --resources: default the collection's rollout.yml)")
    p.add_argument("-i", "--inventory", action="append", required=True, help="inventory source (repeatable)")
    policy = p.add_mutually_exclusive_group(required=True)
    policy.add_argument("--policy", help="YAML file: a DeploymentPolicy resource or just its spec")
    policy.add_argument("--policy-name", help="name of a DeploymentPolicy resource in the cluster")
    policy.add_argument("--resources", action="store_true",
                        help="roll the NodeWright resources out as playbooks/rollout.yml does, each under its own "
                             "DeploymentPolicy")
    p.add_argument("--resource", metavar="NAME",
                   help="with --resources: only this NodeWright resource (rollout.yml's -e nodewright_resource=NAME)")
    p.add_argument("-l", "--limit", help="further limit the hosts (ansible --limit)")
    p.add_argument("--hosts", help="host pattern of the nodes to roll out (default: the playbook's hosts)")
    p.add_argument("-f", "--forks", type=int, default=None, help="parallel hosts within a wave")
    p.add_argument("-e", "--extra-vars", action="append", default=[], help="extra variables (repeatable)")
    p.add_argument("-C", "--check", action="store_true", help="run the playbook in check mode")
    p.add_argument("--report", default=os.environ.get("NODEWRIGHT_REPORT_PATH") or "nodewright-report.json",
                   help="where the JSON run report goes (default nodewright-report.json)")
    p.add_argument("--no-wait-for-window", dest="wait_for_window", action="store_false",
                   help="outside every maintenance window, stop and say when the next opens instead of waiting")
    p.add_argument("--alert-gate", metavar="YAML|FILE",
                   help="the run's alertGate (an inline YAML mapping or a file holding one): no node is admitted "
                        "while a matching alert fires; it replaces the policies' own (docs/deployment-policy.md)")
    p.add_argument("--notify", metavar="URL", action="append", default=[],
                   help="send the run's events (started, batch, blocked, halted, complete) to this Apprise URL "
                        "(slack://..., msteams://..., json://host/path, ...); repeat for more; a failed "
                        "notification never fails the rollout (docs/rollout.md)")
    p.add_argument("--notify-events", metavar="EVENT,...",
                   help="only these of started, batch, blocked, halted, complete (default: all)")
    p.add_argument("--notify-batch-interval", metavar="DURATION",
                   help="at most one batch notification this often (e.g. 30m); the batches in between are counted "
                        "into the next notification (default: every batch)")
    p.add_argument("--state-resource", metavar="NAME",
                   help="keep the batch state in this NodeWright resource's status and resume from it")
    p.add_argument("--admission", action="store_true",
                   help="reserve each wave in the cluster: nodes cordoned, in progress or reserved by other runs "
                        "count against the policy's limits (the hosts must be Kubernetes nodes; always on with "
                        "--resources)")
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
    """node -> ok | failed | blocked for a wave from ansible's per-host stats; a host with no
    stats at all is counted as failed, since losing track of a node is not a success; a node
    the maintain task left blocked by non-interruptible pods, or stopped because its resource was
    paused (the run's custom stats), is blocked: neither done nor failed."""
    stats = stats or {}
    processed = set(stats.get("processed") or {})
    bad = {h for h, n in (stats.get("failures") or {}).items() if n} | \
        {h for h, n in (stats.get("dark") or {}).items() if n}
    custom = stats.get("artifact_data") or {}
    blocked = set(custom.get(STAT_BLOCKED) or {}) | set(custom.get(STAT_PAUSED) or {})
    return {h: ("failed" if h in bad or h not in processed else "blocked" if h in blocked else "ok")
            for h in wave_nodes}


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


def load_notifier(args):
    """The ``--notify`` URLs (and ``--notify-events``) as a Notifier; None without one."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.notify import Notifier, parse_notify
    urls = list(getattr(args, "notify", None) or [])
    events = getattr(args, "notify_events", None)
    interval = getattr(args, "notify_batch_interval", None)
    if (events or interval) and not urls:
        raise ValidationError("--notify-%s without --notify" % ("events" if events else "batch-interval"),
                              field="--notify-events" if events else "--notify-batch-interval",
                              hint="name where the events go with --notify URL")
    value = {"urls": urls}
    if events:
        value["events"] = [e.strip() for e in events.split(",") if e.strip()]
    if interval:
        value["batchInterval"] = interval
    settings = parse_notify(value if urls else None, "--notify")
    if settings is None:
        return None
    return Notifier(settings, warn=lambda text: print("nodewright rollout: %s" % text, file=sys.stderr, flush=True))


def _notified(notifier, records):
    if notifier is None:
        return
    for record in records:
        record.notifications = list(notifier.log)
    print("nodewright rollout: %s (%s)" % (notifier.summary(), notifier.settings.describe()), flush=True)


def load_alert_gate(value):
    """The ``--alert-gate`` value (inline YAML, or a file holding it) as an AlertGate; None without one."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.alerts import parse_alert_gate
    if not value:
        return None
    if os.path.isfile(value):
        with open(value) as fh:
            doc = yaml.safe_load(fh)
    else:
        try:
            doc = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValidationError("--alert-gate is neither a file nor a YAML mapping: %s" % exc, field="--alert-gate",
                                  hint="e.g. --alert-gate '{url: http://alertmanager:9093, matchers: "
                                       "[severity=critical]}'")
    return parse_alert_gate(doc, "--alert-gate")


class WaveHooks(RunHooks):
    """Runs each wave as one ansible-runner run limited to the wave's hosts."""

    def __init__(self, cli, records, keepers, workdir, playbook=None, extravars=None, cmdline=(), writer=None):
        super(WaveHooks, self).__init__(records, keepers, status_writer=writer, say=self._print)
        self.cli = cli
        self.workdir = workdir
        self.playbook = playbook or os.path.abspath(cli.args.playbook)
        self.extravars = dict(extravars or {})
        self.cmdline = list(cmdline)
        self.reports = []
        self.failed = set()

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
        wave_inventory = os.path.join(workdir, name + ".inventory.yml")
        with open(wave_inventory, "w") as fh:
            hosts = {host: {FACT: fact} for host, fact in wave_facts(wave, self.records).items()}
            yaml.safe_dump({"all": {"hosts": hosts}}, fh)
        extravars = {VAR_DRIVER: DRIVER_WAVE_RUNNER, "nodewright_rollout_strategy": "ansible.builtin.linear"}
        extravars.update(self.extravars)
        result = runner.run_playbook(
            self.playbook, name, self.cli.inventories + [wave_inventory], workdir, extravars=extravars,
            limit="@" + limit_file, envvars=self.cli.child_env(), cmdline=self.cli.ansible_args() + self.cmdline,
            forks=args.forks, quiet=not args.show_output, project_dir=os.getcwd())
        if result.report:
            self.reports.append(result.report)
        if not result.stats:
            raise NodeWrightError("wave %d: ansible-playbook ended (%s, rc %s) before it reported any host result%s"
                                  % (wave.number, result.status, result.rc, _tail(result)),
                                  hint="the full output is in %s (kept with --private-data-dir)"
                                       % os.path.join(result.artifacts, "stdout"))
        outcomes = wave_outcome(wave.nodes, result.stats)
        self.failed.update(h for h, o in outcomes.items() if o != "ok")
        return outcomes


def _tail(result, size=1500):
    """``: <the end of a run's output>``, or nothing."""
    try:
        with open(os.path.join(result.artifacts, "stdout"), errors="replace") as fh:
            tail = fh.read()[-size:].strip()
    except OSError:
        return ""
    return (": " + tail) if tail else ""


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

    def child_env(self):
        """The environment of a wave's ansible-playbook: Ansible's, NodeWright's and the credentials'."""
        env = {k: v for k, v in self.env.items() if k == "PATH" or k.startswith(("ANSIBLE_", "NODEWRIGHT_",
                                                                                 "K8S_AUTH_"))}
        env.pop("NODEWRIGHT_REPORT_PATH", None)
        return env

    def ansible_args(self):
        """The user's further ansible-playbook arguments: -e, --check, -v."""
        cmdline = []
        for extra in self.args.extra_vars:
            cmdline += ["-e", extra]
        if self.args.check:
            cmdline.append("--check")
        if self.args.verbose:
            cmdline.append("-" + "v" * self.args.verbose)
        return cmdline

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
        policy = policy.with_alert_gate(load_alert_gate(args.alert_gate))
        notifier = load_notifier(args)
        hosts = self.target_hosts()
        variables = self.host_variables()
        nodes = collect_nodes(hosts, lambda h: variables.get(h) or {}, self.auth)
        name = args.state_resource or os.path.basename(args.playbook)
        # A dry run starts from the first batch, whatever the resource's status holds.
        resources, records, keepers, view = single_policy_run(
            name, policy, source, nodes, os.path.basename(args.playbook), DRIVER_WAVE_RUNNER,
            state_resource=None if args.dry_run else args.state_resource, auth=self.auth, check_mode=args.check,
            say=lambda note: print("nodewright rollout: %s" % note, flush=True))
        (res,), record = resources, records[name]
        if args.dry_run:
            driver, status, reason = plan_run([res], view)
            soaks = {c.name: c.to_dict()["soakTime"] for c in policy.all_compartments if c.soak_time}
            if policy.alert_gate is not None:
                print("alert gate: %s; no node is admitted while a matching alert fires" % policy.alert_gate.describe())
            for wave in driver.waves:
                engine = wave.waves[name]
                soaking = ", ".join("%s %s" % (c, soaks[c]) for c in engine.compartments if c in soaks)
                print("wave %d: %s%s" % (wave.number, ", ".join(
                    "%s [%s]" % (comp, ", ".join(members)) for comp, members in engine.compartments.items()),
                    "; then soak %s" % soaking if soaking else ""))
            print("then: %s (%s)" % (status, reason))
            return EXIT_OK
        fleet = admission_fleet(self.auth, view, admission=args.admission, check_mode=args.check,
                                run="nodewright rollout %s" % args.playbook, ttl=args.reservation_ttl)
        started = time.time()
        workdir = args.private_data_dir or tempfile.mkdtemp(prefix="nodewright-rollout-")
        os.makedirs(workdir, exist_ok=True)
        print("nodewright rollout: %d node(s), policy %s, artifacts in %s" % (len(nodes), source, workdir),
              flush=True)
        hooks = WaveHooks(self, records, keepers, workdir)
        driver = build_driver(resources, fleet, hooks, wait_for_window=args.wait_for_window,
                              capacity_timeout=3600 if args.admission else 0, notifier=notifier)
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
            _notified(notifier, [record])
            self.write_report(os.path.abspath(args.playbook), [record.to_dict(res.state)], hooks.reports, started)
            if not args.private_data_dir and not args.keep_artifacts:
                shutil.rmtree(workdir, ignore_errors=True)
        if code != EXIT_OK:
            return code
        if record.status == HALTED:
            print(record.reason, file=sys.stderr)
            return EXIT_FAILED
        print("nodewright rollout: %s" % reason, flush=True)
        return EXIT_OK if status in ("complete", WAITING) else EXIT_FAILED

    def write_report(self, playbook, rollouts, reports, started):
        """The callback's report shape: hosts, tasks, summary, and ``rollouts`` (one entry per
        resource, none when no wave was planned) from the runs' own ``reports``."""
        report = {"version": 1, "started": started, "playbook": playbook, "hosts": {}, "tasks": []}
        for one in reports:
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
        for rollout in rollouts:
            for host, where in rollout["assignment"].items():
                if host in report["hosts"]:
                    report["hosts"][host].update(where)
        summary = {}
        for entry in report["hosts"].values():
            summary[entry["outcome"]] = summary.get(entry["outcome"], 0) + 1
        report.update({"finished": time.time(), "summary": summary})
        if rollouts:
            report["rollout"] = list(rollouts)
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


# --------------------------------------------------------------------------- --resources

# rollout.yml's task that says what the run will do (its output is shown as ansible-playbook shows it).
SUMMARY_TASK = "Say what will happen"
STRATEGY_EXTRAVAR = "nodewright_rollout_strategy"


def argument_problems(args):
    """What the command line asks for that its mode cannot do (an empty list when nothing)."""
    if not args.resources:
        problems = []
        if not args.playbook:
            problems.append("give the PLAYBOOK to run on each wave, or --resources to roll the NodeWright "
                            "resources out")
        if args.resource:
            problems.append("--resource NAME goes with --resources")
        return problems
    return ["%s does not go with --resources: %s" % (flag, why) for flag, given, why in (
        ("--state-resource", args.state_resource, "every resource keeps its own batch state in its status"),
        ("--hosts", args.hosts, "the nodes are the inventory's hosts that have work (narrow them with --limit)"),
        ("--dry-run", args.dry_run, "ansible-playbook nodewright.fleet.plan prints the waves of every resource"),
    ) if given]


def inventory_hosts(data):
    """Every host of ``ansible-inventory --list`` output but localhost, in the order listed
    (a host without variables appears only in its groups)."""
    hosts = {}
    for group, entry in data.items():
        if group != "_meta" and isinstance(entry, dict):
            for host in entry.get("hosts") or ():
                hosts[host] = None
    for host in (data.get("_meta") or {}).get("hostvars") or {}:
        hosts[host] = None
    hosts.pop("localhost", None)
    return list(hosts)


def controller_plays(plays):
    """``(the plays of rollout.yml that run on localhost, the name of the play that rolls out)``.

    The controller's plays (planning, then status) run on their own before the waves:
    ansible-playbook refuses a ``--limit`` that leaves only the implicit localhost."""
    if not isinstance(plays, list):
        raise NodeWrightError("the rollout playbook is not a list of plays")
    local = [p for p in plays if isinstance(p, dict) and p.get("hosts") == "localhost"]
    rollout = [p for p in plays if isinstance(p, dict) and p.get("hosts") != "localhost"]
    if not local or len(rollout) != 1:
        raise NodeWrightError("the rollout playbook has %d play(s) on localhost and %d other(s)" % (
            len(local), len(rollout)), hint="--resources runs playbooks/rollout.yml (planning and status plays on "
                                            "localhost, one rollout play over the nodes) or a copy of it")
    return local, rollout[0].get("name") or "rollout"


def pin_playbook_dir(value, playbook_dir):
    """``value`` with ``{{ playbook_dir }}`` replaced by ``playbook_dir``, in every string:
    the controller's plays run from a copy, and keep reading files next to the original."""
    if isinstance(value, str):
        return value.replace("{{ playbook_dir }}", playbook_dir)
    if isinstance(value, list):
        return [pin_playbook_dir(v, playbook_dir) for v in value]
    if isinstance(value, dict):
        return {k: pin_playbook_dir(v, playbook_dir) for k, v in value.items()}
    return value


class _UnsafeDumper(yaml.SafeDumper):
    """YAML whose every string is ``!unsafe``: data read from the cluster is never a template."""


_UnsafeDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar("!unsafe", text))


def write_unsafe_vars(path, variables):
    """``variables`` as a vars file for ``-e @path`` that Ansible never templates, as it never
    templates a registered result (the desired state carries the resources' text as is)."""
    with open(path, "w") as fh:
        yaml.dump(variables, fh, Dumper=_UnsafeDumper, default_flow_style=False, sort_keys=False)
    return path


def plan_problem(status, rc, report, desired):
    """``(exit status, message)`` when the planning run gave no plan, else None: 2 when a task of
    the planning play stopped it (a blocked resource, conflicts, bad input), as ansible-playbook
    ends; 1 when the playbook could not run."""
    local = ((report or {}).get("hosts") or {}).get("localhost") or {}
    if local.get("outcome") not in (None, "ok"):
        return EXIT_FAILED, "rollout.yml stopped at '%s': %s" % (local.get("failed_task"), local.get("msg"))
    if status != "successful":
        return EXIT_ERROR, "rollout.yml's planning play could not run (%s, rc %s)" % (status, rc)
    if desired is None:
        return EXIT_ERROR, "rollout.yml's planning play gave no plan (no result of '%s')" % runner.DESIRED_TASK
    return None


def resources_exit(status, halted, failed):
    """The exit status of ``ansible-playbook rollout.yml`` for the same outcome: 2 when a node
    failed or a policy halted, 1 an error, 130 interrupted, else 0."""
    if status == "error":
        return EXIT_ERROR
    if status == INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if halted or failed else EXIT_OK


class ResourcesCli(WaveRunnerCli):
    """``nodewright rollout --resources``: rollout.yml's planning play, then the waves of every
    NodeWright resource, each an ansible-runner run of rollout.yml over the wave's nodes under
    ``linear``; the strategy plugin is never loaded."""

    def __init__(self, args):
        super(ResourcesCli, self).__init__(args)
        self.playbook = os.path.abspath(args.playbook) if args.playbook else collection.playbook("rollout.yml")

    def extravars(self):
        out = {VAR_DRIVER: DRIVER_WAVE_RUNNER, STRATEGY_EXTRAVAR: "ansible.builtin.linear"}
        if self.args.resource:
            out["nodewright_resource"] = self.args.resource
        return out

    def planning_playbook(self, workdir):
        """A copy of the playbook's controller plays in ``workdir``; the name of its rollout play."""
        with open(self.playbook) as fh:
            plays = yaml.safe_load(fh)
        local, play_name = controller_plays(plays)
        path = os.path.join(workdir, "plan-" + os.path.basename(self.playbook))
        with open(path, "w") as fh:
            yaml.safe_dump(pin_playbook_dir(local, os.path.dirname(self.playbook)), fh, sort_keys=False)
        return path, play_name

    def plan(self, workdir):
        """``(the planning run, the desired state or None, the name of the rollout play)``."""
        path, play_name = self.planning_playbook(workdir)
        print("nodewright rollout: planning (%s)" % os.path.basename(self.playbook), flush=True)
        result = runner.run_playbook(
            path, "plan", self.inventories, workdir, extravars=self.extravars(), envvars=self.child_env(),
            cmdline=self.ansible_args(), quiet=not self.args.show_output, project_dir=os.getcwd(),
            keep_events=lambda e: runner.is_desired_result(e) or (e.get("event_data") or {}).get("task") ==
            SUMMARY_TASK)
        for event in result.events:
            data = event.get("event_data") or {}
            msg = (data.get("res") or {}).get("msg") if event.get("event") == "runner_on_ok" else None
            if data.get("task") == SUMMARY_TASK and msg:
                print("nodewright rollout: %s" % " ".join(str(msg).split()), flush=True)
        return result, runner.desired_result(result.events), play_name

    def hosts(self):
        """The inventory's hosts (``--limit`` applied), without localhost."""
        if self.args.limit:
            argv = [_tool("ansible"), "all", "--list-hosts"]
            for inv in self.inventories:
                argv += ["-i", inv]
            argv += ["--limit", self.args.limit]
            return [h for h in parse_list_hosts(self._run_tool(argv, "ansible all --list-hosts")) if h != "localhost"]
        argv = [_tool("ansible-inventory"), "--list"]
        for inv in self.inventories:
            argv += ["-i", inv]
        return inventory_hosts(json.loads(self._run_tool(argv, "ansible-inventory --list")))

    def run(self):
        args = self.args
        started = time.time()
        workdir = args.private_data_dir or tempfile.mkdtemp(prefix="nodewright-rollout-")
        os.makedirs(workdir, exist_ok=True)
        try:
            return self._run(workdir, started)
        finally:
            if not args.private_data_dir and not args.keep_artifacts:
                shutil.rmtree(workdir, ignore_errors=True)

    def _run(self, workdir, started):
        args = self.args
        gate = load_alert_gate(args.alert_gate)  # checked before anything runs
        notifier = load_notifier(args)
        planned, desired, play_name = self.plan(workdir)
        problem = plan_problem(planned.status, planned.rc, planned.report, desired)
        if problem:
            code, message = problem
            if planned.report:
                self.write_report(self.playbook, [], [planned.report], started)
            print("nodewright rollout: %s%s" % (message, "" if code == EXIT_FAILED else _tail(planned)),
                  file=sys.stderr, flush=True)
            return code
        settings = read_settings({VAR_DESIRED: desired, VAR_DRIVER: DRIVER_WAVE_RUNNER, VAR_K8S_AUTH: self.auth,
                                  VAR_WAIT_FOR_WINDOW: args.wait_for_window})
        settings.alert_gate = gate
        hosts = self.hosts()
        resources, records, keepers = resources_from_desired(
            settings.desired, hosts, settings, play_name, DRIVER_WAVE_RUNNER, check_mode=args.check,
            say=WaveHooks._print)
        if not any(r.eligible for r in resources):
            # As the strategy skips its play: the planning run wrote each resource's status.
            print("nodewright rollout: nothing to do: no node of the inventory has work", flush=True)
            self.write_report(self.playbook, [], [planned.report] if planned.report else [], started)
            return self.blocked_exit(settings.desired, EXIT_OK)
        fleet = admission_fleet(self.auth, check_mode=args.check, run="nodewright rollout --resources",
                                ttl=args.reservation_ttl)
        desired_vars = write_unsafe_vars(os.path.join(workdir, "desired.yml"), {VAR_DESIRED: desired})
        hooks = WaveHooks(self, records, keepers, workdir, playbook=self.playbook, extravars=self.extravars(),
                          cmdline=["-e", "@" + desired_vars], writer=status_writer(self.auth))
        driver = build_driver(resources, fleet, hooks, wait_for_window=args.wait_for_window,
                              capacity_timeout=CAPACITY_TIMEOUT, poll=5.0, notifier=notifier)
        print("nodewright rollout: %s; artifacts in %s" % ("; ".join(
            "%s: %d node(s) with work, policy %s" % (r.name, len(r.work), records[r.name].source)
            for r in driver.resources), workdir), flush=True)
        status, reason = INTERRUPTED, "the run was interrupted"
        try:
            status, reason = driver.run()
        except KeyboardInterrupt:
            status, reason = INTERRUPTED, "the run was interrupted"
        except NodeWrightError as exc:
            status, reason = "error", str(exc)
            print("nodewright rollout: %s" % exc, file=sys.stderr, flush=True)
        finally:
            hooks.finish(status, reason)
            _notified(notifier, [records[r.name] for r in driver.resources])
            self.write_report(self.playbook, [records[r.name].to_dict(r.state, done=r.done)
                                              for r in driver.resources],
                              ([planned.report] if planned.report else []) + hooks.reports, started)
        halted = [records[r.name].reason for r in driver.resources if records[r.name].status == HALTED]
        if halted:
            print("; ".join(halted), file=sys.stderr, flush=True)
        elif status not in ("error", INTERRUPTED):
            print("nodewright rollout: %s" % reason, flush=True)
        return self.blocked_exit(settings.desired, resources_exit(status, halted, hooks.failed))

    def blocked_exit(self, plan, code):
        """``code``, or 2 when a resource of ``plan`` (the run's ``RunPlan``) could not be rolled out
        (rollout.yml's last task): the others rolled out, and the run says which could not and why."""
        blocked = [b for b in plan.blocked if isinstance(b, dict)]
        if not blocked or self.args.resource or code != EXIT_OK:
            return code
        print("nodewright rollout: %d NodeWright resource(s) could not be rolled out: %s" % (
            len(blocked), "; ".join("%s: %s" % (b.get("name"), b.get("reason")) for b in blocked)),
            file=sys.stderr, flush=True)
        return EXIT_FAILED


def cmd_rollout(args):
    problems = argument_problems(args)
    if problems:
        raise NodeWrightError("; ".join(problems))
    if args.resources:
        return ResourcesCli(args).run()
    return WaveRunnerCli(args).run()
