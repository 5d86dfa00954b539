# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The alert gate: no new node is admitted while a matching alert fires.

A DeploymentPolicy's ``alertGate`` (or the run's ``nodewright_rollout_alert_gate``)
names an Alertmanager (API v2, ``/api/v2/alerts``) or a Prometheus
(``/api/v1/alerts``), label matchers and an alert-name regexp that select the
alerts that count, and alerts to ignore. kured blocks reboots the same way
(``--prometheus-url``, ``--alert-filter-regexp``).

Parsing the setting, reading a response and choosing the alerts that count are
pure functions (tested by tables); ``check_gate`` adds one HTTP GET (urllib, with a
timeout). A source that cannot be reached or answers something unreadable counts
as firing (fail closed) unless ``failOpen`` is set; either way the result says so.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    check_keys as _check_keys,
    field_path as _path,
    parse_duration,
    read_bool as _read_bool,
    require_mapping,
)

ALERTMANAGER = "alertmanager"
PROMETHEUS = "prometheus"
APIS = (ALERTMANAGER, PROMETHEUS)
# Only active alerts that no silence or inhibition holds back.
ALERTMANAGER_PATH = "/api/v2/alerts"
ALERTMANAGER_QUERY = "active=true&silenced=false&inhibited=false"
PROMETHEUS_PATH = "/api/v1/alerts"

# kube-prometheus' Watchdog fires all the time by design (it proves the pipeline works), and
# InfoInhibitor exists only to inhibit info alerts: neither says anything about the fleet.
DEFAULT_IGNORE = ("Watchdog", "InfoInhibitor")
DEFAULT_WAIT_TIMEOUT = 3600
DEFAULT_CHECK_INTERVAL = 30
DEFAULT_REQUEST_TIMEOUT = 10

_KEYS = ("url", "api", "matchers", "alertNames", "ignore", "failOpen", "waitTimeout", "checkInterval",
         "requestTimeout", "bearerTokenFile", "caFile", "insecureSkipVerify")
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$')
_SHAPE = ("e.g. alertGate: {url: http://alertmanager.monitoring:9093, matchers: ['severity=\"critical\"'], "
          "ignore: [Watchdog]}")


@dataclass(frozen=True)
class Matcher(object):
    """One Prometheus-style label matcher: ``name=value``, ``!=``, ``=~`` or ``!~`` (regexps
    match the whole value, as in PromQL)."""

    name: str
    op: str
    value: str

    def matches(self, labels):
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found

    def __str__(self):
        return '%s%s"%s"' % (self.name, self.op, self.value)


def parse_matcher(text, where):
    """``Matcher`` from ``severity="critical"``, ``team=gpu``, ``alertname=~"Node.*"``."""
    if not isinstance(text, str):
        raise ValidationError("a matcher must be a string such as severity=\"critical\", got %r" % (text,),
                              field=where)
    found = _MATCHER.match(text)
    if not found:
        raise ValidationError("%r is not a label matcher" % text, field=where,
                              hint='write LABEL=VALUE, LABEL!=VALUE, LABEL=~REGEXP or LABEL!~REGEXP, e.g. '
                                   'severity=~"critical|page"')
    name, op, value = found.groups()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if op in ("=~", "!~"):
        _regexp(value, where)
    return Matcher(name, op, value)


def _regexp(text, where):
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValidationError("%r is not a regular expression: %s" % (text, exc), field=where,
                              hint="Python/RE2-style regexps; they must match the whole value")


