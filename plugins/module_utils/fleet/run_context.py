# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""What a rollout computed once on the controller, for every node's task to read.

The rollout strategy publishes here, in the controller process, each resource's
plan (``plan.ResourcePlan``: its package specs, policy, node plans) before a
wave starts. The ``nodewright.fleet.maintain`` task of each node runs in a thread of
the controller or in a worker forked from it, so the action finds the description in
memory instead of receiving a fleet-sized structure as templated task arguments for
every node.
Outside the strategy (the action used on its own, or in a process that did not
publish), ``resource()`` returns None and the action uses its arguments.
"""

from __future__ import annotations

_RESOURCES = {}
_SETTINGS = {}


def publish(plan):
    """Make the resources of ``plan`` (a ``plan.RunPlan``) the current run's."""
    _RESOURCES.clear()
    _SETTINGS.clear()
    for entry in plan.rollouts:
        _RESOURCES[entry.name] = entry
    _SETTINGS["runtime_required"] = any(entry.runtime_required for entry in plan.rollouts)


def resource(name):
    """The published ``plan.ResourcePlan`` of resource ``name``, or None."""
    return _RESOURCES.get(name)


def setting(name, default=None):
    return _SETTINGS.get(name, default)


def names():
    return sorted(_RESOURCES)


def clear():
    _RESOURCES.clear()
    _SETTINGS.clear()
