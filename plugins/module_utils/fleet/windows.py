# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Maintenance windows: the weekly times in which a new wave may start."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Tuple

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    check_keys as _check_keys,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    field_path as _path,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import (
    require_mapping,
)

try:  # Python 3.9+
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
except ImportError:  # pragma: no cover - Python 3.8 on a managed host
    try:
        from backports.zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:
        ZoneInfo = None
        ZoneInfoNotFoundError = KeyError

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_HHMM_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def _mapping(value, where, what):
    return require_mapping(value, where, what, hint="see docs/deployment-policy.md for the shape")


@dataclass(frozen=True)
class MaintenanceWindow(object):
    """A weekly window in which new waves may start. ``days`` are the days a window
    opens on (0 = Monday); ``start``/``end`` are minutes after local midnight; a window
    with ``end <= start`` runs past midnight into the next day."""

    days: Tuple[int, ...]
    start: int
    end: int
    time_zone: str = "UTC"

    def _zone(self):
        return _zone(self.time_zone, None)

    def contains(self, now):
        local = _aware(now).astimezone(self._zone())
        minute = local.hour * 60 + local.minute
        weekday = local.weekday()
        if self.start < self.end:
            return weekday in self.days and self.start <= minute < self.end
        return ((weekday in self.days and minute >= self.start)
                or ((weekday - 1) % 7 in self.days and minute < self.end))

    def next_start(self, now):
        """The next moment after ``now`` this window opens."""
        now = _aware(now)
        zone = self._zone()
        local = now.astimezone(zone)
        opening = datetime.time(self.start // 60, self.start % 60)
        for offset in range(0, 8):
            day = local.date() + datetime.timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            candidate = datetime.datetime.combine(day, opening).replace(tzinfo=zone)
            if candidate > now:
                return candidate
        return None  # pragma: no cover - a window has at least one day

    def describe(self):
        days = ",".join(DAYS[d] for d in self.days) if len(self.days) < 7 else "every day"
        return "%s %s-%s %s" % (days, _hhmm(self.start), _hhmm(self.end), self.time_zone)

    def to_dict(self):
        return {"days": [DAYS[d] for d in self.days], "start": _hhmm(self.start),
                "end": _hhmm(self.end), "timeZone": self.time_zone}


def _hhmm(minutes):
    return "%02d:%02d" % (minutes // 60, minutes % 60)


def _aware(moment):
    # A naive time is read as UTC: the controller's local zone is not a fleet's zone.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def _zone(name, where):
    if ZoneInfo is None:
        raise ValidationError("maintenance windows need the zoneinfo module", field=where,
                              hint="run the controller on Python 3.9+ or install backports.zoneinfo")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValidationError("unknown time zone %r" % (name,), field=where,
                              hint="use an IANA name such as UTC, Europe/Berlin or America/Los_Angeles")


def _parse_hhmm(value, where, allow_24=False):
    if allow_24 and value == "24:00":
        return 24 * 60
    match = _HHMM_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise ValidationError("must be a time HH:MM (24-hour), got %r" % (value,), field=where,
                              hint="e.g. \"22:00\"%s" % (", or \"24:00\" for midnight" if allow_24 else ""))
    return int(match.group(1)) * 60 + int(match.group(2))


def parse_maintenance_window(value, where):
    _mapping(value, where, "a maintenance window")
    _check_keys(value, ("days", "start", "end", "timeZone"), where)
    for key in ("start", "end"):
        if value.get(key) is None:
            raise ValidationError("a maintenance window needs %s" % key, field=_path(where, key),
                                  hint="e.g. {days: [Sat, Sun], start: \"01:00\", end: \"05:00\"}")
    days = value.get("days")
    if days is None:
        day_numbers = tuple(range(7))
    else:
        if not isinstance(days, list) or not days:
            raise ValidationError("must be a non-empty list of days", field=_path(where, "days"),
                                  hint="use %s; leave days out for every day" % ", ".join(DAYS))
        numbers = []
        for n, day in enumerate(days):
            number = DAYS.index(day) if day in DAYS else None
            if number is None:
                raise ValidationError("unknown day %r" % (day,), field=_path(_path(where, "days"), n),
                                      hint="use %s" % ", ".join(DAYS))
            if number in numbers:
                raise ValidationError("day %s is listed twice" % DAYS[number],
                                      field=_path(_path(where, "days"), n))
            numbers.append(number)
        day_numbers = tuple(sorted(numbers))
    start = _parse_hhmm(value["start"], _path(where, "start"))
    end = _parse_hhmm(value["end"], _path(where, "end"), allow_24=True)
    if start == end:
        raise ValidationError("start and end are both %s, so the window is empty" % _hhmm(start),
                              field=where, hint="for a whole day use start \"00:00\", end \"24:00\"")
    zone = value.get("timeZone", "UTC")
    if not isinstance(zone, str) or not zone:
        raise ValidationError("must be an IANA time zone name", field=_path(where, "timeZone"),
                              hint="e.g. UTC or Europe/Berlin")
    _zone(zone, _path(where, "timeZone"))
    return MaintenanceWindow(days=day_numbers, start=start, end=end, time_zone=zone)


def _coerce_windows(windows, where="maintenanceWindows"):
    result = []
    for n, window in enumerate(windows or ()):
        if isinstance(window, MaintenanceWindow):
            result.append(window)
        else:
            result.append(parse_maintenance_window(window, _path(where, n)))
    return result


def in_maintenance_window(windows, now):
    """True when a new wave may start at ``now``: no windows at all, or ``now`` inside one.

    ``windows`` are MaintenanceWindow objects or their mappings; a naive ``now`` is UTC.
    """
    windows = _coerce_windows(windows)
    if not windows:
        return True
    return any(w.contains(now) for w in windows)


def next_maintenance_window(windows, now):
    """The next moment a window opens after ``now`` (None without windows)."""
    starts = [w.next_start(now) for w in _coerce_windows(windows)]
    starts = [s for s in starts if s is not None]
    return min(starts) if starts else None