@dataclass(frozen=True)
class AlertGate(object):
    """A parsed ``alertGate`` setting."""

    url: str
    api: str = ALERTMANAGER
    matchers: Tuple[Matcher, ...] = ()
    alert_names: Optional[str] = None          # regexp on alertname (whole name); None = any
    ignore: Tuple[str, ...] = DEFAULT_IGNORE   # regexps on alertname (whole name)
    fail_open: bool = False
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    check_interval: float = DEFAULT_CHECK_INTERVAL
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    bearer_token_file: Optional[str] = None
    ca_file: Optional[str] = None
    insecure_skip_verify: bool = False

    @property
    def endpoint(self):
        """The URL the gate GETs."""
        base = self.url.rstrip("/")
        if self.api == ALERTMANAGER:
            return base + ALERTMANAGER_PATH + "?" + ALERTMANAGER_QUERY
        return base + PROMETHEUS_PATH

    def counts(self, alert):
        """Whether ``alert`` (an Alert) closes the gate."""
        name = alert.name
        if any(re.fullmatch(pattern, name) for pattern in self.ignore):
            return False
        if self.alert_names is not None and re.fullmatch(self.alert_names, name) is None:
            return False
        return all(m.matches(alert.labels) for m in self.matchers)

    def describe(self):
        what = []
        if self.alert_names is not None:
            what.append("alertname =~ %s" % self.alert_names)
        what.extend(str(m) for m in self.matchers)
        return "%s %s (%s; ignoring %s)" % (self.api, self.url, ", ".join(what) or "any alert",
                                            ", ".join(self.ignore) or "none")

    def to_dict(self):
        out = {"url": self.url, "api": self.api, "matchers": [str(m) for m in self.matchers],
               "ignore": list(self.ignore), "failOpen": self.fail_open, "waitTimeout": _seconds(self.wait_timeout),
               "checkInterval": _seconds(self.check_interval), "requestTimeout": _seconds(self.request_timeout)}
        if self.alert_names is not None:
            out["alertNames"] = self.alert_names
        if self.bearer_token_file:
            out["bearerTokenFile"] = self.bearer_token_file
        if self.ca_file:
            out["caFile"] = self.ca_file
        if self.insecure_skip_verify:
            out["insecureSkipVerify"] = True
        return out


def _seconds(value):
    """A duration as the CRD writes it (``90s``)."""
    return "%ss" % (int(value) if value == int(value) else value)


def parse_alert_gate(value, where="spec.alertGate"):
    """Validate an ``alertGate`` mapping; ValidationError names the field and the fix."""
    require_mapping(value, where, "alertGate", hint=_SHAPE)
    _check_keys(value, _KEYS, where)
    url = value.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ValidationError("alertGate needs the url of an Alertmanager or a Prometheus", field=_path(where, "url"),
                              hint=_SHAPE)
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValidationError("url %r is not an http(s) URL" % url, field=_path(where, "url"),
                              hint="the base URL, e.g. http://alertmanager.monitoring:9093 (the API path is added)")
    api = value.get("api", ALERTMANAGER)
    if api not in APIS:
        raise ValidationError("api must be one of %s, got %r" % (", ".join(APIS), api), field=_path(where, "api"),
                              hint="alertmanager reads /api/v2/alerts (silenced and inhibited alerts do not count); "
                                   "prometheus reads /api/v1/alerts (firing alerts count, pending ones do not)")
    raw = value.get("matchers") or []
    if not isinstance(raw, list):
        raise ValidationError("matchers must be a list of label matchers", field=_path(where, "matchers"),
                              hint='e.g. matchers: [\'severity="critical"\', \'team=~"gpu|infra"\']')
    matchers = tuple(parse_matcher(m, _path(_path(where, "matchers"), i)) for i, m in enumerate(raw))
    names = value.get("alertNames")
    if names is not None:
        if not isinstance(names, str) or not names:
            raise ValidationError("alertNames must be a regular expression", field=_path(where, "alertNames"))
        _regexp(names, _path(where, "alertNames"))
    ignore = value.get("ignore")
    if ignore is None:
        ignore = DEFAULT_IGNORE
    if not isinstance(ignore, (list, tuple)) or not all(isinstance(i, str) and i for i in ignore):
        raise ValidationError("ignore must be a list of alert names (regular expressions)", field=_path(where, "ignore"),
                              hint="e.g. ignore: [Watchdog, 'KubeJob.*']; [] ignores nothing")
    for i, pattern in enumerate(ignore):
        _regexp(pattern, _path(_path(where, "ignore"), i))
    wait = parse_duration(value.get("waitTimeout"), _path(where, "waitTimeout"), "waitTimeout")
    interval = parse_duration(value.get("checkInterval"), _path(where, "checkInterval"), "checkInterval")
    request = parse_duration(value.get("requestTimeout"), _path(where, "requestTimeout"), "requestTimeout")
    if interval is not None and interval < 1:
        raise ValidationError("checkInterval must be at least 1s, got %r" % value.get("checkInterval"),
                              field=_path(where, "checkInterval"), hint="e.g. 30s (the default)")
    if request is not None and request <= 0:
        raise ValidationError("requestTimeout must be more than 0, got %r" % value.get("requestTimeout"),
                              field=_path(where, "requestTimeout"), hint="e.g. 10s (the default)")
    for key in ("bearerTokenFile", "caFile"):
        if value.get(key) is not None and (not isinstance(value[key], str) or not value[key]):
            raise ValidationError("%s must be a file path" % key, field=_path(where, key))
    return AlertGate(
        url=url.strip(), api=api, matchers=matchers, alert_names=names, ignore=tuple(ignore),
        fail_open=_read_bool(value, "failOpen", where, False),
        wait_timeout=DEFAULT_WAIT_TIMEOUT if wait is None else wait,
        check_interval=DEFAULT_CHECK_INTERVAL if interval is None else interval,
        request_timeout=DEFAULT_REQUEST_TIMEOUT if request is None else request,
        bearer_token_file=value.get("bearerTokenFile"), ca_file=value.get("caFile"),
        insecure_skip_verify=_read_bool(value, "insecureSkipVerify", where, False))


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True)
class Alert(object):
    name: str
    labels: Dict[str, str]


