# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Maintenance windows: parsing (each error naming its field), whether a moment is
inside a window across midnight and time zones, and when the next one opens."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.windows import (
    MaintenanceWindow,
    in_maintenance_window,
    next_maintenance_window,
    parse_maintenance_window,
)

pytestmark = pytest.mark.unit

UTC = datetime.timezone.utc
WEEKEND_NIGHT = {"days": ["Sat"], "start": "22:00", "end": "04:00"}


@pytest.mark.parametrize("window,now,inside", [
    # 2025-01-04 is a Saturday.
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 4, 23, 0, tzinfo=UTC), True),
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 4, 22, 0, tzinfo=UTC), True),
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 5, 3, 59, tzinfo=UTC), True),    # Sunday morning
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 5, 4, 0, tzinfo=UTC), False),    # end is exclusive
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 4, 21, 59, tzinfo=UTC), False),
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 4, 3, 0, tzinfo=UTC), False),    # Saturday morning: Friday's
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 3, 23, 0, tzinfo=UTC), False),   # Friday night
    (WEEKEND_NIGHT, datetime.datetime(2025, 1, 4, 23, 0), True),                 # naive = UTC
    ({"days": ["Sun"], "start": "23:00", "end": "01:00"},                         # Sunday into Monday
     datetime.datetime(2025, 1, 6, 0, 30, tzinfo=UTC), True),
    ({"start": "09:00", "end": "17:00"}, datetime.datetime(2025, 1, 7, 12, 0, tzinfo=UTC), True),
    ({"start": "09:00", "end": "17:00"}, datetime.datetime(2025, 1, 7, 17, 0, tzinfo=UTC), False),
    ({"start": "00:00", "end": "24:00", "days": ["Tue"]}, datetime.datetime(2025, 1, 7, 23, 59, tzinfo=UTC), True),
    # Berlin is UTC+1 in winter and UTC+2 in summer.
    ({"start": "22:00", "end": "04:00", "timeZone": "Europe/Berlin"},
     datetime.datetime(2025, 1, 7, 21, 30, tzinfo=UTC), True),
    ({"start": "22:00", "end": "04:00", "timeZone": "Europe/Berlin"},
     datetime.datetime(2025, 7, 7, 20, 30, tzinfo=UTC), True),
    ({"start": "22:00", "end": "04:00", "timeZone": "Europe/Berlin"},
     datetime.datetime(2025, 7, 7, 19, 30, tzinfo=UTC), False),
    ({"days": ["Mon"], "start": "01:00", "end": "02:00", "timeZone": "America/Los_Angeles"},
     datetime.datetime(2025, 1, 6, 9, 30, tzinfo=UTC), True),
])
def test_in_maintenance_window(window, now, inside):
    assert in_maintenance_window([window], now) is inside


def test_no_windows_means_any_time():
    assert in_maintenance_window([], datetime.datetime(2025, 1, 1, tzinfo=UTC)) is True


def test_next_maintenance_window():
    wednesday_noon = datetime.datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    windows = [WEEKEND_NIGHT, {"days": ["Thu"], "start": "02:00", "end": "03:00", "timeZone": "Europe/Berlin"}]
    assert next_maintenance_window(windows, wednesday_noon) == datetime.datetime(2025, 1, 2, 1, 0, tzinfo=UTC)
    assert next_maintenance_window([], wednesday_noon) is None


@pytest.mark.parametrize("value, days, start, end, zone", [
    ({"start": "01:00", "end": "05:00"}, (0, 1, 2, 3, 4, 5, 6), 60, 300, "UTC"),
    ({"days": ["Sun", "Mon"], "start": "22:30", "end": "02:00"}, (0, 6), 22 * 60 + 30, 120, "UTC"),
    ({"days": ["Tue"], "start": "00:00", "end": "24:00", "timeZone": "Europe/Berlin"}, (1,), 0, 1440,
     "Europe/Berlin"),
])
def test_parse_maintenance_window(value, days, start, end, zone):
    window = parse_maintenance_window(value, "spec.maintenanceWindows[0]")
    assert window == MaintenanceWindow(days=days, start=start, end=end, time_zone=zone)


