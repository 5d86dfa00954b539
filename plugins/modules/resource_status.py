#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: resource_status
short_description: Write a NodeWright resource's status from the markers on its nodes
version_added: "0.1.0"
description:
  - Reads the targeted nodes and writes the resource's status subresource - per-node status and package
    state, counts, C(completeNodes) ("3/5"), the package list, conditions and C(observedGeneration) - so
    that C(kubectl get nodewrights) shows progress.
  - O(status) forces the overall status (for example C(blocked) with the reason in O(status_message)).
options:
  name:
    description: NodeWright resource name.
    type: str
    required: true
  targets:
    description: Nodes the resource targets.
    type: list
    elements: str
    default: []
  packages:
    description: Package specs (name, version) of the resource.
    type: list
    elements: dict
    default: []
  status:
    description: Overall status to force instead of deriving it.
    type: str
    choices: [unknown, complete, blocked, waiting, disabled, paused, in_progress, erroring, halted]
  status_message:
    description: Why the rollout is where it is (the status' C(message)).
    type: str
  generation:
    description: The resource generation this status describes.
    type: int
  extra:
    description: More status fields, such as C(compartmentStatuses) and C(rolloutState).
    type: dict
  pending:
    description:
      - Targets that still have work for the resource's current spec (a version or config they have not
        received). They are C(waiting), not complete, whatever their label says.
    type: list
    elements: str
    default: []
  refused:
    description:
      - Targets left alone although they differ from the spec, each C({node, kind, message}) as
        C(nodewright.fleet.desired_state) reports them (C(kind) C(downgrade-refused), C(exhausted) or
        C(restart-limit)). A refused downgrade makes the node and the resource C(blocked); each kind
        sets its condition (C(DowngradeRefused), C(RetryLimitReached)) with the message.
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - nodewright.fleet.attributes
  - nodewright.fleet.k8s_auth
author:
  - NodeWright maintainers (@nodewright)
"""

EXAMPLES = r"""
- name: Publish progress
  nodewright.fleet.resource_status:
    name: gpu-tuning
    targets: "{{ rollout.targets }}"
    packages: "{{ rollout.packages }}"
    generation: "{{ rollout.generation }}"
  delegate_to: localhost
"""

RETURN = r"""
resource_status:
  description: The status written (or that would be written in check mode).
  returned: always
  type: dict
"""

from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names, nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import list_pages
from ansible_collections.nodewright.fleet.plugins.module_utils.common.module_base import NodeWrightModule, check_text
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.plan import PackageSpec
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.status import (
    RESOURCE_STATUSES,
    compute_status,
    conversion_warnings_of,
)


def run(module):
    p = module.params
    names.nodewright_name(p["name"], "name")
    names.node_names(p["targets"], "targets")
    check_text(p["status_message"], "status_message", max_length=32768)
    api = module.api_client()
    current = nodewright_api.get(api, nodewright_api.NODEWRIGHTS, p["name"])
    nodes = [n for page in list_pages(api, "/api/v1/nodes", "list nodes") for n in page]
    # Only each package's name and version go into the status (packageList).
    packages = [PackageSpec(name=str(spec.get("name") or "?"), version=str(spec.get("version") or "?"))
                for spec in p["packages"]]
    status = compute_status(p["name"], nodes, p["targets"], packages, override=p["status"],
                            message=p["status_message"], generation=p["generation"], extra=p["extra"],
                            current=current.get("status"), pending=p["pending"], refused=p["refused"],
                            conversion_warnings=conversion_warnings_of(current),
                            live_generation=(current.get("metadata") or {}).get("generation"))
    old = current.get("status") or {}
    comparable = {k: v for k, v in status.items() if k != "conditions"}
    changed = any(old.get(k) != v for k, v in comparable.items() if v is not None) or \
        [(c["type"], c["status"], c["message"]) for c in old.get("conditions") or []] != \
        [(c["type"], c["status"], c["message"]) for c in status["conditions"]]
    if changed and not module.check_mode:
        status["conditions"] = nodewright_api.merge_conditions(old.get("conditions"), status["conditions"])
        nodewright_api.patch_status(api, p["name"], status)
    return {"changed": changed, "resource_status": status}


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    targets=dict(type="list", elements="str", default=[]),
    packages=dict(type="list", elements="dict", default=[]),
    status=dict(type="str", choices=list(RESOURCE_STATUSES)),
    status_message=dict(type="str"),
    generation=dict(type="int"),
    extra=dict(type="dict"),
    pending=dict(type="list", elements="str", default=[]),
    refused=dict(type="list", elements="dict", default=[]),
)


def main():
    module = NodeWrightModule(ARGUMENT_SPEC)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