class MalformedAlerts(ValueError):
    """The source answered something that is not its alerts API."""


def _labels(item, where):
    labels = item.get("labels") if isinstance(item, dict) else None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise MalformedAlerts("%s has no labels mapping" % where)
    return labels


def parse_alerts(payload, api):
    """The alerts that fire in a decoded JSON ``payload`` of ``api``: Alertmanager's active
    (or not yet processed) alerts, Prometheus' ``firing`` ones (not ``pending``)."""
    alerts = []
    if api == ALERTMANAGER:
        if not isinstance(payload, list):
            raise MalformedAlerts("expected a JSON list of alerts (Alertmanager API v2), got %s"
                                  % type(payload).__name__)
        for i, item in enumerate(payload):
            labels = _labels(item, "alert %d" % i)
            state = (item.get("status") or {}).get("state", "active") if isinstance(item.get("status"), dict) \
                else "active"
            if state in ("active", "unprocessed"):
                alerts.append(Alert(labels.get("alertname", ""), labels))
        return alerts
    if not isinstance(payload, dict) or payload.get("status") != "success" \
            or not isinstance(payload.get("data"), dict) or not isinstance(payload["data"].get("alerts"), list):
        raise MalformedAlerts('expected {"status": "success", "data": {"alerts": [...]}} (Prometheus API v1)')
    for i, item in enumerate(payload["data"]["alerts"]):
        labels = _labels(item, "alert %d" % i)
        if item.get("state") == "firing":
            alerts.append(Alert(labels.get("alertname", ""), labels))
    return alerts


def describe_alerts(alerts, limit=10):
    """``NodeDown (node=gpu-1), GPUXid`` - names with the labels that tell them apart."""
    parts = []
    for alert in alerts[:limit]:
        extra = ", ".join("%s=%s" % (k, v) for k, v in sorted(alert.labels.items())
                          if k in ("node", "instance", "severity", "namespace"))
        parts.append("%s (%s)" % (alert.name or "<no alertname>", extra) if extra else alert.name or "<no alertname>")
    if len(alerts) > limit:
        parts.append("and %d more" % (len(alerts) - limit))
    return ", ".join(parts)


