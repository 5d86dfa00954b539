# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Settings two NodeWright resources would both write on one node, with different values.

Two resources that target the same node and write the same kernel parameter, sysctl
key or file with different values fight: whichever runs last wins on the host, and
the other's checks then fail or, worse, pass against a value it never chose. Such a
pair is refused before any node is touched (``find_conflicts``), naming both
resources, the setting, both values and the nodes; the fix is to make the values
agree, or the selectors disjoint.

What a package writes is known from its manifest: the host settings its config writes
(``hostSettings``: ``sysctl``'s every key is a kernel parameter, ``kdump``'s
``crashkernel`` goes on the kernel command line), the settings its resolver works out
per node (``resolver``: nvidia-tuning's profile), and for every package the files its
``files/`` tree lays onto the host.
"""

from __future__ import annotations

import hashlib
import os

from ansible_collections.nodewright.fleet.plugins.module_utils.package import resolvers


def _norm(value):
    return " ".join(str(value).split())


def _file_digests(root, package):
    """``{"file:/path": sha256}`` of what a package lays onto the host."""
    out = {}
    files = os.path.join(root, getattr(package, "files_dirname", "files") or "files")
    if not os.path.isdir(files):
        return out
    for dirpath, _dirs, names in os.walk(files):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                digest = "symlink:" + os.readlink(path)
            else:
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()[:16]
            out["file:/" + os.path.relpath(path, files)] = digest
    return out


def spec_settings(config, package):
    """``{setting: value}`` a package with ``config`` (its spec's) writes on every node it targets."""
    out = {}
    if package is None:
        return out
    for key, value in package.settings_from_config(config or {}).items():
        out[key] = _norm(value)
    if getattr(package, "root", None):
        out.update(_file_digests(package.root, package))
    return out


def node_settings(plan):
    """``{setting: value}`` resolved for one node by the packages' resolvers (nvidia-tuning's
    per-node profile), from the summaries in the node's plan."""
    out = {}
    for plan_key in resolvers.plan_keys():
        summary = (plan or {}).get(plan_key) or {}
        for setting in summary.get("settings") or []:
            out["%s:%s" % (setting.get("mechanism"), setting.get("key"))] = _norm(setting.get("value"))
    return out


def describe_setting(key):
    kind, dummy, name = key.partition(":")
    return {"sysctl": "sysctl %s", "cmdline": "kernel parameter %s", "file": "file %s"}.get(kind, kind + " %s") % name


def find_conflicts(entries):
    """Conflicts among described resources.

    ``entries``: ``[(name, priority, {node: {setting: value}})]``. Returns a list of
    ``{"resources": [a, b], "setting", "values": {a: va, b: vb}, "nodes": [...]}``, one
    per pair and setting, nodes sorted."""
    found = {}
    for i, (a, _pa, per_node_a) in enumerate(entries):
        for b, _pb, per_node_b in entries[i + 1:]:
            for node in sorted(set(per_node_a) & set(per_node_b)):
                sa, sb = per_node_a[node], per_node_b[node]
                for key in sorted(set(sa) & set(sb)):
                    if sa[key] != sb[key]:
                        item = found.setdefault((a, b, key, sa[key], sb[key]), [])
                        item.append(node)
    out = []
    for (a, b, key, va, vb), nodes in sorted(found.items()):
        out.append({"resources": [a, b], "setting": key, "values": {a: va, b: vb}, "nodes": nodes})
    return out


def conflict_message(conflict, limit=5):
    a, b = conflict["resources"]
    nodes = conflict["nodes"]
    shown = ", ".join(nodes[:limit]) + (" and %d more" % (len(nodes) - limit) if len(nodes) > limit else "")
    return ("NodeWright %s and %s both set %s on %d node(s) (%s), to different values: %r (%s) and %r (%s)"
            % (a, b, describe_setting(conflict["setting"]), len(nodes), shown, conflict["values"][a], a,
               conflict["values"][b], b))
