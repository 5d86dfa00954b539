# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Workload-aware node order: among the nodes a batch may take, those with nothing
protected running first, then those whose protected pods end soonest.

A node whose non-interruptible pods (a resource's ``podNonInterruptLabels``) still run
holds its slot, cordoned, until they end; taken first, it makes its whole wave wait.
With a DeploymentPolicy's ``nodeOrder: workload`` the engine (``waves.next_wave``) puts
the free nodes first and the held ones by when their pods are expected to end:

* the pod's ``nodewright.io/expected-end`` annotation (RFC 3339), which a scheduler or a
  user sets;
* else its ``spec.activeDeadlineSeconds`` after ``status.startTime`` (the kubelet ends it
  then);
* else unknown: after every node with a known end.

Nodes that already had work (the resource's ``status.nodePriority``) keep their place,
and a node passed over ``MAX_DEFERRALS`` times in a run goes first at the next batch
of its compartment: no node waits for ever behind newer ones.
"""

from __future__ import annotations

import datetime

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import to_selector

ANNOTATION_EXPECTED_END = "nodewright.io/expected-end"
MAX_DEFERRALS = 3
_ACTIVE_PHASES = ("Pending", "Running", "Unknown")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _time(text):
    if not isinstance(text, str) or not text:
        return None
    value = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def expected_end(pod):
    """When ``pod`` is expected to end (an aware datetime), or None when nothing says."""
    meta = pod.get("metadata") or {}
    end = _time((meta.get("annotations") or {}).get(ANNOTATION_EXPECTED_END))
    if end is not None:
        return end
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    started = _time((pod.get("status") or {}).get("startTime"))
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline > 0 and started is not None:
        return started + datetime.timedelta(seconds=deadline)
    return None


class Occupancy(object):
    """What holds a node: its protected pods and when the last of them is expected to end
    (``until``; None with ``unknown`` when one of them says nothing)."""

    __slots__ = ("pods", "until", "unknown")

    def __init__(self, pods, until, unknown):
        self.pods = pods
        self.until = until
        self.unknown = unknown

    def sort_key(self):
        if self.unknown:
            return (2, _EPOCH)
        return (1, self.until)

    def describe(self):
        if self.unknown:
            return "%d protected pod(s), end unknown" % len(self.pods)
        return "%d protected pod(s) until %s" % (len(self.pods), self.until.isoformat(timespec="minutes"))


FREE_KEY = (0, _EPOCH)


def occupancy(pods, selector):
    """``{node: Occupancy}`` for the nodes where pods matching the non-interruptible
    ``selector`` run (or may run); nodes without any are free and left out."""
    selector = to_selector(selector, "podNonInterruptLabels")
    if selector.empty:
        return {}
    grouped = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase", "Pending")
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or phase not in _ACTIVE_PHASES or not selector.matches(meta.get("labels") or {}):
            continue
        grouped.setdefault(node, []).append(pod)
    out = {}
    for node, held in grouped.items():
        ends = [expected_end(p) for p in held]
        unknown = any(e is None for e in ends)
        names = sorted("%s/%s" % ((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name"))
                       for p in held)
        out[node] = Occupancy(names, None if unknown else max(ends), unknown)
    return out


def order_keys(occupied):
    """``{node: sort key}`` for ``waves.next_wave``'s ``order_keys`` (free nodes are absent:
    they sort first)."""
    return {node: occ.sort_key() for node, occ in occupied.items()}