# --------------------------------------------------------------------------- the check


@dataclass
class GateCheck(object):
    """One check of a gate. ``closed``: no node may be admitted. ``firing``: the alerts that
    count; ``error``: why the source could not be read (then ``closed`` unless failOpen)."""

    gate: AlertGate
    closed: bool
    firing: List[Alert] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def reason(self):
        """The condition's reason: AlertsFiring, SourceUnavailable, SourceUnavailableFailOpen, NoAlerts."""
        if self.error:
            return "SourceUnavailableFailOpen" if not self.closed else "SourceUnavailable"
        return "AlertsFiring" if self.firing else "NoAlerts"

    @property
    def message(self):
        if self.error and self.closed:
            return ("the alert source %s cannot be read (%s): counted as firing (fail closed; failOpen: true "
                    "admits nodes when it cannot be read)" % (self.gate.endpoint, self.error))
        if self.error:
            return ("the alert source %s cannot be read (%s): nodes are admitted anyway (failOpen: true)"
                    % (self.gate.endpoint, self.error))
        if self.firing:
            return "%d alert(s) firing at %s: %s" % (len(self.firing), self.gate.url, describe_alerts(self.firing))
        return "no matching alert fires at %s" % self.gate.url

    def to_dict(self):
        out = {"closed": self.closed, "reason": self.reason, "message": self.message,
               "firing": [a.name for a in self.firing]}
        if self.error:
            out["error"] = self.error
        return out


def _context(gate):
    if not gate.endpoint.startswith("https:"):
        return None
    if gate.insecure_skip_verify:
        return ssl._create_unverified_context()  # pylint: disable=protected-access
    return ssl.create_default_context(cafile=gate.ca_file) if gate.ca_file else ssl.create_default_context()


def _open_url(gate):
    """An opener that GETs with ansible-core's ``open_url`` (its proxy, TLS and
    redirect handling), verifying with the gate's ``caFile`` unless ``insecureSkipVerify``."""
    def opener(request, timeout=None, context=None):
        from ansible.module_utils.urls import open_url
        return open_url(request.full_url, headers=dict(request.header_items()), method="GET", timeout=timeout,
                        validate_certs=not gate.insecure_skip_verify, ca_path=gate.ca_file or None)
    return opener


def fetch_alerts(gate, opener=None):
    """The source's firing alerts (``Alert`` list). Raises OSError/ValueError/MalformedAlerts."""
    headers = {"Accept": "application/json"}
    if gate.bearer_token_file:
        with open(gate.bearer_token_file) as fh:
            headers["Authorization"] = "Bearer " + fh.read().strip()
    request = urllib.request.Request(gate.endpoint, headers=headers)
    opener = opener or _open_url(gate)
    with opener(request, timeout=gate.request_timeout, context=_context(gate)) as response:
        body = response.read(16 * 1024 * 1024 + 1)
    if len(body) > 16 * 1024 * 1024:
        raise MalformedAlerts("the answer is larger than 16 MiB")
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedAlerts("the answer is not JSON (%s)" % exc)
    return parse_alerts(payload, gate.api)


def check_gate(gate, opener=None):
    """A GateCheck of ``gate`` now: one GET of its source."""
    try:
        alerts = fetch_alerts(gate, opener)
    except urllib.error.HTTPError as exc:
        return GateCheck(gate, closed=not gate.fail_open, error="HTTP %s %s" % (exc.code, exc.reason))
    except MalformedAlerts as exc:
        return GateCheck(gate, closed=not gate.fail_open, error="malformed answer: %s" % exc)
    except (OSError, ValueError, UrlsConnectionError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return GateCheck(gate, closed=not gate.fail_open, error=str(reason) or type(exc).__name__)
    firing = [a for a in alerts if gate.counts(a)]
    return GateCheck(gate, closed=bool(firing), firing=firing)
