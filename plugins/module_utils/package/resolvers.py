# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Controller-side resolvers: packages whose config is worked out per node before they run.

A package's steps run in a plain shell on the node. A package whose settings depend on
the node (its GPUs, OS, cloud) names a resolver in its manifest (``"resolver":
"nvidia-tuning"``); planning then hands the package's spec and the targeted nodes to that
resolver, which returns the spec with its resolved config and, per node, a summary the
plan shows under ``plan_key``. Which package a spec runs is decided by the manifest, never
by the name a resource gives it. Resolvers ship with the collection
(``model.RESOLVERS``); a manifest cannot name code of its own.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError


class Resolver(object):
    """``resolve(spec, nodes, package) -> (spec, {node: summary})``; ``nodes`` are Node
    objects as the API returns them."""

    def __init__(self, name, plan_key, resolve):
        self.name = name
        self.plan_key = plan_key
        self.resolve = resolve


def _nvidia_tuning(spec, nodes, package):
    from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import package as tuning
    from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import package_spec_for_nodes

    return package_spec_for_nodes(spec, [tuning.node_facts(n) for n in nodes], package=package)


_RESOLVERS = {
    "nvidia-tuning": Resolver("nvidia-tuning", "nvidia_tuning", _nvidia_tuning),
}


def plan_keys():
    """The keys under which resolvers put their per-node summary in a node's plan."""
    return tuple(sorted(r.plan_key for r in _RESOLVERS.values()))


def resolver_of(package):
    """The package's resolver, or None when its manifest names none."""
    name = getattr(package, "resolver", None)
    if not name:
        return None
    if name not in _RESOLVERS:
        raise ValidationError("package %s names resolver %r, which this collection does not have"
                              % (getattr(package, "name", "?"), name), field="resolver",
                              hint="known resolvers: %s" % ", ".join(sorted(_RESOLVERS)))
    return _RESOLVERS[name]


def resolve_specs(specs, packages, nodes):
    """``specs`` with each one whose package has a resolver resolved for ``nodes``.

    ``packages`` maps a spec's ``src`` to its loaded package. Returns ``(specs, per_node)``
    where ``per_node`` is ``{node name: {plan key: summary}}``."""
    out, per_node = [], {}
    for spec in specs:
        resolver = resolver_of(packages[spec["src"]])
        if resolver is None:
            out.append(spec)
            continue
        spec, summaries = resolver.resolve(spec, nodes, packages[spec["src"]])
        out.append(spec)
        for node, summary in summaries.items():
            per_node.setdefault(node, {})[resolver.plan_key] = summary
    return out, per_node
