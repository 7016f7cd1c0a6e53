"""Cron ticks in a time zone: seconds fields, and a 02:30 daily schedule on both DST days in Paris."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgflow_django.schedules.cron import (
    InvalidSchedule,
    check_cron,
    check_timezone,
    ticks_after,
    ticks_before,
)
from pgflow_django.schedules.definition import build_spec


def test_spring_forward_fires_the_missing_0230_once_at_0300_local() -> None:
    # 2026-03-29: Paris clocks jump from 02:00 to 03:00 (01:00 UTC)
    ticks = ticks_after("30 2 * * *", "Europe/Paris", datetime(2026, 3, 28, 12, tzinfo=UTC), 3)
    assert ticks == [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, the first instant after the change
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2026, 3, 31, 0, 30, tzinfo=UTC),
    ]


def test_fall_back_fires_the_repeated_0230_once_at_its_first_occurrence() -> None:
    # 2026-10-25: Paris clocks go back from 03:00 CEST to 02:00 CET; 02:30 happens twice
    ticks = ticks_after("30 2 * * *", "Europe/Paris", datetime(2026, 10, 24, 12, tzinfo=UTC), 2)
    assert ticks == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]


def test_seconds_field_and_window_before() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert ticks_after("*/20 * * * * *", "UTC", start, 3) == [
        datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (20, 40)
    ] + [datetime(2026, 1, 1, 0, 1, tzinfo=UTC)]
    latest = ticks_before("* * * * *", "UTC", datetime(2026, 1, 1, 0, 10, tzinfo=UTC), 3, after=start)
    assert latest == [datetime(2026, 1, 1, 0, m, tzinfo=UTC) for m in (8, 9, 10)]


@pytest.mark.parametrize("expression", ["", "* * *", "61 * * * *", "* * * * * * *"])
def test_bad_cron_is_one_clear_error(expression: str) -> None:
    with pytest.raises(InvalidSchedule, match="cron"):
        check_cron(expression)


def test_unknown_timezone() -> None:
    with pytest.raises(InvalidSchedule, match="IANA"):
        check_timezone("Mars/Olympus")


@pytest.mark.parametrize("zone", ["localtime", "posixrules"])
def test_a_host_s_own_zone_is_refused_naming_the_schedule_and_the_fix(zone: str) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        build_spec("nightly_report", cron="30 2 * * *", timezone=zone, name="nightly")
    assert str(raised.value) == (
        f"schedule 'nightly': timezone {zone!r} is each host's own zone setting, so hosts would "
        "disagree on the ticks; give an IANA zone name such as 'Europe/Paris' or 'UTC'"
    )
    with pytest.raises(InvalidSchedule, match="IANA zone name"):
        check_timezone(zone)
