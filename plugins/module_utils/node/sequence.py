# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The safe sequence's markers, written with as few API calls as the sequence needs.

``NodeHandle`` keeps the Node as the API server last returned it: every metadata
patch returns the updated object, so a node that needs no cordon (a non-disruptive
package) is maintained with one read and two writes - in progress, then complete
with its package state - and the markers are exactly those ``node_state`` writes
(``node_ops.state_patch`` and ``node_ops.condition_patch`` build both).
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_json, request_json
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops


def _quote(name):
    from urllib.parse import quote
    return quote(name, safe="")


class NodeHandle(object):
    """One Node, read once and kept current by the responses of its patches."""

    def __init__(self, api, name, check_mode=False):
        self.api = api
        self.name = name
        self.check_mode = check_mode
        self.node = None
        self._pending = None  # the last metadata patch (what check mode pretends was written)

    @property
    def _path(self):
        return "/api/v1/nodes/%s" % _quote(self.name)

    def read(self):
        from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
        try:
            self.node = get_json(self.api, self._path, "read node %s" % self.name)
        except ClusterError as exc:
            if exc.details.get("status") == 404:
                raise node_ops.NodeNotFound("node %s does not exist" % self.name,
                                            hint="check the name with `kubectl get nodes`; the inventory may be "
                                                 "stale")
            raise
        return self.node

    def _patch(self, path, body, content_type, what):
        if body is None:
            return False
        if self.check_mode:
            return True
        node, _headers = request_json(self.api, "PATCH", path, what, body=body, content_type=content_type)
        if node:
            self.node = node
        return True

    def mark(self, resource, status=None, state=None):
        """Record ``status``/``state`` for ``resource`` (labels and state annotation)."""
        patch = node_ops.state_patch(self.node, resource, status=status, state=state)
        self._pending = patch
        return self._patch(self._path, patch, "application/merge-patch+json",
                           "record NodeWright %s state on node %s" % (resource, self.name))

    def remove_annotation(self, key):
        """Remove the annotation ``key``; False when the node has none."""
        if key not in ((self.node.get("metadata") or {}).get("annotations") or {}):
            return False
        return self._patch(self._path, {"metadata": {"annotations": {key: None}}}, "application/merge-patch+json",
                           "remove annotation %s from node %s" % (key, self.name))

    def condition(self, cond_type, status, reason, message):
        patch = node_ops.condition_patch(self.node, cond_type, status, reason, message)
        return self._patch(self._path + "/status", patch, "application/strategic-merge-patch+json",
                           "set condition %s on node %s" % (cond_type, self.name))

    def sync_error(self, resource, error=None):
        """Bring the Erroring condition in line with every resource on the node (and
        ``resource``'s ``error``, a mapping with reason and message): a resource that
        succeeds never clears what another resource's failure set."""
        node = self.node
        if self.check_mode and self._pending is not None:
            node = node_ops.merged(node, self._pending)
        patch = node_ops.erroring_condition_patch(node, resource, error)
        return self._patch(self._path + "/status", patch, "application/strategic-merge-patch+json",
                           "set condition %s on node %s" % (markers.CONDITION_ERRORING, self.name))

    def event(self, reason, message, event_type="Normal"):
        if self.check_mode:
            return False
        return node_ops.emit_event(node_ops.core_api(self.api), self.name, reason, message, event_type)

    # what the sequence reads -------------------------------------------------------

    def cordon(self):
        return node_ops.cordon_state(self.node)

    def boot_id(self):
        return node_ops.boot_id(self.node)

    def state(self, resource):
        return node_ops.read_state(self.node, resource)

    def status(self, resource):
        return ((self.node.get("metadata") or {}).get("labels") or {}).get(markers.status_label(resource))
