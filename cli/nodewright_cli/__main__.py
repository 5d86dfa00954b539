# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""``python -m nodewright_cli`` is ``nodewright``."""

from __future__ import annotations

import sys

from nodewright_cli.cli import main

sys.exit(main())
