# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Notifications: the setting, what each event says, and that a failing target never
stops the rollout (the driver's events under test_driver's Recorder)."""

from __future__ import annotations

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import notify
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.driver import COMPLETE, HALTED, RolloutDriver
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.admission import FleetView

from test_driver import NOW, Recorder, ViewFleet, fleet, policy, resource

pytestmark = pytest.mark.unit

SLACK = "slack://T0000/B0000/s3cr3tTOKEN"
HOOK = "json://hooks.example.com:8080/nodewright?token=abc"


class Sent(object):
    """Stands in for Apprise's send: records each notification, fails for URLs in ``fail``."""

    def __init__(self, fail=(), raises=()):
        self.fail, self.raises, self.calls = set(fail), set(raises), []

    def __call__(self, url, title, body, kind):
        self.calls.append((url, title, body, kind))
        if url in self.raises:
            raise OSError("connection refused")
        return (False, "the target refused it") if url in self.fail else (True, None)


@pytest.mark.parametrize("value, urls, events", [
    (SLACK, [SLACK], list(notify.EVENTS)),
    ([SLACK, HOOK], [SLACK, HOOK], list(notify.EVENTS)),
    ({"urls": [HOOK], "events": ["halted", "started"]}, [HOOK], ["started", "halted"]),
])
def test_the_setting_takes_a_url_a_list_or_urls_and_events(value, urls, events):
    settings = notify.parse_notify(value)
    assert settings.urls == urls and list(settings.events) == events


@pytest.mark.parametrize("value, words", [
    ("not a url", "is not a notification URL"),
    ([SLACK, 3], "nodewright_rollout_notify[1]"),
    ({"urls": [HOOK], "events": ["finished"]}, "unknown event(s) finished"),
    ({"url": HOOK}, "unknown key(s) url"),
    ({"urls": []}, "needs at least one URL"),
    ({"urls": [HOOK], "batchInterval": "soon"}, "nodewright_rollout_notify.batchInterval"),
])
def test_a_bad_setting_is_refused_naming_the_field(value, words):
    with pytest.raises(ValidationError) as exc:
        notify.parse_notify(value)
    assert words in str(exc.value)


def test_batch_interval_sends_one_batch_per_interval_and_counts_the_rest_into_the_next():
    clock = [0.0]
    sent = Sent()
    settings = notify.parse_notify({"urls": [HOOK], "batchInterval": "10m"})
    assert settings.batch_interval == 600 and settings.describe().endswith("(batches at most every 600s)")
    assert settings.to_dict()["batchInterval"] == 600
    n = notify.Notifier(settings, send=sent, clock=lambda: clock[0])
    n.emit(notify.STARTED, "rollout started", "")
    for wave in range(1, 5):               # waves 1-4 within the first ten minutes
        clock[0] = wave * 60.0
        n.emit(notify.BATCH, "wave %d done" % wave, "w%d" % wave)
    assert [c[1] for c in sent.calls] == ["NodeWright: rollout started", "NodeWright: wave 1 done"]
    assert n.summary() == "2 notification(s) sent, 3 batch notification(s) held back by batchInterval"
    clock[0] = 700.0                       # the interval has passed: the next batch goes, with the held ones
    n.emit(notify.BATCH, "wave 5 done", "w5")
    assert sent.calls[-1][1] == "NodeWright: wave 5 done"
    assert sent.calls[-1][2] == ("w5\n(3 batch notification(s) held back by batchInterval since the last one: "
                                 "wave 2 done; wave 3 done; wave 4 done)")
    clock[0] = 720.0
    n.emit(notify.BATCH, "wave 6 done", "w6")
    n.emit(notify.COMPLETE, "rollout complete", "all done")   # never held, and it carries wave 6
    assert sent.calls[-1][1] == "NodeWright: rollout complete" and "wave 6 done" in sent.calls[-1][2]
    assert n.held == []


def test_without_batch_interval_every_batch_is_sent():
    sent = Sent()
    n = notify.Notifier(notify.parse_notify([HOOK]), send=sent, clock=lambda: 0.0)
    for wave in range(3):
        n.emit(notify.BATCH, "wave %d done" % wave, "")
    assert len(sent.calls) == 3


def test_nothing_set_is_no_notifier():
    assert notify.parse_notify(None) is None and notify.parse_notify([]) is None


def test_tokens_never_reach_the_log_or_the_description():
    settings = notify.parse_notify([SLACK, HOOK])
    n = notify.Notifier(settings, send=Sent(fail={SLACK}))
    n.emit(notify.HALTED, "rollout halted", "why")
    text = repr(n.log) + settings.describe()
    assert "s3cr3tTOKEN" not in text and "token=abc" not in text and "B0000" not in text
    assert [e["target"] for e in n.log] == ["slack://T...0/B...0/s...N", "json://hooks.example.com:8080/nodewright"]
    assert notify.target("json://user:pw@127.0.0.1:9/x") == "json://user:****@127.0.0.1:9/x"
    assert notify.target("nosuchscheme://secret@host/x") == "nosuchscheme://..."


