# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodewright.fleet.node connection plugin inside Ansible, without a cluster: its
options, become handling through Ansible's own command path, file transfers through
exec, and its ansible-doc page."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import become_loader, connection_loader
from ansible.template import Templar

from ansible_collections.nodewright.fleet.plugins.module_utils.node import pod as node_pod
from ansible_collections.nodewright.fleet.plugins.module_utils.node.pod import fetch_file_argv, put_file_argv

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


class RecordingPod(object):
    """Stands in for the pod: records each exec instead of sending it."""

    node = "gpu-7"
    where = "pod nodewright/nodewright-gpu-7-x on node gpu-7"

    def __init__(self, out=b"out", rc=0):
        self.calls, self.out, self.rc, self.deleted = [], out, rc, False

    def exec(self, argv, stdin=None):
        self.calls.append((argv, stdin))
        return self.rc, self.out, b"err"

    def delete(self):
        self.deleted = True


class Probe(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {}


@pytest.fixture
def connection():
    # Loaded from its directory, as the collection loader cannot be set up once
    # other tests imported ansible_collections; options come from DOCUMENTATION all the same.
    connection_loader.add_directory(os.path.join(REPO, "plugins", "connection"))
    conn = connection_loader.get("node", PlayContext(), "/dev/null")
    conn.set_options(var_options={"inventory_hostname": "inv-name", "ansible_host": "gpu-7",
                                  "nodewright_node_pod_namespace": "ops"})
    conn._pod = RecordingPod()
    return conn


def low_level(conn, cmd, become_user=None, in_data=None):
    if become_user:
        plugin = become_loader.get("sudo")
        plugin.set_options(direct={"become_user": become_user})
        conn.set_become_plugin(plugin)
    action = Probe(Task(), conn, PlayContext(), DataLoader(), Templar(loader=DataLoader()))
    return action._low_level_execute_command(cmd, in_data=in_data)


def test_options_come_from_inventory_vars(connection):
    assert connection.get_option("node") == "gpu-7", "ansible_host (the node name) wins over the inventory name"
    assert connection.get_option("namespace") == "ops"
    assert connection.get_option("pod_image") == node_pod.DEFAULT_IMAGE
    assert connection.get_option("chroot") is True and connection.get_option("host_mount") == "/host"
    assert connection.get_option("host_path") == "/", "production mounts the host's /"


def test_become_to_root_is_skipped_because_commands_already_run_as_root(connection):
    low_level(connection, "id -u", become_user="root")
    argv, stdin = connection._pod.calls[-1]
    assert argv[:4] == ["chroot", "/host", "/bin/sh", "-c"] and stdin is None
    assert "sudo" not in argv[4] and "id -u" in argv[4]


def test_become_to_another_user_uses_the_hosts_become_method(connection):
    low_level(connection, "id -u", become_user="postgres")
    argv, _ = connection._pod.calls[-1]
    assert "sudo -H -S -n  -u postgres" in argv[4]


def test_pipelined_modules_are_sent_on_stdin(connection):
    result = low_level(connection, "/usr/bin/python3", in_data=b"MODULE")
    argv, stdin = connection._pod.calls[-1]
    assert stdin == b"MODULE" and argv[4].startswith("head -c 6 | /bin/sh -c ")
    assert result["stdout"] == "out"


def test_put_and_fetch_go_through_exec(connection, tmp_path):
    local = tmp_path / "module.py"
    local.write_bytes(b"payload")
    connection.put_file(str(local), "/root/.ansible/tmp/x/module.py")
    argv, stdin = connection._pod.calls[-1]
    assert stdin == b"payload" and argv == put_file_argv("/root/.ansible/tmp/x/module.py", 7)

    connection._pod.out = b"\x00fetched"
    connection.fetch_file("/etc/hostname", str(tmp_path / "got" / "hostname"))
    assert connection._pod.calls[-1] == (fetch_file_argv("/etc/hostname"), None)
    assert (tmp_path / "got" / "hostname").read_bytes() == b"\x00fetched"


def test_a_failed_transfer_names_the_file_and_node(connection, tmp_path):
    from ansible.errors import AnsibleError, AnsibleFileNotFound
    with pytest.raises(AnsibleFileNotFound):
        connection.put_file(str(tmp_path / "missing"), "/tmp/x")
    connection._pod.rc = 1
    local = tmp_path / "f"
    local.write_bytes(b"x")
    with pytest.raises(AnsibleError) as caught:
        connection.put_file(str(local), "/readonly/x")
    assert "failed to write /readonly/x on node gpu-7: err" in str(caught.value)


def test_close_deletes_the_pod_and_reset_starts_over(connection):
    pod = connection._pod
    connection.reset()
    assert pod.deleted and connection._pod is None and not connection._connected


def test_ansible_doc_renders_the_connection():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", "connection",
                           "nodewright.fleet.node"], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "nodewright_node_pod_image" in proc.stdout and "K8S_AUTH_KUBECONFIG" in proc.stdout
