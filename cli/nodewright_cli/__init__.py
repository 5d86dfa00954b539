# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The ``nodewright`` command: the continuous reconciler, drift checks, status at a
glance and the node and resource actions, over the ``nodewright.fleet`` collection.

Everything NodeWright decides lives in the collection's ``module_utils``; this
package finds the collection, reads and watches the cluster, and runs the
collection's playbooks through ansible-runner.
"""

from __future__ import annotations

__version__ = "0.1.0"
