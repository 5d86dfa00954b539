# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""nodewright.fleet.node: reach a Kubernetes node's host without SSH, through a
short-lived privileged pod on that node and the pods/exec API."""

from __future__ import annotations

DOCUMENTATION = r"""
name: node
short_description: Reach a Kubernetes node's host through a short-lived privileged pod (no SSH)
version_added: "0.1.0"
description:
  - Runs Ansible on a node's host without SSH. On first use in a task it creates a privileged pod pinned
    to the node (C(nodeName)), with the host's PID and network namespaces and the host's C(/) mounted at
    O(host_mount); it tolerates every taint, so a cordoned node or one tainted
    C(nodewright.io/runtime-required) is reached too. It waits until the pod runs.
  - Commands run through the pods/exec API as C(chroot /host /bin/sh -c ...), as root, so modules see the
    host as over SSH and use the host's Python. Files travel through exec streams. The pod is deleted when
    Ansible closes the connection (after each task).
  - The pod carries the label C(nodewright.io/node-pod=true) and the node's name (label
    C(nodewright.io/node), annotation C(nodewright.io/node)); its only process sleeps for O(pod_lifetime)
    seconds, so a pod whose controller died ends on its own.
  - Credentials come from the same places as every NodeWright module (the options below, the
    C(K8S_AUTH_*) environment, a kubeconfig, or the in-cluster service account). The account needs, in
    O(namespace), C(create), C(get), C(delete) on C(pods) and C(get), C(create) on C(pods/exec) - the
    Helm chart's C(<release>-node-pods) Role.
  - See C(docs/connection.md) in the collection for how it works, its security, GKE/COS and an end-to-end run.
author:
  - NodeWright maintainers (@nodewright)
extends_documentation_fragment:
  - connection_pipelining
