"""Schedules plan and fire on the database's clock, not the host's (issue 35, item 3): a host whose
clock is 30 s, or 3 hours, fast fires no tick early and plans no tick from its own time, and says
so once per process. The database's clock is the real one; the host's is shifted in Python."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from pgflow_django.schedules import create_schedule, fire_due, get_schedule, resume_schedule, trigger_now
from pgflow_django.schedules.planner import plan_schedules
from tests.sql.schedules.support import database_now, host_clock_ahead, ledger, plan, probe_flow
from tests.sql.support import q

pytestmark = pytest.mark.django_db

AHEAD = [timedelta(seconds=30), timedelta(hours=3)]
SKEW_LOGGER = "pgflow_django.schedules"


@pytest.fixture(autouse=True)
def flow() -> str:
    return probe_flow()


def scheduler_pass() -> list[datetime]:
    """A worker's pass with no time given: plan, then fire, each on its clock."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        plan_schedules(cursor)
    with transaction.atomic(), connection.cursor() as cursor:
        return [tick.tick for tick in fire_due(cursor).fired]


def skew_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == SKEW_LOGGER and "clock" in record.getMessage()
    ]


@pytest.mark.parametrize("ahead", AHEAD, ids=["30s", "3h"])
def test_a_fast_host_plans_and_fires_on_the_database_clock(
    ahead: timedelta, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    host_clock_ahead(monkeypatch, ahead)
    caplog.set_level(logging.WARNING, logger=SKEW_LOGGER)
    before = database_now()
    create_schedule("sched_probe", cron="* * * * * *", name="s")
    first = get_schedule("s").upcoming[0]
    assert before < first <= database_now() + timedelta(seconds=1), "planned from the database's now"

    # plan it from 2.5 s ago on the database's clock, so ticks are due without waiting for them
    q("update pgflow.schedules set upcoming = '{}', planned_until = null, next_fire_at = null")
    start = database_now()
    plan(start - timedelta(seconds=2.5), ["s"])
    fired = [tick for _ in range(4) for tick in scheduler_pass()]
    after = database_now()
    # the latest tick due at the first pass, then only ticks that came due while the passes ran (a
    # busy machine can take over a second for four): none early by the database's clock, none stale.
    # Ticks are whole seconds, so this allows one per second boundary the passes crossed.
    assert fired and fired == sorted(set(fired)), fired
    assert all(start.replace(microsecond=0) <= tick <= after for tick in fired), (fired, start, after)
    assert ledger("s") == fired
    assert get_schedule("s").missed_ticks <= 2, "the ticks up to the host's time are not counted missed"
    assert len(skew_warnings(caplog)) == 1


def test_the_skew_warning_says_by_how_much_and_what_to_fix(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    host_clock_ahead(monkeypatch, timedelta(seconds=30))
    caplog.set_level(logging.WARNING, logger=SKEW_LOGGER)
    create_schedule("sched_probe", cron="* * * * *", name="s")
    scheduler_pass()
    trigger_now("s")
    (warning,) = skew_warnings(caplog)
    assert warning.startswith("this host's clock is 30.0 s ahead of the database server's: ")
    assert "NTP" in warning and "\n" not in warning


def test_a_host_in_time_with_the_database_logs_no_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    host_clock_ahead(monkeypatch, timedelta(0))
    caplog.set_level(logging.WARNING, logger=SKEW_LOGGER)
    create_schedule("sched_probe", cron="* * * * * *", name="s")
    scheduler_pass()
    assert skew_warnings(caplog) == []


def test_resume_and_trigger_use_the_database_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    host_clock_ahead(monkeypatch, timedelta(hours=3))
    create_schedule("sched_probe", cron="* * * * * *", name="s")
    q("update pgflow.schedules set paused_reason = 'operator', paused_at = clock_timestamp()")
    resumed = resume_schedule("s")
    assert resumed.upcoming[0] <= database_now() + timedelta(seconds=1), "not planned from the host's time"
    assert resumed.missed_ticks <= 1
    trigger_now("s")
    manual = q("select tick from pgflow.schedule_ticks where kind = 'manual'")[0]["tick"]
    assert abs(manual - database_now()) < timedelta(seconds=1)
