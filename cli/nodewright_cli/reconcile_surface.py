# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What a reconcile pass writes back besides running playbooks: the status of the
resources that cannot roll out (blocked, paused, disabled) and of those that no
longer are, the Erroring condition of nodes whose state annotation is malformed, and
the runtime-required gate of tainted nodes the rollout will not visit."""

from __future__ import annotations

import logging

from nodewright_cli import collection  # noqa: F401 pylint: disable=unused-import
from nodewright_cli.reconcile_work import name_of

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.desired_state import targeted_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import deletion
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import PackageSpec
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import (
    CONDITION_NODE_STATE_MALFORMED,
    CONDITION_UNINSTALL_IN_PROGRESS,
    compute_status,
    conversion_warnings_of,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state

LOG = logging.getLogger("nodewright.reconcile")

OVERRIDES = ("blocked", "paused", "disabled")


def _malformed_changed(resource, described):
    """Whether the status' NodeStateMalformed condition no longer matches the targets'
    state annotations (one was hand-edited, or repaired): re-evaluated at every pass,
    as a node with no work is never visited by a rollout that would write it."""
    conditions = ((resource.get("status") or {}).get("conditions")) or []
    shown = any(c.get("type") == CONDITION_NODE_STATE_MALFORMED and c.get("status") == "True" for c in conditions)
    return shown != bool(described.malformed)


class SurfaceMixin(object):
    """Needs ``cluster``, ``opts``, ``caches``, ``reported`` and ``_report_once()`` of
    the Reconciler."""

    def _surface_resources(self, view, nodes):
        """Resources that cannot roll out say why in their status: blocked (a missing
        policy, an invalid spec), paused, disabled. A resource that was so and no
        longer is gets its derived status back."""
        wanted = []
        for resource, reason in view["blocked"]:
            wanted.append((resource, "blocked", reason, None))
            self._report_once(("blocked", name_of(resource)),
                              "NodeWright %s is blocked: %s" % (name_of(resource), reason), logging.WARNING)
        for resource, described in view["rollouts"]:
            self.reported.pop(("blocked", described.name), None)
            if described.paused:
                wanted.append((resource, "paused", "paused (annotation %s=true): no node starts"
                               % markers.ANNOTATION_PAUSE, described))
            elif described.disabled:
                wanted.append((resource, "disabled", "disabled (annotation %s=true): skipped"
                               % markers.ANNOTATION_DISABLE, described))
            elif described.held_work:
                # Held by an earlier sequencing: all resource: waiting (upstream's), saying for which.
                wanted.append((resource, "waiting", described.held, described))
            elif ((resource.get("status") or {}).get("status")) in OVERRIDES + ("waiting",) \
                    or _malformed_changed(resource, described):
                wanted.append((resource, None, None, described))
        for resource, override, message, described in wanted:
            self._write_status(resource, override, message, nodes, described)

    def _write_status(self, resource, override, message, nodes, described):
        name = name_of(resource)
        current = resource.get("status") or {}
        generation = (resource.get("metadata") or {}).get("generation")
        if override and current.get("status") == override and current.get("message") == message \
                and current.get("observedGeneration") == generation:
            return
        if described:
            targets, packages = described.targets, described.packages
        else:
            try:
                targets = targeted_nodes(resource, nodes)
            except NodeWrightError:
                targets = []
            packages = [PackageSpec(name=k, version=str(v.get("version", "?"))) for k, v in
                        sorted((((resource.get("spec") or {}).get("packages")) or {}).items())
                        if isinstance(v, dict)]
        new = compute_status(name, nodes, targets, packages, override=override, message=message,
                             generation=generation, current=current,
                             conversion_warnings=conversion_warnings_of(resource))
        if (resource.get("metadata") or {}).get("deletionTimestamp"):
            # The deletion's own conditions (fleet/deletion.py) stay while it goes on.
            kept = [c for c in current.get("conditions") or []
                    if c.get("type") in (deletion.CONDITION_DELETING, deletion.CONDITION_DELETION_BLOCKED,
                                         CONDITION_UNINSTALL_IN_PROGRESS)]
            new["conditions"] = [c for c in new["conditions"] if c["type"] not in {k["type"] for k in kept}] + kept
        new["conditions"] = nodewright_api.merge_conditions(current.get("conditions"), new["conditions"])
        try:
            self.cluster.patch_nodewright_status(name, new)
            LOG.info("NodeWright %s status: %s%s", name, new["status"], (" (%s)" % message) if message else "")
        except NodeWrightError as exc:
            LOG.error("could not write the status of NodeWright %s: %s", name, exc)

    def _surface_malformed(self, malformed, nodes):
        """A hand-edited, malformed state annotation: the node gets the Erroring condition
        and one Warning Event, and the rollout leaves it alone until it is fixed or reset."""
        by_name = {name_of(n): n for n in nodes}
        for node_name, errors in sorted(malformed.items()):
            node = by_name.get(node_name)
            text = "; ".join("%s: %s" % (r, e) for r, e in sorted(errors.items()))
            message = ("NodeWright leaves this node alone until its state is fixed or reset "
                       "(nodewright reset %s --resource <name>): %s" % (node_name, text))
            patch = node_ops.condition_patch(node, markers.CONDITION_ERRORING, "True", markers.REASON_MALFORMED_STATE,
                                             message)
            if patch is None:
                continue
            try:
                self.cluster.patch_node_status(node_name, patch)
                self.cluster.event(node_name, markers.EVENT_FAILED, message, "Warning")
                LOG.warning("node %s: %s", node_name, message)
            except NodeWrightError as exc:
                LOG.error("could not mark node %s: %s", node_name, exc)
        # A node with no work is never visited: once its state reads again, the mark follows
        # what its resources say now.
        for node in nodes:
            if name_of(node) in malformed or not node_state.repaired_malformed(node):
                continue
            patch = node_ops.erroring_condition_patch(node)
            if patch is None:
                continue
            try:
                self.cluster.patch_node_status(name_of(node), patch)
                LOG.info("node %s: its NodeWright state reads again; condition %s re-evaluated",
                         name_of(node), markers.CONDITION_ERRORING)
            except NodeWrightError as exc:
                LOG.error("could not update node %s: %s", name_of(node), exc)

    def _open_ready_gates(self, nodes, managed, busy):
        """Tainted nodes that the rollout will not visit: open the gate when it is ready
        (e.g. a node that was re-tainted, or finished before it was tainted), or say
        why it stays closed. Only nodes a managed runtimeRequired resource targets; the
        decision weighs every resource."""
        resources = list(self.caches["nodewrights"].values())
        for node in nodes:
            name = name_of(node)
            if name not in busy and gating.stale_runtime_cordon(node):
                try:
                    if gating.clear_stale_runtime_cordon(self.cluster.core, name, node):
                        LOG.info("node %s: %s", name, gating.STALE_CORDON_TEXT)
                except NodeWrightError as exc:
                    LOG.error("node %s: %s", name, exc)
            if name in busy or not gating.has_taint(node, self.opts.taint_key) \
                    or not gating.gating_resources(managed, node):
                continue
            decision = gating.decide(node, resources, self.opts.taint_key)
            if decision["action"] != gating.OPEN and not gating.gate_condition(node, decision):
                continue
            try:
                done = gating.enforce(self.cluster.core, name, resources, self.opts.taint_key)
                if done["changed"]:
                    LOG.info("node %s: %s", name, done["msg"])
            except NodeWrightError as exc:
                LOG.error("runtime gate of node %s: %s", name, exc)
