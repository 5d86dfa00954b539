# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Notifications of a rollout: started, batch done, node blocked, halted, complete.

The run's ``nodewright_rollout_notify`` (``nodewright rollout --notify URL``) names
where they go as Apprise URLs (``slack://...``, ``msteams://...``, ``json://host/path``
for a generic JSON webhook, ``mailto://...``; https://github.com/caronc/apprise/wiki),
so one setting reaches whatever a team already reads; Apprise does the sending.

A long rollout makes many batches; ``batchInterval`` (``{urls, events, batchInterval:
30m}``) sends at most one batch notification per interval and per run: the batches in
between are counted into the next notification that goes out (batch, blocked, halted or
complete), so a channel hears of every wave without hearing of each.

A notification never changes the rollout: a target that cannot be reached, an URL
Apprise does not know, or Apprise missing is recorded (the run report lists every
notification with its outcome) and the rollout goes on. URLs carry tokens, so the
report and the output show them as Apprise's privacy form does (tokens elided).
"""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import parse_duration

STARTED = "started"
BATCH = "batch"
BLOCKED = "blocked"
HALTED = "halted"
COMPLETE = "complete"
EVENTS = (STARTED, BATCH, BLOCKED, HALTED, COMPLETE)

_SHAPE = ("a URL, a list of URLs, or {urls: [...], events: [%s], batchInterval: 30m}; URLs as Apprise writes them, e.g. "
          "slack://T000/B000/XXXX or json://hooks.example.com/nodewright" % ", ".join(EVENTS))
# Apprise's own severities for each event (its ``notify_type``).
_TYPES = {STARTED: "info", BATCH: "info", BLOCKED: "warning", HALTED: "failure", COMPLETE: "success"}


class NotifySettings(object):
    """Where notifications go (``urls``) and which events are sent (``events``)."""

    def __init__(self, urls, events=EVENTS, batch_interval=0):
        self.urls = list(urls)
        self.events = tuple(e for e in EVENTS if e in events)
        self.batch_interval = batch_interval  # seconds; 0: every batch is sent

    def describe(self):
        every = " (batches at most every %ss)" % _number(self.batch_interval) if self.batch_interval else ""
        return "%s to %s%s" % (", ".join(self.events), ", ".join(target(u) for u in self.urls), every)

    def to_dict(self):
        out = {"targets": [target(u) for u in self.urls], "events": list(self.events)}
        if self.batch_interval:
            out["batchInterval"] = self.batch_interval
        return out


def _number(value):
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def target(url):
    """What of ``url`` may be shown: Apprise's own privacy form of it (tokens and
    passwords elided), without its query; only the scheme when Apprise cannot read it."""
    scheme = urllib.parse.urlsplit(url).scheme if isinstance(url, str) else ""
    if not scheme:
        return "(not a URL)"
    try:
        import apprise
        plugin = apprise.Apprise.instantiate(url)
        if plugin:
            return plugin.url(privacy=True).split("?", 1)[0].rstrip("/")
    except Exception:  # noqa: BLE001 - showing a target never fails a rollout
        pass
    return "%s://..." % scheme


def parse_notify(value, where="nodewright_rollout_notify"):
    """NotifySettings from a URL, a list of URLs or ``{urls, events}``; None when empty."""
    if value is None or value == "" or value == []:
        return None
    events = EVENTS
    interval = 0
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"urls", "events", "batchInterval"})
        if unknown:
            raise ValidationError("unknown key(s) %s" % ", ".join(unknown), field=where, hint=_SHAPE)
        if "events" in value:
            events = value["events"]
            if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
                raise ValidationError("events must be a list of %s" % ", ".join(EVENTS), field=where + ".events")
            wrong = sorted(set(events) - set(EVENTS))
            if wrong:
                raise ValidationError("unknown event(s) %s" % ", ".join(wrong), field=where + ".events",
                                      hint="one or more of %s" % ", ".join(EVENTS))
        interval = parse_duration(value.get("batchInterval"), where + ".batchInterval", "batchInterval") or 0
        value = value.get("urls")
        where = where + ".urls"
    urls = [value] if isinstance(value, str) else value
    if not isinstance(urls, list) or not urls:
        raise ValidationError("needs at least one URL", field=where, hint=_SHAPE)
    for n, url in enumerate(urls):
        if not isinstance(url, str) or "://" not in url or not urllib.parse.urlsplit(url.strip()).scheme:
            raise ValidationError("%s is not a notification URL" % (target(url) if isinstance(url, str) else
                                                                    repr(url)),
                                  field="%s[%d]" % (where, n) if len(urls) > 1 or isinstance(value, list) else where,
                                  hint=_SHAPE)
    return NotifySettings([u.strip() for u in urls], events, interval)


def apprise_send(url, title, body, kind):
    """Send one notification with Apprise; ``(ok, error)``."""
    try:
        import apprise
    except ImportError:
        return False, "Apprise is not installed on the controller (pip install apprise)"
    sender = apprise.Apprise()
    if not sender.add(url):
        return False, "Apprise does not know this URL (see its wiki for the schemes)"
    if sender.notify(title=title, body=body, notify_type=kind):
        return True, None
    return False, "the target refused it or could not be reached"


class Notifier(object):
    """Sends the rollout's events to the settings' URLs; never raises. ``log``: one
    entry per notification (event, target, ok, error), for the run report."""

    def __init__(self, settings, send=apprise_send, warn=None, clock=time.monotonic):
        self.settings = settings
        self.send = send
        self.warn = warn
        self.clock = clock
        self.log = []
        self.held = []  # titles of batch notifications held back by batchInterval
        self._last_batch = None
        self._targets = {u: target(u) for u in settings.urls} if settings is not None else {}

    def emit(self, event, title, body, resource=None):
        if self.settings is None or event not in self.settings.events:
            return []
        if event == BATCH and self.settings.batch_interval:
            now = self.clock()
            if self._last_batch is not None and now - self._last_batch < self.settings.batch_interval:
                self.held.append(title)
                return []
            self._last_batch = now
        if self.held:
            body = "%s\n(%d batch notification(s) held back by batchInterval since the last one: %s)" % (
                body, len(self.held), "; ".join(self.held))
            self.held = []
        sent = []
        for url in self.settings.urls:
            try:
                ok, error = self.send(url, "NodeWright: %s" % title, body, _TYPES[event])
            except Exception as exc:  # noqa: BLE001 - a notification never stops a rollout
                ok, error = False, "%s: %s" % (type(exc).__name__, exc)
            entry = {"event": event, "target": self._targets[url], "title": "NodeWright: %s" % title, "ok": bool(ok)}
            if resource:
                entry["resource"] = resource
            if not ok:
                entry["error"] = error or "not sent"
                if self.warn is not None:
                    self.warn("notification %s to %s failed: %s; the rollout goes on"
                              % (event, entry["target"], entry["error"]))
            self.log.append(entry)
            sent.append(entry)
        return sent

    def summary(self):
        ok = sum(1 for e in self.log if e["ok"])
        failed = len(self.log) - ok
        held = ", %d batch notification(s) held back by batchInterval" % len(self.held) if self.held else ""
        return "%d notification(s) sent%s%s" % (ok, ", %d failed" % failed if failed else "", held)
