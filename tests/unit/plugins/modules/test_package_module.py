# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""nodewright.fleet.package and the packages role through ansible-playbook
(connection local, on simulator host roots), and the action plugin's transfer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.action.package import ActionModule
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.modules.package import _extract

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)



def playbook(tmp_path, text, *args, **extra_vars):
    """Run a playbook against localhost; returns what it wrote to ``out``."""
    book = tmp_path / "play.yml"
    book.write_text(textwrap.dedent(text))
    out = tmp_path / "out.json"
    inventory = tmp_path / "hosts"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="0")
    extra = dict(extra_vars, out=str(out))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(book),
                           "-e", json.dumps(extra)] + list(args), capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_check_mode_plans_and_changes_nothing(root, tmp_path):
    before = sorted(os.listdir(os.path.join(root, "var/lib")))
    result = playbook(tmp_path, """
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: Plan the shipped sysctl package
              nodewright.fleet.package:
                name: sysctl
                host_root: "{{ root }}"
                config:
                  vm.swappiness: "10"
              register: planned
            - name: Plan through the role
              ansible.builtin.include_role:
                name: nodewright.fleet.packages
              vars:
                nodewright_packages:
                  - name: kdump
                packages_host_root: "{{ root }}"
            - name: Keep the results
              ansible.builtin.copy:
                content: "{{ {'planned': planned, 'interrupt': nodewright_packages_interrupt,
                              'role': nodewright_packages_result} | to_json }}"
                dest: "{{ out }}"
                mode: "0644"
              check_mode: false
        """, "--check", root=root)
    planned = result["planned"]
    assert planned["changed"] and planned["results"] == []
    assert [(e["name"], e["action"]) for e in planned["plan"]["packages"]] == [("sysctl", "apply")]
    assert "sysctl: apply 1.0.0" in planned["msg"]
    assert result["interrupt"] == {"type": "reboot", "services": []}
    assert result["role"]["plan"]["packages"][0]["action"] == "apply"
    assert sorted(os.listdir(os.path.join(root, "var/lib"))) == before
    assert not os.path.exists(os.path.join(root, "var/lib/nodewright"))
    assert hostroot.run(root, "sysctl -n vm.swappiness").stdout.strip() == "60"


YAML_PACKAGE = """\
name: motd
version: 2.0.0
description: a message of the day
expectedConfig: [text]
stages:
  config:
    - path: motd.sh
      idempotent: true
  config-check:
    - path: motd.sh
      arguments: [check]
      idempotent: true
  uninstall:
    - path: motd.sh
      arguments: [remove]
      idempotent: true
  uninstall-check:
    - path: motd.sh
      arguments: [removed]
      idempotent: true
"""
MOTD_SCRIPT = """\
#!/bin/sh
case "${1:-}" in
  check) cmp "$NODEWRIGHT_CONFIG_DIR/text" /etc/motd ;;
  remove) rm -f /etc/motd ;;
  removed) test ! -e /etc/motd ;;
  *) cp "$NODEWRIGHT_CONFIG_DIR/text" /etc/motd ;;
esac
"""


def test_apply_rerun_role_and_controller_validation(root, tmp_path):
    yaml_pkg = tmp_path / "motd"
    (yaml_pkg / "steps").mkdir(parents=True)
    (yaml_pkg / "package.yaml").write_text(YAML_PACKAGE)
    (yaml_pkg / "steps" / "motd.sh").write_text(MOTD_SCRIPT)
    broken = tmp_path / "broken"
    (broken / "steps").mkdir(parents=True)
    (broken / "steps" / "motd.sh").write_text(MOTD_SCRIPT)
    (broken / "package.yaml").write_text(YAML_PACKAGE.replace("- path: motd.sh\n      idempotent: true\n  config-check",
                                                              "- path: motd-v2.sh\n      idempotent: true\n  config-check"))
    result = playbook(tmp_path, """
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: A broken package is refused before the node is touched
              nodewright.fleet.package:
                src: "{{ broken }}"
                host_root: "{{ root }}"
                config: {text: hi}
              register: refused
              ignore_errors: true
            - name: Apply a shipped package and a YAML one
              nodewright.fleet.package: &apply
                host_root: "{{ root }}"
                resource: web
                packages:
                  - name: sysctl
                    config: {vm.swappiness: "10"}
                  - src: "{{ yaml_pkg }}"
                    config: {text: "hello from NodeWright"}
              register: first
            - name: Again
              nodewright.fleet.package: *apply
              register: second
            - name: The role, with the state of the annotation
              ansible.builtin.include_role:
                name: nodewright.fleet.packages
              vars:
                nodewright_packages:
                  - name: sysctl
                    config: {vm.swappiness: "20"}
                  - name: motd
                    state: absent
                packages_host_root: "{{ root }}"
                packages_resource: web
                packages_recorded_state: "{{ second.annotation.value }}"
            - name: Keep the results
              ansible.builtin.copy:
                content: "{{ {'refused': refused, 'first': first, 'second': second,
                              'interrupt': nodewright_packages_interrupt, 'role': nodewright_packages_result}
                             | to_json }}"
                dest: "{{ out }}"
                mode: "0644"
        """, root=root, broken=str(broken), yaml_pkg=str(yaml_pkg))

    refused = result["refused"]
    assert refused["failed"]
    assert "broken/package.yaml:7: stages.config[0].path: package 'motd'" in refused["msg"]
    assert "step script 'motd-v2.sh' does not exist" in refused["msg"]

    first = result["first"]
    assert first["changed"]
    assert [(r["name"], r["action"]) for r in first["results"]] == [("motd", "apply"), ("sysctl", "apply")]
    assert first["state"]["status"] == "complete"
    assert first["annotation"]["key"] == "nodewright.io/state-web"
    assert json.loads(first["annotation"]["value"]) == first["state"]
    assert [(s["stage"], s["ok"]) for s in first["results"][0]["steps"]] == [("config", True), ("config-check", True)]

    second = result["second"]
    assert not second["changed"], "a rerun is idempotent"
    assert second["state"] == first["state"]

    role = result["role"]
    # The uninstall ran from the copy on the host, whose package.yaml became package.json.
    assert [(r["name"], r["action"]) for r in role["results"]] == [("motd", "uninstall"), ("sysctl", "config")]
    assert result["interrupt"] == {"type": "noop", "services": []}
    assert sorted(role["state"]["packages"]) == ["sysctl"]
    assert hostroot.run(root, "sysctl -n vm.swappiness").stdout.strip() == "20"
    assert not os.path.exists(os.path.join(root, "etc/motd"))
    assert not os.path.exists(os.path.join(broken, "steps", "motd-v2.sh"))


