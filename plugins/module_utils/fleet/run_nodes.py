# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The nodes of a play: their labels and creation times from host variables, or from the
cluster in one read when the variables lack them (``collect_nodes``)."""

from __future__ import annotations


from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_record import _names
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_settings import (
    VAR_INVENTORY_NODE,
    VAR_NODE_LABELS,
    _NODE_GET_LIMIT,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import (
    _api,
)


def node_from_vars(host, variables):
    """The engine's view of one host (name, labels, creationTimestamp) from its variables, or None
    when neither ``k8s_node.labels`` nor ``nodewright_node_labels`` is set."""
    node = variables.get(VAR_INVENTORY_NODE)
    labels = None
    created = None
    source = None
    if isinstance(node, dict) and node.get("labels") is not None:
        labels = node.get("labels")
        created = node.get("creationTimestamp") or node.get("creation_timestamp")
        source = "%s.labels" % VAR_INVENTORY_NODE
    elif variables.get(VAR_NODE_LABELS) is not None:
        labels = variables.get(VAR_NODE_LABELS)
        source = VAR_NODE_LABELS
    if labels is None:
        return None
    if not isinstance(labels, dict):
        raise NodeWrightError("host %s: %s must be a mapping of label keys to values, got %s"
                              % (host, source, type(labels).__name__))
    return {"name": host, "labels": {str(k): str(v) for k, v in labels.items()},
            "creationTimestamp": str(created) if created else None}


def fetch_nodes(names, auth=None):
    """name → node view for Nodes read from the API; names that are no Node are left out."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names as k8s_names
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import api_path, get_json, list_pages
    api = _api(auth)
    wanted = set(names)
    found = {}

    def keep(obj):
        meta = obj.get("metadata") or {}
        if meta.get("name") in wanted:
            found[meta["name"]] = {"name": meta["name"], "labels": meta.get("labels") or {},
                                   "creationTimestamp": meta.get("creationTimestamp")}

    if len(wanted) > _NODE_GET_LIMIT:
        for page in list_pages(api, "/api/v1/nodes", "list nodes"):
            for obj in page:
                keep(obj)
        return found
    for name in sorted(wanted):
        if not k8s_names.is_subdomain(name):
            continue  # an inventory host that cannot be a Node's name is no Node: nothing to ask
        try:
            keep(get_json(api, api_path("v1", "nodes", name, name_rule="node"), "read node %s" % name))
        except ClusterError as exc:
            if exc.details.get("status") != 404:
                raise
    return found


def collect_nodes(host_names, variables_of, auth=None):
    """Node views for ``host_names`` (in order), labels from host variables, else from the API.

    ``variables_of(host)`` returns a host's (templated) variables as a mapping.
    """
    nodes = {}
    missing = []
    for host in host_names:
        view = node_from_vars(host, variables_of(host))
        if view is None:
            missing.append(host)
        else:
            nodes[host] = view
    if missing:
        try:
            fetched = fetch_nodes(missing, auth)
        except NodeWrightError as exc:
            raise NodeWrightError("%d host(s) have no node labels (%s) and reading their Nodes from the "
                                  "Kubernetes API failed: %s" % (len(missing), _names(missing), exc),
                                  hint="use the nodewright.fleet.k8s_nodes inventory, or set the host variable %s "
                                       "(a mapping, {} for none)" % VAR_NODE_LABELS)
        absent = [h for h in missing if h not in fetched]
        if absent:
            raise NodeWrightError("%d host(s) have no node labels and no Node of that name exists in the cluster: "
                                  "%s" % (len(absent), _names(absent)),
                                  hint="use the nodewright.fleet.k8s_nodes inventory, or set the host variable %s "
                                       "(a mapping, {} for none)" % VAR_NODE_LABELS)
        nodes.update(fetched)
    return [nodes[h] for h in host_names]
