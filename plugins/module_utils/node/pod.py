# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The privileged pod through which the ``nodewright.fleet.node`` connection
reaches a node's host, and the command lines it runs in that pod.

Pure functions over plain dicts and strings (no Kubernetes client), so the pod
spec, every exec argv and the reading of a pod's status are tested without a
cluster; ``plugins/connection/node.py`` does the I/O.

The pod is pinned to its node with ``nodeName`` (no scheduler, so a cordon does
not keep it off), tolerates every taint (the cordon's, NodeWright's
``runtime-required``, NoExecute ones), shares the host's PID and network
namespaces, and mounts the host's ``/`` at ``/host``. Commands run as
``chroot /host /bin/sh -c CMD``, so they see the host exactly as SSH would.
Its only process sleeps for ``lifetime`` seconds: a pod the controller never
deleted (the controller died) ends on its own, and its labels find it for
cleanup.
"""

from __future__ import annotations

import json
import re
import shlex

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import LABEL_NODE_POD, PREFIX

# Pod labels: what `kubectl get pods -l nodewright.io/node-pod=true` finds, and
# what a drain should recognise as NodeWright's own pod.
NODE_POD_LABEL = LABEL_NODE_POD
NODE_LABEL = PREFIX + "/node"
NODE_ANNOTATION = PREFIX + "/node"
LABELS = {
    "app.kubernetes.io/name": "nodewright",
    "app.kubernetes.io/component": "node-pod",
    "app.kubernetes.io/managed-by": "nodewright",
    NODE_POD_LABEL: "true",
}
CONTAINER = "node"
HOST_VOLUME = "host"

DEFAULT_IMAGE = "docker.io/library/busybox:1.37"
DEFAULT_NAMESPACE = "nodewright"
DEFAULT_HOST_MOUNT = "/host"
DEFAULT_HOST_PATH = "/"
DEFAULT_LIFETIME = 4 * 3600
SHELL = "/bin/sh"

# What the connection calls, as (resource, verb): the chart's <release>-node-pods
# Role must grant each. A WebSocket exec is an HTTP GET, authorised as `get` on
# pods/exec; API servers from 1.35 also check `create` on the upgrade.
REQUIRED_PERMISSIONS = (
    ("pods", "create"),
    ("pods", "get"),
    ("pods", "delete"),
    ("pods/exec", "get"),
    ("pods/exec", "create"),
)

# Container states that will not get better by waiting.
FATAL_WAITING_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                         "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                         "CrashLoopBackOff")

_DNS_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")


class NodePodError(Exception):
    """The pod or a command in it failed for a reason other than the command's exit code."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self):
        return "%s (%s)" % (self.message, self.hint) if self.hint else self.message


def pod_name(node, suffix):
    """``nodewright-<node>-<suffix>``, a valid pod name of at most 63 characters
    (the pod's hostname is its name, which must be a DNS label)."""
    base = _DNS_LABEL_CHARS.sub("-", node.lower()).strip("-") or "node"
    suffix = _DNS_LABEL_CHARS.sub("", suffix.lower())[:8] or "0"
    room = 63 - len("nodewright--") - len(suffix)
    return "nodewright-%s-%s" % (base[:room].rstrip("-"), suffix)


