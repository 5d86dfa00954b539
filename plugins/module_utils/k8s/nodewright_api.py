# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NodeWright's own API objects: the group, version and plurals, their reads, patches and
status writes, and the one rule for a condition's ``lastTransitionTime``, in one place
(raw JSON through the shared client). The reconciler's watches take their paths from
here; the kubernetes package's watch helper needs its typed list call for the stream."""

from __future__ import annotations

import datetime

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
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


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(old, new, now=None):
    """``new`` conditions with Kubernetes' rule for ``lastTransitionTime``: kept from the
    condition of the same type in ``old`` while its status stays the same, else the new
    condition's own time (or ``now``)."""
    before = {c.get("type"): c for c in old or [] if isinstance(c, dict)}
    out = []
    for cond in new:
        cond = dict(cond)
        prev = before.get(cond.get("type"))
        if prev and prev.get("status") == cond.get("status") and prev.get("lastTransitionTime"):
            cond["lastTransitionTime"] = prev["lastTransitionTime"]
        else:
            cond["lastTransitionTime"] = cond.get("lastTransitionTime") or now or _now()
        out.append(cond)
    return out


def set_condition(api, name, ctype, decide, attempts=3):
    """Set the condition ``ctype`` of a NodeWright's status: ``decide(old)`` gets the current
    condition of that type (or None) and returns the new one (type, status, reason,
    message) or None to leave it. Nothing is written when status, reason and message stay
    the same. Written with the resourceVersion read, and read again when another writer
    changed the resource meanwhile (409). Returns whether the condition now holds what
    ``decide`` asked for; ClusterError when the resource cannot be read or written."""
    for attempt in range(attempts):
        current = get_json(api, path(NODEWRIGHTS, name, "status"), "read status of NodeWright %s" % name)
        conditions = [c for c in (current.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        old = next((c for c in conditions if c.get("type") == ctype), None)
        new = decide(old)
        if new is None:
            return True
        if old and all(old.get(k) == new.get(k) for k in ("status", "reason", "message")):
            return True
        merged = merge_conditions(conditions, [c for c in conditions if c.get("type") != ctype] + [new])
        body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {"conditions": merged}}
        try:
            request_json(api, "PATCH", path(NODEWRIGHTS, name, "status"), "write status of NodeWright %s" % name,
                         body=body, content_type="application/merge-patch+json")
            return True
        except ClusterError as exc:
            if (exc.details or {}).get("status") != 409 or attempt == attempts - 1:
                raise
    return False
