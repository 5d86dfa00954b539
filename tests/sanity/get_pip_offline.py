# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Stand-in for the get-pip script that ansible-test downloads from its own file host
(not a package registry) to put pip into the empty virtual environments of its sanity tests.

ansible-test runs it as ``get_pip_<version>.py [pip options] pip==<version> --no-setuptools
--no-wheel`` inside the new environment. This does the same from the Python standard library
and the package index: ``ensurepip`` installs the pip wheel that ships with Python, then that
pip installs the requested pip version and packages. tests/sanity/run.sh puts it where
ansible-test looks for its cached copy.
"""

from __future__ import annotations

import ensurepip
import os
import subprocess
import sys

# get-pip options that pip's own ``install`` does not take.
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main(argv):
    env = dict(os.environ)  # ensurepip turns pip's configuration off (PIP_CONFIG_FILE) in os.environ
    ensurepip.bootstrap(upgrade=True)
    args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