options:
  node:
    description: Name of the Kubernetes node to reach (the inventory plugin sets C(ansible_host) to it).
    type: str
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: delegated_vars['ansible_host']
  namespace:
    description:
      - Namespace of the node pods. It must allow privileged pods
        (C(pod-security.kubernetes.io/enforce=privileged)).
    type: str
    default: nodewright
    env:
      - name: NODEWRIGHT_NAMESPACE
    vars:
      - name: nodewright_node_pod_namespace
  pod_image:
    description:
      - Image of the node pod. With O(chroot) it needs only C(sleep) and C(chroot) (any busybox does);
        commands run with the host's own tools. Without O(chroot), commands run in this image, which then
        needs C(/bin/sh), C(head), C(wc), C(cat) and, for modules, Python.
      - Pin it by digest and mirror it where nodes cannot reach Docker Hub.
    type: str
    default: docker.io/library/busybox:1.37
    env:
      - name: NODEWRIGHT_NODE_POD_IMAGE
    vars:
      - name: nodewright_node_pod_image
  pod_image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull O(pod_image) with.
    type: list
    elements: str
    default: []
    vars:
      - name: nodewright_node_pod_image_pull_secrets
  pod_priority_class:
    description: PriorityClass of the node pod, e.g. one that lets it in on a node full of GPU jobs.
    type: str
    vars:
      - name: nodewright_node_pod_priority_class
  host_path:
    description:
      - The directory of the node that is mounted as the host's root (a C(hostPath) volume).
      - V(/) in production. The local simulator's real nodes point it at each node's own host root
        (the node's annotation C(sim.nodewright.io/host-root)), so that commands never reach the machine
        that runs the simulator.
    type: str
    default: /
    vars:
      - name: nodewright_node_pod_host_path
  host_mount:
    description: Where O(host_path) (the host's C(/)) is mounted in the pod.
    type: str
    default: /host
    vars:
      - name: nodewright_node_pod_host_mount
  chroot:
    description:
      - Run commands in a chroot of the host (V(true)), or in the pod's own container with the host at
        O(host_mount) (V(false); for hosts without Python such as Container-Optimized OS, with an image that
        has Python, and C(packages_host_root=/host)).
    type: bool
    default: true
    vars:
      - name: nodewright_node_pod_chroot
  pod_lifetime:
    description:
      - Seconds after which the pod ends on its own if nobody deleted it. Longer than the longest task.
    type: int
    default: 14400
    vars:
      - name: nodewright_node_pod_lifetime
  timeout:
    description:
      - Seconds to wait for the pod to run (image pull included) before the connection fails.
      - C(ansible.builtin.reboot) lowers it while it waits for the node to come back.
    type: int
    default: 120
    vars:
      - name: nodewright_node_pod_timeout
  kubeconfig:
    description: Path to a kubeconfig file (else C(K8S_AUTH_KUBECONFIG), C(KUBECONFIG), C(~/.kube/config), in-cluster).
    type: path
    env:
      - name: K8S_AUTH_KUBECONFIG
    vars:
      - name: nodewright_k8s_kubeconfig
  context:
    description: The kubeconfig context to use.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
    vars:
      - name: nodewright_k8s_context
  host:
    description: URL of the Kubernetes API server.
    type: str
    env:
      - name: K8S_AUTH_HOST
    vars:
      - name: nodewright_k8s_host
  api_key:
    description: Bearer token (set by the AWX/AAP Kubernetes credential as C(K8S_AUTH_API_KEY)).
    type: str
    env:
      - name: K8S_AUTH_API_KEY
    vars:
      - name: nodewright_k8s_api_key
  ca_cert:
    description: CA certificate that signed the API server's certificate.
    type: path
    env:
      - name: K8S_AUTH_SSL_CA_CERT
    vars:
      - name: nodewright_k8s_ca_cert
  client_cert:
    description: Client certificate.
    type: path
    env:
      - name: K8S_AUTH_CERT_FILE
    vars:
      - name: nodewright_k8s_client_cert
  client_key:
    description: Client key.
    type: path
    env:
      - name: K8S_AUTH_KEY_FILE
    vars:
      - name: nodewright_k8s_client_key
  validate_certs:
    description: Whether to verify the API server's certificate.
    type: bool
    env:
      - name: K8S_AUTH_VERIFY_SSL
    vars:
      - name: nodewright_k8s_validate_certs
  proxy:
    description: HTTP proxy for API requests.
    type: str
    env:
      - name: K8S_AUTH_PROXY
    vars:
      - name: nodewright_k8s_proxy
requirements:
  - kubernetes >= 30.1.0 (Python library) on the controller
notes:
  - Commands run as root. A C(become) to root is a no-op (no sudo needed on the host); a C(become_user)
    other than root uses the become method on the host.
  - The pod is pinned with C(nodeName), so the scheduler, a cordon and taints do not keep it off the node;
    the kubelet still admits it, so a node without free pod slots refuses it.
"""

EXAMPLES = r"""
# inventory: the k8s_nodes inventory plugin with `connection: k8s` sets
# ansible_connection=nodewright.fleet.node and ansible_host=<node name>.
- name: Look at a node's kernel without SSH
  hosts: gpu_nodes
  gather_facts: false
  vars:
    nodewright_node_pod_namespace: nodewright
    nodewright_node_pod_image: registry.example.com/mirror/busybox@sha256:...
  tasks:
    - name: Kernel release
      ansible.builtin.command: uname -r
      changed_when: false
"""

import getpass
import os
import signal
import socket
import time
import uuid

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import client as k8s_client
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.node import pod as node_pod
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError

display = Display()

# The exec stream's channels. One name per assignment: ansible-doc reads this file's top level
# and warns (on stderr) about tuple assignments.
STDOUT = 1
STDERR = 2
STATUS = 3
CHUNK = 64 * 1024
PING_EVERY = 30.0  # keeps proxies and load balancers from closing a quiet stream
POLL = 0.5


class NodePod(object):
    """One privileged pod on one node: created, waited for, used through exec,
    deleted. Errors are ``NodePodError`` with a hint."""

    def __init__(self, api, node, namespace=node_pod.DEFAULT_NAMESPACE, image=node_pod.DEFAULT_IMAGE,
                 host_mount=node_pod.DEFAULT_HOST_MOUNT, chroot=True, lifetime=node_pod.DEFAULT_LIFETIME,
                 image_pull_secrets=(), priority_class=None, timeout=120, clock=time.monotonic, sleep=time.sleep,
                 host_path=node_pod.DEFAULT_HOST_PATH):
        # Checked before any request: the node's name goes into a URL path and the pod's spec.
        names.node_name(node, "node (ansible_host)")
        names.namespace(namespace, "namespace (nodewright_node_pod_namespace)")
        for n, secret in enumerate(image_pull_secrets or ()):
            names.object_name(secret, "pod_image_pull_secrets[%d]" % n, "Secret")
        if priority_class:
            names.object_name(priority_class, "pod_priority_class", "PriorityClass")
        self.api = api
        self.node = node
        self.namespace = namespace
        self.image = image
        self.host_mount = host_mount
        self.host_path = host_path
        self.chroot = chroot
        self.lifetime = lifetime
        self.image_pull_secrets = list(image_pull_secrets or ())
        self.priority_class = priority_class
        self.timeout = timeout
        self.name = node_pod.pod_name(node, uuid.uuid4().hex[:6])
        self.created = False
        self._detached = None
        self._clock = clock
        self._sleep = sleep

    @property
    def where(self):
        return "pod %s/%s on node %s" % (self.namespace, self.name, self.node)

    def manifest(self):
        try:
            owner = "%s@%s" % (getpass.getuser(), socket.gethostname())
        except (KeyError, OSError):
            owner = None
        return node_pod.node_pod_manifest(
            self.node, self.name, namespace=self.namespace, image=self.image, host_mount=self.host_mount,
            lifetime=self.lifetime, image_pull_secrets=self.image_pull_secrets,
            priority_class=self.priority_class, owner=owner, host_path=self.host_path)

    def _core(self):
        from kubernetes import client
        return client.CoreV1Api(self.api)

    def start(self):
        """Create the pod and wait until it runs; a pod that cannot start is deleted."""
        self._check_node()
        try:
            # Made now, while the kubeconfig's credential files are there (see delete).
            self._detached = k8s_client.detached_api_client(self.api)
        except Exception as exc:  # pylint: disable=broad-except  # delete() falls back to the usual client
            display.vvv("no detached client for %s: %s" % (self.where, exc), host=self.node)
        # Counted as created from the request on: a signal that lands while the API
        # server is creating it still deletes it (a pod that was never made is a 404).
        self.created = True
        try:
            k8s_client.call("create node pod in namespace %s" % self.namespace,
                            self._core().create_namespaced_pod, self.namespace, self.manifest())
        except NodeWrightError as exc:
            if not exc.details.get("status"):  # no answer: the pod may have been made all the same
                try:
                    self.delete()
                except node_pod.NodePodError as failed:
                    display.warning(str(failed))
            self.created = False
            raise self._explain_create(exc)
        try:
            self.wait_running()
        except node_pod.NodePodError:
            try:
                self.delete()
            except node_pod.NodePodError as exc:
                display.warning(str(exc))
            raise

    def _check_node(self):
        path = k8s_client.api_path("v1", "nodes", self.node, name_rule="node", field="node (ansible_host)")
        try:
            k8s_client.get_json(self.api, path, "read node %s" % self.node)
        except NodeWrightError as exc:
            status = exc.details.get("status")
            if status == 404:
                raise node_pod.NodePodError("node %s does not exist" % self.node,
                                            hint="check the inventory: ansible_host must be a node name "
                                                 "(kubectl get nodes)")
            if status != 403:  # reading nodes is not required, creating the pod is
                raise node_pod.NodePodError(str(exc))

    def _explain_create(self, exc):
        status = exc.details.get("status")
        text = exc.message
        if status == 403 and "PodSecurity" in text:
            return node_pod.NodePodError(
                "namespace %s does not allow the privileged node pod: %s" % (self.namespace, text),
                hint="label it: kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged"
                     % self.namespace)
        if status in (403, 422) and ("ValidatingAdmissionPolicy" in text or "admission webhook" in text):
            return node_pod.NodePodError(
                "an admission policy refused the node pod in namespace %s: %s" % (self.namespace, text),
                hint="the policy named there must admit NodeWright's node pods (label nodewright.io/node-pod=true: "
                     "privileged, hostPID, hostNetwork, a hostPath of the host's root)")
        if status == 403:
            return node_pod.NodePodError(
                "not allowed to create pods in namespace %s: %s" % (self.namespace, text),
                hint="grant create/get/delete on pods and get/create on pods/exec there (the Helm chart's "
                     "<release>-node-pods Role), or set nodewright_node_pod_namespace to the namespace that "
                     "has them")
        if status == 404:
            return node_pod.NodePodError("namespace %s does not exist" % self.namespace,
                                         hint="create it (and label it pod-security.kubernetes.io/enforce="
                                              "privileged), or set nodewright_node_pod_namespace")
        return node_pod.NodePodError(str(exc))

    def read(self):
        return k8s_client.get_json(self.api, k8s_client.api_path("v1", "pods", self.name, namespace=self.namespace),
                                   "read %s" % self.where)

    def wait_running(self):
        deadline = self._clock() + self.timeout
        last = "not seen yet"
        while True:
            try:
                state, why = node_pod.pod_progress(self.read())
            except NodeWrightError as exc:
                state, why = "waiting", str(exc)
            if state == "running":
                return
            if state == "failed":
                raise node_pod.NodePodError("%s cannot run: %s" % (self.where, why),
                                            hint=_start_hint(why, self.image))
            last = why
            if self._clock() >= deadline:
                raise node_pod.NodePodError("%s is not running after %ss (%s)" % (self.where, self.timeout, last),
                                            hint="is the node Ready and its kubelet up? A node that is "
                                                 "rebooting accepts the pod once it is back")
            self._sleep(POLL)

    def delete(self, detached=False):
        """Delete the pod without waiting; a pod already gone is fine.

        ``detached`` (from a signal handler) sends the request through a client made when
        the pod was started, with a pool of its own and the credentials in memory: the
        usual pool may be in use by the code the signal interrupted, and a new connection
        of the usual client reads the kubeconfig's credential files, which the Ansible
        controller removes when it exits, often before its worker's handler runs."""
        if not self.created:
            return
        from kubernetes import client
        core = client.CoreV1Api(self._detached if detached and self._detached is not None else self.api)
        try:
            k8s_client.call("delete %s" % self.where, core.delete_namespaced_pod, self.name,
                            self.namespace, grace_period_seconds=0)
        except NodeWrightError as exc:
            if exc.details.get("status") != 404:
                raise node_pod.NodePodError(str(exc), hint="delete it by hand: kubectl delete pod -n %s %s"
                                            % (self.namespace, self.name))
        self.created = False

    def exec(self, argv, stdin=None):
        """Run ``argv`` in the pod; returns (exit code, stdout bytes, stderr bytes)."""
        from kubernetes.stream import stream
        try:
            ws = stream(self._core().connect_get_namespaced_pod_exec, self.name, self.namespace, command=argv,
                        container=node_pod.CONTAINER, stdin=stdin is not None, stdout=True, stderr=True,
                        tty=False, _preload_content=False, binary=True)
        except Exception as exc:  # the client reports a refused upgrade as ApiException(status=0)
            raise _explain_exec(exc, self)
        out, err, status = [], [], []
        try:
            if stdin:
                view = memoryview(stdin)
                for offset in range(0, len(view), CHUNK):
                    ws.write_stdin(bytes(view[offset:offset + CHUNK]))
                    _drain(ws, out, err, status)
            last_ping = self._clock()
            while ws.is_open():
                ws.update(timeout=PING_EVERY)
                _drain(ws, out, err, status)
                if self._clock() - last_ping >= PING_EVERY:
                    ws.sock.ping()
                    last_ping = self._clock()
            _drain(ws, out, err, status)
        except node_pod.NodePodError:
            raise
        except Exception as exc:
            raise node_pod.NodePodError("the exec stream to %s broke: %s" % (self.where, exc),
                                        hint="the node may be rebooting or the pod gone; retry the task")
        finally:
            ws.close()
        try:
            code = node_pod.exit_status(b"".join(status))
        except node_pod.NodePodError as exc:
            raise node_pod.NodePodError("cannot exec in %s: %s" % (self.where, exc.message), hint=exc.hint)
        return code, b"".join(out), b"".join(err)


def _drain(ws, out, err, status):
    for channel, sink in ((STDOUT, out), (STDERR, err), (STATUS, status)):
        data = ws.read_channel(channel, timeout=0)
        if data:
            sink.append(data if isinstance(data, bytes) else data.encode("utf-8"))


def _start_hint(why, image):
    if "Image" in why or "image" in why:
        return "the node cannot pull %s: mirror it to a registry the nodes reach and set " \
               "nodewright_node_pod_image (and nodewright_node_pod_image_pull_secrets)" % image
    return "kubectl describe pod shows the kubelet's reason"


def _explain_exec(exc, pod):
    text = str(getattr(exc, "reason", None) or exc)
    if "403" in text:
        return node_pod.NodePodError(
            "not allowed to exec in %s" % pod.where,
            hint="exec over a WebSocket needs both get and create on pods/exec in namespace %s" % pod.namespace)
    return node_pod.NodePodError("cannot exec in %s: %s" % (pod.where, text.splitlines()[0][:300]))


class Connection(ConnectionBase):
    """Ansible connection through a node pod."""

    transport = "nodewright.fleet.node"
    has_pipelining = True
    # Commands run as root: a become to root is skipped (ansible compares it with this user).
    default_user = "root"

    # Ansible ends a worker with one of these on Ctrl-C or when it is stopped; the pod
    # is deleted first, as close() would.
    CLEANUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, *args, **kwargs):
        super(Connection, self).__init__(*args, **kwargs)
        self._pod = None
        self._previous_handlers = {}

    def _delete_on_signal(self, signum, frame):
        # Ansible follows a SIGINT with a SIGTERM: hold both until the pod is deleted.
        signal.pthread_sigmask(signal.SIG_BLOCK, self.CLEANUP_SIGNALS)
        pod, self._pod = self._pod, None
        if pod is not None:
            try:
                # The detached client: the usual pool may be in use by the code the signal
                # interrupted, and by now the controller may have removed the credential
                # files a new connection of the usual client would read.
                pod.delete(detached=True)
            except Exception:
                try:
                    pod.delete()
                except Exception as exc:  # the signal still ends the process
                    display.warning("could not delete %s: %s" % (pod.where, exc))
        # The signal was meant to end this process: let it, by its default action.
        self._previous_handlers = {}
        for other in self.CLEANUP_SIGNALS:
            signal.signal(other, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.CLEANUP_SIGNALS)

    def _install_handlers(self):
        for signum in self.CLEANUP_SIGNALS:
            try:
                self._previous_handlers[signum] = signal.signal(signum, self._delete_on_signal)
            except (ValueError, OSError):  # not the main thread: close() still deletes the pod
                pass

    def _restore_handlers(self):
        handlers, self._previous_handlers = self._previous_handlers, {}
        for signum, previous in handlers.items():
            try:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass

    def _settings(self):
        return {
            "node": self.get_option("node"),
            "namespace": self.get_option("namespace"),
            "image": self.get_option("pod_image"),
            "image_pull_secrets": self.get_option("pod_image_pull_secrets") or [],
            "priority_class": self.get_option("pod_priority_class"),
            "host_mount": self.get_option("host_mount"),
            "host_path": self.get_option("host_path"),
            "chroot": self.get_option("chroot"),
            "lifetime": self.get_option("pod_lifetime"),
            "timeout": self.get_option("timeout"),
        }

    def _auth(self):
        return {k: self.get_option(k) for k in k8s_client.AUTH_OPTIONS if self.get_option(k) not in (None, "")}

    def _connect(self):
        if self._pod is None:
            settings = self._settings()
            try:
                api = k8s_client.get_api_client(self._auth())
                pod = NodePod(api, **settings)
                display.vvv("starting %s (image %s)" % (pod.where, pod.image), host=settings["node"])
                self._install_handlers()
                self._pod = pod
                pod.start()
            except (node_pod.NodePodError, NodeWrightError, ValueError) as exc:
                self._pod = None
                self._restore_handlers()
                raise AnsibleConnectionFailure("cannot reach node %s: %s" % (settings["node"], exc))
        self._connected = True
        return self

    def _run(self, argv, stdin=None):
        self._connect()
        try:
            return self._pod.exec(argv, stdin)
        except node_pod.NodePodError as exc:
            raise AnsibleConnectionFailure(str(exc))

    def _argv_settings(self):
        return {"chroot": self.get_option("chroot"), "host_mount": self.get_option("host_mount")}

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        data = to_bytes(in_data) if in_data is not None else None
        argv = node_pod.exec_argv(cmd, stdin_size=len(data) if data is not None else None, **self._argv_settings())
        display.vvv("EXEC %s" % (argv,), host=self.get_option("node"))
        return self._run(argv, data)

    def put_file(self, in_path, out_path):
        super(Connection, self).put_file(in_path, out_path)
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self.get_option("node"))
        if not os.path.isfile(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound("file or module does not exist: %s" % in_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as fh:
            data = fh.read()
        rc, _out, err = self._run(node_pod.put_file_argv(out_path, len(data), **self._argv_settings()), data)
        if rc != 0:
            raise AnsibleError("failed to write %s on node %s: %s" % (out_path, self.get_option("node"),
                                                                      to_text(err).strip()))

    def fetch_file(self, in_path, out_path):
        super(Connection, self).fetch_file(in_path, out_path)
        display.vvv("FETCH %s TO %s" % (in_path, out_path), host=self.get_option("node"))
        rc, out, err = self._run(node_pod.fetch_file_argv(in_path, **self._argv_settings()))
        if rc != 0:
            raise AnsibleError("failed to read %s on node %s: %s" % (in_path, self.get_option("node"),
                                                                     to_text(err).strip()))
        target = to_bytes(out_path, errors="surrogate_or_strict")
        os.makedirs(os.path.dirname(target) or b".", exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(out)

    def close(self):
        pod, self._pod = self._pod, None
        self._connected = False
        if pod is not None:
            try:
                pod.delete()
                display.vvv("deleted %s" % pod.where, host=pod.node)
            except node_pod.NodePodError as exc:
                display.warning("could not delete %s: %s" % (pod.where, exc))
        self._restore_handlers()

    def reset(self):
        # After a reboot the old pod is dead; the next command starts a new one.
        self.close()
