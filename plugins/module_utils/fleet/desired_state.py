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
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    parse_policy,
    policy_from_interruption_budget,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import resource_selector, targets
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import order_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    DEFAULT_PRIORITY,
    is_disabled,
    is_paused,
    validate_nodewright,
)


def _order_key(resource):
    spec = resource.get("spec") if isinstance(resource.get("spec"), dict) else {}
    priority = spec.get("priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = DEFAULT_PRIORITY  # validation reports it; the order must not fail on it
    metadata = resource.get("metadata") if isinstance(resource.get("metadata"), dict) else {}
    return priority, str(metadata.get("name") or "")


def order_resources(resources):
    """Priority order: lower priority value first, then name (as Skyhook does)."""
    return sorted(resources, key=_order_key)


def targeted_nodes(resource, nodes):
    """Names of the nodes the resource selects, minus ignored ones, oldest first."""
    selector = resource_selector(resource)
    chosen = [n for n in nodes if targets(resource, (n.get("metadata") or {}).get("labels"), selector)]
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
            raise ValidationError(str(exc), field=where + ".image",
                                  hint="image is the repository (registry/path), version the tag, containerSHA "
                                       "sha256:<64 hex>")
        resolver = resolver if resolver is not None else package_sources.ImageResolver()
        return resolver.resolve(ref, package=name, field=where + ".image", digest_field=where + ".containerSHA").path
    candidates = []
    source = package.get("source")
    if source and os.path.isabs(source):
        candidates.append(os.path.normpath(source))
    for d in package_dirs:
        candidates.append(os.path.normpath(os.path.join(d, source or name)))
    for c in candidates:
        if os.path.isdir(c):
            return os.path.abspath(c)
    raise ValidationError("no package directory found (looked in %s)" % (", ".join(candidates) or "no directory"),
                          field=where + (".source" if source else ""),
                          hint="set source to the package directory, or add the directory that holds it to "
                               "nodewright_extra_package_dirs")


# The package planner names the fields of its own spec ("packages[0].version"); a
# resource's are spec.packages.<name>.version, configMap, dependsOn, configInterrupts.
_SPEC_FIELDS = ((".config_interrupts", ".configInterrupts"), (".config", ".configMap"),
                (".depends_on", ".dependsOn"), (".src", ".source"))


def _in_resource(exc, where):
    """``exc`` (one problem or several) with the planner's field paths turned into the
    resource's (``spec.packages.<name>...``)."""
    errors = exc.errors if isinstance(getattr(exc, "errors", None), list) and exc.errors else [exc]
    problems = Problems()
    for error in errors:
        field = error.field or ""
        if not field.startswith("packages[0]"):
            problems.add(error)
            continue
        rest = field[len("packages[0]"):]
        for old, new in _SPEC_FIELDS:
            if rest.startswith(old):
                rest = new + rest[len(old):]
                break
        problems.add(ValidationError(getattr(error, "problem", error.message), field=where + rest, hint=error.hint))
    try:
        problems.raise_if_any()
    except ValidationError as mapped:
        return mapped
    return exc


def _load(src, cache):
    if cache is None:
        return load_package(src)
    if src not in cache:
        cache[src] = load_package(src)
    return cache[src]


def package_specs(resource, package_dirs, cache=None):
    """The package module's specs for a validated NodeWright resource, each checked
    against its manifest (version, expected config) before any node is touched."""
    specs = []
    problems = Problems()
    for name, pkg in sorted((resource["spec"].get("packages") or {}).items()):
        where = "spec.packages.%s" % name
        with problems.collect():
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
            package = _load(src, cache)
            try:
                package_planner.desired_from_spec(spec, package)  # version and config checked here
            except ValidationError as exc:
                raise _in_resource(exc, where)
            specs.append(spec)
    problems.raise_if_any()
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


def desired_packages(specs, cache=None):
    """The planner's view of ``specs`` (each package loaded once)."""
    return [package_planner.desired_from_spec(spec, _load(spec["src"], cache)) for spec in specs]


def node_plan(specs, node, resource_name, desired=None, cache=None):
    """What would run on this node, and whether it disrupts workloads."""
    if desired is None:
        desired = desired_packages(specs, cache)
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

def nvidia_tuning_specs(specs, nodes, cache=None):
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
        spec, settings = package_spec_for_nodes(spec, facts, package=_load(spec["src"], cache))
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


def describe(resource, nodes, policies, package_dirs, cache=None, by_name=None):
    """Everything a rollout of one resource needs, validated; raises on bad input.

    ``waves`` is filled in by ``describe_all``: the waves of a run of every resource
    together, which is what a rollout makes."""
    resource = validate_nodewright(resource)
    name = resource["metadata"]["name"]
    targets = targeted_nodes(resource, nodes)
    cache = {} if cache is None else cache
    specs = package_specs(resource, package_dirs, cache)
    by_name = by_name or {n["metadata"]["name"]: n for n in nodes}
    specs, tuning_settings = nvidia_tuning_specs(specs, [by_name[t] for t in targets], cache)
    desired = desired_packages(specs, cache)
    plans = {t: node_plan(specs, by_name[t], name, desired=desired) for t in targets}
    for t, settings in tuning_settings.items():
        plans[t]["nvidia_tuning"] = settings
    policy = policy_for(resource, policies)
    # A node left mid-sequence (a crash after its packages ran, before it was marked
    # complete) or marked erroring is work too: the safe sequence resumes or retries it.
    work = [t for t in targets if plans[t]["changed"] or _unfinished(by_name[t], name)]
    return {
        "name": name, "priority": resource["spec"].get("priority", DEFAULT_PRIORITY),
        "generation": resource["metadata"].get("generation"),
        "paused": is_paused(resource), "disabled": is_disabled(resource),
        "policy": policy, "policy_name": resource["spec"].get("deploymentPolicy"),
        "waves": {"waves": [], "status": "unplanned", "reason": "planned with every resource (describe_all)"},
        "non_interruptible": resource["spec"].get("podNonInterruptLabels") or {},
        "runtime_required": bool(resource["spec"].get("runtimeRequired")),
        "targets": targets, "packages": specs, "nodes": plans,
        "work": work,
        "drain": resource["spec"].get("drainConfig") or {},
    }


def settings_of(entry, cache):
    """node -> {setting: value} a described resource writes (for ``conflicts``)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts
    common = {}
    for spec in entry["packages"]:
        common.update(conflicts.spec_settings(spec, _load(spec["src"], cache)))
    out = {}
    for node in entry["targets"]:
        settings = dict(common)
        settings.update(conflicts.node_settings(entry["nodes"].get(node)))
        out[node] = settings
    return out


def describe_all(resources, nodes, policies, package_dirs, only=None, holders=None, now=None):
    """Every resource described, conflicts between them refused, and the waves of a run
    of all of them together (the rollout driver's own dry run).

    Returns ``{"rollouts", "blocked", "waves", "conflicts", "status", "reason"}``;
    ``only``: the name of the one resource to report (the others are still read, for
    conflicts and for the nodes they have in progress)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts as conflicts_mod
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import driver as driver_mod
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.rollout import resume_state

    cache = {}
    by_name = {n["metadata"]["name"]: n for n in nodes}
    rollouts, blocked, objects = [], [], {}
    for resource in order_resources(resources):
        name = (resource.get("metadata") or {}).get("name", "?")
        try:
            rollouts.append(describe(resource, nodes, policies, package_dirs, cache, by_name))
            objects[name] = resource
        except NodeWrightError as exc:
            blocked.append({"name": name, "reason": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one resource's surprise must not stop the others
            blocked.append({"name": name, "reason": "cannot be described (%s: %s); this is a NodeWright bug if the "
                                                    "resource is valid" % (type(exc).__name__, exc)})
    found = conflicts_mod.find_conflicts([(r["name"], r["priority"], settings_of(r, cache)) for r in rollouts])
    if found:
        bad = {}
        for conflict in found:
            for name in conflict["resources"]:
                bad.setdefault(name, []).append(conflicts_mod.conflict_message(conflict))
        blocked.extend({"name": name, "reason": "; ".join(reasons) + "; make the values agree, or the resources' "
                        "nodeSelectors disjoint (nothing was changed)", "conflict": True}
                       for name, reasons in sorted(bad.items()))
        rollouts = [r for r in rollouts if r["name"] not in bad]
    if only is not None:
        rollouts = [r for r in rollouts if r["name"] == only]
        blocked = [b for b in blocked if b["name"] == only]
    runnable = []
    for entry in rollouts:
        if entry["paused"] or entry["disabled"]:
            continue
        policy = parse_policy(entry["policy"])
        state, _note = resume_state(policy, objects.get(entry["name"]))
        runnable.append(driver_mod.ResourceRollout(entry["name"], policy, targets=entry["targets"],
                                                   work=entry["work"], priority=entry["priority"], state=state))
    view = driver_mod.simulated_view(nodes, holders, now)
    run, status, reason = driver_mod.plan_run(runnable, view)
    per = {res.name: res for res in run.resources}
    for entry in rollouts:
        res = per.get(entry["name"])
        if res is None:
            continue
        waves = []
        for wave in run.waves:
            mine = wave.waves.get(res.name)
            if mine is not None:
                data = mine.to_dict()
                data["number"] = wave.number
                waves.append(data)
        decision = res.decision
        entry["waves"] = {"waves": waves, "status": decision.status if decision else "complete",
                          "reason": decision.reason if decision else "nothing to do"}
    return {"rollouts": rollouts, "blocked": blocked, "waves": driver_mod.waves_of(run), "conflicts": found,
            "status": status, "reason": reason}
