# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which cloud, operating system and driver source a node has, from its labels, its
/etc/os-release or its reported OS image."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.detect import (
    LABEL_DEPLOY_DRIVER,
    detect_cloud,
    driver_source,
    os_from_os_image,
    os_from_os_release,
    os_release_match,
)

pytestmark = pytest.mark.unit

SUPPORTED = "supported: ubuntu-22.04, ubuntu-24.04, debian-12, rhel-9, cos"


# ------------------------------------------------------------------ cloud

def test_detect_cloud():
    assert detect_cloud({"eks.amazonaws.com/nodegroup": "gpu"}) == "eks"
    assert detect_cloud({"cloud.google.com/gke-nodepool": "a3"}) == "gke"
    assert detect_cloud({"kubernetes.io/arch": "amd64"}) is None


@pytest.mark.parametrize("labels,cloud", [
    (None, None),
    ({}, None),
    ({"eks.amazonaws.com/capacityType": "ON_DEMAND", "kubernetes.io/os": "linux"}, "eks"),
    ({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, "gke"),
    # Only the label prefixes count, not a value that mentions a cloud or a look-alike key.
    ({"node.kubernetes.io/instance-type": "eks.amazonaws.com/p5"}, None),
    ({"cloud.google.com/machine-family": "a3"}, None),
    ({"topology.kubernetes.io/zone": "us-east-1a"}, None),
    ({"example.com/eks.amazonaws.com/nodegroup": "x"}, None),
])
def test_the_cloud_comes_from_label_prefixes(labels, cloud):
    assert detect_cloud(labels) == cloud


# ------------------------------------------------------------------ /etc/os-release

@pytest.mark.parametrize("text,expected", [
    ('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu-22.04"),
    ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu-24.04"),
    ('ID=debian\nVERSION_ID="12"\n', "debian-12"),
    ('ID="rhel"\nVERSION_ID="9.4"\n', "rhel-9"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.3"\n', "rhel-9"),
    ('NAME="Container-Optimized OS"\nID=cos\nVERSION_ID=117\n', "cos"),
])
def test_os_from_os_release(text, expected):
    assert os_from_os_release(text) == expected


@pytest.mark.parametrize("text,expected", [
    # Single quotes, blank lines, comments and surrounding spaces are tolerated.
    ("# written by the image build\n\n  ID='ubuntu'  \nVERSION_ID='24.04'\n", "ubuntu-24.04"),
    ("ID=AlmaLinux\nID_LIKE='rhel centos fedora'\nVERSION_ID=9.5\n", "rhel-9"),
    # Debian's VERSION_ID has no minor version, but a point release may add one.
    ('ID=debian\nVERSION_ID="12.7"\n', "debian-12"),
    # A derivative of Ubuntu matches through ID_LIKE.
    ('ID=pop\nID_LIKE="ubuntu debian"\nVERSION_ID="22.04"\n', "ubuntu-22.04"),
    ('ID=COS\nVERSION_ID=109\n', "cos"),
])
def test_os_release_variants(text, expected):
    assert os_from_os_release(text) == expected


def test_unsupported_os_is_named():
    with pytest.raises(ValidationError, match="unsupported operating system ubuntu 20.04"):
        os_from_os_release('ID=ubuntu\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n')


@pytest.mark.parametrize("text,message", [
    ('ID=ubuntu\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n',
     "unsupported operating system ubuntu 20.04 (Ubuntu 20.04.6 LTS)"),
    # Ubuntu's minor versions are part of the release: 24.10 is not 24.04.
    ('ID=ubuntu\nVERSION_ID="24.10"\n', "unsupported operating system ubuntu 24.10 (no PRETTY_NAME)"),
    ('ID=rhel\nVERSION_ID="8.10"\n', "unsupported operating system rhel 8.10 (no PRETTY_NAME)"),
    ('ID=fedora\nVERSION_ID=40\n', "unsupported operating system fedora 40 (no PRETTY_NAME)"),
    ("", "unsupported operating system ? ? (no PRETTY_NAME)"),
    (None, "unsupported operating system ? ? (no PRETTY_NAME)"),
])
def test_an_unsupported_os_release_says_what_it_found(text, message):
    with pytest.raises(ValidationError) as err:
        os_from_os_release(text)
    assert err.value.field == "os"
    assert err.value.reason == message
    assert err.value.hint == SUPPORTED + "; or set nvidia_tuning_os"


# ------------------------------------------------------------------ status.nodeInfo.osImage

@pytest.mark.parametrize("image,expected", [
    ("Ubuntu 24.04.1 LTS", "ubuntu-24.04"), ("Ubuntu 22.04.5 LTS", "ubuntu-22.04"),
    ("Debian GNU/Linux 12 (bookworm)", "debian-12"), ("Red Hat Enterprise Linux 9.4 (Plow)", "rhel-9"),
    ("Rocky Linux 9.5 (Blue Onyx)", "rhel-9"), ("Container-Optimized OS from Google", "cos"),
])
def test_os_from_os_image(image, expected):
    assert os_from_os_image(image) == expected


@pytest.mark.parametrize("image,expected", [
    ("  ubuntu   24.04 LTS ", "ubuntu-24.04"),
    ("AlmaLinux 9.4 (Seafoam Ocelot)", "rhel-9"),
    ("CentOS Stream 9", "rhel-9"),
    ("Oracle Linux Server 9.3", "rhel-9"),
    ("Ubuntu 24.04", "ubuntu-24.04"),
])
def test_os_image_variants(image, expected):
    assert os_from_os_image(image) == expected


@pytest.mark.parametrize("image", [
    "Ubuntu 20.04.6 LTS", "Ubuntu 24.041", "Red Hat Enterprise Linux 8.10 (Ootpa)", "Rocky Linux 90",
    "Debian GNU/Linux 11 (bullseye)", "Bottlerocket OS 1.20.0", "", None,
])
def test_an_unsupported_os_image_is_refused(image):
    with pytest.raises(ValidationError) as err:
        os_from_os_image(image)
    assert err.value.field == "os"
    assert err.value.reason == "unsupported operating system %r (the node's status.nodeInfo.osImage)" % (
        image or "")
    assert err.value.hint == SUPPORTED + "; or set os explicitly"


# ------------------------------------------------------------------ os_release_match

@pytest.mark.parametrize("os_name,expected", [
    ("ubuntu-22.04", ("ubuntu", "22.04")), ("ubuntu-24.04", ("ubuntu", "24.04")),
    ("debian-12", ("debian", "12")), ("rhel-9", ("rhel", "9")), ("cos", ("cos", "")),
])
def test_os_release_match(os_name, expected):
    assert os_release_match(os_name) == expected


@pytest.mark.parametrize("os_name", ["ubuntu-22.04", "ubuntu-24.04", "debian-12", "rhel-9"])
def test_os_release_match_reads_back_through_os_from_os_release(os_name):
    os_id, version = os_release_match(os_name)
    assert os_from_os_release("ID=%s\nVERSION_ID=%s\n" % (os_id, version)) == os_name


def test_os_release_match_refuses_an_unknown_os():
    with pytest.raises(ValidationError) as err:
        os_release_match("windows-2022")
    assert str(err.value) == "os: unknown os 'windows-2022'"


# ------------------------------------------------------------------ who loads the driver

@pytest.mark.parametrize("labels,container,source,reason", [
    ({LABEL_DEPLOY_DRIVER: "true"}, None, "gpu-operator",
     "the GPU Operator's driver DaemonSet runs on this node (nvidia.com/gpu.deploy.driver=true)"),
    ({LABEL_DEPLOY_DRIVER: " TRUE "}, False, "gpu-operator",
     "the GPU Operator's driver DaemonSet runs on this node (nvidia.com/gpu.deploy.driver=true)"),
    ({}, True, "gpu-operator",
     "the GPU Operator's driver container runs on this host (/run/nvidia/driver)"),
    ({LABEL_DEPLOY_DRIVER: "pre-installed"}, True, "gpu-operator",
     "the GPU Operator's driver container runs on this host (/run/nvidia/driver)"),
    ({LABEL_DEPLOY_DRIVER: "pre-installed"}, None, "host",
     "the GPU Operator found a driver installed on the host (nvidia.com/gpu.deploy.driver=pre-installed)"),
    ({LABEL_DEPLOY_DRIVER: "false"}, None, "host",
     "no GPU Operator driver DaemonSet on this node (nvidia.com/gpu.deploy.driver is not 'true')"),
    (None, None, "host",
     "no GPU Operator driver DaemonSet on this node (nvidia.com/gpu.deploy.driver is not 'true')"),
])
def test_driver_source(labels, container, source, reason):
    assert driver_source(labels, container) == (source, reason)


def test_the_driver_label_is_the_gpu_operators():
    assert LABEL_DEPLOY_DRIVER == "nvidia.com/gpu.deploy.driver"