def test_role_reports_a_failing_step(root, tmp_path):
    result = playbook(tmp_path, """
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: A parameter the kernel does not have
              block:
                - name: Apply through the role
                  ansible.builtin.include_role:
                    name: nodewright.fleet.packages
                  vars:
                    nodewright_packages:
                      - name: sysctl
                        config: {kernel.sched_latency_ns: "1000000"}
                    packages_host_root: "{{ root }}"
              rescue:
                - name: Keep the results
                  ansible.builtin.copy:
                    content: "{{ {'msg': ansible_failed_result.msg, 'role': nodewright_packages_result} | to_json }}"
                    dest: "{{ out }}"
                    mode: "0644"
        """, root=root)
    assert "kernel.sched_latency_ns does not exist" in result["msg"]
    assert result["role"]["state"]["packages"]["sysctl"]["state"] == "erroring"
    assert result["role"]["state"]["status"] == "erroring"
    assert result["role"]["results"][0]["steps"][-1]["log"]


def test_ansible_doc_renders():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(BIN, "ansible-doc"), "nodewright.fleet.package"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for words in ("host_root", "recorded_state", "post-interrupt", "RETURN VALUES", "annotation"):
        assert words in proc.stdout


class _Shell(object):
    tmpdir = None

    @staticmethod
    def join_path(*parts):
        return os.path.join(*parts)


class _Connection(object):
    transport = "ssh"
    _load_name = "ssh"
    _shell = _Shell()


def test_a_remote_host_gets_the_package_as_an_archive(tmp_path):
    """The transfer an SSH or k8s connection takes: archive, send, unpack on the node."""
    action = ActionModule.__new__(ActionModule)
    action._connection = _Connection()
    remote = tmp_path / "remote"
    remote.mkdir()
    sent = []

    def make_tmp():
        _Connection._shell.tmpdir = str(remote)
        return str(remote)

    def transfer(local, remote_path):
        sent.append(remote_path)
        with open(local, "rb") as src, open(remote_path, "wb") as dst:
            dst.write(src.read())

    action._make_tmp_path = make_tmp
    action._transfer_file = transfer
    action._fixup_perms2 = lambda paths: None
    staging = tmp_path / "staging"
    staging.mkdir()
    specs = action._transfer([{"name": "kdump", "src": os.path.join(REPO, "packages", "kdump")},
                              {"name": "gone", "state": "absent"}], str(staging))
    assert specs[0]["src"] == sent[0] and sent[0].endswith(".tar.gz")
    assert specs[1] == {"name": "gone", "state": "absent"}
    unpacked = _extract(specs[0]["src"], str(tmp_path))
    assert load_package(unpacked).name == "kdump"
    assert os.access(os.path.join(unpacked, "steps", "kdump.sh"), os.X_OK)


def test_an_archive_cannot_write_outside_its_directory(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(str(evil), "w:gz") as tar:
        tar.add(str(payload), arcname="../../etc/owned")
    with pytest.raises(NodeWrightError) as caught:
        _extract(str(evil), str(tmp_path))
    assert "outside the package" in str(caught.value)