@pytest.mark.parametrize("value, field, message, hint", [
    ("nightly", "w", "must be a mapping", "see docs/deployment-policy.md for the shape"),
    ({"start": "01:00"}, "w.end", "a maintenance window needs end",
     'e.g. {days: [Sat, Sun], start: "01:00", end: "05:00"}'),
    ({"end": "01:00"}, "w.start", "a maintenance window needs start", None),
    ({"days": [], "start": "01:00", "end": "02:00"}, "w.days", "must be a non-empty list of days",
     "use Mon, Tue, Wed, Thu, Fri, Sat, Sun; leave days out for every day"),
    ({"days": "Sat", "start": "01:00", "end": "02:00"}, "w.days", "must be a non-empty list of days", None),
    ({"days": ["Sat", "Funday"], "start": "01:00", "end": "02:00"}, "w.days[1]", "unknown day 'Funday'",
     "use Mon, Tue, Wed, Thu, Fri, Sat, Sun"),
    ({"days": ["sat"], "start": "01:00", "end": "02:00"}, "w.days[0]", "unknown day 'sat'", None),
    ({"days": ["Sat", "Sat"], "start": "01:00", "end": "02:00"}, "w.days[1]", "day Sat is listed twice", None),
    ({"start": "1:00", "end": "02:00"}, "w.start", "must be a time HH:MM (24-hour), got '1:00'", 'e.g. "22:00"'),
    ({"start": "24:00", "end": "02:00"}, "w.start", "must be a time HH:MM (24-hour), got '24:00'", None),
    ({"start": 100, "end": "02:00"}, "w.start", "must be a time HH:MM (24-hour), got 100", None),
    ({"start": "01:00", "end": "24:30"}, "w.end", "must be a time HH:MM (24-hour), got '24:30'",
     'e.g. "22:00", or "24:00" for midnight'),
    ({"start": "03:00", "end": "03:00"}, "w", "start and end are both 03:00, so the window is empty",
     'for a whole day use start "00:00", end "24:00"'),
    ({"start": "01:00", "end": "02:00", "timeZone": ""}, "w.timeZone", "must be an IANA time zone name",
     "e.g. UTC or Europe/Berlin"),
    ({"start": "01:00", "end": "02:00", "timeZone": "Mars/Olympus"}, "w.timeZone",
     "unknown time zone 'Mars/Olympus'", "use an IANA name such as UTC, Europe/Berlin or America/Los_Angeles"),
])
def test_parse_errors_name_the_field(value, field, message, hint):
    with pytest.raises(ValidationError) as caught:
        parse_maintenance_window(value, "w")
    assert caught.value.field == field
    assert message in str(caught.value)
    if hint is not None:
        assert caught.value.hint == hint


def test_unknown_key_is_refused():
    with pytest.raises(ValidationError) as caught:
        parse_maintenance_window({"start": "01:00", "end": "02:00", "timezone": "UTC"}, "w")
    assert "timezone" in str(caught.value)


def test_windows_given_as_objects_are_used_as_they_are():
    window = parse_maintenance_window(WEEKEND_NIGHT, "w")
    assert in_maintenance_window([window], datetime.datetime(2025, 1, 4, 23, 0, tzinfo=UTC)) is True


def test_an_invalid_window_mapping_is_reported_with_its_index():
    with pytest.raises(ValidationError) as caught:
        in_maintenance_window([WEEKEND_NIGHT, {"start": "x", "end": "02:00"}], datetime.datetime(2025, 1, 1))
    assert caught.value.field == "maintenanceWindows[1].start"


@pytest.mark.parametrize("value, text", [
    (WEEKEND_NIGHT, "Sat 22:00-04:00 UTC"),
    ({"start": "00:00", "end": "24:00"}, "every day 00:00-24:00 UTC"),
    ({"days": ["Mon", "Fri"], "start": "09:05", "end": "17:00", "timeZone": "Europe/Berlin"},
     "Mon,Fri 09:05-17:00 Europe/Berlin"),
])
def test_describe(value, text):
    assert parse_maintenance_window(value, "w").describe() == text


def test_to_dict_round_trips():
    value = {"days": ["Mon", "Fri"], "start": "22:00", "end": "24:00", "timeZone": "Europe/Berlin"}
    window = parse_maintenance_window(value, "w")
    assert window.to_dict() == value
    assert parse_maintenance_window(window.to_dict(), "w") == window


@pytest.mark.parametrize("now, expected", [
    # Wednesday noon: Saturday 22:00.
    (datetime.datetime(2025, 1, 1, 12, 0, tzinfo=UTC), datetime.datetime(2025, 1, 4, 22, 0, tzinfo=UTC)),
    # Inside the window: the next opening is a week later.
    (datetime.datetime(2025, 1, 4, 23, 0, tzinfo=UTC), datetime.datetime(2025, 1, 11, 22, 0, tzinfo=UTC)),
    # Exactly at the opening: the next one, not this one.
    (datetime.datetime(2025, 1, 4, 22, 0, tzinfo=UTC), datetime.datetime(2025, 1, 11, 22, 0, tzinfo=UTC)),
    # Naive = UTC.
    (datetime.datetime(2025, 1, 4, 21, 0), datetime.datetime(2025, 1, 4, 22, 0, tzinfo=UTC)),
])
def test_next_start(now, expected):
    assert parse_maintenance_window(WEEKEND_NIGHT, "w").next_start(now) == expected


def test_next_start_in_a_zone_across_daylight_saving():
    # Berlin moves to summer time on 2025-03-30: 02:00 local is 00:00 UTC after it.
    window = parse_maintenance_window({"days": ["Mon"], "start": "02:00", "end": "03:00",
                                       "timeZone": "Europe/Berlin"}, "w")
    assert window.next_start(datetime.datetime(2025, 3, 29, tzinfo=UTC)) == \
        datetime.datetime(2025, 3, 31, 0, 0, tzinfo=UTC)
    assert window.next_start(datetime.datetime(2025, 3, 22, tzinfo=UTC)) == \
        datetime.datetime(2025, 3, 24, 1, 0, tzinfo=UTC)
