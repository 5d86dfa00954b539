# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The simulator at fleet size without a cluster: nodes laid down from one booted
template per kind of node (an overlay of it, or a copy) are the nodes a boot of their
own makes, each with its own name, boot ID and changes; and a large fleet renews its
Leases less often."""

from __future__ import annotations

import errno
import os
import re

import pytest
from nodewright_sim import hostroot
from nodewright_sim.cluster import heartbeat_settings

from conftest import H100_NODE

pytestmark = pytest.mark.unit


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    hostroot.unmount_under(str(tmp_path))  # the overlay roots, before pytest removes the directory


def tree(root, boot_ids):
    """Every entry of a root: type, mode, link target or content (the boot IDs and the
    journal's clock masked)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[rel] = ("dir", oct(st.st_mode & 0o7777))
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    text = fh.read().decode("utf-8", "replace")
                for boot_id in boot_ids:
                    text = text.replace(boot_id, "BOOT-ID")
                text = re.sub(r"\b\d{10}\b", "EPOCH", re.sub(r"\w{3} \d\d \d\d:\d\d:\d\d", "TIME", text))
                out[rel] = ("file", oct(st.st_mode & 0o7777), text)
            else:
                out[rel] = ("special", oct(st.st_mode), st.st_rdev)
    return out


@pytest.fixture(params=["overlay", "copy"])
def template(request, workdir, base_image, monkeypatch):
    monkeypatch.setenv(hostroot.HOST_ROOTS_ENV, request.param)
    layers = str(workdir / "layers")
    if request.param == "overlay":
        hostroot.mount_tmpfs(layers)
    tpl = hostroot.Template(str(workdir / "template" / "root"), base_image, dict(H100_NODE), layers=layers)
    return tpl


def test_a_node_from_the_template_is_the_node_its_own_boot_makes(template, workdir, base_image):
    booted = str(workdir / "booted")
    own_id = hostroot.create(booted, base_image, dict(H100_NODE, name="h100-0007"))
    root = str(workdir / "nodes" / "h100-0007" / "root")
    new_id = template.clone(root, "h100-0007")
    assert template.overlay is (os.environ[hostroot.HOST_ROOTS_ENV] == "overlay")
    assert os.path.ismount(root) is template.overlay
    assert new_id not in (own_id, template.boot_id.decode())
    assert hostroot.boot_id(root) == new_id
    assert tree(root, [new_id]) == tree(booted, [own_id])
    with open(os.path.join(root, hostroot.NODE_ENV)) as fh:
        assert fh.readline() == "NODE_NAME=h100-0007\n"
    with open(os.path.join(root, "var/lib/nodewright-sim/actions.log")) as fh:
        assert fh.readline().startswith("boot %s " % new_id)
    assert hostroot.run(root, "systemctl is-active containerd kubelet").stdout == "active\nactive\n"


def test_nodes_of_one_template_change_only_themselves(template, workdir):
    one, two = (str(workdir / "nodes" / n / "root") for n in ("n1", "n2"))
    template.clone(one, "n1")
    template.clone(two, "n2")
    script = "sysctl -w vm.swappiness=5 && echo 'vm.max_map_count = 262144' > /etc/sysctl.d/90-x.conf && " \
             "rm /etc/os-release"
    if template.overlay:  # an overlay node's userland is its own too (a copy shares it with the base image)
        script += " && echo 'echo changed' > /bin/nvidia-smi"
    assert hostroot.run(one, script).returncode == 0
    for other in (two, template.root):
        assert hostroot.run(other, "sysctl -n vm.swappiness").stdout == "60\n"
        assert not os.path.exists(os.path.join(other, "etc/sysctl.d/90-x.conf"))
        assert os.path.exists(os.path.join(other, "etc/os-release"))
        assert "H100" in hostroot.run(other, "nvidia-smi -L").stdout
    # A boot of the changed node keeps what it persisted and drops what it did not.
    first = hostroot.boot_id(one)
    assert hostroot.boot(one) != first
    assert hostroot.run(one, "sysctl -n vm.swappiness vm.max_map_count").stdout == "60\n262144\n"
    assert hostroot.run(two, "sysctl -n vm.max_map_count").stdout == "1048576\n"


def test_a_node_of_a_name_used_before_starts_from_the_template_again(template, workdir):
    root = str(workdir / "nodes" / "n1" / "root")
    template.clone(root, "n1")
    hostroot.run(root, "echo left > /etc/left-over")
    hostroot.remove(root)
    assert not os.path.exists(root)
    template.clone(root, "n1")
    assert not os.path.exists(os.path.join(root, "etc/left-over"))
    assert hostroot.run(root, "systemctl is-active containerd").stdout == "active\n"


def test_without_overlay_mounts_nodes_are_copies(workdir, base_image, monkeypatch):
    monkeypatch.delenv(hostroot.HOST_ROOTS_ENV, raising=False)

    def refused(*_args):
        raise OSError(errno.EPERM, "mount overlay: Operation not permitted")
    monkeypatch.setattr(hostroot, "mount_overlay", refused)
    tpl = hostroot.Template(str(workdir / "template" / "root"), base_image, dict(H100_NODE),
                            layers=str(workdir / "layers"))
    assert tpl.overlay is None  # not known until a node is made
    root = str(workdir / "nodes" / "n1" / "root")
    tpl.clone(root, "n1")
    assert tpl.overlay is False and not os.path.ismount(root)
    assert hostroot.run(root, "systemctl is-active containerd").stdout == "active\n"
    # The userland is shared with the base image, as a node of its own boot shares it.
    assert os.stat(os.path.join(root, "bin/busybox")).st_ino == os.stat(os.path.join(base_image.path,
                                                                                       "bin/busybox")).st_ino


def test_an_unknown_host_root_mode_is_refused(workdir, base_image, monkeypatch):
    monkeypatch.setenv(hostroot.HOST_ROOTS_ENV, "hardlink")
    with pytest.raises(hostroot.HostRootError, match="NODEWRIGHT_SIM_HOST_ROOTS must be overlay or copy"):
        hostroot.Template(str(workdir / "template" / "root"), base_image, dict(H100_NODE))


@pytest.mark.parametrize("fleet,lease,grace", [
    (0, 40, 20), (24, 40, 20), (500, 40, 20), (1000, 80, 40), (3000, 240, 120), (5000, 400, 200)])
def test_a_large_fleet_renews_its_leases_less_often(fleet, lease, grace):
    assert heartbeat_settings(fleet) == (lease, grace)
    renewals_per_second = fleet / (lease / 4.0)
    assert renewals_per_second <= 50
