# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The pod of the nodewright.fleet.node connection without a cluster: the pod it creates,
the command lines it runs (run here through /bin/sh to prove their quoting and
stdin handling) and the exec status it reads."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.node import pod as node_pod
from ansible_collections.nodewright.fleet.plugins.module_utils.node.pod import (
    NodePodError,
    exec_argv,
    exit_status,
    fetch_file_argv,
    label_value,
    node_pod_manifest,
    pod_name,
    pod_progress,
    put_file_argv,
)

pytestmark = pytest.mark.unit

TRICKY = "echo \"it's $HOME\" 'a  b' `true` \\ ; printf '%s\\n' done"


# --------------------------------------------------------------------------- the pod

def test_the_pod_reaches_the_host_of_its_node_and_nothing_else():
    pod = node_pod_manifest("gpu-7", "nodewright-gpu-7-abc123", namespace="ops", image="mirror/busybox:1.37",
                            lifetime=600)
    spec = pod["spec"]
    assert pod["metadata"]["namespace"] == "ops"
    assert spec["nodeName"] == "gpu-7", "pinned: no scheduler, so a cordon does not keep it off"
    assert spec["tolerations"] == [{"operator": "Exists"}], "tolerates the cordon, runtime-required, NoExecute"
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    assert "hostIPC" not in spec
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False, "the pod gets no API credentials"
    (container,) = spec["containers"]
    assert container["name"] == node_pod.CONTAINER and container["image"] == "mirror/busybox:1.37"
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert container["command"] == ["sleep", "600"], "it ends on its own if never deleted"
    assert spec["activeDeadlineSeconds"] > 600
    assert container["volumeMounts"] == [{"name": "host", "mountPath": "/host", "mountPropagation": "HostToContainer"}]
    assert spec["volumes"] == [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}]


def test_the_pod_is_labelled_for_cleanup():
    pod = node_pod_manifest("gpu-7.dc1.example.com", "p", owner="ops@bastion")
    labels = pod["metadata"]["labels"]
    assert labels["nodewright.io/node-pod"] == "true"
    assert labels["app.kubernetes.io/managed-by"] == "nodewright"
    assert labels["nodewright.io/node"] == "gpu-7.dc1.example.com"
    assert pod["metadata"]["annotations"] == {"nodewright.io/node": "gpu-7.dc1.example.com",
                                              "nodewright.io/started-by": "ops@bastion"}


def test_pull_secrets_and_priority_class_are_passed_on():
    spec = node_pod_manifest("n", "p", image_pull_secrets=["mirror-creds"], priority_class="system-node-critical")["spec"]
    assert spec["imagePullSecrets"] == [{"name": "mirror-creds"}]
    assert spec["priorityClassName"] == "system-node-critical"


def test_the_host_path_can_be_a_directory_of_the_node():
    spec = node_pod_manifest("n", "p", host_path="/srv/sim/nodes/n/root")["spec"]
    assert spec["volumes"] == [{"name": "host", "hostPath": {"path": "/srv/sim/nodes/n/root", "type": "Directory"}}]
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/host"


@pytest.mark.parametrize("kwargs,problem", [
    ({"host_mount": "/"}, "host_mount"),
    ({"host_mount": "host"}, "host_mount"),
    ({"lifetime": 0}, "lifetime"),
    ({"host_path": "relative/root"}, "host_path"),
    ({"host_path": "/srv/../etc"}, "host_path"),
])
def test_nonsense_settings_are_refused(kwargs, problem):
    with pytest.raises(ValueError) as caught:
        node_pod_manifest("n", "p", **kwargs)
    assert problem in str(caught.value)


@pytest.mark.parametrize("node", ["gpu-7", "GPU_7.dc1.example.com", "x" * 253, "-odd-"])
def test_pod_names_are_dns_labels(node):
    name = pod_name(node, "a1b2c3")
    assert len(name) <= 63 and name.endswith("-a1b2c3") and name.startswith("nodewright-")
    assert all(c.isdigit() or c.islower() or c == "-" for c in name)
    assert "--" not in name.replace("nodewright-", "", 1).rsplit("-", 1)[0] or node == "-odd-"


def test_long_node_names_fit_a_label_value():
    value = label_value("a" * 70 + ".example.com")
    assert len(value) == 63 and value[-1].isalnum()


# --------------------------------------------------------------------------- the commands

def run_here(argv, stdin=b""):
    """Run an exec argv on this machine (chroot=False builds it without chroot)."""
    return subprocess.run(argv, input=stdin, capture_output=True)


