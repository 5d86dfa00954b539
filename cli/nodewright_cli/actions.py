# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``nodewright pause|resume|disable|enable NAME``, ``ignore NODE``, ``reset NODE`` and
``reset-batches NAME``.

Each action only changes annotations and labels (the keys of ``markers``): a
resource's pause/disable annotation, a node's ignore label, a node's NodeWright
status labels and state annotations. Nothing is cordoned, drained or run; the
reconciler (or the next rollout) acts on the new marks. The patch builders are pure.
"""

from __future__ import annotations

# Imported for its effect: it makes the collection importable.
from nodewright_cli import collection  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops

RESOURCE_ANNOTATIONS = {
    "pause": (markers.ANNOTATION_PAUSE, "true"),
    "resume": (markers.ANNOTATION_PAUSE, None),
    "disable": (markers.ANNOTATION_DISABLE, "true"),
    "enable": (markers.ANNOTATION_DISABLE, None),
}


def resource_patch(resource, action):
    """Merge patch of a NodeWright resource for pause/resume/disable/enable, or None."""
    key, value = RESOURCE_ANNOTATIONS[action]
    current = ((resource.get("metadata") or {}).get("annotations") or {}).get(key)
    if current == value:
        return None
    return {"metadata": {"annotations": {key: value}}}


def batch_reset_patch(resource):
    """Status patch that forgets a resource's rollout batch state, or None when it has none.

    The next rollout then starts each compartment from its first batch, and a halted
    compartment may run again."""
    status = resource.get("status") or {}
    if not status.get("rolloutState") and not status.get("compartmentStatuses"):
        return None
    return {"rolloutState": None, "compartmentStatuses": None}


def ignore_patch(node, undo=False):
    """Label patch that makes NodeWright leave a node alone (or take it back), or None."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if undo:
        return {"metadata": {"labels": {markers.LABEL_IGNORE: None}}} if markers.LABEL_IGNORE in labels else None
    if labels.get(markers.LABEL_IGNORE) == "true":
        return None
    return {"metadata": {"labels": {markers.LABEL_IGNORE: "true"}}}


def reset_patch(node, resource=None):
    """Patch that forgets NodeWright's record of ``resource`` on the node (of every
    resource when None, and then the blocked-by note too): status labels and state
    annotations. The cordon record stays: a node NodeWright cordoned must still be
    uncordoned by it."""
    if resource:
        return node_ops.clear_marks_patch(node, resource)
    meta = node.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    out_labels = {k: None for k in labels if k.startswith(markers.LABEL_STATUS + "-")}
    out_annotations = {k: None for k in annotations if k.startswith(markers.ANNOTATION_STATE_PREFIX)}
    if markers.LABEL_STATUS in labels:
        out_labels[markers.LABEL_STATUS] = None
    if markers.ANNOTATION_BLOCKED_BY in annotations:
        out_annotations[markers.ANNOTATION_BLOCKED_BY] = None
    out = {k: v for k, v in (("labels", out_labels), ("annotations", out_annotations)) if v}
    return {"metadata": out} if out else None


def apply_resource_action(cluster, name, action, dry_run=False):
    resource = cluster.nodewright(name)
    patch = resource_patch(resource, action)
    if patch and not dry_run:
        cluster.patch_nodewright(name, patch)
    return patch


def reset_node(cluster, name, resource=None, dry_run=False):
    """``nodewright reset``: forget the record (``reset_patch``), then bring the
    ``nodewright.io/Erroring`` condition in line with the resources still recorded (it
    clears when none is erroring any more). Returns ``(patch, condition patch)``."""
    node = cluster.node(name)
    patch = reset_patch(node, resource)
    if patch is None:
        return None, None
    after = node_ops.merged(node, patch)
    condition = node_ops.erroring_condition_patch(after)
    if not dry_run:
        cluster.patch_node(name, patch)
        if condition:
            cluster.patch_node_status(name, condition)
    return patch, condition


def apply_node_patch(cluster, name, build, dry_run=False, **kwargs):
    node = cluster.node(name)
    patch = build(node, **kwargs)
    if patch and not dry_run:
        cluster.patch_node(name, patch)
    return patch
