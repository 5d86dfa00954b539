# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""NVIDIA tuning on the controller, for the filter plugins: the package's comparator
(``verdict.sh``), run here to check what a host reports against a profile. The shipped
profiles and templates are read in ``module_utils/tuning/shipped.py``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning import checks
from ansible_collections.nodewright.fleet.plugins.module_utils.tuning.shipped import PACKAGE_DIR

# The package's comparator; the role's check runs it too.
VERDICT_SCRIPT = os.path.join(PACKAGE_DIR, "steps", "verdict.sh")


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