def test_commands_run_in_a_chroot_of_the_host_mount():
    assert exec_argv("uname -r") == ["chroot", "/host", "/bin/sh", "-c", "uname -r"]
    assert exec_argv("uname -r", host_mount="/node") == ["chroot", "/node", "/bin/sh", "-c", "uname -r"]
    assert exec_argv("uname -r", chroot=False) == ["/bin/sh", "-c", "uname -r"]


def test_a_command_reaches_the_shell_unchanged():
    proc = run_here(exec_argv(TRICKY, chroot=False))
    expected = subprocess.run(["/bin/sh", "-c", TRICKY], capture_output=True).stdout
    assert proc.returncode == 0 and proc.stdout == expected


def test_pipelined_input_is_read_by_size_not_to_end_of_stream():
    data = b"print('module')\n\x00\xff binary"
    argv = exec_argv("cat; echo; echo rc-of-cat=$?", chroot=False, stdin_size=len(data))
    # more bytes than announced: the command sees exactly the announced ones
    proc = run_here(argv, data + b"TRAILING")
    assert proc.stdout == data + b"\nrc-of-cat=0\n"
    assert argv[:2] == ["/bin/sh", "-c"] and argv[2].startswith("head -c %d | /bin/sh -c " % len(data))


def test_pipelined_command_ends_although_stdin_stays_open():
    # An exec stream cannot always close stdin: head -c must end the input by itself.
    argv = exec_argv("wc -c", chroot=False, stdin_size=3)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(b"abc")
    proc.stdin.flush()
    try:
        out = proc.stdout.read()
        assert proc.wait() == 0 and out.strip() == b"3"
    finally:
        proc.stdin.close()


def test_put_file_writes_exactly_the_bytes_sent(tmp_path):
    target = tmp_path / "dir with space" / "it's a file"
    target.parent.mkdir()
    data = bytes(range(256)) * 100
    argv = put_file_argv(str(target), len(data), chroot=False)
    assert run_here(argv, data + b"extra").returncode == 0
    assert target.read_bytes() == data
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert put_file_argv("/root/.ansible/tmp/x", 3)[:2] == ["chroot", "/host"]


def test_put_file_fails_on_a_short_write(tmp_path):
    target = tmp_path / "short"
    proc = run_here(put_file_argv(str(target), 10, chroot=False), b"abc")
    assert proc.returncode == 1 and b"short write" in proc.stderr


def test_fetch_file_reads_any_name(tmp_path):
    source = tmp_path / "-n $(x) 'q'"
    source.write_bytes(b"\x00payload\n")
    proc = run_here(fetch_file_argv(str(source), chroot=False))
    assert proc.returncode == 0 and proc.stdout == b"\x00payload\n"
    missing = run_here(fetch_file_argv(str(tmp_path / "missing"), chroot=False))
    assert missing.returncode != 0


# --------------------------------------------------------------------------- exec status and pod progress

def test_the_exit_code_comes_from_the_status_channel():
    assert exit_status(b'{"metadata":{},"status":"Success"}') == 0
    failure = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
               "message": "command terminated with non-zero exit code: exit code 3",
               "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    assert exit_status(json.dumps(failure)) == 3


@pytest.mark.parametrize("raw,problem", [
    (b"", "ended without an exit status"),
    (b'{"status":"Failure","reason":"InternalError","message":"unable to upgrade connection: container not '
     b'found (\\"node\\")"}', "unable to upgrade connection"),
    (b"not json", "unreadable status"),
])
def test_a_stream_that_did_not_run_the_command_is_an_error(raw, problem):
    with pytest.raises(NodePodError) as caught:
        exit_status(raw)
    assert problem in str(caught.value)


def pod(phase, waiting=None, terminated=None, running=False, **status):
    state = {}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": "pull access denied"}
    if terminated:
        state["terminated"] = {"reason": terminated, "exitCode": 1}
    if running:
        state["running"] = {"startedAt": "2026-01-01T00:00:00Z"}
    return {"metadata": {"name": "p"},
            "status": dict(status, phase=phase, containerStatuses=[{"name": "node", "state": state}])}


@pytest.mark.parametrize("status,state,words", [
    (pod("Running", running=True), "running", None),
    (pod("Pending", waiting="ContainerCreating"), "waiting", "ContainerCreating"),
    (pod("Pending", waiting="ImagePullBackOff"), "failed", "ImagePullBackOff: pull access denied"),
    (pod("Running", terminated="Error"), "failed", "exited (Error, exit code 1)"),
    (pod("Failed", reason="DeadlineExceeded", message="Pod was active too long"), "failed", "active too long"),
    ({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}}, "failed", "being deleted"),
    ({"metadata": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "node gone"}]}}, "waiting", "node gone"),
])
def test_pod_progress(status, state, words):
    got, why = pod_progress(status)
    assert got == state
    assert (why is None) if words is None else (words in why)
