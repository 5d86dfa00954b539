# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Retry budget and limits of a package on a node: the pure decisions.

* **Stage retries** (``stageRetries``, default 3): a failed stage (its steps or its
  check, a stage timeout included) runs again up to that many times in the same run,
  after a pause that doubles each time (``stageRetryBackoff``, default 1 s, at most
  5 min). The attempts are recorded in the package's node state (``attempts``: stage
  -> count) and survive the run: a package erroring at a stage whose attempts reached
  the budget is not run again by a later run (its plan says ``exhausted``) until
  something new is asked of it - another version, changed config, ``nodewright
  package rerun`` - or the node's record is reset (``nodewright reset``).
* **Interrupt restart limit** (``interruptRestartLimit``, default 3): a non-reboot
  interrupt (service restart, restartAllServices) that fails is restarted up to that
  many times, with the same backoff; the restarts are recorded in the node state
  (``restarts``) and a node whose limit was reached is not interrupted again until
  its packages change or its record is reset. A reboot is never restarted this way:
  it ends the processes that would count it.
* **Downgrades**: a package with ``uninstall.enabled`` that the node records at a
  newer version than the one wanted is not touched - it must be uninstalled first
  (``uninstall.apply: true``), then the lower version is a fresh apply (upstream
  NodeWright's rule since v0.16). Other packages downgrade as they always did: the
  installed version's uninstall, then the apply of the wanted one.

Stdlib only: the package runner on the node uses it.
"""

from __future__ import annotations

DEFAULT_STAGE_RETRIES = 3
DEFAULT_RETRY_BACKOFF = 1.0
MAX_RETRY_BACKOFF = 300.0
MAX_RETRIES = 10
DEFAULT_RESTART_LIMIT = 3


def backoff_delay(retry, base=DEFAULT_RETRY_BACKOFF, cap=MAX_RETRY_BACKOFF):
    """Seconds to wait before retry number ``retry`` (1 for the first): ``base``,
    then doubling, never more than ``cap``."""
    if retry < 1 or not base:
        return 0.0
    return float(min(cap, base * 2 ** (retry - 1)))


def budget(retries):
    """Attempts a stage gets in all: the first one and its retries (None: no retry - the
    package module's default; a NodeWright resource always gives its stageRetries, 3 unless
    it says otherwise)."""
    return 1 + (0 if retries is None else int(retries))


def attempts_at(entry, stage):
    """Attempts recorded for ``stage`` in a package's node-state entry (0 when none)."""
    attempts = (entry or {}).get("attempts")
    value = attempts.get(stage) if isinstance(attempts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def exhausted(entry, retries):
    """Whether a recorded package entry is erroring at a stage whose attempts reached
    the budget: a later run must not start it again on its own."""
    if retries is None or not isinstance(entry, dict) or entry.get("state") != "erroring":
        return False  # no budget given (the package module's default): every run tries again
    return attempts_at(entry, entry.get("stage")) >= budget(retries)


def exhausted_reason(entry, retries):
    stage = entry.get("stage")
    return ("stage %s of %s %s failed %d time(s), its whole retry budget (stageRetries %d): not run again until "
            "its version or config changes, `nodewright package rerun NODE %s %s` or `nodewright reset NODE`"
            % (stage, entry.get("name"), entry.get("version"), attempts_at(entry, stage), budget(retries) - 1,
               entry.get("name"), stage if stage in ("apply", "config", "upgrade", "post-interrupt") else "apply"))


def restart_limit_reached(state):
    """Whether the node state says a non-reboot interrupt used up its restarts."""
    return bool(isinstance(state, dict) and state.get("restartLimitReached"))


def downgrade_reason(name, have, want):
    return ("downgrade of %s refused: the node has %s, the resource wants %s, and %s has uninstall.enabled; "
            "uninstall it first (uninstall.apply: true, and wait until it is gone from the node), then set version "
            "%s (a fresh apply)" % (name, have, want, name, want))
