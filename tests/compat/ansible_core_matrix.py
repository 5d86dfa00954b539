#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The collection on every ansible-core it supports (``make matrix``).

For each supported minor other than the pinned one (the full suite runs on that), a
virtualenv in ``.matrix/`` with that ansible-core on a Python it supports, the runtime
requirements, the CLI and the simulator; then, with that ansible-core:

* the strategy's, the action plugins' and the internals seam's unit tests, and
  ``ansible-doc`` of every plugin (``tests/unit/plugins/test_plugin_docs.py``);
* ``plan.yml``, then ``rollout.yml`` making exactly the waves it planned;
* the main job as a user runs it (``tests/integration/test_demo.py``: ``make demo``'s
  ``bin/nodewright-demo`` on a ``mixed`` simulator of its own, ``install_crds.yml`` then
  ``rollout.yml`` with the shipped examples, every targeted node complete, exit 0, and a
  second run that finds nothing to do);
* a rollout with ``nodewright_rollout_workers=threads``: in threads where the seam has
  them, else in forked workers with one line saying so;
* the same resources rolled out without the strategy plugin (``nodewright rollout
  --resources``), beside ``rollout.yml`` (``tests/integration/test_rollout_without_strategy.py``).

    python tests/compat/ansible_core_matrix.py                 # prepare and run every version
    python tests/compat/ansible_core_matrix.py --prepare-only  # only the virtualenvs (CI starts this early)
    python tests/compat/ansible_core_matrix.py --versions 2.16,2.21

A version's output is in ``.matrix/ansible-core-X.log``; the table at the end gives each
version's result and time. Exit status 1 when any version failed.
"""

from __future__ import annotations

import argparse
import ast
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEAM = os.path.join(REPO, "plugins", "plugin_utils", "core_internals.py")


def _seam_value(name):
    """A literal of the internals seam, read without importing it (this runs before any
    virtualenv with ansible-core exists)."""
    with open(SEAM) as fh:
        tree = ast.parse(fh.read(), SEAM)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("%s defines no %s" % (SEAM, name))


def core_minor(version):
    return tuple(int(part) for part in version.split(".")[:2])


SUPPORTED = _seam_value("SUPPORTED")

MATRIX = os.path.join(REPO, ".matrix")
# The Python each ansible-core runs on here: the controller Pythons each release supports
# (2.20 dropped 3.11), the oldest one that pyenv or the system has.
PYTHON_FOR = {(2, 16): "3.11", (2, 17): "3.11", (2, 18): "3.11", (2, 19): "3.11", (2, 20): "3.12", (2, 21): "3.13"}
TESTS = [
    "tests/unit/plugins/plugin_utils/test_core_internals.py",
    "tests/unit/plugins/strategy",
    "tests/unit/plugins/action",
    "tests/unit/plugins/test_plugin_docs.py",
    "tests/integration/test_demo.py",
    # plan.yml, then rollout.yml making exactly the planned waves.
    "tests/integration/test_rollout_playbook.py::test_rollout_follows_the_plan_and_publishes_status",
    # nodewright_rollout_workers=threads: threads where the seam has them, else forks with one line.
    "tests/integration/test_rollout_playbook.py::test_maintain_tasks_run_in_threads_or_processes_with_the_same_outcome",
    "tests/integration/test_rollout_without_strategy.py",
]


def pinned():
    with open(os.path.join(REPO, "requirements.txt")) as fh:
        for line in fh:
            if line.startswith("ansible-core=="):
                return line.split("==", 1)[1].strip()
    raise SystemExit("requirements.txt pins no ansible-core")


def runtime_requirements():
    """requirements.txt without its ansible-core pin, and the dev pin of pytest."""
    out = []
    with open(os.path.join(REPO, "requirements.txt")) as fh:
        out += [ln.strip() for ln in fh if ln.strip() and not ln.startswith(("#", "ansible-core"))]
    with open(os.path.join(REPO, "requirements-dev.txt")) as fh:
        out += [ln.strip() for ln in fh if ln.startswith("pytest==")]
    return out


def find_python(minor):
    """An interpreter of Python ``minor`` (``3.12``): pyenv's, else one on PATH."""
    roots = []
    try:
        roots.append(subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    roots.append(os.path.expanduser("~/.pyenv"))
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "versions", minor + ".*", "bin", "python" + minor)))
        if found:
            return found[-1]
    on_path = shutil.which("python" + minor)
    if on_path:
        return on_path
    raise SystemExit("no Python %s found (pyenv's versions/%s.*/bin/python%s or python%s on PATH): install it "
                     "to test the ansible-core releases that need it" % (minor, minor, minor, minor))


