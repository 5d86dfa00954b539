# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Drift, and settings lost at boot: the reconciler runs the check stages of completed
nodes (``playbooks/drift.yml`` of this package), records the ``nodewright.io/Drift``
condition, an Event and a metric per node, and with reapply marks the drifted
packages for the next rollout. A node that booted again where its OS forgets the
settings at boot (``rebooted_since_applied``) gets that check at once, with reapply."""

from __future__ import annotations

import logging

from nodewright_cli import collection, runner
from nodewright_cli.reconcile_work import boot_id, name_of, rebooted_since_applied

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import drift
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops

LOG = logging.getLogger("nodewright.reconcile")


class DriftMixin(object):
    """Needs ``cluster``, ``opts``, ``caches``, ``worker``, ``run_playbook``,
    ``inventory``, ``workdir``, ``run_metrics``, ``boot_checked``, ``managed()`` and
    ``_cancel_run()`` of the Reconciler; sets ``drift_counts``."""

    def _reapply_after_boot(self, view, nodes):
        """Nodes that lost their settings with a reboot (``rebooted_since_applied``) get
        the drift check with reapply; True when some package was marked. Each boot of a
        node is checked once."""
        if self.worker is not None and self.worker.is_alive():
            return False
        due = {}
        for name, resources in rebooted_since_applied(view, nodes).items():
            boot = boot_id(next(n for n in nodes if name_of(n) == name))
            if self.boot_checked.get(name) != boot:
                self.boot_checked[name] = boot
                due[name] = resources
        if not due:
            return False
        LOG.info("booted again since their settings were applied (the OS forgets them at boot): %s",
                 ", ".join("%s (%s)" % (n, ", ".join(r)) for n, r in sorted(due.items())))
        found = self.drift_check(targets=due, reapply=True)
        return any(items for per_resource in found.values() for items in per_resource.values())

    # --------------------------------------------------------------------- drift
    def drift_check(self, targets=None, reapply=None):
        """Run the check stages on completed nodes (or ``targets``, ``{node:
        [resource]}``); record Drift conditions, Events and metrics; with ``reapply``
        (default: ``drift_reapply``) mark drifted packages for the next rollout."""
        reapply = self.opts.drift_reapply if reapply is None else reapply
        nodes = list(self.caches["nodes"].values())
        by_name = {name_of(n): n for n in nodes}
        full = targets is None
        if full:
            targets = drift.check_targets(nodes, self.managed())
        targets = {n: r for n, r in targets.items() if n in by_name
                   and not gating.has_taint(by_name[n], self.opts.taint_key)
                   and node_ops.cordon_state(by_name[n]) == "uncordoned"}
        if not targets:
            LOG.debug("drift check: no completed node to check")
            return {}
        LOG.info("drift check of %d node(s)", len(targets))
        try:
            result = self.run_playbook(collection.own_playbook("drift.yml"), "drift", self.inventory, self.workdir,
                                       extravars={"nodewright_drift_targets": targets,
                                                  "nodewright_drift_reapply": bool(reapply)},
                                       limit=",".join(sorted(targets)), cancel=self._cancel_run,
                                       keep_events=runner.is_drift_result)
        except Exception as exc:  # noqa: BLE001
            LOG.error("the drift check could not run: %s", exc)
            self.run_metrics.inc("nodewright_runs_total", kind="drift", result="error")
            return {}
        found, errors = runner.drift_results(result.events)
        if not result.success and not found:
            LOG.error("the drift check %s (rc %s); its output is in %s", result.status, result.rc, result.artifacts)
        nw_metrics.run_metrics(self.run_metrics, "drift", result.duration, result.success and not errors,
                               result.finished, result.outcomes())
        self.run_metrics.inc("nodewright_runs_total", kind="drift", result=result.status)
        for node, text in sorted(errors.items()):
            LOG.warning("drift check of %s could not run: %s", node, text)
        counts = {}
        for node_name, per_resource in sorted(found.items()):
            node = by_name.get(node_name)
            for resource, items in per_resource.items():
                if items:
                    counts[resource] = counts.get(resource, 0) + 1
            self._record_drift(node, per_resource, reapply)
        if full:
            self.drift_counts = counts
        return found

    def _record_drift(self, node, per_resource, reapply=False):
        name = name_of(node)
        cond = drift.condition(per_resource)
        if cond["status"] == "False" and not drift.is_drifting(node):
            return
        patch = node_ops.condition_patch(node, cond["type"], cond["status"], cond["reason"], cond["message"])
        try:
            if patch:
                self.cluster.patch_node_status(name, patch)
                if cond["status"] == "True":
                    self.cluster.event(name, markers.EVENT_DRIFT, cond["message"], "Warning")
                    LOG.warning("node %s: %s", name, cond["message"])
                else:
                    self.cluster.event(name, markers.EVENT_DRIFT, "drift resolved: " + cond["message"])
                    LOG.info("node %s: drift resolved", name)
            if reapply and cond["status"] == "True":
                for resource, items in sorted(per_resource.items()):
                    if not items:
                        continue
                    state, marked = drift.reapply_state(node_ops.read_state(node, resource), items)
                    patch = node_ops.state_patch(node, resource, status=markers.STATUS_IN_PROGRESS, state=state,
                                                 merge=False)
                    self.cluster.patch_node(name, patch)
                    LOG.info("node %s: %s marked to be applied again (%s)", name, ", ".join(marked), resource)
        except NodeWrightError as exc:
            LOG.error("could not record drift on node %s: %s", name, exc)
