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
# Reason of the Erroring condition on a node whose state annotation cannot be parsed.
REASON_MALFORMED_STATE = "MalformedState"

# Event reasons
EVENT_CORDON = "NodeWrightCordon"
EVENT_UNCORDON = "NodeWrightUncordon"
EVENT_DRAIN = "NodeWrightDrain"
EVENT_DRAIN_FAILED = "NodeWrightDrainFailed"
EVENT_BLOCKED = "NodeWrightBlocked"
EVENT_APPLY = "NodeWrightApply"
EVENT_INTERRUPT = "NodeWrightInterrupt"
EVENT_FAILED = "NodeWrightFailed"
EVENT_COMPLETE = "NodeWrightComplete"
EVENT_DRIFT = "NodeWrightDrift"
EVENT_RUNTIME_READY = "NodeWrightRuntimeReady"
EVENT_REAPPLY = "NodeWrightReapply"

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
GPU_OPERATOR_UPGRADE_SKIP = "nvidia.com/gpu-driver-upgrade.skip"
SKYHOOK_IGNORE = "skyhook.nvidia.com/ignore"


def state_annotation(resource):
    """Annotation key that holds the JSON state of one NodeWright resource on a node."""
    return ANNOTATION_STATE_PREFIX + resource


def status_label(resource):
    """Label key that holds the status of one NodeWright resource on a node."""
    return LABEL_STATUS + "-" + resource
