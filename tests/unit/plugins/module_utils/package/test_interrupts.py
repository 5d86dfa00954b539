# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Package interrupts: validation with field paths and hints, the run-time request
words, merging by severity, and configInterrupts globs."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package import interrupts as i

pytestmark = pytest.mark.unit

NOOP = {"type": "noop", "services": []}
REBOOT = {"type": "reboot", "services": []}


def test_types_in_ascending_severity():
    assert i.INTERRUPT_TYPES == ("noop", "service", "restartAllServices", "reboot")


@pytest.mark.parametrize("value, expected", [
    ({"type": "reboot"}, REBOOT),
    ({"type": "noop", "services": None}, NOOP),
    ({"type": "restartAllServices", "services": []}, {"type": "restartAllServices", "services": []}),
    ({"type": "service", "services": ["kubelet", "containerd.service", "kubelet"]},
     {"type": "service", "services": ["containerd.service", "kubelet"]}),
    ({"type": "service", "services": ["getty@tty1.service", "a:b_c.d", "x\\x2dy"]},
     {"type": "service", "services": ["a:b_c.d", "getty@tty1.service", "x\\x2dy"]}),
])
def test_parse_interrupt(value, expected):
    assert i.parse_interrupt(value) == expected


@pytest.mark.parametrize("value", [None, {}])
def test_allow_empty_means_noop(value):
    assert i.parse_interrupt(value, allow_empty=True) == NOOP
    with pytest.raises(ValidationError):
        i.parse_interrupt(value)


@pytest.mark.parametrize("value, field, subpath, message, hint", [
    ("reboot", "interrupt", (), "an interrupt must be a mapping with type (and services), got 'reboot'",
     "e.g. {type: reboot} or {type: service, services: [containerd]}"),
    ({"type": "reboot", "service": ["x"]}, "interrupt.service", ("service",), "unknown interrupt field 'service'",
     "allowed: type, services"),
    ({"type": "reboots"}, "interrupt.type", ("type",), "unknown interrupt type 'reboots'",
     "type is one of reboot, restartAllServices, service, noop"),
    ({}, "interrupt.type", ("type",), "unknown interrupt type None",
     "type is one of reboot, restartAllServices, service, noop"),
    ({"type": "service", "services": "containerd"}, "interrupt.services", ("services",),
     "services must be a list of systemd unit names", "e.g. services: [containerd.service]"),
    ({"type": "service", "services": ["s%d" % n for n in range(33)]}, "interrupt.services", ("services",),
     "33 services; at most 32", "use type restartAllServices to restart every service"),
    ({"type": "service", "services": ["ok", "bad unit"]}, "interrupt.services[1]", ("services", 1),
     "'bad unit' is not a systemd unit name", "a unit such as containerd or nvidia-persistenced.service"),
    ({"type": "service", "services": [""]}, "interrupt.services[0]", ("services", 0),
     "'' is not a systemd unit name", None),
    ({"type": "service", "services": [7]}, "interrupt.services[0]", ("services", 0),
     "7 is not a systemd unit name", None),
    ({"type": "service", "services": ["a" * 257]}, "interrupt.services[0]", ("services", 0),
     "is not a systemd unit name", None),
    ({"type": "service"}, "interrupt.services", ("services",), "interrupt type service needs the services to restart",
     "list the systemd units, e.g. services: [containerd.service]"),
    ({"type": "reboot", "services": ["x"]}, "interrupt.services", ("services",),
     "services are only used by interrupt type service, not reboot",
     "remove services, or use type: service to restart named units"),
])
def test_parse_errors_name_the_field(value, field, subpath, message, hint):
    with pytest.raises(ValidationError) as caught:
        i.parse_interrupt(value)
    assert caught.value.field == field
    assert caught.value.subpath == subpath
    assert message in str(caught.value)
    if hint is not None:
        assert hint in caught.value.hint


def test_near_misses_are_suggested():
    with pytest.raises(ValidationError) as caught:
        i.parse_interrupt({"type": "reboot", "servics": []})
    assert "'services'" in caught.value.hint
    with pytest.raises(ValidationError) as caught:
        i.parse_interrupt({"type": "reboo"})
    assert "'reboot'" in caught.value.hint


