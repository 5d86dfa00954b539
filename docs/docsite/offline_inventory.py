# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Write the Sphinx inventory of the few ansible-core documentation labels that antsibull-docs'
pages refer to, so the docs site builds without fetching docs.ansible.com's inventory (the links
still point there). ``make docs`` writes it as build/docs-site/ansible_devel.inv, the local
fallback the generated conf.py names.

    python docs/docsite/offline_inventory.py OUT.inv
"""

from __future__ import annotations

import sys
import zlib

# label -> (page, anchor, title) in https://docs.ansible.com/projects/ansible/devel/
LABELS = {
    "action_plugins": ("plugins/action.html", "action-plugins", "Action plugins"),
    "callback_plugins": ("plugins/callback.html", "callback-plugins", "Callback plugins"),
    "common_return_values": ("reference_appendices/common_return_values.html", "common-return-values",
                             "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html", "ansible-configuration-settings",
                                       "Ansible Configuration Settings"),
    "connection_plugins": ("plugins/connection.html", "connection-plugins", "Connection plugins"),
    "inventory_plugins": ("plugins/inventory.html", "inventory-plugins", "Inventory plugins"),
    "strategy_plugins": ("plugins/strategy.html", "strategy-plugins", "Strategy plugins"),
    "playbooks_filters": ("playbook_guide/playbooks_filters.html", "playbooks-filters", "Using filters"),
}

# ansible-core configuration variables the plugin pages name (reference_appendices/config.html).
ENVVARS = ("ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION", "ANSIBLE_CACHE_PLUGIN_PREFIX",
           "ANSIBLE_CACHE_PLUGIN_TIMEOUT", "ANSIBLE_PIPELINING", "ANSIBLE_REMOTE_TEMP", "ANSIBLE_REMOTE_USER",
           "ANSIBLE_BECOME_METHOD", "ANSIBLE_INVENTORY_ENABLED")


def inventory():
    lines = "".join("%s std:label -1 %s#%s %s\n" % (label, page, anchor, title)
                    for label, (page, anchor, title) in sorted(LABELS.items()))
    lines += "".join("%s std:envvar 1 reference_appendices/config.html#envvar-$ -\n" % name for name in ENVVARS)
    header = ("# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
              "# The remainder of this file is compressed using zlib.\n")
    return header.encode() + zlib.compress(lines.encode())


if __name__ == "__main__":
    with open(sys.argv[1], "wb") as fh:
        fh.write(inventory())
