# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""A rollout's state across runs: the DeploymentPolicy of a run (``load_policy``), the batch
state kept in each resource's status (``resume_state``, ``StateKeeper``)."""

from __future__ import annotations


from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import (
    NodeWrightError,
    ValidationError,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (
    BatchState,
    RolloutState,
    compartment_statuses,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.run_settings import (
    VAR_POLICY,
    VAR_POLICY_NAME,
    VAR_STATE_RESOURCE,
)


def _api(auth):
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import get_api_client
    return get_api_client(auth)


def fetch_deployment_policy(name, auth=None):
    """The spec of the cluster-scoped DeploymentPolicy ``name``, parsed (ClusterError/ValidationError)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
    obj = nodewright_api.get(_api(auth), nodewright_api.DEPLOYMENT_POLICIES, name, field=VAR_POLICY_NAME)
    return parse_policy(obj.get("spec"), "DeploymentPolicy %s: spec" % name)


def spec_key(resource):
    """What a rollout's batch state belongs to: the resource's packages and its spec generation.

    Any change of the spec (a new package version, new config, another policy) makes a
    new key, and so a new rollout that starts from the first batch."""
    packages = ((resource or {}).get("spec") or {}).get("packages") or {}
    names = ",".join("%s:%s" % (name, (packages[name] or {}).get("version", "")) for name in sorted(packages))
    return "%s (generation %s)" % (names, ((resource or {}).get("metadata") or {}).get("generation", "?"))


def resume_state(policy, resource):
    """``(state, note)``: the RolloutState a run of ``resource`` starts from.

    The batch states recorded in ``status.rolloutState`` are taken up again when they
    belong to the same spec (``spec_key``); a changed spec, or a record that cannot be
    read, starts from the first batch. Node outcomes are not carried over: which nodes
    still have work comes from their markers. ``note`` says what happened, or is None."""
    key = spec_key(resource)
    saved = ((resource or {}).get("status") or {}).get("rolloutState") or {}
    fresh = RolloutState(policy, version=key)
    if not isinstance(saved, dict) or not saved.get("batchStates"):
        return fresh, None
    if saved.get("version") != key:
        return fresh, "the resource changed since the recorded rollout (%s, now %s): starting from the first " \
                      "batch" % (saved.get("version"), key)
    known = {comp.name for comp in policy.all_compartments}
    try:
        batches = {name: BatchState.from_dict(data, "status.rolloutState.batchStates.%s" % name)
                   for name, data in (saved.get("batchStates") or {}).items() if name in known}
    except (ValidationError, TypeError, AttributeError) as exc:
        return fresh, "the recorded batch state cannot be used (%s): starting from the first batch" % exc
    if not batches:
        return fresh, None
    halted = sorted(name for name, b in batches.items() if b.should_stop)
    note = "resuming the recorded batch state of %s" % ", ".join(
        "%s (batch %d)" % (name, b.current_batch) for name, b in sorted(batches.items()))
    if halted:
        note += "; halted: %s - change the resource or run `nodewright reset-batches %s` to start again" % (
            ", ".join(halted), (resource.get("metadata") or {}).get("name", "NAME"))
    return RolloutState(policy, batches=batches, version=key), note


def state_patch(state, nodes, previous_status=None, done=(), failed=(), in_progress=()):
    """Merge patch of a NodeWright's status that records ``state``: ``rolloutState``
    (spec key, wave count, batch states) and ``compartmentStatuses``; compartments no
    longer in the policy are removed. ``done``/``failed``/``in_progress``: what the
    nodes' own markers say (complete, erroring and in progress for this resource), so
    that progress counts nodes finished or failed in earlier runs too."""
    previous_status = previous_status or {}
    compartments = compartment_statuses(state, nodes, done=done, in_progress=in_progress)
    if failed:
        failed = set(failed) | state.failed
        members = _members(state, nodes)
        for name, entry in compartments.items():
            group = members.get(name, [])
            bad = sum(1 for n in group if n in failed)
            entry["batchState"]["failedNodes"] = max(entry["batchState"].get("failedNodes", 0), bad)
            total = entry["matched"]
            entry["progressPercent"] = (entry["completed"] + bad) * 100 // total if total else 0
    batches = {name: b.to_dict() for name, b in sorted(state.batches.items())}
    for old, value in (previous_status.get("compartmentStatuses") or {}).items():
        if value is not None:
            compartments.setdefault(old, None)
    for old, value in ((previous_status.get("rolloutState") or {}).get("batchStates") or {}).items():
        if value is not None:
            batches.setdefault(old, None)
    return {"status": {"rolloutState": {"version": state.version, "waveNumber": state.wave_number,
                                        "batchStates": batches},
                       "compartmentStatuses": compartments}}


def fetch_resource(name, auth=None):
    """The NodeWright resource ``name`` as the API server has it (ClusterError when it cannot be read)."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
    return nodewright_api.get(_api(auth), nodewright_api.NODEWRIGHTS, name, field=VAR_STATE_RESOURCE)


class StateKeeper(object):
    """Writes a rollout's batch state into a NodeWright resource's status (``state_patch``)."""

    def __init__(self, name, auth=None, status=None):
        self.name = name
        self.auth = auth or {}
        self.status = status or {}

    @classmethod
    def resume(cls, name, policy, auth=None, check_mode=False):
        """``(state, note, keeper)`` for the resource ``name``: the resumed state, what was
        resumed, and the keeper (None in check mode, or when the resource cannot be read -
        then ``note`` says so and the state is fresh)."""
        try:
            resource = fetch_resource(name, auth)
        except NodeWrightError as exc:
            return RolloutState(policy), "the batch state of %s is neither resumed nor kept: %s" % (name, exc), None
        state, note = resume_state(policy, resource)
        keeper = None if check_mode else cls(name, auth, resource.get("status"))
        return state, note, keeper

    def save(self, state, nodes, done=(), failed=(), in_progress=(), status=None):
        """Write ``state`` (and the resource ``status`` fields, when given) in one patch;
        returns None, or the reason it could not be written."""
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
        patch = state_patch(state, nodes, self.status, done=done, failed=failed, in_progress=in_progress)
        if status:
            status = dict(status)
            if status.get("conditions") is not None:
                status["conditions"] = nodewright_api.merge_conditions(self.status.get("conditions"),
                                                                       status["conditions"])
            patch["status"].update(status)
        try:
            nodewright_api.patch_status(_api(self.auth), self.name, patch["status"],
                                        "write the rollout state of NodeWright %s" % self.name)
        except NodeWrightError as exc:
            return "could not record the batch state of %s: %s" % (self.name, exc)
        merged = dict(self.status)
        merged.update(dict(patch["status"]))
        self.status = merged
        return None


def load_policy(settings):
    """(policy, source) for the settings; source is ``inline`` or ``DeploymentPolicy/<name>``."""
    if settings.policy_name:
        return fetch_deployment_policy(settings.policy_name, settings.k8s_auth), \
            "DeploymentPolicy/%s" % settings.policy_name
    return parse_policy(settings.policy_spec, VAR_POLICY), "inline"


def _members(state, nodes):
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import assign_nodes
    return {name: list(group) for name, group in assign_nodes(state.policy, nodes).items()}
