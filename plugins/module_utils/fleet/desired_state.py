# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""From NodeWright resources to per-node work: which nodes a resource targets, the
package specs it asks for (with their sources resolved), and for each node what
would run (apply / upgrade / config / uninstall / nothing) and which interrupt.

Pure functions over plain dicts (resources, nodes as the API returns them, the
node's recorded state); reading the cluster is the caller's business.
"""

from __future__ import annotations

import json
import os

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.package import planner as package_planner
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import package as tuning
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    parse_policy,
    policy_from_interruption_budget,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    is_ignored,
    order_nodes,
    plan_waves,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    DEFAULT_PRIORITY,
    is_disabled,
    is_paused,
    validate_nodewright,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import from_label_selector


def order_resources(resources):
    """Priority order: lower priority value first, then name (as Skyhook does)."""
    return sorted(resources, key=lambda r: (r.get("spec", {}).get("priority", DEFAULT_PRIORITY),
                                            r["metadata"]["name"]))


def targeted_nodes(resource, nodes):
    """Names of the nodes the resource selects, minus ignored ones, oldest first."""
    selector = from_label_selector(resource.get("spec", {}).get("nodeSelectors"), "spec.nodeSelectors")
    chosen = [n for n in nodes if selector.matches((n.get("metadata") or {}).get("labels") or {})
              and not is_ignored((n.get("metadata") or {}).get("labels") or {})]
    flat = [{"name": n["metadata"]["name"], "labels": n["metadata"].get("labels") or {},
             "creationTimestamp": n["metadata"].get("creationTimestamp")} for n in chosen]
    return order_nodes(flat)


def resolve_source(name, package, package_dirs, where, resolver=None):
    """Directory of a package: its ``image`` (``version`` is the tag, ``containerSHA``
    the pinned digest) pulled and unpacked by ``resolver`` (a
    ``package_sources.ImageResolver``; None: one with the default cache), else
    ``source`` (absolute, or relative to a package dir), else the package's name
    among the package dirs."""
    if package.get("image"):
        try:
            ref = package_sources.image_ref_for_package(package["image"], package["version"],
                                                        package.get("containerSHA"))
        except ValueError as exc:
            raise ValidationError("package %s: %s" % (name, exc), field=where + ".image",
                                  hint="image is the repository (registry/path), version the tag, containerSHA "
                                       "sha256:<64 hex>")
        resolver = resolver if resolver is not None else package_sources.ImageResolver()
        return resolver.resolve(ref, package=name, field=where + ".image", digest_field=where + ".containerSHA").path
    candidates = []
    source = package.get("source")
    if source and os.path.isabs(source):
        candidates.append(source)
    for d in package_dirs:
        candidates.append(os.path.join(d, source or name))
    for c in candidates:
        if os.path.isdir(c):
            return os.path.abspath(c)
    raise ValidationError("package %s: no package directory found (looked in %s)" % (name, ", ".join(candidates)),
                          field=where + (".source" if source else ""),
                          hint="set source to the package directory")


def package_specs(resource, package_dirs):
    """The package module's specs for a validated NodeWright resource, each checked
    against its manifest (version, expected config) before any node is touched."""
    specs = []
    for name, pkg in sorted((resource["spec"].get("packages") or {}).items()):
        where = "spec.packages.%s" % name
        src = resolve_source(name, pkg, package_dirs, where)
        spec = {"name": name, "src": src, "version": pkg["version"], "config": pkg.get("configMap") or {}}
        if pkg.get("interrupt"):
            spec["interrupt"] = pkg["interrupt"]
        if pkg.get("configInterrupts"):
            spec["config_interrupts"] = pkg["configInterrupts"]
        if pkg.get("dependsOn"):
            spec["depends_on"] = pkg["dependsOn"]
        if pkg.get("env"):
            spec["env"] = {e["name"]: e.get("value", "") for e in pkg["env"] if "name" in e}
        package = load_package(src)
        package_planner.desired_from_spec(spec, package)  # version and config checked here
        specs.append(spec)
    return specs


def recorded_state(node, resource_name):
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(markers.state_annotation(resource_name))
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "packages" in value else None


def node_plan(specs, node, resource_name):
    """What would run on this node, and whether it disrupts workloads."""
    desired = []
    for spec in specs:
        package = load_package(spec["src"])
        desired.append(package_planner.desired_from_spec(spec, package))
    result = package_planner.plan(desired, recorded_state(node, resource_name))
    interrupt = result.get("interrupt") or {"type": "noop"}
    return {"actions": {p["name"]: p["action"] for p in result["packages"]},
            "interrupt": interrupt, "changed": bool(result.get("changed")),
            "disruptive": interrupt.get("type", "noop") != "noop",
            "packages": result["packages"]}


# --- NVIDIA tuning --------------------------------------------------------------------
# The nvidia-tuning package's steps run in a plain shell on the node, so its profile is
# resolved here, from the targeted nodes' labels and OS, into the package's config
# (module_utils/tuning/package.py). The plan shows the settings.

def nvidia_tuning_specs(specs, nodes):
    """The specs with nvidia-tuning's profile resolved for ``nodes`` (Node objects), and
    per node name the settings it would get (``tuning.plan_summary``)."""
    # The shipped profiles and templates are read on the controller.
    from ansible_collections.nodewright.fleet.plugins.plugin_utils.tuning_files import package_spec_for_nodes

    out, per_node = [], {}
    facts = [tuning.node_facts(n) for n in nodes]
    for spec in specs:
        if spec["name"] != tuning.PACKAGE_NAME:
            out.append(spec)
            continue
        spec, settings = package_spec_for_nodes(spec, facts, package=load_package(spec["src"]))
        out.append(spec)
        per_node.update(settings)
    return out, per_node


def _unfinished(node, resource_name):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(markers.status_label(resource_name)) in (
        markers.STATUS_IN_PROGRESS, markers.STATUS_ERRORING, markers.STATUS_BLOCKED)


def policy_for(resource, policies):
    """The DeploymentPolicy spec of a resource (by name from ``policies``), or the one
    its interruptionBudget implies. A missing policy is an error the caller reports."""
    spec = resource["spec"]
    name = spec.get("deploymentPolicy")
    if name:
        if name not in policies:
            raise ValidationError("DeploymentPolicy %r does not exist" % name, field="spec.deploymentPolicy",
                                  hint="create it, or fix the name; the resource stays blocked until then")
        return parse_policy(policies[name].get("spec") or {}).to_dict()
    return policy_from_interruption_budget(spec.get("interruptionBudget")).to_dict()


def describe(resource, nodes, policies, package_dirs):
    """Everything a rollout of one resource needs, validated; raises on bad input."""
    resource = validate_nodewright(resource)
    name = resource["metadata"]["name"]
    targets = targeted_nodes(resource, nodes)
    specs = package_specs(resource, package_dirs)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    specs, tuning_settings = nvidia_tuning_specs(specs, [by_name[t] for t in targets])
    plans = {t: node_plan(specs, by_name[t], name) for t in targets}
    for t, settings in tuning_settings.items():
        plans[t]["nvidia_tuning"] = settings
    policy = policy_for(resource, policies)
    # A node left mid-sequence (a crash after its packages ran, before it was marked
    # complete) or marked erroring is work too: the safe sequence resumes or retries it.
    work = [t for t in targets if plans[t]["changed"] or _unfinished(by_name[t], name)]
    waves = plan_waves(parse_policy(policy), [by_name[t] for t in targets],
                       done=[t for t in targets if t not in work], fleet_size=len(nodes))
    return {
        "name": name, "priority": resource["spec"].get("priority", DEFAULT_PRIORITY),
        "generation": resource["metadata"].get("generation"),
        "paused": is_paused(resource), "disabled": is_disabled(resource),
        "policy": policy, "policy_name": resource["spec"].get("deploymentPolicy"),
        "waves": waves.to_dict(),
        "non_interruptible": resource["spec"].get("podNonInterruptLabels") or {},
        "runtime_required": bool(resource["spec"].get("runtimeRequired")),
        "targets": targets, "packages": specs, "nodes": plans,
        "work": work,
    }