def test_the_field_path_starts_where_the_caller_says():
    with pytest.raises(ValidationError) as caught:
        i.parse_interrupt({"type": "x"}, where="spec.packages.demo.interrupt")
    assert caught.value.field == "spec.packages.demo.interrupt.type"


def test_a_service_at_the_length_limit_is_accepted():
    assert i.parse_interrupt({"type": "service", "services": ["a" * 256]})["services"] == ["a" * 256]
    assert len(i.parse_interrupt({"type": "service", "services": ["s%d" % n for n in range(32)]})["services"]) == 32


@pytest.mark.parametrize("words, expected", [
    ([], None),
    (None, None),
    (["reboot"], REBOOT),
    (["restartAllServices"], {"type": "restartAllServices", "services": []}),
    (["service", "b", "a"], {"type": "service", "services": ["a", "b"]}),
])
def test_from_words(words, expected):
    assert i.from_words(words) == expected


@pytest.mark.parametrize("words, message", [
    (["halt"], "unknown interrupt type 'halt'"),
    (["service"], "interrupt type service needs the services to restart"),
    (["reboot", "now"], "services are only used by interrupt type service, not reboot"),
])
def test_from_words_refuses(words, message):
    with pytest.raises(ValidationError) as caught:
        i.from_words(words, "$NODEWRIGHT_INTERRUPT_FILE")
    assert message in str(caught.value)
    assert caught.value.field.startswith("$NODEWRIGHT_INTERRUPT_FILE")


@pytest.mark.parametrize("interrupt, expected", [
    (REBOOT, {"type": "reboot"}),
    ({"type": "service", "services": ["a"]}, {"type": "service", "services": ["a"]}),
    ({"type": "noop"}, {"type": "noop"}),
])
def test_compact(interrupt, expected):
    assert i.compact(interrupt) == expected


@pytest.mark.parametrize("interrupt, noop", [
    (None, True), ({}, True), (NOOP, True), ({"services": []}, True), (REBOOT, False),
    ({"type": "service", "services": ["a"]}, False),
])
def test_is_noop(interrupt, noop):
    assert i.is_noop(interrupt) is noop


@pytest.mark.parametrize("items, expected", [
    ([], NOOP),
    ([None, {}, ""], NOOP),
    (["noop"], NOOP),
    (["reboot", {"type": "service", "services": ["a"]}], REBOOT),
    ([{"type": "service", "services": ["b"]}, {"type": "service", "services": ["a", "b"]}],
     {"type": "service", "services": ["a", "b"]}),
    ([{"type": "service", "services": ["a"]}, "restartAllServices"], {"type": "restartAllServices", "services": []}),
    (["noop", {"type": "service", "services": ["a"]}], {"type": "service", "services": ["a"]}),
])
def test_merge_interrupts(items, expected):
    assert i.merge_interrupts(items) == expected


def test_merge_interrupts_validates_each():
    with pytest.raises(ValidationError, match="unknown interrupt type 'halt'"):
        i.merge_interrupts(["reboot", "halt"])


@pytest.mark.parametrize("pattern, key, matches", [
    ("*.conf", "a.conf", True),
    ("*.conf", "a.config", False),
    ("kernel.*", "kernel.sched", True),
    ("kernel.*", "Kernel.sched", False),    # case matters
    ("exact", "exact", True),
    ("fi?e", "file", True),
])
def test_config_key_matches(pattern, key, matches):
    assert i.config_key_matches(pattern, key) is matches


def test_interrupts_for_keys():
    config = {"kernel.*": {"type": "reboot"}, "*.conf": {"type": "service", "services": ["a"]},
              "other": {"type": "restartAllServices"}}
    assert i.interrupts_for_keys(config, ["kernel.x", "b.conf"]) == [
        {"type": "service", "services": ["a"]}, REBOOT]
    assert i.interrupts_for_keys(config, []) == []
    assert i.interrupts_for_keys(None, ["x"]) == []


def test_interrupts_for_keys_names_the_glob_of_a_bad_interrupt():
    with pytest.raises(ValidationError) as caught:
        i.interrupts_for_keys({"*.conf": {"type": "boom"}}, ["a.conf"])
    assert caught.value.field == "configInterrupts.*.conf.type"
