# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright's own API objects: the group, version and plurals, and their reads and
status writes, in one place (raw JSON through the shared client)."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import (
    api_path,
    get_json,
    list_pages,
    request_json,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import API_GROUP, API_VERSION

NODEWRIGHTS = "nodewrights"
DEPLOYMENT_POLICIES = "deploymentpolicies"
GROUP_VERSION = "%s/%s" % (API_GROUP, API_VERSION)


def path(plural, name=None, subresource=None, field="name"):
    """``/apis/nodewright.io/v1alpha1/<plural>[/<name>[/<subresource>]]``, the name checked
    against its kind's rule and quoted (``names.InvalidName`` naming ``field``)."""
    rule = "nodewright" if plural == NODEWRIGHTS else "subdomain"
    return api_path(GROUP_VERSION, plural, name, subresource=subresource, name_rule=rule, field=field)


def get(api, plural, name, what=None, timeout=None, field="name"):
    """One object as the API server has it (ClusterError when it cannot be read)."""
    kind = "NodeWright" if plural == NODEWRIGHTS else "DeploymentPolicy"
    return get_json(api, path(plural, name, field=field), what or "read %s %s" % (kind, name), timeout=timeout)


def list_all(api, plural, what=None):
    items = []
    for page in list_pages(api, path(plural), what or "list %s.%s" % (plural, API_GROUP)):
        items.extend(page)
    return items


def patch_status(api, name, status, what=None):
    """Merge ``status`` (a mapping; None values remove keys) into a NodeWright's status."""
    body, _headers = request_json(api, "PATCH", path(NODEWRIGHTS, name, "status"),
                                  what or "write status of NodeWright %s" % name, body={"status": status},
                                  content_type="application/merge-patch+json")
    return body


def patch(api, plural, name, body, what=None):
    """Merge ``body`` into an object (metadata such as the pause annotation)."""
    obj, _headers = request_json(api, "PATCH", path(plural, name), what or "update %s %s" % (plural, name),
                                 body=body, content_type="application/merge-patch+json")
    return obj
