# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""From NodeWright resources to per-node work: which nodes a resource targets, the
package specs it asks for (with their sources resolved), and for each node what
would run (apply / upgrade / config / uninstall / nothing) and which interrupt.

Pure functions over plain dicts (resources, nodes as the API returns them, the
node's recorded state); reading the cluster is the caller's business.

``describe`` returns, per resource, what a rollout of it needs (a ``plan.ResourcePlan``,
whose docstring lists its fields); ``describe_all`` every resource of a run (a
``plan.RunPlan``).
"""

from __future__ import annotations

import base64
import os

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gpu_health
from ansible_collections.nodewright.fleet.plugins.module_utils.node import state as node_state
from ansible_collections.nodewright.fleet.plugins.module_utils.package import planner as package_planner
from ansible_collections.nodewright.fleet.plugins.module_utils.package import resolvers as package_resolvers
from ansible_collections.nodewright.fleet.plugins.module_utils.package import retries as package_retries
from ansible_collections.nodewright.fleet.plugins.module_utils.package import sources as package_sources
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import Problems
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import parse_duration
from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import (
    NodePlan,
    PackageSpec,
    ResourcePlan,
    RunPlan,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import (
    parse_policy,
    policy_from_interruption_budget,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import resource_selector, targets
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import conversion_warnings_of
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import order_nodes
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.resources import (
    DEFAULT_PRIORITY,
    drain_options,
    is_disabled,
    is_paused,
    non_interrupt_wait_options,
    retry_options,
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
    """Names of the nodes the resource selects, minus ignored ones, in batch order: the
    nodes its ``status.nodePriority`` names first (in that order), then oldest first."""
    selector = resource_selector(resource)
    chosen = [n for n in nodes if targets(resource, (n.get("metadata") or {}).get("labels"), selector)]
    flat = [{"name": n["metadata"]["name"], "labels": n["metadata"].get("labels") or {},
             "creationTimestamp": n["metadata"].get("creationTimestamp")} for n in chosen]
    return order_nodes(flat, sticky=node_priority(resource))


def node_priority(resource):
    """``status.nodePriority``: node name -> when it first had work for the resource."""
    value = ((resource or {}).get("status") or {}).get("nodePriority")
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def resolve_source(name, package, package_dirs, where, resolver=None, archs=None, images=None):
    """Directory of a package: its ``image`` (``version`` is the tag, ``containerSHA``
    the pinned digest) pulled and unpacked by ``resolver`` (a
    ``package_sources.ImageResolver``; None: one with the default cache), else
    ``source`` (absolute, or relative to a package dir), else the package's name
    among the package dirs.

    An image that is an index of platforms is unpacked once per architecture in
    ``archs`` (the targeted nodes'; none known: the controller's), each variant checked
    here, before any node is touched; ``images[name]`` then records the reference pinned
    to the index, from which each node's run takes its own architecture's variant. The
    directory returned (for planning) is the first architecture's."""
    if package.get("image"):
        try:
            ref = package_sources.image_ref_for_package(package["image"], package["version"],
                                                        package.get("containerSHA"))
        except ValueError as exc:
            raise ValidationError(str(exc), field=where + ".image",
                                  hint="image is the repository (registry/path), version the tag, containerSHA "
                                       "sha256:<64 hex>")
        resolver = resolver if resolver is not None else package_sources.ImageResolver()
        wanted = sorted(set(archs or ())) or [resolver.arch]
        fields = {"package": name, "field": where + ".image", "digest_field": where + ".containerSHA"}
        first = resolver.for_arch(wanted[0]).resolve(ref, **fields)
        if first.manifest_digest and first.manifest_digest != first.digest:
            pinned = package_sources.parse_image_ref("oci://%s:%s@%s" % (ref.name, ref.tag, first.digest))
            for arch in wanted[1:]:
                _load(resolver.for_arch(arch).resolve(pinned, **fields).path, None)
            if images is not None:
                images[name] = {"reference": pinned.text, "archs": wanted}
        return first.path
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


def stage_timeout(value, where):
    """Seconds of a stageTimeout (None: no bound)."""
    return parse_duration(value, where, what="stageTimeout") or None


ENV_NAMESPACE = "nodewright"
"""Namespace of the Secrets and ConfigMaps a package's ``env[].valueFrom`` names."""

_REF_KINDS = {"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}


def split_env(env):
    """A resource's ``env`` list as ``(values, refs)``: ``values`` maps each variable
    given by ``value`` to it; ``refs`` maps each variable given by ``valueFrom`` to
    ``{kind, name, key, optional}`` (kind ``Secret`` or ``ConfigMap``), read from
    ``ENV_NAMESPACE`` when the package runs, so that no Secret's value is written into
    the plan, the inventory or any status."""
    values, refs = {}, {}
    for item in env or []:
        if "name" not in item:
            continue
        source = item.get("valueFrom")
        if not source:
            values[item["name"]] = item.get("value", "")
            continue
        ref_kind = next(iter(source))
        ref = source[ref_kind]
        refs[item["name"]] = {"kind": _REF_KINDS[ref_kind], "name": ref["name"], "key": ref["key"],
                              "optional": bool(ref.get("optional"))}
    return values, refs


def env_lookup_for(api_client, namespace=ENV_NAMESPACE):
    """A ``lookup(kind, name, key)`` that reads a key of a Secret or ConfigMap in
    ``namespace``: its value, or None when the object or the key does not exist."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import call
    from kubernetes import client as k8s_client
    core = k8s_client.CoreV1Api(api_client)

    def lookup(kind, name, key):
        read = core.read_namespaced_secret if kind == "Secret" else core.read_namespaced_config_map
        try:
            obj = call("read %s %s/%s" % (kind, namespace, name), read, name, namespace)
        except ClusterError as exc:
            if (exc.details or {}).get("status") == 404:
                return None
            raise
        data = obj.data or {}
        if key not in data:
            return None
        if kind == "Secret":
            return base64.b64decode(data[key]).decode("utf-8", "replace")
        return data[key]
    return lookup


def _missing_ref(ref, field):
    return ValidationError("%s %s/%s has no key %r" % (ref["kind"], ENV_NAMESPACE, ref["name"], ref["key"]),
                           field=field, hint="create it (kubectl -n %s create %s ...), or set optional: true to "
                                             "leave the variable unset when it is missing"
                                             % (ENV_NAMESPACE, ref["kind"].lower()))


def check_env_from(refs, lookup, where):
    """Refuse, before any node is touched, a required ``valueFrom`` whose Secret or
    ConfigMap key does not exist."""
    problems = Problems()
    for var, ref in sorted(refs.items()):
        if not ref["optional"] and lookup(ref["kind"], ref["name"], ref["key"]) is None:
            problems.add(_missing_ref(ref, "%s.%s.valueFrom" % (where, var)))
    problems.raise_if_any()


def resolve_env_from(refs, lookup, where="env"):
    """The variables ``refs`` name, read now (an optional one that is missing is left
    unset); raises ValidationError for a required one that is missing."""
    values = {}
    problems = Problems()
    for var, ref in sorted(refs.items()):
        value = lookup(ref["kind"], ref["name"], ref["key"])
        if value is not None:
            values[var] = value
        elif not ref["optional"]:
            problems.add(_missing_ref(ref, "%s.%s.valueFrom" % (where, var)))
    problems.raise_if_any()
    return values


def package_specs(resource, package_dirs, cache=None, archs=None, images=None, env_lookup=None):
    """The package module's specs for a validated NodeWright resource, each checked
    against its manifest (version, expected config, the scripts its checks need)
    before any node is touched. Errors name the resource's fields
    (``spec.packages.<name>.configMap.<key>``). ``archs`` and ``images``: see
    ``resolve_source``. ``env_lookup``: see ``env_lookup_for``; with it a required
    ``env[].valueFrom`` that names a missing Secret or ConfigMap key is refused."""
    specs = []
    problems = Problems()
    default_timeout = stage_timeout(resource["spec"].get("stageTimeout"), "spec.stageTimeout")
    for name, pkg in sorted((resource["spec"].get("packages") or {}).items()):
        where = "spec.packages.%s" % name
        with problems.collect():
            src = resolve_source(name, pkg, package_dirs, where, archs=archs, images=images)
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
                spec["env"], env_from = split_env(pkg["env"])
                if env_from:
                    spec["env_from"] = env_from
                    if env_lookup is not None:
                        check_env_from(env_from, env_lookup, where + ".env")
            timeout = stage_timeout(pkg.get("stageTimeout"), where + ".stageTimeout") if "stageTimeout" in pkg \
                else default_timeout
            if timeout:
                spec["stage_timeout"] = timeout
            if resource["spec"].get("reapplyOnReboot"):
                spec["reapply_on_reboot"] = True
            limits = retry_options(resource["spec"])
            spec["stage_retries"] = pkg.get("stageRetries", limits["stage_retries"])
            spec["retry_backoff"] = limits["retry_backoff"]
            if (pkg.get("uninstall") or {}).get("enabled"):
                spec["refuse_downgrade"] = True
            package = _load(src, cache)
            try:
                # version, expected config and the check scripts are checked here
                package_planner.desired_from_spec(spec, package, where=where, config_field="configMap")
            except ValidationError as exc:
                raise _in_resource(exc, where)
            specs.append(spec)
    problems.raise_if_any()
    return specs


def recorded_state(node, resource_name):
    """The state ``resource_name`` recorded on ``node`` (``node/state.py``): None when
    there is none; raises ``UnreadableState`` when it cannot be parsed."""
    state = node_state.read_node_state(node, resource_name)
    if "error" in state:
        raise node_state.UnreadableState(state["error"])
    return state if "packages" in state else None


def desired_packages(specs, cache=None):
    """The planner's view of ``specs`` (each package loaded once)."""
    return [package_planner.desired_from_spec(spec, _load(spec["src"], cache)) for spec in specs]


def node_plan(specs, node, resource_name, desired=None, cache=None):
    """What would run on this node, and whether it disrupts workloads."""
    if desired is None:
        desired = desired_packages(specs, cache)
    result = package_planner.plan(desired, recorded_state(node, resource_name), boot_id=node_state.boot_id(node))
    interrupt = result.get("interrupt") or {"type": "noop"}
    return NodePlan(actions={p["name"]: p["action"] for p in result["packages"]},
                    interrupt=interrupt, changed=bool(result.get("changed")),
                    disruptive=interrupt.get("type", "noop") != "noop",
                    packages=result["packages"])


def resolved_specs(specs, nodes, cache=None):
    """The specs with the config of each package that has a resolver (its manifest names
    one, e.g. nvidia-tuning's profile) worked out for ``nodes`` (Node objects), and per
    node name what each resolver would set there (``package/resolvers.py``)."""
    return package_resolvers.resolve_specs(specs, {s["src"]: _load(s["src"], cache) for s in specs}, nodes)


def has_work(specs, node, resource_name, desired=None, cache=None):
    """Whether ``node`` still has work for the resource's packages ``specs``, judged from
    its markers as they are now: what its plan would run, or a sequence left unfinished.
    (A node another run has finished since this run planned has none.)"""
    if node_state.unreadable(node, resource_name):
        return True
    return _work_left(node_plan(specs, node, resource_name, desired=desired, cache=cache), node, resource_name)


def _work_left(plan, node, resource_name):
    """A node has work when its plan runs something, or a sequence was left unfinished on it
    (a crash after its packages ran, before it was marked complete; or an error): the safe
    sequence resumes or retries it."""
    return bool(plan.changed or _unfinished(node, resource_name))


def _unfinished(node, resource_name):
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(markers.status_label(resource_name)) in (
        markers.STATUS_IN_PROGRESS, markers.STATUS_ERRORING, markers.STATUS_BLOCKED)


def policy_for(resource, policies):
    """The DeploymentPolicy of a resource (by name from ``policies``, its
    ``deploymentPolicyOptions`` applied), or the one its interruptionBudget implies, parsed.
    A missing policy is an error the caller reports."""
    spec = resource["spec"]
    name = spec.get("deploymentPolicy")
    if name:
        if name not in policies:
            raise ValidationError("DeploymentPolicy %r does not exist" % name, field="spec.deploymentPolicy",
                                  hint="create it, or fix the name; the resource stays blocked until then")
        policy = parse_policy(policies[name].get("spec") or {})
        return policy.with_options(spec.get("deploymentPolicyOptions"))
    return policy_from_interruption_budget(spec.get("interruptionBudget"))


def describe(resource, nodes, policies, package_dirs, cache=None, by_name=None, env_lookup=None):
    """Everything a rollout of one resource needs, validated, as a ``plan.ResourcePlan``
    (its fields are listed there); raises on bad input. ``waves`` is filled in by
    ``describe_all``: the waves of a run of every resource together, which is what a
    rollout makes."""
    original = resource
    resource = validate_nodewright(resource)
    spec = resource["spec"]
    name = resource["metadata"]["name"]
    targets = targeted_nodes(resource, nodes)
    cache = {} if cache is None else cache
    by_name = by_name or {n["metadata"]["name"]: n for n in nodes}
    archs = {package_sources.node_architecture(by_name[t]) for t in targets} - {None}
    images = {}
    specs = package_specs(resource, package_dirs, cache, archs=archs, images=images, env_lookup=env_lookup)
    specs, resolved = resolved_specs(specs, [by_name[t] for t in targets], cache)
    desired = desired_packages(specs, cache)
    plans, malformed = {}, []
    for t in targets:
        problem = node_state.unreadable(by_name[t], name)
        if problem:
            malformed.append({"node": t, "resource": name, "message": problem})
            plans[t] = NodePlan(malformed=problem)
            continue
        plans[t] = node_plan(specs, by_name[t], name, desired=desired)
    for t, summaries in resolved.items():
        if t in plans:
            plans[t].resolved.update(summaries)
    policy = policy_for(resource, policies)
    bad = {m["node"] for m in malformed}
    deleting = bool(((original or {}).get("metadata") or {}).get("deletionTimestamp"))
    # A node whose state cannot be read is left alone until it is fixed or reset.
    refused = refused_nodes(plans, by_name, name, spec)
    work = [] if deleting else [t for t in targets if t not in bad and t not in refused
                                and _work_left(plans[t], by_name[t], name)]
    sticky = node_priority(original)
    return ResourcePlan(
        name=name, priority=spec.get("priority", DEFAULT_PRIORITY),
        generation=resource["metadata"].get("generation"),
        paused=is_paused(resource), disabled=is_disabled(resource), deleting=deleting,
        policy=policy, policy_name=spec.get("deploymentPolicy"),
        waves={"waves": [], "status": "unplanned", "reason": "planned with every resource (describe_all)"},
        non_interruptible=spec.get("podNonInterruptLabels") or {},
        runtime_required=bool(spec.get("runtimeRequired")),
        targets=targets, packages=[PackageSpec.from_dict(s) for s in specs], nodes=plans, images=images,
        work=work,
        node_order={t: sticky[t] for t in targets if t in sticky},
        drain=drain_options(spec.get("drainConfig")),
        tolerations=spec.get("additionalTolerations") or [],
        gpu_health=gpu_health.parse_gate(spec.get("gpuHealthGate")),
        recorded_conversion_warnings=conversion_warnings_of(original),
        non_interrupt_wait=non_interrupt_wait_options(spec.get("podNonInterruptWait")),
        stage_timeout=stage_timeout(spec.get("stageTimeout"), "spec.stageTimeout"),
        sequencing=spec.get("sequencing", "node"),
        reapply_on_reboot=bool(spec.get("reapplyOnReboot")),
        malformed=malformed,
        retries=retry_options(spec),
        refused=[{"node": t, "resource": name, "kind": kind, "message": message}
                 for t, (kind, message) in sorted(refused.items())],
        uninstalling=[t for t in work if "uninstall" in plans[t].actions.values()],
        repaired=[t for t in targets if t not in bad and node_state.repaired_malformed(by_name[t])],
        recorded=sorted(n["metadata"]["name"] for n in nodes
                        if node_state.annotation_text(n, name) is not None),
        adoptable=adoptable(name, spec, desired, [by_name[t] for t in targets if t not in bad]),
    )


def adoptable(name, spec, desired, nodes):
    """Per node, the packages upstream NodeWright completed there (its nodeState annotation
    for a resource of this name) that NodeWright does not record: ``nodewright adopt``
    records them so that they are not applied again; until then the plan applies them."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.node import upstream
    raw = spec.get("packages") or {}
    wanted = {}
    for d in desired:
        if d.get("state", "present") == "present":
            asked = (raw.get(d["name"]) or {}).get("interrupt") is not None
            wanted[d["name"]] = {"version": d["version"],
                                 "has_interrupt": asked or not package_planner.is_noop(d.get("interrupt"))}
    out = {}
    for node in nodes:
        if upstream.read(node, name)["key"] is None:
            continue
        found = upstream.decide(node, name, wanted, node_state.package_entries(node_state.read_node_state(node, name)))
        if found["adopt"]:
            out[node["metadata"]["name"]] = ["%s %s" % (e["name"], e["version"]) for e in found["adopt"]]
    return out


def refused_nodes(plans, by_name, resource_name, spec):
    """node -> (kind, why) for the targets left alone although they differ from the spec:
    a package whose plan is ``exhausted`` (its retry budget spent) or ``downgrade-refused``,
    or a non-reboot interrupt whose restart limit was reached while nothing new is asked of
    the node and the limit was not raised since (``package/retries.py``). The rollout does
    not take them out of work."""
    out = {}
    for node, plan in plans.items():
        refused = [p for p in plan.packages if p["action"] in package_planner.REFUSED_ACTIONS]
        if refused:
            out[node] = (refused[0]["action"], "; ".join(p["reason"] for p in refused))
            continue
        state = node_state.read_node_state(by_name.get(node), resource_name)
        limit = retry_options(spec)["restart_limit"]
        # A limit raised since lets the next run try again.
        if package_retries.restart_limit_reached(state) and not plan.changed and \
                int(state.get("restarts") or 0) >= limit:
            kind = (state.get("interrupt") or {}).get("type", "service")
            failures = int(state.get("restarts") or 0) + 1
            out[node] = ("restart-limit", "the %s interrupt failed %d time(s), its whole restart limit "
                         "(interruptRestartLimit %d): not restarted again until the packages change, the limit is "
                         "raised or `nodewright reset %s` forgets the node's record" % (kind, failures, limit, node))
    return out


def settings_of(entry, cache):
    """node -> {setting: value} a described resource writes (for ``conflicts``)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts
    common = {}
    for spec in entry.packages:
        common.update(conflicts.spec_settings(spec.config, _load(spec.src, cache)))
    out = {}
    for node in entry.targets:
        settings = dict(common)
        settings.update(conflicts.node_settings(entry.node(node).resolved))
        out[node] = settings
    return out


def describe_all(resources, nodes, policies, package_dirs, only=None, holders=None, now=None, env_lookup=None,
                 maintenance=None, pods=None):
    """Every resource described, conflicts between them refused, and the waves of a run
    of all of them together (the rollout driver's own dry run).

    Returns a ``plan.RunPlan``;
    ``only``: the name of the one resource to report (the others are still read, for
    conflicts and for the nodes they have in progress); ``pods``: label selector text -> the
    pods it matches, for the dry run of a ``nodeOrder: workload`` policy."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import conflicts as conflicts_mod
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import driver as driver_mod
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import run_builder
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_state import resume_state

    cache = {}
    by_name = {n["metadata"]["name"]: n for n in nodes}
    rollouts, blocked, objects = [], [], {}
    for resource in order_resources(resources):
        name = (resource.get("metadata") or {}).get("name", "?")
        try:
            rollouts.append(describe(resource, nodes, policies, package_dirs, cache, by_name, env_lookup=env_lookup))
            objects[name] = resource
        except NodeWrightError as exc:
            blocked.append({"name": name, "reason": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one resource's surprise must not stop the others
            blocked.append({"name": name, "reason": "cannot be described (%s: %s); this is a NodeWright bug if the "
                                                    "resource is valid" % (type(exc).__name__, exc)})
    found = conflicts_mod.find_conflicts([(r.name, r.priority, settings_of(r, cache)) for r in rollouts])
    if found:
        bad = {}
        for conflict in found:
            for name in conflict["resources"]:
                bad.setdefault(name, []).append(conflicts_mod.conflict_message(conflict))
        blocked.extend({"name": name, "reason": "; ".join(reasons) + "; make the values agree, or the resources' "
                        "nodeSelectors disjoint (nothing was changed)", "conflict": True}
                       for name, reasons in sorted(bad.items()))
        rollouts = [r for r in rollouts if r.name not in bad]
    apply_sequencing(rollouts)
    if only is not None:
        rollouts = [r for r in rollouts if r.name == only]
        blocked = [b for b in blocked if b["name"] == only]
        # Other resources' conflicts among themselves do not concern a run of this one.
        found = [c for c in found if only in c["resources"]]
    runnable = []
    for entry in rollouts:
        if not entry.rollable:
            continue
        state, _note = resume_state(entry.policy, objects.get(entry.name))
        runnable.append(driver_mod.ResourceRollout(entry.name, entry.policy, targets=entry.targets,
                                                   work=entry.work, priority=entry.priority, state=state,
                                                   order=entry.node_order, plan=entry))
    view = driver_mod.simulated_view(nodes, holders, now, maintenance)
    # Read before the dry run, which makes every node it admits healthy.
    unavailable = view.unavailable_nodes()
    for entry in rollouts:
        entry.unavailable = {}
        for node in entry.targets:
            if node in unavailable:
                resumed = node in entry.work and \
                    view.nodes[node].statuses.get(entry.name) == markers.STATUS_IN_PROGRESS
                entry.unavailable[node] = unavailable[node] + (
                    "; left in progress by this resource: resumed first" if resumed else
                    "; counted against the limits, not admitted until healthy")
    run, status, reason = run_builder.plan_run(runnable, view, pods=pods)
    per = {res.name: res for res in run.resources}
    for entry in rollouts:
        res = per.get(entry.name)
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
        entry.waves = {"waves": waves, "status": decision.status if decision else "complete",
                       "reason": decision.reason if decision else "nothing to do"}
        _describe_gates(entry, res.policy)
    return RunPlan(rollouts=rollouts, blocked=blocked, waves=driver_mod.waves_of(run), conflicts=found,
                   status=status, reason=reason)


def _describe_gates(entry, policy):
    """``soak`` (compartment -> its soakTime, e.g. ``10m``) and ``alert_gate`` (the gate, and a
    check of it now) for the plan: what will hold the rollout back besides its limits."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import alerts
    entry.soak = {c.name: c.to_dict()["soakTime"] for c in policy.all_compartments if c.soak_time}
    if policy.alert_gate is not None:
        entry.alert_gate = {"gate": policy.alert_gate.to_dict(), "describe": policy.alert_gate.describe(),
                            "now": alerts.check_gate(policy.alert_gate).to_dict()}


def apply_sequencing(rollouts):
    """``sequencing: all``: a resource that is not complete on every node it targets
    holds every resource of a later priority - each gets ``held`` (why), ``held_by``
    and no ``work`` - until it is. ``rollouts`` are ``describe`` results in priority
    order; they are changed in place and returned. A disabled resource holds nothing
    (it is withdrawn); resources of the same priority are not held by each other."""
    holder = None
    for r in rollouts:
        if holder is not None and r.priority > holder.priority and not r.deleting:
            pending = len(holder.work) + len(holder.malformed)
            r.held_by = holder.name
            r.held = ("waiting for %s (priority %d, sequencing: all) to complete on every node it targets; "
                      "%d of %d still to do" % (holder.name, holder.priority, pending, len(holder.targets)))
            # Its status says waiting (upstream's) while it has work of its own held back.
            r.held_work = r.work
            r.work = []
            continue
        if holder is None and r.sequencing == "all" and not r.disabled and not r.deleting \
                and (r.work or r.malformed):
            holder = r
    return rollouts
