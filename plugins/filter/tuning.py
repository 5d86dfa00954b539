# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Filters for intent-based NVIDIA host tuning (controller side).

The logic lives in ``module_utils/tuning/`` (``shipped`` loads the YAML profile layers
shipped with the ``nodewright.fleet.nvidia_tuning`` role and renders its templates) and
``plugin_utils/tuning_files.py`` (runs the package's comparator). This plugin hands Ansible's values over as plain data and turns
errors into filter errors.
Each filter is documented in ``plugins/filter/<filter name>.yml``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gpu
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import checks, decide, detect, diff, files, shipped
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.interrupts import merge_interrupts
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import PACKAGE_NAME
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.resolve import resolve_profile
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import DEFAULT_POWER_PROFILE_COMMAND
from ansible_collections.nodewright.fleet.plugins.plugin_utils import tuning_files


def _plain(value):
    """Strip Ansible's lazy containers and tagged strings down to plain Python data."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def load_profiles(profiles_dir=None):
    """Read every ``*.yml`` layer under ``profiles_dir``; names are paths without ``.yml``."""
    try:
        return shipped.load_profiles(profiles_dir)
    except NodeWrightError as exc:
        raise AnsibleFilterError(str(exc))


def _call(func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except NodeWrightError as exc:
        raise AnsibleFilterError(str(exc))


def tuning_profile(accelerator, intent, os, cloud=None, options=None, extra=None, profiles_dir=None, host=None):
    profiles = load_profiles(profiles_dir)
    return _call(resolve_profile, _plain(accelerator), _plain(intent), _plain(os),
                 cloud=_plain(cloud) or None, options=_plain(options) or None,
                 profiles=profiles, extra=_plain(extra) or None, host=_plain(host) or None)


def tuning_host_facts(observed, labels=None, state=None):
    """What decides the profile on a host, from observe.sh's output (or a mapping)."""
    observed = _plain(observed)
    if not isinstance(observed, dict):
        observed = checks.parse_observations(observed)
    return _call(decide.host_facts, observed, labels=_plain(labels) or {},
                 applied=diff.applied_sysctls(_plain(state) or {}))


def tuning_detect_accelerator(labels):
    return _call(gpu.detect_accelerator, _plain(labels))


def tuning_detect_accelerator_smi(output, arch=None):
    return _call(gpu.detect_accelerator_from_nvidia_smi, _plain(output), arch=_plain(arch))


def tuning_detect_cloud(labels):
    return detect.detect_cloud(_plain(labels)) or ""


def tuning_os_from_os_release(text):
    return _call(detect.os_from_os_release, _plain(text))


def tuning_diff(old, new, reapply=None):
    return _call(diff.diff_settings, _plain(old), _plain(new), reapply=_plain(reapply) or ())


def tuning_merge_interrupts(interrupts):
    return _call(merge_interrupts, _plain(interrupts) or [])


def tuning_probes(resolved):
    return _call(checks.probes, _plain(resolved))


def tuning_parse_observations(text):
    return checks.parse_observations(_plain(text))


def tuning_check(resolved, observed, phase="post-interrupt", skip=None):
    return _call(tuning_files.check_settings, _plain(resolved), _plain(observed) or {}, phase=_plain(phase),
                 skip=_plain(skip) or None)


def tuning_state(resolved, pending_interrupt=None, initramfs=None):
    return _call(diff.state_record, _plain(resolved), _plain(pending_interrupt), initramfs=_plain(initramfs) or None)


def tuning_uninstall_paths(state):
    """Every path to remove at uninstall: the recorded files and the fixed managed paths."""
    state = _plain(state) or {}
    paths = list(state.get("files") or [])
    for path in files.managed_paths():
        if path not in paths:
            paths.append(path)
    return paths


def tuning_render_files(resolved, power_profile_command=DEFAULT_POWER_PROFILE_COMMAND, templates_dir=None):
    return _call(shipped.render_files, _plain(resolved), _plain(power_profile_command),
                 templates_dir=_plain(templates_dir) or None)


def tuning_package_spec(spec, labels=None, os_image=None, node=None, profiles_dir=None):
    """The nvidia-tuning package spec with its profile resolved for one node."""
    spec = _plain(spec) or {}
    facts = [{"name": _plain(node) or "node", "labels": _plain(labels) or {}, "os_image": _plain(os_image)}] \
        if (labels or os_image or node) else []
    rendered, _unused = _call(shipped.package_spec_for_nodes, dict(spec, name=spec.get("name") or PACKAGE_NAME),
                              facts, profiles_dir=_plain(profiles_dir) or None)
    return rendered


class FilterModule(object):
    """NodeWright NVIDIA tuning filters."""

    def filters(self):
        return {
            "tuning_profile": tuning_profile,
            "tuning_detect_accelerator": tuning_detect_accelerator,
            "tuning_detect_accelerator_smi": tuning_detect_accelerator_smi,
            "tuning_detect_cloud": tuning_detect_cloud,
            "tuning_host_facts": tuning_host_facts,
            "tuning_os_from_os_release": tuning_os_from_os_release,
            "tuning_diff": tuning_diff,
            "tuning_merge_interrupts": tuning_merge_interrupts,
            "tuning_probes": tuning_probes,
            "tuning_parse_observations": tuning_parse_observations,
            "tuning_check": tuning_check,
            "tuning_state": tuning_state,
            "tuning_uninstall_paths": tuning_uninstall_paths,
            "tuning_render_files": tuning_render_files,
            "tuning_package_spec": tuning_package_spec,
        }
