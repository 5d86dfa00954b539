# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Filters that guard the playbooks' inputs (controller side).

``input_size`` counts the values of a variable the way anything that copies or
serialises it would meet them - a YAML anchor used many times counted each time -
while walking each distinct object only once, so a YAML bomb in a vars file given
with ``-e @file`` is measured in microseconds instead of being expanded. Each filter
is documented in ``plugins/filter/<filter name>.yml``. ``notify_targets`` checks the
run's notification setting and shows where it sends without the URLs' tokens.
"""

from __future__ import annotations

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load


def _stored(value):
    """ansible-core keeps a variable's values unrendered inside a lazy container until
    they are read, each behind a placeholder with the original in ``.value``; the
    original is what the vars file loaded (shared between aliases), so it is what is
    counted."""
    if type(value).__name__ == "_LazyValue" and hasattr(value, "value"):
        return value.value
    return value


def input_size(value, limit=safe_load.MAX_VALUES):
    """How many values ``value`` holds, every shared object counted each time it is
    reached; at most ``limit + 1``."""
    return safe_load.bounded_size(_stored(value), int(limit), unwrap=_stored)


def notify_targets(value):
    """The run's notification setting (``nodewright_rollout_notify``), checked, as
    ``{targets, events}``; targets in Apprise's privacy form (tokens elided)."""
    from ansible.errors import AnsibleFilterError

    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
    from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.notify import parse_notify
    try:
        settings = parse_notify(value)
    except NodeWrightError as exc:
        raise AnsibleFilterError(str(exc))
    return settings.to_dict() if settings is not None else {"targets": [], "events": []}


class FilterModule(object):
    def filters(self):
        return {"input_size": input_size, "notify_targets": notify_targets}
