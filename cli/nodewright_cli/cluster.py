# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The cluster as the ``nodewright`` command sees it: raw JSON reads through the
collection's one client factory, the few writes it makes, and the permission check
of the reconciler."""

from __future__ import annotations

import os

# Imported for its effect: it makes the collection importable.
from nodewright_cli import collection  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers, nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.node import ops as node_ops
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import (
    api_path,
    call,
    get_api_client,
    get_json,
    list_pages,
)

GROUP, VERSION = markers.API_GROUP, markers.API_VERSION
NODES = api_path("v1", "nodes")
NODEWRIGHTS = nodewright_api.path(nodewright_api.NODEWRIGHTS)
POLICIES = nodewright_api.path(nodewright_api.DEPLOYMENT_POLICIES)

# What the reconciler needs, (verb, group, resource, subresource), and why; the
# ClusterRole of deploy/helm grants exactly these (and what the rollout itself needs).
RECONCILER_PERMISSIONS = (
    ("list", "", "nodes", "", "read the fleet"),
    ("watch", "", "nodes", "", "see new and changed nodes"),
    ("patch", "", "nodes", "", "taint new nodes (autoTaintNewNodes), open runtime-required gates, mark state"),
    ("patch", "", "nodes", "status", "record the Drift and Blocked conditions"),
    ("create", "", "events", "", "record Events on nodes"),
    ("list", GROUP, "nodewrights", "", "read the desired state"),
    ("watch", GROUP, "nodewrights", "", "see edited NodeWright resources"),
    ("patch", GROUP, "nodewrights", "", "add and remove the uninstall finalizer"),
    ("patch", GROUP, "nodewrights", "status", "write resource status (blocked, paused, progress)"),
    ("list", GROUP, "deploymentpolicies", "", "read rollout policies"),
    ("watch", GROUP, "deploymentpolicies", "", "see edited policies"),
    ("list", "", "pods", "", "drain and wait for non-interruptible pods (the rollout)"),
    ("create", "", "pods", "eviction", "evict pods through the Eviction API (the rollout)"),
    ("get", "coordination.k8s.io", "leases", "", "read the wave reservations of every run (admission)",
     "lock"),
    ("update", "coordination.k8s.io", "leases", "", "reserve waves, so that limits hold across runs (admission)",
     "lock"),
)


def describe_permission(verb, group, resource, subresource):
    what = resource + ("/" + subresource if subresource else "")
    return "%s %s%s" % (verb, what, (".%s" % group) if group else "")


class Cluster(object):
    """Reads and writes of one cluster (credentials as the collection resolves them:
    K8S_AUTH_*, KUBECONFIG, ~/.kube/config, or the in-cluster service account)."""

    def __init__(self, auth=None, api=None):
        self.api = api or get_api_client(auth or {})
        self.core = node_ops.core_api(self.api)
        from kubernetes import client as k8s_client
        self.custom = k8s_client.CustomObjectsApi(self.api)
        self.authz = k8s_client.AuthorizationV1Api(self.api)
        self.target = getattr(self.api, "nodewright_target", None) or self.api.configuration.host

    # --- reads ------------------------------------------------------------------------
    def nodes(self):
        return [n for page in list_pages(self.api, NODES, "list nodes") for n in page]

    def nodewrights(self):
        return nodewright_api.list_all(self.api, nodewright_api.NODEWRIGHTS, "list NodeWright resources")

    def policies(self):
        return {p["metadata"]["name"]: p for p in nodewright_api.list_all(
            self.api, nodewright_api.DEPLOYMENT_POLICIES, "list DeploymentPolicy resources")}

    def node(self, name):
        return node_ops.get_node(self.core, name)

    def nodewright(self, name):
        return nodewright_api.get(self.api, nodewright_api.NODEWRIGHTS, name, field="NAME")

    def list_raw(self, path, what):
        """A full LIST with its metadata (resourceVersion), for starting a watch."""
        return get_json(self.api, path, what)

    # --- writes -----------------------------------------------------------------------
    def patch_node(self, name, patch):
        return node_ops.patch_node(self.core, name, patch)

    def patch_node_status(self, name, patch):
        return node_ops.patch_node_status(self.core, name, patch)

    def event(self, node, reason, message, event_type="Normal"):
        return node_ops.emit_event(self.core, node, reason, message, event_type)

    def patch_nodewright(self, name, patch):
        return nodewright_api.patch(self.api, nodewright_api.NODEWRIGHTS, name, patch, "patch NodeWright %s" % name)

    def patch_nodewright_status(self, name, status):
        return nodewright_api.patch_status(self.api, name, status)

    # --- permissions ------------------------------------------------------------------
    def missing_permissions(self, wanted=RECONCILER_PERMISSIONS):
        """The permissions of ``wanted`` this identity lacks at cluster scope, each as
        ``(description, why)``; SelfSubjectAccessReview, which every authenticated user
        may ask. When even that is refused, the answer is unknown: an empty list, and
        the first real call says what is missing."""
        missing = []
        for entry in wanted:
            verb, group, resource, subresource, why = entry[:5]
            attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
            if len(entry) > 5 and entry[5] == "lock":
                from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import (
                    DEFAULT_LOCK_NAMESPACE,
                    LOCK_NAME,
                    LOCK_NAMESPACE_ENV,
                )
                attributes.update(namespace=os.environ.get(LOCK_NAMESPACE_ENV) or DEFAULT_LOCK_NAMESPACE,
                                  name=LOCK_NAME)
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attributes}}
            try:
                review = call("review access", self.authz.create_self_subject_access_review, body)
            except ClusterError as exc:
                if (exc.details or {}).get("status") in (403, 404):
                    return []
                raise
            if not review.status.allowed:
                missing.append((describe_permission(verb, group, resource, subresource), why))
        return missing