def label_value(text):
    """``text`` as a label value (63 characters of ``[A-Za-z0-9._-]``, alphanumeric
    at both ends); the full node name is kept in an annotation."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def node_pod_manifest(node, name, namespace=DEFAULT_NAMESPACE, image=DEFAULT_IMAGE, host_mount=DEFAULT_HOST_MOUNT,
                      lifetime=DEFAULT_LIFETIME, image_pull_secrets=(), priority_class=None, owner=None,
                      host_path=DEFAULT_HOST_PATH):
    """The pod that gives the connection a root shell on ``node``'s host.

    ``host_path`` is the directory of the node that is the host's root: ``/`` in
    production; the simulator's real nodes point it at each node's own host root."""
    if not host_mount.startswith("/") or host_mount == "/":
        raise ValueError("host_mount must be an absolute path other than / (got %r)" % (host_mount,))
    if not isinstance(host_path, str) or not host_path.startswith("/") or "/../" in host_path + "/":
        raise ValueError("host_path must be an absolute path on the node without '..' (got %r)" % (host_path,))
    lifetime = int(lifetime)
    if lifetime <= 0:
        raise ValueError("the pod lifetime must be a positive number of seconds (got %r)" % (lifetime,))
    annotations = {NODE_ANNOTATION: node}
    if owner:
        annotations[PREFIX + "/started-by"] = owner
    spec = {
        "nodeName": node,
        "restartPolicy": "Never",
        "hostPID": True,
        "hostNetwork": True,
        "dnsPolicy": "Default",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        # A backstop to the sleep below: the kubelet ends the pod even if the image's sleep misbehaves.
        "activeDeadlineSeconds": lifetime + 60,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{
            "name": CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", str(lifetime)],
            "securityContext": {"privileged": True, "runAsUser": 0},
            "volumeMounts": [{"name": HOST_VOLUME, "mountPath": host_mount,
                              "mountPropagation": "HostToContainer"}],
        }],
        "volumes": [{"name": HOST_VOLUME, "hostPath": {"path": host_path, "type": "Directory"}}],
    }
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = dict(LABELS)
    labels[NODE_LABEL] = label_value(node)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": spec}


# --------------------------------------------------------------------------- commands

def _prefix(chroot, host_mount):
    return ["chroot", host_mount] if chroot else []


def exec_argv(cmd, chroot=True, host_mount=DEFAULT_HOST_MOUNT, stdin_size=None):
    """The exec argv that runs the shell command ``cmd`` on the host.

    An exec stream cannot signal the end of stdin on every API server, so input
    (Ansible's pipelining) is announced by size: ``head -c N`` reads exactly that
    much and ends, and ``cmd`` reads it from the pipe."""
    if stdin_size is None:
        return _prefix(chroot, host_mount) + [SHELL, "-c", cmd]
    script = "head -c %d | %s -c %s" % (int(stdin_size), SHELL, shlex.quote(cmd))
    return _prefix(chroot, host_mount) + [SHELL, "-c", script]


def put_file_argv(path, size, chroot=True, host_mount=DEFAULT_HOST_MOUNT):
    """The exec argv that writes the next ``size`` bytes of stdin to ``path`` and
    fails unless exactly that many arrived."""
    script = ('umask 077; head -c %d > "$1" && [ $(wc -c < "$1") -eq %d ] '
              '|| { echo "nodewright: short write to $1" >&2; exit 1; }') % (int(size), int(size))
    return _prefix(chroot, host_mount) + [SHELL, "-c", script, "nodewright-put", path]


def fetch_file_argv(path, chroot=True, host_mount=DEFAULT_HOST_MOUNT):
    """The exec argv that writes ``path`` to stdout."""
    return _prefix(chroot, host_mount) + [SHELL, "-c", 'exec cat -- "$1"', "nodewright-fetch", path]


def exit_status(raw):
    """The exit code from the exec stream's status channel (a ``Status`` object).

    Raises ``NodePodError`` when the status is not about the command's exit
    (the container is gone, the kubelet refused the stream, no status came)."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw or not raw.strip():
        raise NodePodError("the exec stream ended without an exit status",
                           hint="the pod or its node went away (a reboot?); the task can be retried")
    try:
        status = json.loads(raw)
    except ValueError:
        raise NodePodError("the exec stream sent an unreadable status: %s" % raw[:200])
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message"))
                except (TypeError, ValueError):
                    continue
    raise NodePodError(status.get("message") or raw[:200],
                       hint="the kubelet did not run the command; kubectl describe pod shows why")


# --------------------------------------------------------------------------- pod status

def pod_progress(pod):
    """Where a node pod stands, from its raw JSON: ``("running", None)``,
    ``("waiting", why)`` or ``("failed", why)``."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        return "failed", "the pod is being deleted"
    if phase in ("Failed", "Succeeded"):
        why = status.get("message") or status.get("reason") or "its process ended"
        return "failed", "the pod ended (%s): %s" % (phase, why)
    containers = status.get("containerStatuses") or []
    for c in containers:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return "failed", "container %s: %s: %s" % (c.get("name"), waiting["reason"],
                                                       waiting.get("message") or "")
        terminated = (c.get("state") or {}).get("terminated")
        if terminated:
            return "failed", "container %s exited (%s, exit code %s)" % (
                c.get("name"), terminated.get("reason") or "terminated", terminated.get("exitCode"))
    if phase == "Running" and containers and all((c.get("state") or {}).get("running") for c in containers):
        return "running", None
    reasons = [((c.get("state") or {}).get("waiting") or {}).get("reason") for c in containers]
    reasons = [r for r in reasons if r]
    for cond in status.get("conditions") or []:
        if cond.get("status") == "False" and cond.get("message"):
            reasons.append(cond["message"])
    return "waiting", "%s%s" % (phase, (": " + "; ".join(reasons)) if reasons else "")
