# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Finding the ``nodewright.fleet`` collection: to import its ``module_utils`` and to
hand its playbooks and its path to ansible-runner."""

from __future__ import annotations

import os
import sys

COLLECTION = ("ansible_collections", "nodewright", "fleet")
DEFAULT_COLLECTION_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")
_HERE = os.path.dirname(os.path.abspath(__file__))


def candidate_roots(environ=None):
    """Directories that may hold ansible_collections/nodewright/fleet, most specific first."""
    environ = os.environ if environ is None else environ
    roots = []
    if environ.get("NODEWRIGHT_COLLECTION_ROOT"):
        roots.append(environ["NODEWRIGHT_COLLECTION_ROOT"])
    # A development checkout: cli/nodewright_cli is two levels below the work tree,
    # whose .collections links the tree in as the collection (make link).
    roots.append(os.path.join(os.path.dirname(os.path.dirname(_HERE)), ".collections"))
    for var in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        roots.extend(p for p in environ.get(var, "").split(os.pathsep) if p)
    roots.extend(os.path.expanduser(p) for p in DEFAULT_COLLECTION_PATHS)
    return roots


def ensure_importable():
    """Make ``ansible_collections.nodewright.fleet`` importable; return its collection root
    (the directory that holds ``ansible_collections``)."""
    try:
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
    except ImportError:
        for root in candidate_roots():
            if os.path.isdir(os.path.join(root, *COLLECTION)):
                sys.path.insert(0, root)
                break
        else:
            raise SystemExit("nodewright: the nodewright.fleet collection was not found (looked in %s); install "
                             "it (ansible-galaxy collection install) or set ANSIBLE_COLLECTIONS_PATH"
                             % ", ".join(candidate_roots()))
        from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import markers
    # .../ansible_collections/nodewright/fleet/plugins/module_utils/k8s/markers.py
    fleet = os.path.abspath(markers.__file__)
    for _level in range(4):
        fleet = os.path.dirname(fleet)
    return os.path.dirname(os.path.dirname(os.path.dirname(fleet)))


COLLECTION_ROOT = ensure_importable()
FLEET_DIR = os.path.join(COLLECTION_ROOT, *COLLECTION)


def playbook(name):
    """Path of one of the collection's playbooks (``rollout.yml``)."""
    return os.path.join(FLEET_DIR, "playbooks", name)


def own_playbook(name):
    """Path of a playbook shipped with this package (``drift.yml``)."""
    return os.path.join(_HERE, "playbooks", name)


def shipped_package_dirs():
    return [os.path.join(FLEET_DIR, "packages")]


def collections_path(environ=None):
    """ANSIBLE_COLLECTIONS_PATH for child runs: the collection's root first."""
    environ = os.environ if environ is None else environ
    rest = [p for p in environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p and p != COLLECTION_ROOT]
    return os.pathsep.join([COLLECTION_ROOT] + rest)
