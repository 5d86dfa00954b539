# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""nodewright.fleet.package: plan and run the lifecycle of NodeWright packages on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: package
short_description: Apply, upgrade, reconfigure and uninstall NodeWright packages on a host
version_added: "0.1.0"
description:
  - Runs the lifecycle of one or more NodeWright packages on a host (or on a host root
    directory through chroot) - apply, config, upgrade, downgrade, uninstall and
    post-interrupt, each stage followed by its C(-check) stage.
  - A package is a directory with C(package.json) (or C(package.yaml)), C(steps/) and
    C(files/); a Skyhook package directory (C(config.json), C(skyhook_dir/),
    C(root_dir/)) runs unmodified. See C(docs/packages.md) in the collection.
  - The action plugin validates every package on the controller before anything
    touches the node, then transfers it (a local connection uses the directory in place).
  - The module compares the desired packages with the node's recorded state and runs
    only what changed - a new version upgrades (C(upgrade) then C(config)), an older one
    downgrades (the installed version's C(uninstall), then C(apply)), changed config keys
    rerun C(config) and ask only for the interrupts their C(configInterrupts) name.
  - It never reboots or restarts services itself - it returns the merged interrupt the
    node needs (reboot > restartAllServices > services > noop) for the safe sequence to
    perform, after which a second call with O(phase=post-interrupt) runs the
    post-interrupt stages.
  - It returns the node's new package state, JSON for the node annotation
    C(nodewright.io/state-<resource>); writing the annotation is the caller's business.
    Without O(recorded_state) the state the host keeps in
    C(/var/lib/nodewright/state/<resource>.json) is used.
author:
  - NodeWright maintainers (@nodewright)
options:
  name:
    description:
      - Name of the package. Without O(src), the package of that name shipped with the
        collection (C(packages/<name>)), or for O(state=absent) the copy kept on the host.
      - For a Skyhook package it is the name the package gets on the node (its
        C(package_name) may differ).
    type: str
  src:
    description:
      - The package's source - a directory with C(package.json), C(package.yaml) or a
        Skyhook C(config.json). A relative path is searched like a C(files/) lookup.
      - The action plugin passes the module a C(.tar.gz) of the directory when the
        package has to travel to a remote host.
      - An OCI image reference (C(oci://registry/repo:tag@sha256:...)) is pulled on the controller, its digest
        verified and cached; see the collection's docs/packages.md.
    type: str
  version:
    description:
      - The version the package must have. With O(src) it is checked against the
        manifest; with O(state=absent) and no O(src) it names the installed version.
        With O(phase=update-state) or O(phase=reset), the version the host must record.
    type: str
  config:
    description:
      - Config keys and values, written as files under C(configmaps/) in the package
        directory on the host. A value that is not a string is written as JSON.
      - Merged over the manifest's C(defaultConfig); every key in C(expectedConfig)
        must be present.
    type: dict
  env:
    description: Environment variables given to every step (and to C(env:VAR) arguments).
    type: dict
  interrupt:
    description:
      - Overrides the manifest's interrupt, C({type, services}) with type one of
        C(reboot), C(service), C(restartAllServices), C(noop).
    type: dict
  config_interrupts:
    description: Overrides the manifest's C(configInterrupts) (config key glob to interrupt).
    type: dict
  depends_on:
    description: Overrides the manifest's C(dependsOn) (package name to minimum version).
    type: dict
  state:
    description: Whether the package should be on the host.
    type: str
    choices: [present, absent]
    default: present
  stage_timeout:
    description:
      - Bounds each stage of the package, together with its check, in seconds or as a
        duration (V(30m), V(1h30m)); V(0) or unset means no bound beyond each step's own
        C(timeout). A stage past it is killed and the package is erroring at that stage.
      - With O(packages), the default for the packages that give none.
    type: raw
  reapply_on_reboot:
    description:
      - Apply the package again (C(apply) and C(config), finished steps included) when the
        node rebooted since it was complete - its boot id differs from the one recorded then.
        A NodeWright resource's C(reapplyOnReboot) sets it.
    type: bool
    default: false
  stage_retries:
    description:
      - How many times a failed stage (its steps or its check, a stage timeout included) runs
        again in the same run before the package is erroring; 0 to 10, default 0 (a NodeWright
        resource's C(stageRetries) defaults to 3). The attempts
        are recorded in the node state (C(attempts)); a package erroring at a stage whose
        attempts used up the budget is planned C(exhausted) and not run again until its
        version or config changes, or C(phase=rerun) asks for it.
      - A NodeWright resource's C(stageRetries) sets it.
    type: int
  retry_backoff:
    description:
      - Pause before the first retry of a stage, in seconds or as a duration; it doubles
        for each further retry, up to 5 minutes. Default 1 second.
      - A NodeWright resource's C(stageRetryBackoff) sets it.
    type: raw
  refuse_downgrade:
    description:
      - Refuse a version older than the one the node records (planned C(downgrade-refused);
        nothing runs) - the package must be uninstalled first. A NodeWright resource sets it
        for the packages with C(uninstall.enabled). Without it a downgrade runs the
        installed version's C(uninstall), then the C(apply) of the wanted one.
    type: bool
    default: false
  packages:
    description:
      - Several packages at once, each a mapping with the keys O(name), O(src),
        O(version), O(config), O(env), O(interrupt), O(config_interrupts),
        O(depends_on), O(state), O(stage_timeout), O(reapply_on_reboot), O(stage_retries), O(retry_backoff)
        and O(refuse_downgrade). They run in C(dependsOn) order;
        the result has one merged interrupt.
      - Mutually exclusive with O(name) and O(src).
    type: list
    elements: dict
  host_root:
    description:
      - The host's root directory. V(/) runs steps directly; any other path runs them in
        a chroot of it (a host mounted into a privileged pod, a simulator node).
    type: path
    default: /
  resource:
    description:
      - Name of the NodeWright resource the packages belong to; it names the state file,
        the annotation and C(SKYHOOK_RESOURCE_ID).
    type: str
    default: default
  recorded_state:
    description:
      - The node's recorded package state - the value of the node annotation
        C(nodewright.io/state-<resource>) as JSON text or a mapping, or one package's entry.
      - Omitted, the state the host keeps for O(resource) is used.
    type: raw
  adopted:
    description:
      - Package entries (name to entry, as in the node state) that C(nodewright adopt) recorded
        complete from upstream NodeWright's node state. Each one the recorded state does not
        hold is taken as recorded, so that it is not applied again.
    type: dict
  prune:
    description: Uninstall packages recorded on the node that are not among the desired packages.
    type: bool
    default: false
  phase:
    description:
      - V(main) plans and runs everything up to the interrupt. V(post-interrupt) runs the
        post-interrupt stages of the packages whose interrupt has been performed (a
        reboot is verified through the boot id).
      - V(check) changes nothing - a drift check. It runs again the C(apply-check),
        C(config-check) and C(post-interrupt-check) stages of every package the node state
        records as complete, from the copy kept on the host, and returns RV(drifted). A
        package whose check fails does not fail the task.
      - V(logs) returns the step logs of package O(name) (of O(stage) only, when given) and the
        step running now, changing nothing - C(nodewright package logs).
      - V(rerun) marks stage O(stage) of package O(name) to run again, finished steps included,
        in the state the host keeps; the next O(phase=main) run does it (C(nodewright package rerun)).
      - V(update-state) sets package O(name) to O(package_state) at O(stage) (default the stage
        recorded) in the state the host keeps, for recovery (C(nodewright node update-state)). With
        O(version), the recorded version must be that one.
      - V(reset) forgets package O(name) in the state the host keeps, with its finished steps, so
        that the next O(phase=main) run applies it from the start (C(nodewright reset NODE --package)).
      - V(update-state) and V(reset) are refused while a package run holds the host.
    type: str
    choices: [main, post-interrupt, check, logs, rerun, update-state, reset]
    default: main
  stage:
    description:
      - With O(phase=logs), only the logs of this stage (C(apply), C(apply-check), ...).
      - With O(phase=rerun), the stage to run again - C(apply), C(config), C(upgrade) or C(post-interrupt).
      - With O(phase=update-state), the stage to set - C(apply), C(config), C(upgrade), C(uninstall) or
        C(post-interrupt).
    type: str
  package_state:
    description: With O(phase=update-state), the state to set.
    type: str
    choices: [complete, in_progress, erroring]
  log_offsets:
    description: With O(phase=logs), log path to the bytes already read (to follow a running step).
    type: dict
    default: {}
  all_logs:
    description: With O(phase=logs), every kept log of each step instead of the latest one.
    type: bool
    default: false
  reapply:
    description:
      - With O(phase=check), mark each drifted package in the host's state as in progress at the
        stage whose rerun repairs it (C(apply) for a failed C(apply-check), C(config) otherwise), so
        that the next O(phase=main) run applies it again. The task then reports a change.
    type: bool
    default: false
  keep_logs:
    description: Step logs kept per step under C(/var/log/nodewright/<resource>/<name>/<version>/).
    type: int
    default: 5
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
    details: Returns the plan; no step runs and nothing is written on the host. With O(phase=check) the check
      stages run as without check mode - they only read the host.
  diff_mode:
    support: none
    description: Does not return diffs.
notes:
  - Runs as root on the host (chroot needs it for O(host_root) other than V(/)).
  - A step that manages its own idempotence is marked C(idempotent) and always runs;
    any other finished step of C(apply), C(upgrade), C(uninstall) and C(post-interrupt)
    leaves a flag under C(/var/lib/nodewright/flags/<resource>/) and is not repeated.
  - Each step runs under a supervisor that holds the host's package lock until the step
    ended, so a run that was killed never leaves a step running unseen, and a new run
    neither starts it a second time nor repeats it once it finished.
"""

EXAMPLES = r"""
- name: Tune kernel parameters with the shipped sysctl package
  nodewright.fleet.package:
    name: sysctl
    config:
      vm.swappiness: "10"
      net.core.somaxconn: "4096"

- name: Run a Skyhook package directory unmodified inside a host mounted at /host
  nodewright.fleet.package:
    src: /srv/skyhook-packages/shellscript
    name: shellscript
    host_root: /host
    resource: gpu-baseline
    config:
      apply.sh: |
        #!/bin/bash
        echo hello > /etc/hello
      apply_check.sh: |
        #!/bin/bash
        grep -q hello /etc/hello

- name: Several packages in dependsOn order, with the state from the node annotation
  nodewright.fleet.package:
    resource: gpu-baseline
    recorded_state: "{{ node_annotations['nodewright.io/state-gpu-baseline'] | default('{}') }}"
    prune: true
    packages:
      - name: cve-remediation
        config:
          openssl: 3.0.13-0ubuntu3.4
      - name: kdump
        config:
          crashkernel: 1G-4G:192M,4G-64G:256M,64G-:512M
  register: nodewright_pkg

- name: After the safe sequence rebooted the node, run the post-interrupt stages
  nodewright.fleet.package:
    resource: gpu-baseline
    phase: post-interrupt
    recorded_state: "{{ nodewright_pkg.state }}"

- name: Uninstall a package with the copy kept on the host
  nodewright.fleet.package:
    name: security-agent
    state: absent
"""

RETURN = r"""
plan:
  description:
    - What the planner decided, in execution order. Each package has C(name),
      C(action) (apply, upgrade, downgrade, reinstall, config, resume, uninstall,
      interrupt, post-interrupt, none; exhausted and downgrade-refused run nothing and
      fail the task with the reason), C(version), C(from_version), C(stages),
      C(interrupt), C(post_interrupt), C(changed_keys), C(depends_on) and C(reason).
  returned: always
  type: dict
  sample:
    phase: main
    changed: true
    interrupt: {type: reboot, services: []}
    packages:
      - name: kdump
        action: config
        version: 1.0.0
        from_version: null
        stages: [config]
        interrupt: {type: reboot, services: []}
        post_interrupt: true
        changed_keys: [crashkernel]
        depends_on: {}
        reason: "config changed: crashkernel"
interrupt:
  description:
    - The interrupt the node needs now, merged over its packages - reboot >
      restartAllServices > service (union of services) > noop. Includes interrupts a
      step asked for at run time. In check mode, the planned one.
  returned: always
  type: dict
  sample: {type: service, services: [containerd.service, kubelet.service]}
results:
  description:
    - Per package, the stages run and per step C(stage), C(step), C(ok), C(skipped),
      C(exit_code), C(stdout_tail), C(stderr_tail), C(duration_s) and C(log) (the
      log file on the host, as the module saw it), and C(retries) - each failed attempt
      that was retried (C(stage), C(attempt), C(error), C(log), C(retry_in_s)). Empty in
      check mode.
  returned: always
  type: list
  elements: dict
before:
  description: With O(phase=update-state) or O(phase=reset), the state the host kept before the change.
  returned: when O(phase=update-state) or O(phase=reset)
  type: dict
state:
  description:
    - The node's package state after the run, for the node annotation
      C(nodewright.io/state-<resource>) - C(packages) maps each package name to
      C(name), C(version), C(stage) (apply, config, upgrade, uninstall, interrupt,
      post-interrupt), C(state) (complete, in_progress, erroring), C(configHashes)
      (per config key digests), C(dependsOn), and while unfinished C(interrupt),
      C(fromVersion), C(bootId); C(status) is complete, in_progress or erroring.
    - Returned on failure too, so that the caller can record the erroring state.
  returned: always
  type: dict
  sample:
    status: in_progress
    packages:
      kdump:
        name: kdump
        version: 1.0.0
        stage: interrupt
        state: in_progress
        configHashes: {crashkernel: 3f1c0a9d2b7e4c11, coredir: 0b9e2f6c1d3a5e77}
        interrupt: {type: reboot, services: []}
        bootId: 5b7c3b1e-8a0e-4d61-9d5c-0f6f0c6d8e11
        updated: "2026-01-31T10:00:00Z"
drifted:
  description:
    - With O(phase=check), the packages whose check failed, each with C(name), C(version),
      C(stage) (the check stage that failed), C(message) and C(log).
  returned: when O(phase=check)
  type: list
  elements: dict
checked:
  description: With O(phase=check), the packages whose checks passed.
  returned: when O(phase=check)
  type: list
  elements: str
reapply:
  description: With O(phase=check) and O(reapply), the packages marked to be applied again.
  returned: when O(phase=check)
  type: list
  elements: str
logs:
  description:
    - With O(phase=logs), the logs, oldest first, each with C(path) (on the host), C(stage), C(step),
      C(started), C(size), C(offset), C(text) (from the offset) and C(live) (the step runs now).
  returned: when O(phase=logs)
  type: list
  elements: dict
running:
  description: With O(phase=logs), the record of the package's step running now, or null.
  returned: when O(phase=logs)
  type: dict
annotation:
  description: The annotation key and its value (compact JSON of RV(state)) to write on the Node.
  returned: always
  type: dict
  sample: {key: nodewright.io/state-default, value: '{"packages":{},"status":"complete"}'}
msg:
  description: One line per package saying what was decided.
  returned: always
  type: str
"""

import json
import os
import shutil
import tarfile
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import state_annotation
from ansible_collections.nodewright.fleet.plugins.module_utils.package.planner import (
    PACKAGE_SPEC_KEYS,
    pending_interrupt,
    plan_summary,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.package import triage
from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import (
    StepFailed,
    check_packages,
    run_packages,
)


def _extract(archive, workdir):
    """Unpack a package archive sent by the action plugin; refuses members that
    would land outside the target."""
    target = tempfile.mkdtemp(prefix="pkg-", dir=workdir)
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            dest = os.path.realpath(os.path.join(target, member.name))
            if not dest.startswith(os.path.realpath(target) + os.sep) and dest != os.path.realpath(target):
                raise NodeWrightError("package archive %s has a member outside the package: %s"
                                      % (archive, member.name))
            if member.islnk() or member.isdev():
                raise NodeWrightError("package archive %s has an unsupported member: %s" % (archive, member.name))
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)
    return target


PACKAGE_SPEC = dict(
    name=dict(type="str"), src=dict(type="str"), version=dict(type="str"), config=dict(type="dict"),
    env=dict(type="dict"), interrupt=dict(type="dict"), config_interrupts=dict(type="dict"),
    depends_on=dict(type="dict"), state=dict(type="str", choices=["present", "absent"], default="present"),
    stage_timeout=dict(type="raw"), reapply_on_reboot=dict(type="bool", default=False),
    stage_retries=dict(type="int"), retry_backoff=dict(type="raw"), refuse_downgrade=dict(type="bool", default=False),
)
ARGUMENT_SPEC = dict(
    PACKAGE_SPEC,
    packages=dict(type="list", elements="dict"),
    host_root=dict(type="path", default="/"),
    resource=dict(type="str", default="default"),
    recorded_state=dict(type="raw"),
    adopted=dict(type="dict"),
    prune=dict(type="bool", default=False),
    phase=dict(type="str", choices=["main", "post-interrupt", "check", "logs", "rerun", "update-state", "reset"],
               default="main"),
    stage=dict(type="str"),
    package_state=dict(type="str", choices=["complete", "in_progress", "erroring"]),
    log_offsets=dict(type="dict", default={}),
    all_logs=dict(type="bool", default=False),
    keep_logs=dict(type="int", default=5),
    reapply=dict(type="bool", default=False),
)
MUTUALLY_EXCLUSIVE = [("packages", "name"), ("packages", "src")]


def run(p, check_mode):
    """The module's work on validated parameters; returns the result (``failed`` on error).
    The action plugin calls this directly when the host is the controller itself."""
    if p["packages"] is not None:
        specs = [{k: v for k, v in spec.items() if v is not None} for spec in p["packages"]]
    elif p["name"] or p["src"]:
        specs = [{k: p[k] for k in PACKAGE_SPEC_KEYS if p[k] is not None}]
    elif p["phase"] in ("post-interrupt", "check"):
        specs = []
    elif p["phase"] in ("logs", "rerun", "update-state", "reset"):
        specs = []
        if not p["name"]:
            return dict(failed=True, msg="phase %s needs the package's name" % p["phase"])
    else:
        return dict(failed=True, msg="give name or src (one package) or packages (a list, may be empty)")
    if not os.path.isdir(p["host_root"]):
        return dict(failed=True, msg="host_root %s is not a directory" % p["host_root"])
    try:
        # The name is part of paths on the host (/var/lib/nodewright/state/<resource>.json)
        # and of the node annotation's key.
        names.nodewright_name(p["resource"], "resource")
    except NodeWrightError as exc:
        return dict(failed=True, msg=str(exc))

    def annotation(state):
        return dict(key=state_annotation(p["resource"]),
                    value=json.dumps(state, sort_keys=True, separators=(",", ":")))

    if p["phase"] == "logs":
        try:
            found = triage.read_logs(p["host_root"], p["resource"], p["name"], stage=p["stage"],
                                     offsets=p["log_offsets"], every=p["all_logs"])
        except NodeWrightError as exc:
            return dict(failed=True, msg=str(exc))
        except OSError as exc:
            return dict(failed=True, msg="reading logs on host root %s failed: %s" % (p["host_root"], exc))
        what = "%d log(s) of %s %s" % (len(found["logs"]), p["name"], found["version"] or "(no version recorded)")
        return dict(changed=False, msg=what + (", step %s running" % found["running"]["step"]
                                               if found["running"] else ""), **found)

    if p["phase"] == "rerun":
        if not p["stage"]:
            return dict(failed=True, msg="phase rerun needs the stage to run again (stage: apply, config, "
                                         "upgrade or post-interrupt)")
        try:
            state = triage.recorded(p["host_root"], p["resource"]) if check_mode else \
                triage.mark_rerun_on_host(p["host_root"], p["resource"], p["name"], p["stage"])
        except NodeWrightError as exc:
            return dict(failed=True, msg=str(exc))
        return dict(changed=not check_mode, state=state, annotation=annotation(state),
                    msg="%s: stage %s runs again at the next rollout (finished steps included)"
                        % (p["name"], p["stage"]))

    if p["phase"] in ("update-state", "reset"):
        if p["phase"] == "update-state" and not p["package_state"]:
            return dict(failed=True, msg="phase update-state needs package_state (complete, in_progress or erroring)")
        try:
            if check_mode:
                before = after = triage.recorded(p["host_root"], p["resource"])
            elif p["phase"] == "reset":
                before, after = triage.reset_on_host(p["host_root"], p["resource"], p["name"], p["version"])
            else:
                before, after = triage.update_state_on_host(p["host_root"], p["resource"], p["name"], p["stage"],
                                                            p["package_state"], p["version"])
        except NodeWrightError as exc:
            return dict(failed=True, msg=str(exc))
        except OSError as exc:
            return dict(failed=True, msg="writing the state on host root %s failed: %s" % (p["host_root"], exc))
        return dict(changed=not check_mode and before != after, state=after, before=before,
                    annotation=annotation(after),
                    msg="%s: %s" % (p["name"], "forgotten; the next rollout applies it from the start"
                                    if p["phase"] == "reset" else "set to %s/%s" % (
                                        after["packages"][p["name"]]["stage"], p["package_state"])))

    if p["phase"] == "check":
        try:
            found = check_packages(host_root=p["host_root"], resource=p["resource"],
                                   recorded_state=p["recorded_state"], keep_logs=p["keep_logs"],
                                   reapply=p["reapply"] and not check_mode)
        except NodeWrightError as exc:
            return dict(failed=True, msg=str(exc))
        except OSError as exc:
            return dict(failed=True, msg="checking packages on host root %s failed: %s" % (p["host_root"], exc))
        lines = ["%s %s: drifted, %s failed: %s" % (d["name"], d["version"], d["stage"] or "copy",
                                                    d["message"].splitlines()[0]) for d in found["drifted"]]
        return dict(changed=bool(found["reapply"]), plan=None, results=[],
                    interrupt=pending_interrupt(found["state"]), annotation=annotation(found["state"]),
                    msg="\n".join(lines) or "no drift in %d package(s)" % len(found["checked"]), **found)

    workdir = tempfile.mkdtemp(prefix="nodewright-package-")
    try:
        for spec in specs:
            if spec.get("src") and os.path.isfile(spec["src"]):
                spec["src"] = _extract(spec["src"], workdir)
        try:
            done = run_packages(specs, host_root=p["host_root"], resource=p["resource"],
                                recorded_state=p["recorded_state"], prune=p["prune"], phase=p["phase"],
                                check_mode=check_mode, keep_logs=p["keep_logs"],
                                stage_timeout=p["stage_timeout"] if p["packages"] is not None else None,
                                adopted=p["adopted"])
        except StepFailed as exc:
            state = getattr(exc, "state", None) or {"packages": {}, "status": "erroring"}
            package_results = getattr(exc, "package_results", None) or []
            # Steps that ran before the failing one changed the host, and so did the failing one.
            changed = any(r.get("changed") for r in package_results)
            return dict(failed=True, changed=changed, msg=str(exc), plan=getattr(exc, "plan", None),
                        results=getattr(exc, "package_results", exc.results), state=state,
                        interrupt=pending_interrupt(state), log=exc.log, annotation=annotation(state))
        except NodeWrightError as exc:
            errors = [str(e) for e in getattr(exc, "errors", [])] or [str(exc)]
            return dict(failed=True, msg=str(exc), errors=errors)
        except OSError as exc:
            return dict(failed=True, msg="running packages on host root %s failed: %s" % (p["host_root"], exc))
        return dict(msg="\n".join(plan_summary(done["plan"])), annotation=annotation(done["state"]), **done)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           supports_check_mode=True)
    result = run(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
