# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NVIDIA tuning's shipped files, read on the controller.

The profile layers and templates of the ``nodewright.fleet.nvidia_tuning`` role and the
``nvidia-tuning`` package ship with the collection; this module reads them (PyYAML and
Jinja2 come with Ansible on the controller, imported where they are used) and resolves
a package spec with them. Planning calls it through the package's resolver
(``package/resolvers.py``); the filter plugins through ``plugin_utils/tuning_files.py``.
Never shipped to a node.
"""

from __future__ import annotations

import os

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.package import (
    PACKAGE_NAME,
    resolve_package_spec,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.vocabulary import (
    DEFAULT_POWER_PROFILE_COMMAND,
)

COLLECTION_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
ROLE_DIR = os.path.join(COLLECTION_DIR, "roles", "nvidia_tuning")
PROFILES_DIR = os.path.join(ROLE_DIR, "files", "profiles")
TEMPLATES_DIR = os.path.join(ROLE_DIR, "templates")
PACKAGE_DIR = os.path.join(COLLECTION_DIR, "packages", PACKAGE_NAME)


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
