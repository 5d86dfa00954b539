# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Which NVIDIA accelerator a node has: from GPU Feature Discovery or GKE labels, from
the compute capability and architecture, or from ``nvidia-smi`` output; and what is
said when it cannot be told."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.node.gpu import (
    ACCELERATOR_NAMES,
    LABEL_ARCH,
    LABEL_FAMILY,
    LABEL_GKE_ACCELERATOR,
    LABEL_MAJOR,
    LABEL_MINOR,
    LABEL_PRODUCT,
    detect_accelerator,
    detect_accelerator_from_nvidia_smi,
    normalize_arch,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("product,accelerator,form_factor", [
    ("NVIDIA-H100-80GB-HBM3", "h100", "sxm"),
    ("NVIDIA-H100-PCIe", "h100", "pcie"),
    ("NVIDIA-H100-NVL", "h100", "pcie"),
    ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "h100", "sxm"),
    ("NVIDIA-H200", "h200", "sxm"),
    ("NVIDIA-H200-NVL", "h200", "pcie"),
    ("NVIDIA-GH200-480GB", "gh200", "superchip"),
    ("NVIDIA-GH200-144G-HBM3e", "gh200", "superchip"),
    ("NVIDIA-B200", "b200", "sxm"),
    ("NVIDIA-GB200", "gb200", "superchip"),
    ("NVIDIA-B300-SXM6-AC", "b300", "sxm"),
    ("NVIDIA-GB300", "gb300", "superchip"),
])
def test_detect_from_product_label(product, accelerator, form_factor):
    got = detect_accelerator({LABEL_PRODUCT: product})
    assert (got["accelerator"], got["form_factor"], got["source"]) == (accelerator, form_factor, LABEL_PRODUCT)
    assert got["warnings"] == []


def test_superchips_match_before_the_discrete_gpu_they_contain():
    order = list(ACCELERATOR_NAMES)
    for superchip, discrete in (("gh200", "h200"), ("gb200", "b200"), ("gb300", "b300")):
        assert discrete.upper() in superchip.upper()
        assert order.index(superchip) < order.index(discrete)


@pytest.mark.parametrize("labels,accelerator", [
    ({LABEL_GKE_ACCELERATOR: "nvidia-h100-mega-80gb"}, "h100"),
    ({LABEL_GKE_ACCELERATOR: "nvidia-h200-141gb"}, "h200"),
    ({LABEL_GKE_ACCELERATOR: "nvidia-gb200"}, "gb200"),
    ({LABEL_MAJOR: "10", LABEL_MINOR: "0", LABEL_ARCH: "arm64"}, "gb200"),
    ({LABEL_MAJOR: "10", LABEL_MINOR: "0", LABEL_ARCH: "amd64"}, "b200"),
    ({LABEL_MAJOR: "10", LABEL_MINOR: "3", LABEL_ARCH: "arm64"}, "gb300"),
    ({LABEL_MAJOR: "10", LABEL_MINOR: "3", LABEL_ARCH: "amd64"}, "b300"),
    ({LABEL_MAJOR: "9", LABEL_MINOR: "0", LABEL_ARCH: "arm64"}, "gh200"),
])
def test_detect_without_a_known_product(labels, accelerator):
    assert detect_accelerator(labels)["accelerator"] == accelerator


def test_detect_reports_contradicting_labels():
    got = detect_accelerator({LABEL_PRODUCT: "NVIDIA-H100-80GB-HBM3", LABEL_MAJOR: "10",
                                LABEL_MINOR: "0", LABEL_ARCH: "arm64"})
    assert got["accelerator"] == "h100"
    assert len(got["warnings"]) == 2


def test_undetectable_gpu_says_what_was_detected():
    with pytest.raises(ValidationError) as err:
        detect_accelerator({LABEL_PRODUCT: "NVIDIA-A100-SXM4-80GB", LABEL_MAJOR: "8",
                              LABEL_MINOR: "0", LABEL_ARCH: "amd64"})
    message = str(err.value)
    assert "NVIDIA-A100-SXM4-80GB" in message and "'8'" in message
    assert "supported: gh200, h200, h100, gb300, b300, gb200, b200" in message


def test_ambiguous_compute_capability_names_the_candidates():
    with pytest.raises(ValidationError, match="h200 or h100"):
        detect_accelerator({LABEL_MAJOR: "9", LABEL_MINOR: "0", LABEL_ARCH: "amd64"})
    with pytest.raises(ValidationError, match="no GPU information"):
        detect_accelerator({})


@pytest.mark.parametrize("output,arch,accelerator", [
    ("NVIDIA H200, 9.0, 0x233510DE\nNVIDIA H200, 9.0, 0x233510DE\n", "x86_64", "h200"),
    ("NVIDIA H100 80GB HBM3, 9.0", None, "h100"),
    ("NVIDIA GH200 480GB, 9.0", "aarch64", "gh200"),
    ("NVIDIA GB200, 10.0\nNVIDIA GB200, 10.0\nNVIDIA GB200, 10.0\nNVIDIA GB200, 10.0", "aarch64", "gb200"),
    ("NVIDIA B300 SXM6 AC, 10.3", "x86_64", "b300"),
    ("NVIDIA Graphics Device, 10.0", "aarch64", "gb200"),
])
def test_detect_from_nvidia_smi(output, arch, accelerator):
    got = detect_accelerator_from_nvidia_smi(output, arch=arch)
    assert got["accelerator"] == accelerator and got["source"] == "nvidia-smi"


