# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The reconciler's part in upstream NodeWright's lifecycle fields: the uninstall
finalizer and the uninstall of a deleted resource (``fleet/deletion.py``), and the
runtime-required taint put back on a node that rebooted and re-applies its packages
(``reapplyOnReboot``, ``gating.retaint_after_reboot``). The decisions are pure
functions of the collection; this mixin carries them out for a ``Reconciler``."""

from __future__ import annotations

import logging

from nodewright_cli import collection  # noqa: F401 pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import deletion
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.names import name_of

LOG = logging.getLogger("nodewright.reconcile")


def _failed_before(resource):
    """The resource's Deleting condition says its last uninstall failed (written by a
    reconciler that may have restarted since): it stays until an uninstall succeeds."""
    for cond in ((resource or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == deletion.CONDITION_DELETING and cond.get("reason") == "UninstallFailed":
            return True
    return False


def _condition_true(resource, cond_type):
    for cond in ((resource or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type:
            return cond.get("status") == "True"
    return False


def record_uninstall_outcome(core, resource, result, reported):
    """After an uninstall run: a failure goes into the resource's Deleting condition
    at once (with the nodes' reasons); a success forgets it."""
    if result.success:
        reported.pop(("uninstall-failed", resource), None)
        return
    why = "; ".join("%s: %s" % (h, t) for h, t in sorted(result.messages.items())) or result.status
    failure = "its uninstall failed (%s)" % why[:900]
    reported[("uninstall-failed", resource)] = failure
    node_ops.set_resource_condition(core, resource, deletion.deleting_condition({"action": deletion.UNINSTALL,
                                                                                 "reason": ""}, failure))
    LOG.warning("NodeWright %s is being deleted: %s", resource, failure)


class LifecycleMixin(object):
    """Needs ``cluster``, ``opts``, ``caches``, ``reported``, ``managed()`` and
    ``_report_once()`` of the Reconciler."""

    def _handle_deletions(self, view, nodes):
        """Finalizers and the uninstall of deleted resources (``fleet/deletion.py``).
        Returns ``{resource: decision}`` for the uninstalls to run."""
        described = {d.name: d for _r, d in view["rollouts"]}
        blocked = {name_of(r, None): reason for r, reason in view["blocked"]}
        uninstalls = {}
        for resource in self.managed():
            name = name_of(resource, None)
            decision = deletion.decide(resource, nodes, described.get(name), blocked.get(name))
            action = decision["action"]
            try:
                if action == deletion.ADD_FINALIZER:
                    self.cluster.patch_nodewright(name, deletion.finalizer_patch(resource, True))
                    LOG.info("NodeWright %s: finalizer %s added (%s)", name, deletion.FINALIZER, decision["reason"])
                elif action == deletion.REMOVE_FINALIZER:
                    # Packages without uninstall.enabled stay on the nodes: so do their entries
                    # in the node state (as upstream keeps them).
                    keep = deletion.kept_packages(resource)
                    for node in nodes:
                        patch = node_ops.clear_marks_patch(node, name, keep=keep)
                        if patch:
                            self.cluster.patch_node(name_of(node, None), patch)
                    self.cluster.patch_nodewright(name, deletion.finalizer_patch(resource, False))
                    LOG.info("NodeWright %s: finalizer removed, the resource goes (%s)", name, decision["reason"])
                elif action == deletion.DELETION_BLOCKED:
                    self._block_deletion(resource, decision)
                elif action in (deletion.UNINSTALL, deletion.BLOCKED):
                    if _condition_true(resource, deletion.CONDITION_DELETION_BLOCKED):
                        node_ops.set_resource_condition(self.cluster.core, name,
                                                        deletion.deletion_blocked_condition(decision))
                    failure = self.reported.get(("uninstall-failed", name))
                    if failure or not _failed_before(resource):
                        node_ops.set_resource_condition(self.cluster.core, name,
                                                        deletion.deleting_condition(decision, failure))
                    self._report_once(("deleting", name), "NodeWright %s is being deleted: %s"
                                      % (name, failure or decision["reason"]),
                                      logging.WARNING if action == deletion.BLOCKED else logging.INFO)
                    if action == deletion.UNINSTALL:
                        for cond in deletion.uninstall_conditions(decision):
                            node_ops.set_resource_condition(self.cluster.core, name, cond)
                        uninstalls[name] = decision
            except NodeWrightError as exc:
                LOG.error("NodeWright %s: %s failed: %s", name, action, exc)
        return uninstalls

    def _block_deletion(self, resource, decision):
        """A paused or disabled resource being deleted with an uninstall pending: it stays,
        with the DeletionBlocked condition and one Warning Event (when it becomes blocked)."""
        name = name_of(resource, None)
        if not _condition_true(resource, deletion.CONDITION_DELETION_BLOCKED):
            node_ops.emit_event(self.cluster.core, name, deletion.CONDITION_DELETION_BLOCKED, decision["reason"],
                                "Warning", involved=node_ops.resource_ref(name))
        node_ops.set_resource_condition(self.cluster.core, name, deletion.deletion_blocked_condition(decision))
        node_ops.set_resource_condition(self.cluster.core, name, deletion.deleting_condition(decision))
        self._report_once(("deleting", name), "NodeWright %s is being deleted: %s" % (name, decision["reason"]),
                          logging.WARNING)

    def _retaint_rebooted(self, view, work):
        """A runtimeRequired node that rebooted and is to re-apply its packages
        (reapplyOnReboot) gets the runtime-required taint back until they are done."""
        rollouts = [d for _r, d in view["rollouts"]]
        for name in sorted({n for names in work.values() for n in names}):
            node = self.caches["nodes"].get(name)
            if node is None:
                continue
            ok, why = gating.retaint_after_reboot(name, node, rollouts, self.opts.taint_key)
            if not ok:
                continue
            try:
                gating.add_taint(self.cluster.core, name, self.opts.taint_key, reason=why)
                self.cluster.event(name, markers.EVENT_REAPPLY, why)
                LOG.info("tainted %s with %s: %s", name, self.opts.taint_key, why)
            except NodeWrightError as exc:
                LOG.error("could not taint rebooted node %s: %s", name, exc)
