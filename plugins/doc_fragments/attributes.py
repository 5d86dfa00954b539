# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The check-mode attribute of modules that support check mode fully."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Can run in check mode and return the changed status prediction without modifying the target.
"""
