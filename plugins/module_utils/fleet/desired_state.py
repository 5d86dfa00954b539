# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""From NodeWright resources to per-node work: which nodes a resource targets, the
package specs it asks for (with their sources resolved), and for each node what
would run (apply / upgrade / config / uninstall / nothing) and which interrupt.

Pure functions over plain dicts (resources, nodes as the API returns them, the
node's recorded state); reading the cluster is the caller's business.

``describe`` returns, per resource, what a rollout of it needs - the keys the
rollout driver reads (``rollout.yml`` today, the controller-side sequence after it):

=========================== ==========================================================
``name``, ``priority``      the resource and its priority (lower first)
``generation``              its ``metadata.generation``
``paused``, ``disabled``    its pause / disable annotations
``deleting``                it has a ``deletionTimestamp``: no rollout; its nodes are
                            uninstalled (``deletion``, ``playbooks/uninstall.yml``)
``policy``, ``policy_name`` the DeploymentPolicy spec in force and its name
``waves``                   the waves the policy makes (a dry run)
``targets``                 targeted nodes in batch order: the ones the resource's
                            ``status.nodePriority`` names first (in that order), then
                            oldest ``creationTimestamp`` first
``work``                    targets with something to do (not held, not malformed)
``nodes``                   per target: ``actions`` per package, ``interrupt``,
                            ``changed``, ``disruptive``, ``packages`` (plan entries)
``packages``                the package module's specs, sources resolved; each with
                            ``stage_timeout`` (seconds) when one applies,
                            ``reapply_on_reboot`` with ``reapplyOnReboot`` and
                            ``state: absent`` for a package with ``uninstall.apply``
``non_interruptible``       ``podNonInterruptLabels``
``runtime_required``        ``runtimeRequired``
``drain``                   ``drainConfig`` as ``nodewright.fleet.node_drain`` options
                            (``timeout``, ``grace_period`` in seconds,
                            ``delete_emptydir_data``, ``force``, ``ignore_daemonsets``,
                            ``disable_eviction``), only those the resource sets; the
                            driver merges: role defaults < ``drain`` < variables the
                            user gave the playbook
``stage_timeout``           ``spec.stageTimeout`` in seconds (None: no bound)
``sequencing``              ``node`` or ``all``; ``held`` (a reason) and ``held_by``
                            when an earlier ``sequencing: all`` resource is not
                            complete everywhere yet (``apply_sequencing``): then
                            ``work`` is empty
``uninstall``               ``{enabled: [packages], apply: [packages]}``: the packages
                            uninstalled when the resource is deleted, and now
``reapply_on_reboot``       ``reapplyOnReboot``: the package module applies a complete
                            package again when the node's boot id changed since
                            (its specs carry it), and the reconciler re-taints a
                            runtimeRequired node for that (``gating.retaint_after_reboot``)
``runtime_required_cordon_after``  ``runtimeRequiredCordonAfter`` (the gate's decision)
``malformed``               ``[{node, resource, message}]``: targets whose state
                            annotation cannot be parsed; they are left out of ``work``
                            and the rollout marks them (condition ``nodewright.io/
                            Erroring``, reason ``MalformedState``)
``recorded``                nodes that carry a state of this resource (targeted or
                            not): what an uninstall of it must visit
=========================== ==========================================================
"""

from __future__ import annotations

import os

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package import planner as package_planner
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.module_utils import tuning
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import parse_duration
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
    drain_options,
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
    """Names of the nodes the resource selects, minus ignored ones, in batch order: the
    nodes its ``status.nodePriority`` names first (in that order), then oldest first."""
    selector = from_label_selector(resource.get("spec", {}).get("nodeSelectors"), "spec.nodeSelectors")
    chosen = [n for n in nodes if selector.matches((n.get("metadata") or {}).get("labels") or {})
              and not is_ignored((n.get("metadata") or {}).get("labels") or {})]
    flat = [{"name": n["metadata"]["name"], "labels": n["metadata"].get("labels") or {},
             "creationTimestamp": n["metadata"].get("creationTimestamp")} for n in chosen]
    return order_nodes(flat, sticky=node_priority(resource))


def node_priority(resource):
    """``status.nodePriority``: node name -> when it first had work for the resource."""
    value = ((resource or {}).get("status") or {}).get("nodePriority")
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


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


def stage_timeout(value, where):
    """Seconds of a stageTimeout (None: no bound)."""
    return parse_duration(value, where, what="stageTimeout") or None


def package_specs(resource, package_dirs):
    """The package module's specs for a validated NodeWright resource, each checked
    against its manifest (version, expected config, the scripts its checks need)
    before any node is touched. Errors name the resource's fields
    (``spec.packages.<name>.configMap.<key>``)."""
    specs = []
    default_timeout = stage_timeout(resource["spec"].get("stageTimeout"), "spec.stageTimeout")
    for name, pkg in sorted((resource["spec"].get("packages") or {}).items()):
        where = "spec.packages.%s" % name
        src = resolve_source(name, pkg, package_dirs, where)
        spec = {"name": name, "src": src, "version": pkg["version"], "config": pkg.get("configMap") or {}}
        if (pkg.get("uninstall") or {}).get("apply"):
            spec["state"] = "absent"
        if pkg.get("interrupt"):
            spec["interrupt"] = pkg["interrupt"]
        if pkg.get("configInterrupts"):
            spec["config_interrupts"] = pkg["configInterrupts"]
        if pkg.get("dependsOn"):
            spec["depends_on"] = pkg["dependsOn"]
        if pkg.get("env"):
            spec["env"] = {e["name"]: e.get("value", "") for e in pkg["env"] if "name" in e}
        timeout = stage_timeout(pkg.get("stageTimeout"), where + ".stageTimeout") if "stageTimeout" in pkg \
            else default_timeout
        if timeout:
            spec["stage_timeout"] = timeout
        if resource["spec"].get("reapplyOnReboot"):
            spec["reapply_on_reboot"] = True
        package = load_package(src)
        # version, expected config and the check scripts are checked here
        package_planner.desired_from_spec(spec, package, where=where, config_field="configMap")
        specs.append(spec)
    return specs


def recorded_state(node, resource_name):
    """The state ``resource_name`` recorded on ``node`` (``node/state.py``): None when
    there is none; raises ``UnreadableState`` when it cannot be parsed."""
    state = node_state.read_node_state(node, resource_name)
    if "error" in state:
        raise node_state.UnreadableState(state["error"])
    return state if "packages" in state else None


def node_plan(specs, node, resource_name):
    """What would run on this node, and whether it disrupts workloads."""
    desired = []
    for spec in specs:
        package = load_package(spec["src"])
        desired.append(package_planner.desired_from_spec(spec, package))
    result = package_planner.plan(desired, recorded_state(node, resource_name), boot_id=node_state.boot_id(node))
    interrupt = result.get("interrupt") or {"type": "noop"}
    return {"actions": {p["name"]: p["action"] for p in result["packages"]},
            "interrupt": interrupt, "changed": bool(result.get("changed")),
            "disruptive": interrupt.get("type", "noop") != "noop",
            "packages": result["packages"]}


# --- NVIDIA tuning --------------------------------------------------------------------
# The nvidia-tuning package's steps run in a plain shell on the node, so its profile is
# resolved here, from the targeted nodes' labels and OS, into the package's config
# (module_utils/tuning.py, "The nvidia-tuning package"). The plan shows the settings.

def nvidia_tuning_specs(specs, nodes):
    """The specs with nvidia-tuning's profile resolved for ``nodes`` (Node objects), and
    per node name the settings it would get (``tuning.plan_summary``)."""
    out, per_node = [], {}
    facts = [tuning.node_facts(n) for n in nodes]
    for spec in specs:
        if spec["name"] != tuning.PACKAGE_NAME:
            out.append(spec)
            continue
        spec, settings = tuning.package_spec_for_nodes(spec, facts, package=load_package(spec["src"]))
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
    """Everything a rollout of one resource needs, validated; raises on bad input.
    The keys are listed in this module's docstring."""
    original = resource
    resource = validate_nodewright(resource)
    spec = resource["spec"]
    name = resource["metadata"]["name"]
    targets = targeted_nodes(resource, nodes)
    specs = package_specs(resource, package_dirs)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    specs, tuning_settings = nvidia_tuning_specs(specs, [by_name[t] for t in targets])
    plans, malformed = {}, []
    for t in targets:
        problem = node_state.unreadable(by_name[t], name)
        if problem:
            malformed.append({"node": t, "resource": name, "message": problem})
            plans[t] = {"actions": {}, "interrupt": {"type": "noop"}, "changed": False, "disruptive": False,
                        "packages": [], "malformed": problem}
            continue
        plans[t] = node_plan(specs, by_name[t], name)
    for t, settings in tuning_settings.items():
        if t in plans:
            plans[t]["nvidia_tuning"] = settings
    policy = policy_for(resource, policies)
    bad = {m["node"] for m in malformed}
    deleting = bool(((original or {}).get("metadata") or {}).get("deletionTimestamp"))
    # A node left mid-sequence (a crash after its packages ran, before it was marked
    # complete) or marked erroring is work too: the safe sequence resumes or retries it.
    # A node whose state cannot be read is left alone until it is fixed or reset.
    work = [] if deleting else [t for t in targets if t not in bad
                                and (plans[t]["changed"] or _unfinished(by_name[t], name))]
    sticky = node_priority(original)
    waves = plan_waves(parse_policy(policy), [_with_sticky(by_name[t], sticky) for t in targets],
                       done=[t for t in targets if t not in work], fleet_size=len(nodes))
    packages = spec.get("packages") or {}
    return {
        "name": name, "priority": spec.get("priority", DEFAULT_PRIORITY),
        "generation": resource["metadata"].get("generation"),
        "paused": is_paused(resource), "disabled": is_disabled(resource), "deleting": deleting,
        "policy": policy, "policy_name": spec.get("deploymentPolicy"),
        "waves": waves.to_dict(),
        "non_interruptible": spec.get("podNonInterruptLabels") or {},
        "runtime_required": bool(spec.get("runtimeRequired")),
        "targets": targets, "packages": specs, "nodes": plans,
        "work": work,
        "drain": drain_options(spec.get("drainConfig")),
        "stage_timeout": stage_timeout(spec.get("stageTimeout"), "spec.stageTimeout"),
        "sequencing": spec.get("sequencing", "node"),
        "uninstall": {"enabled": sorted(p for p, v in packages.items() if (v.get("uninstall") or {}).get("enabled")),
                      "apply": sorted(p for p, v in packages.items() if (v.get("uninstall") or {}).get("apply"))},
        "reapply_on_reboot": bool(spec.get("reapplyOnReboot")),
        "runtime_required_cordon_after": bool(spec.get("runtimeRequiredCordonAfter")),
        "malformed": malformed,
        "recorded": sorted(n["metadata"]["name"] for n in nodes
                           if node_state.annotation_text(n, name) is not None),
    }


def _with_sticky(node, sticky):
    """The node with its place in ``status.nodePriority`` for the wave engine."""
    if node["metadata"]["name"] not in sticky:
        return node
    return dict(node, nodewrightOrder=sticky[node["metadata"]["name"]])


def apply_sequencing(rollouts):
    """``sequencing: all``: a resource that is not complete on every node it targets
    holds every resource of a later priority - each gets ``held`` (why), ``held_by``
    and no ``work`` - until it is. ``rollouts`` are ``describe`` results in priority
    order; they are changed in place and returned. A disabled resource holds nothing
    (it is withdrawn); resources of the same priority are not held by each other."""
    holder = None
    for r in rollouts:
        if holder is not None and r["priority"] > holder["priority"] and not r.get("deleting"):
            pending = len(holder["work"]) + len(holder.get("malformed") or [])
            r["held_by"] = holder["name"]
            r["held"] = ("waiting for %s (priority %d, sequencing: all) to complete on every node it targets; "
                         "%d of %d still to do" % (holder["name"], holder["priority"], pending,
                                                  len(holder["targets"])))
            r["work"] = []
            continue
        if holder is None and r.get("sequencing") == "all" and not r.get("disabled") and not r.get("deleting") \
                and (r["work"] or r.get("malformed")):
            holder = r
    return rollouts
