# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which cloud and which operating system a node runs, from its labels, its
``os-release`` or its ``status.nodeInfo.osImage``. The accelerator comes from
``node/gpu.py``."""

from __future__ import annotations

import re

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError


def detect_cloud(labels):
    """``eks``, ``gke`` or None, from the node's labels."""
    for key in (labels or {}):
        if key.startswith("eks.amazonaws.com/"):
            return "eks"
        if key.startswith("cloud.google.com/gke-"):
            return "gke"
    return None


_OS_MAP = (("ubuntu", "22.04", "ubuntu-22.04"), ("ubuntu", "24.04", "ubuntu-24.04"),
           ("debian", "12", "debian-12"), ("rhel", "9", "rhel-9"))


def os_from_os_release(text):
    """The tuning OS name (``ubuntu-24.04``, ``rhel-9``, ``cos`` ...) from /etc/os-release."""
    fields = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            fields[key] = value.strip().strip("\"'")
    os_id = fields.get("ID", "").lower()
    like = fields.get("ID_LIKE", "").lower().split()
    version = fields.get("VERSION_ID", "")
    if os_id == "cos":
        return "cos"
    ids = [os_id] + like
    for want_id, want_version, name in _OS_MAP:
        if want_id in ids and (version == want_version or
                               (want_id in ("rhel", "debian") and version.split(".")[0] == want_version)):
            return name
    raise ValidationError(
        "unsupported operating system %s %s (%s)" % (
            fields.get("ID", "?"), version or "?", fields.get("PRETTY_NAME", "no PRETTY_NAME")),
        field="os", hint="supported: %s, cos; or set nvidia_tuning_os" % ", ".join(
            n for dummy, dummy, n in _OS_MAP))


# Kubernetes reports the OS as status.nodeInfo.osImage (PRETTY_NAME of os-release).
_OS_IMAGES = (
    (re.compile(r"^container-optimized os\b"), "cos"),
    (re.compile(r"^ubuntu 22\.04\b"), "ubuntu-22.04"),
    (re.compile(r"^ubuntu 24\.04\b"), "ubuntu-24.04"),
    (re.compile(r"^debian gnu/linux 12\b"), "debian-12"),
    (re.compile(r"^(red hat enterprise linux|rocky linux|almalinux|centos stream|oracle linux server) 9\b"),
     "rhel-9"),
)


def os_from_os_image(text):
    """The tuning OS name from a node's ``status.nodeInfo.osImage`` (``Ubuntu 24.04.1 LTS``)."""
    image = " ".join(str(text or "").lower().split())
    for pattern, name in _OS_IMAGES:
        if pattern.match(image):
            return name
    raise ValidationError(
        "unsupported operating system %r (the node's status.nodeInfo.osImage)" % (text or ""),
        field="os", hint="supported: %s, cos; or set os explicitly" % ", ".join(n for dummy, dummy, n in _OS_MAP))


def os_release_match(os_name):
    """``(ID, VERSION_ID)`` that /etc/os-release of a host running ``os_name`` shows; the
    ID may also come from ID_LIKE, and VERSION_ID may add a minor version (``9.4``)."""
    if os_name == "cos":
        return ("cos", "")
    for want_id, want_version, name in _OS_MAP:
        if name == os_name:
            return (want_id, want_version)
    raise ValidationError("unknown os %r" % (os_name,), field="os")


# The GPU Operator puts its driver DaemonSet on the nodes it labels
# nvidia.com/gpu.deploy.driver=true, and relabels a node "pre-installed" when the host
# has a driver of its own.
LABEL_DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"


def driver_source(labels, driver_container=None):
    """``(source, reason)``: ``gpu-operator`` where the GPU Operator's driver DaemonSet
    runs on the node (its label on the node, or the driver container's root under
    ``/run/nvidia/driver`` on the host, ``driver_container``), else ``host``."""
    value = str((labels or {}).get(LABEL_DEPLOY_DRIVER, "")).strip().lower()
    if value == "true":
        return "gpu-operator", "the GPU Operator's driver DaemonSet runs on this node (%s=true)" % LABEL_DEPLOY_DRIVER
    if driver_container:
        return "gpu-operator", "the GPU Operator's driver container runs on this host (/run/nvidia/driver)"
    if value == "pre-installed":
        return "host", "the GPU Operator found a driver installed on the host (%s=pre-installed)" % LABEL_DEPLOY_DRIVER
    return "host", "no GPU Operator driver DaemonSet on this node (%s is not 'true')" % LABEL_DEPLOY_DRIVER
