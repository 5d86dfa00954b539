# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NVIDIA tuning on the controller: the files that ship with the collection.

``module_utils/tuning`` is pure; this module reads what it needs from the collection
- the profile layers and templates of the ``nodewright.fleet.nvidia_tuning`` role,
the ``nvidia-tuning`` package and its shell helpers - with PyYAML and Jinja2, which
come with Ansible on the controller. The filter plugin, ``desired_state`` and the
tests use it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import checks
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import (
    PACKAGE_NAME,
    resolve_package_spec,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    DEFAULT_POWER_PROFILE_COMMAND,
)

COLLECTION_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ROLE_DIR = os.path.join(COLLECTION_DIR, "roles", "nvidia_tuning")
PROFILES_DIR = os.path.join(ROLE_DIR, "files", "profiles")
TEMPLATES_DIR = os.path.join(ROLE_DIR, "templates")
PACKAGE_DIR = os.path.join(COLLECTION_DIR, "packages", PACKAGE_NAME)
# The package's comparator; the role's check runs it too.
VERDICT_SCRIPT = os.path.join(PACKAGE_DIR, "steps", "verdict.sh")


def load_profiles(profiles_dir=None):
    """Read every ``*.yml`` layer under ``profiles_dir``; names are paths without ``.yml``."""
    import yaml

    root = os.path.abspath(profiles_dir or PROFILES_DIR)
    if not os.path.isdir(root):
        raise ValidationError("tuning profiles directory %s does not exist" % root, field="profiles_dir",
                              hint="the profiles ship with the collection's nvidia_tuning role; resolve them on "
                                   "the controller, where the collection is installed")
    layers = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            stem, ext = os.path.splitext(filename)
            if ext not in (".yml", ".yaml"):
                continue
            path = os.path.join(dirpath, filename)
            name = os.path.relpath(os.path.join(dirpath, stem), root).replace(os.sep, "/")
            try:
                with open(path) as handle:
                    data = yaml.safe_load(handle) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ValidationError("cannot read tuning profile %s: %s" % (path, exc), field="profiles_dir")
            if not isinstance(data, dict):
                raise ValidationError("tuning profile %s is not a mapping" % path, field="profiles_dir")
            if name in layers:
                raise ValidationError("tuning profile %s is defined twice (.yml and .yaml)" % name,
                                      field="profiles_dir")
            layers[name] = data
    return layers


def render_files(resolved, power_profile_command=None, templates_dir=None):
    """The profile's files (``files.render_plan``) with their ``content``, rendered from
    the role's templates: the role and the package write the same bytes."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir or TEMPLATES_DIR), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    out = []
    for spec in resolved["files"]:
        content = env.get_template(spec["template"]).render(
            nvidia_tuning_profile=resolved, item=spec,
            nvidia_tuning_power_profile_command=power_profile_command or DEFAULT_POWER_PROFILE_COMMAND)
        out.append(dict(spec, content=content if content.endswith("\n") else content + "\n"))
    return out


def package_spec_for_nodes(spec, nodes, package=None, profiles_dir=None, templates_dir=None):
    """``package.resolve_package_spec`` with the shipped profiles, templates and package."""
    from ansible_collections.nodewright.fleet.plugins.module_utils.package.model import load_package

    package = package or load_package(spec.get("src") or PACKAGE_DIR)
    profiles = load_profiles(profiles_dir)
    return resolve_package_spec(spec, package, nodes, profiles,
                                lambda resolved, command: render_files(resolved, command, templates_dir))


def check_settings(resolved_or_settings, observed, phase="post-interrupt", skip=None):
    """Compare what the host reports with what the profile asks for, with the package's
    comparator (``verdict.sh``), here on the controller.

    ``observed`` maps probe ids (``checks.probes``) to what the host reported;
    ``phase`` and the result are those of ``checks.check_result``; ``skip`` maps
    setting-id globs to the reason the host cannot report them (unverified).
    """
    if phase not in ("post-interrupt", "live"):
        raise ValidationError("unknown check phase %r" % (phase,), field="phase", hint="post-interrupt or live")
    rows = checks.check_expectations(resolved_or_settings, skip)
    with tempfile.TemporaryDirectory(prefix="nodewright-verdict-") as tmp:
        paths = {}
        for name, text in (("checks", checks.checks_text(rows)), ("observed", checks.observations_text(observed))):
            paths[name] = os.path.join(tmp, name)
            with open(paths[name], "w") as handle:
                handle.write(text)
        try:
            proc = subprocess.run(["/bin/sh", VERDICT_SCRIPT, paths["checks"], paths["observed"]],
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ValidationError("cannot run the tuning verdict %s: %s" % (VERDICT_SCRIPT, exc), field="check")
    if proc.returncode not in (0, 1):
        raise ValidationError("the tuning verdict %s failed (rc %d): %s"
                              % (VERDICT_SCRIPT, proc.returncode, proc.stderr.strip()), field="check")
    return checks.check_result(rows, proc.stdout, observed, phase)
