# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Admission: what counts as disrupted, and the reservation record's shape and expiry."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
    AdmissionError,
    FleetView,
    Holder,
    NodeInfo,
    node_info,
    parse_record,
    policy_digest,
    render_record,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)


def info(name, **kw):
    base = {"labels": {}, "created": None, "unschedulable": False, "cordoned_by": None, "statuses": {}}
    base.update(kw)
    return NodeInfo(name=name, **base)


def test_node_info_reads_cordon_owner_and_statuses():
    obj = {"metadata": {"name": "n1", "labels": {"nodewright.io/status-a": "in_progress", "nodewright.io/status": "x",
                                                 "zone": "z"},
                        "annotations": {"nodewright.io/cordoned-by": json.dumps({"owner": "nodewright",
                                                                                  "resource": "a"})}},
           "spec": {"unschedulable": True}}
    n = node_info(obj)
    assert n.unschedulable and n.cordoned_by == "a" and n.statuses == {"a": "in_progress"}
    assert n.in_progress_under() == ["a"]
    assert node_info({"metadata": {"name": "n2"}}).cordoned_by is None


@pytest.mark.parametrize("node, reserved, pickable, expected", [
    (info("n"), None, True, "free"),
    # Cordoned by someone outside NodeWright, with work for us: ours to take, counted.
    (info("n", unschedulable=True), None, True, "resumable"),
    (info("n", unschedulable=True), None, False, "busy"),
    # Our own leftover (a crashed run): resumed.
    (info("n", unschedulable=True, cordoned_by="mine", statuses={"mine": "in_progress"}), None, True,
     "resumable"),
    # Left cordoned by another resource (erroring there), or in progress under it: not ours.
    (info("n", unschedulable=True, cordoned_by="other", statuses={"other": "erroring"}), None, True, "busy"),
    (info("n", statuses={"other": "in_progress"}), None, True, "busy"),
    # Reserved by another live run: never taken, even when it is our resource's node.
    (info("n"), ("someone", "mine"), True, "busy"),
    # Reserved by this run itself: neither.
    (info("n", statuses={"mine": "in_progress"}), ("me", "mine"), True, "free"),
])
def test_what_a_wave_may_take_and_what_counts(node, reserved, pickable, expected):
    holders = {}
    if reserved:
        holders[reserved[0]] = Holder(id=reserved[0], renewed=NOW, nodes={node.name: reserved[1]})
    view = FleetView([node], holders, NOW)
    busy, resumable = view.split("me", "mine", {node.name} if pickable else set())
    found = "busy" if node.name in busy else "resumable" if node.name in resumable else "free"
    assert found == expected


def test_records_round_trip_and_expire_on_the_servers_clock():
    holder = Holder(id="h1", renewed=NOW, ttl=30, run="laptop pid 1", nodes={"n1": "r"}, policies={"r": "abc"})
    parsed = parse_record(render_record({"h1": holder}))
    assert parsed["h1"].nodes == {"n1": "r"} and parsed["h1"].policies == {"r": "abc"}
    assert not parsed["h1"].expired(NOW + datetime.timedelta(seconds=29))
    assert parsed["h1"].expired(NOW + datetime.timedelta(seconds=30))
    assert parse_record("") == {} and parse_record(None) == {}


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"),
    ('["a"]', "must be a mapping"),
    ('{"version": 9, "holders": {}}', "version 9"),
    ('{"holders": {"h": {"renewTime": "yesterday", "ttlSeconds": 5}}}', "renewTime 'yesterday' is not a time"),
    ('{"holders": {"h": {"renewTime": "2026-12-01T12:00:00Z", "ttlSeconds": -1}}}', "ttlSeconds -1"),
    ('{"holders": {"h": {"renewTime": "2026-12-01T12:00:00Z", "ttlSeconds": 5, "nodes": ["n1"]}}}',
     "nodes must map node names"),
])
def test_a_record_edited_into_nonsense_is_refused_with_the_reason(text, message):
    with pytest.raises(AdmissionError) as info_:
        parse_record(text)
    assert message in str(info_.value)


def test_policy_digests_tell_policies_apart():
    assert policy_digest({"a": 1, "b": [1, 2]}) == policy_digest({"b": [1, 2], "a": 1})
    assert policy_digest({"a": 1}) != policy_digest({"a": 2})
