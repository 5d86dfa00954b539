# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every mark NodeWright puts on a Node or reads from one, in one place.

Labels, annotations, taints, condition types and event reasons all live under the
``nodewright.io/`` prefix so that ``kubectl get nodes -l`` and ``kubectl describe``
show at once what NodeWright did, and so that nothing collides with other tools
(the GPU Operator's ``nvidia.com/gpu-driver-upgrade-*`` marks in particular).
"""

from __future__ import annotations

PREFIX = "nodewright.io"
API_GROUP = "nodewright.io"
API_VERSION = "v1alpha1"
GROUP_VERSION = API_GROUP + "/" + API_VERSION
FIELD_MANAGER = "nodewright"

# Node labels
LABEL_STATUS = PREFIX + "/status"
LABEL_IGNORE = PREFIX + "/ignore"

# Label of the short-lived pods the k8s connection starts on a node.
LABEL_NODE_POD = PREFIX + "/node-pod"

# Node annotations
ANNOTATION_CORDONED_BY = PREFIX + "/cordoned-by"
ANNOTATION_STATE_PREFIX = PREFIX + "/state-"
ANNOTATION_BLOCKED_BY = PREFIX + "/blocked-by"
# The persistent cordon of runtimeRequiredCordonAfter: set when the runtime-required
# gate opened; NodeWright never lifts a cordon it records here.
ANNOTATION_RUNTIME_CORDON = PREFIX + "/runtime-required-cordon"

# Resource annotations (on NodeWright objects)
ANNOTATION_PAUSE = PREFIX + "/pause"
ANNOTATION_DISABLE = PREFIX + "/disable"

# Taints
TAINT_RUNTIME_REQUIRED = PREFIX + "/runtime-required"

# Node condition types
CONDITION_ERRORING = PREFIX + "/Erroring"
CONDITION_BLOCKED = PREFIX + "/Blocked"
# Node condition: non-interruptible pods hold the node past a run's wait (the node is left blocked).
CONDITION_NODE_NON_INTERRUPT = PREFIX + "/NonInterruptPodsRunning"
CONDITION_DRIFT = PREFIX + "/Drift"
# Node condition, live while a drain runs: True while PodDisruptionBudgets refuse its
# evictions (naming them, the pods and since when), False once they go through or the
# drain ends.
CONDITION_DRAIN_BLOCKED = PREFIX + "/DrainBlocked"

# Condition of a NodeWright resource (and the reason of the Event on it) while one of
# its nodes waits for non-interruptible pods; upstream NodeWright's name.
CONDITION_NON_INTERRUPT = "NonInterruptPodsRunning"
# Condition of a NodeWright resource while PodDisruptionBudgets refuse the evictions of a
# drain on one of its nodes: one line per node (``NODE: what refuses, since when``);
# upstream NodeWright's name.
CONDITION_RESOURCE_DRAIN_BLOCKED = "DrainBlocked"
# Reason of the Erroring condition on a node whose state annotation cannot be parsed.
REASON_MALFORMED_STATE = "MalformedState"

# Event reasons
EVENT_CORDON = "NodeWrightCordon"
EVENT_UNCORDON = "NodeWrightUncordon"
EVENT_DRAIN = "NodeWrightDrain"
EVENT_DRAIN_FAILED = "NodeWrightDrainFailed"
EVENT_BLOCKED = "NodeWrightBlocked"
EVENT_INTERRUPT = "NodeWrightInterrupt"
EVENT_FAILED = "NodeWrightFailed"
EVENT_DRIFT = "NodeWrightDrift"
EVENT_RUNTIME_READY = "NodeWrightRuntimeReady"
EVENT_REAPPLY = "NodeWrightReapply"
# `nodewright adopt` recorded what upstream NodeWright had completed on the node.
EVENT_ADOPTED = "NodeWrightAdopted"
# A person changed a package's recorded state by hand (nodewright node update-state, reset --package).
EVENT_STATE_UPDATED = "NodeWrightStateUpdated"
EVENT_PACKAGE_RESET = "NodeWrightPackageReset"

# Node status values (label value and state annotation "status")
STATUS_COMPLETE = "complete"
STATUS_IN_PROGRESS = "in_progress"
STATUS_ERRORING = "erroring"
STATUS_BLOCKED = "blocked"
STATUS_WAITING = "waiting"
STATUS_UNKNOWN = "unknown"
STATUSES = (STATUS_COMPLETE, STATUS_IN_PROGRESS, STATUS_ERRORING, STATUS_BLOCKED,
            STATUS_WAITING, STATUS_UNKNOWN)

# Marks of other tools that NodeWright respects and never fights.
GPU_OPERATOR_UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
SKYHOOK_IGNORE = "skyhook.nvidia.com/ignore"
# NVSentinel's fault handling: the state of its break-fix workflow (quarantined, draining,
# drain-succeeded, remediating, ...; removed when the node returns) and the health event
# that quarantined the node.
NVSENTINEL_STATE = "dgxc.nvidia.com/nvsentinel-state"
NVSENTINEL_QUARANTINE = "quarantineHealthEvent"
# The NVIDIA maintenance-operator's NodeMaintenance (namespaced): one object per requestor
# and node asks for the node's maintenance.
NODE_MAINTENANCE_GROUP, NODE_MAINTENANCE_VERSION, NODE_MAINTENANCE_PLURAL = (
    "maintenance.nvidia.com", "v1alpha1", "nodemaintenances")
# NodeWright's own requests (requestor mode, node/maintenance.py): its requestor ID, and
# the name of its object for a node (<prefix>-<node>).
NODE_MAINTENANCE_REQUESTOR = "nodewright.io"
NODE_MAINTENANCE_NAME_PREFIX = "nodewright"

# Upstream NodeWright's marks (NVIDIA's operator, formerly Skyhook: prefix nodewright.nvidia.com
# from v0.18, skyhook.nvidia.com before). NodeWright recognises them where it recognises its own
# (``node/upstream.py`` reads the operator's node state for ``nodewright adopt``).
UPSTREAM_PREFIX = "nodewright.nvidia.com"
SKYHOOK_PREFIX = "skyhook.nvidia.com"
UPSTREAM_IGNORE = UPSTREAM_PREFIX + "/ignore"
# The operator's runtime-required taints (``<key>=runtime-required:NoSchedule``): a node carrying
# one is gated like one carrying TAINT_RUNTIME_REQUIRED, and loses it when its gate opens.
UPSTREAM_RUNTIME_TAINT_KEYS = (UPSTREAM_PREFIX, SKYHOOK_PREFIX)


def state_annotation(resource):
    """Annotation key that holds the JSON state of one NodeWright resource on a node."""
    return ANNOTATION_STATE_PREFIX + resource


def status_label(resource):
    """Label key that holds the status of one NodeWright resource on a node."""
    return LABEL_STATUS + "-" + resource