def test_a_failing_or_raising_target_is_recorded_and_warned_and_the_others_still_get_it():
    warned = []
    sent = Sent(fail={SLACK}, raises={HOOK})
    n = notify.Notifier(notify.parse_notify([SLACK, HOOK, "json://ok.example.com/x"]), send=sent,
                        warn=warned.append)
    n.emit(notify.BLOCKED, "1 node(s) blocked", "held")
    assert [e["ok"] for e in n.log] == [False, False, True]
    assert "OSError: connection refused" in n.log[1]["error"]
    assert len(warned) == 2 and all("the rollout goes on" in w for w in warned)
    assert n.summary() == "1 notification(s) sent, 2 failed"
    assert sent.calls[0][3] == "warning"


def test_events_not_asked_for_are_not_sent():
    sent = Sent()
    n = notify.Notifier(notify.parse_notify({"urls": [HOOK], "events": ["halted"]}), send=sent)
    n.emit(notify.STARTED, "rollout started", "")
    n.emit(notify.HALTED, "rollout halted", "x")
    assert [c[1] for c in sent.calls] == ["NodeWright: rollout halted"]


def test_without_apprise_a_notification_fails_with_the_fix(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_apprise(name, *args, **kw):
        if name == "apprise":
            raise ImportError(name)
        return real(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_apprise)
    assert notify.apprise_send(HOOK, "t", "b", "info") == (
        False, "Apprise is not installed on the controller (pip install apprise)")


def test_an_url_apprise_does_not_know_fails_without_sending():
    ok, error = notify.apprise_send("nosuchscheme://host/x", "t", "b", "info")
    assert not ok and "does not know this URL" in error


def _driver(resources, nodes, sent, fail=(), events=None):
    view = FleetView(nodes, {}, NOW)
    value = {"urls": [HOOK], "events": events} if events else [HOOK]
    notifier = notify.Notifier(notify.parse_notify(value), send=sent)
    driver = RolloutDriver(resources, ViewFleet(view), Recorder(view, fail), holder_id="me", now=NOW,
                           notifier=notifier)
    return driver, notifier


def test_a_run_tells_started_each_batch_and_complete():
    sent = Sent()
    driver, notifier = _driver([resource("tuning", policy({"fixed": {"initialBatch": 2}}),
                                         ["n00", "n01", "n02"])], fleet(3), sent)
    assert driver.run()[0] == COMPLETE
    assert [e["event"] for e in notifier.log] == ["started", "batch", "batch", "complete"]
    titles = [c[1] for c in sent.calls]
    assert titles[0] == "NodeWright: rollout started (tuning)"
    assert titles[1:3] == ["NodeWright: wave 1 done (2 node(s))", "NodeWright: wave 2 done (1 node(s))"]
    assert "tuning: 3 node(s) with work of 3 targeted" in sent.calls[0][2]
    assert "tuning: 2 ok, 0 failed, 0 blocked; 2 of 3 node(s) with work done" in sent.calls[1][2]
    assert sent.calls[-1][3] == "success"


def test_a_halted_run_tells_halted_with_the_reason():
    sent = Sent()
    pol = policy({"fixed": {"initialBatch": 1, "failureThreshold": 1}})
    driver, notifier = _driver([resource("tuning", pol, ["n00", "n01", "n02"])], fleet(3), sent, fail={"n00"})
    status, reason = driver.run()
    assert status == HALTED
    assert [e["event"] for e in notifier.log] == ["started", "batch", "halted"]
    assert sent.calls[-1][1:] == ("NodeWright: rollout halted", reason, "failure")
    assert "tuning: 0 ok, 1 failed, 0 blocked" in sent.calls[1][2]


class BlockingRecorder(Recorder):
    def run_wave(self, wave):
        out = super(BlockingRecorder, self).run_wave(wave)
        return {n: ("blocked" if n == "n01" else o) for n, o in out.items()}


def test_a_blocked_node_is_told_with_the_batch():
    sent = Sent()
    view = FleetView(fleet(2), {}, NOW)
    notifier = notify.Notifier(notify.parse_notify({"urls": [HOOK], "events": ["blocked"]}), send=sent)
    driver = RolloutDriver([resource("tuning", policy(), ["n00", "n01"])], ViewFleet(view), BlockingRecorder(view),
                           holder_id="me", now=NOW, notifier=notifier)
    driver.run()
    assert [c[1] for c in sent.calls] == ["NodeWright: 1 node(s) blocked in wave 1: n01"]
    assert "picked up by the next run" in sent.calls[0][2]


def test_the_dry_run_sends_nothing():
    sent = Sent()
    driver, notifier = _driver([resource("tuning", policy(), ["n00"])], fleet(1), sent)
    driver.simulate()
    assert sent.calls == [] and notifier.log == []
