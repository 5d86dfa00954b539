# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The reconciler's decisions, pure functions of what it has listed: which change of
a node or resource counts (not the kubelet's heartbeats, not status writes), the work
a fleet view holds, the fingerprint that tells the same work again, the nodes that
booted again since their settings were applied, and the ``--limit`` that keeps
malformed nodes out of a run."""

from __future__ import annotations

from nodewright_cli import collection  # noqa: F401 pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import reapplies_every_boot


def name_of(obj):
    """The ``metadata.name`` of an object (None when it has none)."""
    return ((obj or {}).get("metadata") or {}).get("name")


def _ready(node):
    return node_ops.is_ready(node)


def node_fingerprint(node):
    """What of a node matters for the work: labels, NodeWright's annotations, taints,
    cordon and readiness - not the status heartbeats the kubelet writes."""
    meta = node.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(markers.PREFIX)}
    spec = node.get("spec") or {}
    return (tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted(annotations.items())),
            repr(spec.get("taints")), bool(spec.get("unschedulable")), _ready(node))


def object_fingerprint(obj):
    """A NodeWright or DeploymentPolicy changes its work through its spec (generation) and
    its annotations (pause, disable); status writes do not count."""
    meta = obj.get("metadata") or {}
    return (meta.get("generation"), tuple(sorted((meta.get("annotations") or {}).items())),
            meta.get("deletionTimestamp"))


def relevant_change(kind, old, new):
    if old is None or new is None:
        return True
    if kind == "nodes":
        return node_fingerprint(old) != node_fingerprint(new)
    return object_fingerprint(old) != object_fingerprint(new)


def work_of(view):
    """``{resource: [nodes]}`` with work now: not paused, not disabled, minus the nodes
    whose state annotation is malformed (they are reported, not touched)."""
    malformed = set(view["malformed"])
    work = {}
    for _resource, described in view["rollouts"]:
        if described.paused or described.disabled:
            continue
        nodes = [n for n in described.work if n not in malformed]
        if nodes:
            work[described.name] = nodes
    return work


def work_fingerprint(view, work, uninstalls=None):
    generations = {d.name: d.generation for _r, d in view["rollouts"]}
    return tuple(sorted((name, generations.get(name), tuple(sorted(nodes))) for name, nodes in work.items())) + \
        tuple(sorted(("uninstall", name, tuple(u["nodes"])) for name, u in (uninstalls or {}).items()))


def boot_id(node):
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""


def rebooted_since_applied(view, nodes):
    """``{node: [resource]}``: nodes that booted again since their resource's status
    recorded them (``status.nodeBootIds``), for resources with a package whose OS
    forgets its settings at every boot, where the node is complete (its record says
    the settings are there, the host no longer has them)."""
    by_name = {name_of(n): n for n in nodes}
    out = {}
    for resource, described in view["rollouts"]:
        if described.paused or described.disabled:
            continue
        if not any(reapplies_every_boot(spec.name, spec.config) for spec in described.packages):
            continue
        recorded = (resource.get("status") or {}).get("nodeBootIds") or {}
        for name in described.targets:
            node = by_name.get(name)
            before, now = recorded.get(name), boot_id(node or {})
            if not node or not before or not now or before == now:
                continue
            if node_ops.read_state(node, described.name).get("status") == markers.STATUS_COMPLETE:
                out.setdefault(name, []).append(described.name)
    return out


def rollout_limit(malformed):
    """An ansible --limit that keeps nodes with a malformed state out of the run."""
    if not malformed:
        return None
    return ":".join(["localhost", "all"] + ["!%s" % n for n in sorted(malformed)])
