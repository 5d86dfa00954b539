# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A labelled set of fresh simulator nodes with an inventory that selects them, and
runners for the collection's playbooks against them (the rollout tests share it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import yaml
from nodewright_sim import hostroot

from k8s_helpers import ensure_crds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUP, VERSION = "nodewright.io", "v1alpha1"


class Fleet(object):
    """A labelled set of fresh simulator nodes, an inventory that selects them, and runners."""

    def __init__(self, sim, tmp_path, pools):
        self.sim = sim
        self.tmp = tmp_path
        self.label = "rollout-test-%s" % uuid.uuid4().hex[:6]
        self.nodes = []
        for pool, count in pools:
            self.nodes += sim.add_nodes(pool, count)
        for n in self.nodes:
            sim.core.patch_node(n, {"metadata": {"labels": {"rollout-test": self.label}}})
        self.custom = ensure_crds(sim)
        (tmp_path / "fleet.k8s_nodes.yml").write_text(yaml.safe_dump({
            "plugin": "nodewright.fleet.k8s_nodes", "label_selectors": "rollout-test=%s" % self.label,
            "connection": "local"}))

    def create(self, kind, name, spec):
        plural = {"NodeWright": "nodewrights", "DeploymentPolicy": "deploymentpolicies"}[kind]
        body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": kind, "metadata": {"name": name}, "spec": spec}
        self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def resource(self, name):
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "nodewrights", name)

    def playbook(self, playbook, *extra):
        env = self.sim.env()
        env.update({"ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
                    "NODEWRIGHT_REPORT_PATH": str(self.tmp / "report.json"), "ANSIBLE_LOCALHOST_WARNING": "false",
                    "ANSIBLE_DEPRECATION_WARNINGS": "false", "ANSIBLE_FORKS": "10"})
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
               str(self.tmp / "fleet.k8s_nodes.yml"), os.path.join(REPO, "playbooks", playbook)] + list(extra)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        try:
            proc.report = json.loads((self.tmp / "report.json").read_text())
        except (OSError, ValueError):
            proc.report = None
        return proc

    def start(self, playbook, *extra, name="run", env=None):
        """``playbook`` in the background (its own session, its own report); returns the Popen."""
        environ = self.sim.env()
        environ.update({"ANSIBLE_CALLBACKS_ENABLED": "nodewright.fleet.report",
                        "NODEWRIGHT_REPORT_PATH": str(self.tmp / ("%s.report.json" % name)),
                        "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_DEPRECATION_WARNINGS": "false",
                        "ANSIBLE_FORKS": "10"})
        environ.update(env or {})
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
               str(self.tmp / "fleet.k8s_nodes.yml"), os.path.join(REPO, "playbooks", playbook)] + list(extra)
        out = open(str(self.tmp / ("%s.out" % name)), "w")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
        proc.name = name
        return proc

    def finished(self, proc, timeout=600):
        """Wait for a ``start()``ed run; its output and report."""
        proc.wait(timeout=timeout)
        proc.output = (self.tmp / ("%s.out" % proc.name)).read_text()
        try:
            proc.report = json.loads((self.tmp / ("%s.report.json" % proc.name)).read_text())
        except (OSError, ValueError):
            proc.report = None
        return proc

    def plan(self, resource):
        path = self.tmp / "plan.json"
        proc = self.playbook("plan.yml", "-e", "nodewright_resource=%s" % resource,
                             "-e", "nodewright_plan_path=%s" % path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return json.loads(path.read_text())["rollouts"][0]

    def sysctl(self, node, key):
        return hostroot.run(self.sim.host_root(node), "sysctl -n %s" % key).stdout.strip()

    def node_labels(self, node):
        return self.sim.core.read_node(node).metadata.labels or {}


def waves_from_report(report):
    """Wave membership (sorted node names per wave) as the strategy recorded it."""
    waves = {}
    for run in report.get("rollout") or []:
        for node, where in run.get("assignment", {}).items():
            waves.setdefault(where["wave"], []).append(node)
    return [sorted(waves[k]) for k in sorted(waves)]


def process_tree(pid):
    """``pid`` and every descendant (ansible-core's workers call setsid, so a process
    group does not hold them all)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, stack = [], [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack.extend(children.get(current, []))
    return tree


def kill_tree(pid):
    """Stop the whole tree first (so nothing forks or cleans up), then kill it."""
    tree = process_tree(pid)
    for p in tree:
        try:
            os.kill(p, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    for p in process_tree(pid) + tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