def versions(wanted=None):
    """``[(ansible-core version, python minor)]``: every supported release but the pinned one."""
    skip = core_minor(pinned())
    out = []
    for minor, release in sorted(SUPPORTED.items()):
        if minor == skip:
            continue
        if wanted and "%d.%d" % minor not in wanted and release not in wanted:
            continue
        out.append((release, PYTHON_FOR[minor]))
    return out


def venv_of(release):
    return os.path.join(MATRIX, "ansible-core-" + release)


def _stamp(release, python):
    digest = hashlib.sha256(("%s %s" % (release, python)).encode())
    for name in ("requirements.txt", "requirements-dev.txt", "cli/pyproject.toml", "simulator/pyproject.toml"):
        with open(os.path.join(REPO, name), "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()


def prepare(release, python_minor):
    """The virtualenv of ``release``, made once (again when the requirements change)."""
    venv = venv_of(release)
    stamp = os.path.join(venv, ".nodewright-stamp")
    wanted = _stamp(release, python_minor)
    if os.path.exists(stamp) and open(stamp).read() == wanted:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    log = venv + ".prepare.log"
    os.makedirs(MATRIX, exist_ok=True)
    pip = [os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check"]
    steps = [
        [find_python(python_minor), "-m", "venv", venv],
        pip + ["ansible-core==" + release] + runtime_requirements(),
        # The CLI and the simulator, on what is installed (their own requirements are a subset).
        pip + ["--no-deps", "-e", os.path.join(REPO, "cli"),
               "-e", os.path.join(REPO, "simulator")],
    ]
    with open(log, "w") as out:
        for argv in steps:
            if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False).returncode:
                raise RuntimeError("ansible-core %s: %s failed (see %s)" % (release, " ".join(argv[:3]), log))
    with open(stamp, "w") as fh:
        fh.write(wanted)
    return venv


def run(release, python_minor):
    """The matrix's tests under ``release``; (passed, seconds, the log's path, its last line)."""
    venv = prepare(release, python_minor)
    log = venv + ".log"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
               PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", ""))
    tests = [t for t in TESTS if os.path.exists(os.path.join(REPO, t.split("::")[0]))]
    started = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pytest", "-p", "no:cacheprovider",
                               "-q", "-o", "addopts=-ra --strict-markers"] + tests,
                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    with open(log) as fh:
        lines = [ln.strip() for ln in fh if ln.strip()]
    return code == 0, time.monotonic() - started, log, (lines[-1] if lines else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", help="comma-separated minors or releases (default: every supported one)")
    parser.add_argument("--prepare-only", action="store_true", help="make the virtualenvs and stop")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("NODEWRIGHT_MATRIX_JOBS") or 5),
                        help="releases tested at once, each on a simulator of its own (default 5: a rollout on "
                             "the simulator mostly waits, for drains and reboots)")
    args = parser.parse_args(argv)
    todo = versions(set(args.versions.split(",")) if args.versions else None)
    if not todo:
        raise SystemExit("no supported ansible-core matches %s" % args.versions)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(todo)) as pool:
        for future in [pool.submit(prepare, release, minor) for release, minor in todo]:
            future.result()
    print("ansible-core matrix: %d virtualenv(s) ready in %.0f s (%s)" % (
        len(todo), time.monotonic() - started, ", ".join(r for r, _m in todo)), flush=True)
    if args.prepare_only:
        return 0
    rows, failed = [], 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(release, minor, pool.submit(run, release, minor)) for release, minor in todo]
        for release, minor, future in futures:
            ok, seconds, log, last = future.result()
            failed += not ok
            rows.append((release, minor, "ok" if ok else "FAILED", seconds, last))
            print("ansible-core %-8s python %-5s %-6s %5.0f s  %s" % rows[-1], flush=True)
            if not ok:
                with open(log) as fh:
                    print(fh.read()[-6000:], flush=True)
    print("ansible-core matrix: %d passed, %d failed in %.0f s (pinned %s: the full suite)" % (
        len(rows) - failed, failed, time.monotonic() - started, pinned()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