@pytest.mark.parametrize("output,match", [
    ("", "listed no GPU"),
    ("NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H200, 9.0", "mixes accelerators"),
    ("NVIDIA A100-SXM4-80GB, 8.0", "A100"),
])
def test_detect_from_nvidia_smi_refuses(output, match):
    with pytest.raises(ValidationError, match=match):
        detect_accelerator_from_nvidia_smi(output, arch="x86_64")


@pytest.mark.parametrize("arch, expected", [
    ("x86_64", "amd64"), ("amd64", "amd64"), ("AMD64", "amd64"), (" aarch64 ", "arm64"), ("arm64", "arm64"),
    ("ppc64le", None), ("", None), (None, None),
])
def test_normalize_arch(arch, expected):
    assert normalize_arch(arch) == expected


def test_detection_result_shape():
    got = detect_accelerator({LABEL_PRODUCT: "NVIDIA-GH200-480GB", LABEL_MAJOR: "9", LABEL_MINOR: "0",
                              LABEL_ARCH: "arm64"})
    assert got == {"accelerator": "gh200", "family": "hopper", "arch": "arm64", "form_factor": "superchip",
                   "product": "NVIDIA-GH200-480GB", "compute_capability": "9.0", "source": LABEL_PRODUCT,
                   "warnings": []}


def test_the_product_label_wins_over_gke():
    got = detect_accelerator({LABEL_PRODUCT: "NVIDIA-B200", LABEL_GKE_ACCELERATOR: "nvidia-h100-80gb"})
    assert (got["accelerator"], got["source"]) == ("b200", LABEL_PRODUCT)


def test_an_unknown_product_falls_through_to_gke():
    got = detect_accelerator({LABEL_PRODUCT: "NVIDIA-A100", LABEL_GKE_ACCELERATOR: "nvidia-h200-141gb"})
    assert (got["accelerator"], got["source"], got["product"]) == ("h200", LABEL_GKE_ACCELERATOR,
                                                                   "nvidia-h200-141gb")


def test_compute_capability_without_minor_reads_as_zero():
    got = detect_accelerator({LABEL_MAJOR: "10", LABEL_ARCH: "aarch64"})
    assert (got["accelerator"], got["compute_capability"], got["source"]) == ("gb200", "10.0", "compute capability")
    assert got["product"] is None


def test_contradicting_labels_are_warned_about_in_words():
    got = detect_accelerator({LABEL_PRODUCT: "NVIDIA-H100-80GB-HBM3", LABEL_MAJOR: "10",
                              LABEL_MINOR: "0", LABEL_ARCH: "arm64"})
    assert got["warnings"] == ["compute capability 10.0 does not match H100 (9.0)",
                               "node architecture arm64 does not match H100 (amd64)"]
    assert got["compute_capability"] == "10.0" and got["arch"] == "amd64"


def test_undetectable_error_fields_and_hints():
    with pytest.raises(ValidationError) as caught:
        detect_accelerator({LABEL_FAMILY: "ampere", "other": "x"})
    assert caught.value.field == "accelerator"
    assert caught.value.hint == "set nvidia_tuning_accelerator explicitly"
    assert "detected: %s='ampere'" % LABEL_FAMILY in str(caught.value)
    assert "other" not in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        detect_accelerator({LABEL_MAJOR: "9", LABEL_ARCH: "amd64"})
    assert caught.value.hint == ("compute capability 9.0 on amd64 fits h200 or h100; set "
                                 "nvidia_tuning_accelerator explicitly")


def test_without_an_architecture_the_compute_capability_is_not_enough():
    with pytest.raises(ValidationError):
        detect_accelerator({LABEL_MAJOR: "10", LABEL_MINOR: "0"})


@pytest.mark.parametrize("labels", ["h100", ["a"]])
def test_labels_must_be_a_mapping(labels):
    with pytest.raises(ValidationError) as caught:
        detect_accelerator(labels)
    assert caught.value.field == "labels"
    assert "node labels must be a mapping, got %s" % type(labels).__name__ in str(caught.value)


def test_nvidia_smi_result_and_blank_lines():
    got = detect_accelerator_from_nvidia_smi("\n\nNVIDIA H100 PCIe, 9.0\n\n", arch="x86_64")
    assert got == {"accelerator": "h100", "family": "hopper", "arch": "amd64", "form_factor": "pcie",
                   "product": "NVIDIA H100 PCIe", "compute_capability": "9.0", "source": "nvidia-smi",
                   "warnings": []}


def test_nvidia_smi_without_compute_column():
    got = detect_accelerator_from_nvidia_smi("NVIDIA B200")
    assert (got["accelerator"], got["compute_capability"]) == ("b200", "10.0")


def test_nvidia_smi_errors_say_what_to_do():
    with pytest.raises(ValidationError) as caught:
        detect_accelerator_from_nvidia_smi(None)
    assert caught.value.hint == "is the NVIDIA driver loaded? or set nvidia_tuning_accelerator"
    with pytest.raises(ValidationError) as caught:
        detect_accelerator_from_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H200, 9.0")
    assert "the host mixes accelerators: NVIDIA H100 80GB HBM3 (h100), NVIDIA H200 (h200)" in str(caught.value)
    assert caught.value.hint == "tune such hosts with an explicit nvidia_tuning_accelerator"
    with pytest.raises(ValidationError) as caught:
        detect_accelerator_from_nvidia_smi("NVIDIA Graphics Device, 10.0")   # no arch to tell GB200 from B200
    assert "NVIDIA Graphics Device" in str(caught.value)
