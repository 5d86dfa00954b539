# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Runs nodewright.fleet.node_maintenance inside the controller when the task runs there."""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.plugin_utils.k8s_action import K8sModuleAction as ActionModule

__all__ = ["ActionModule"]
