"""Catch-up policies after an outage of 10 ticks, and a paused schedule, with time passed as ``now``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgflow_django.schedules import get_schedule, pause_schedule, resume_schedule
from tests.sql.schedules.support import every_minute, fire, ledger, minute, probe_flow, runs_of
from tests.sql.support import q

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def flow() -> str:
    return probe_flow()


def test_on_time_ticks_fire_once_each() -> None:
    every_minute("s")
    for n in range(1, 6):
        assert [tick for _, tick, _ in fire(minute(n + 0.1))] == [minute(n)]
        assert fire(minute(n + 0.2)) == []
    assert ledger("s") == [minute(n) for n in range(1, 6)]
    assert runs_of() == 5
    view = get_schedule("s")
    assert view.last_tick == minute(5) and view.missed_ticks == 0
    assert (
        view.last_run_id
        == q("select run_id from pgflow.schedule_ticks where tick = %s", [minute(5)])[0]["run_id"]
    )


@pytest.mark.parametrize(
    ("policy", "max_catch_up", "fired"),
    [("all", 100, list(range(1, 11))), ("all", 3, [8, 9, 10]), ("latest", 10, [10]), ("none", 10, [])],
)
def test_after_a_ten_tick_outage(policy: str, max_catch_up: int, fired: list[int]) -> None:
    every_minute("s", catch_up=policy, max_catch_up=max_catch_up)
    # nothing fired from 12:00 to 12:10; the first call comes at 12:10:30, past a 'none' grace of 10 s
    late = fire(minute(10.5), grace=timedelta(seconds=10))
    assert [tick for _, tick, _ in late] == [minute(n) for n in fired]
    assert ledger("s") == [minute(n) for n in fired]
    assert runs_of() == len(fired)
    assert get_schedule("s").missed_ticks == 10 - len(fired)
    # afterwards the schedule is back on time
    assert [tick for _, tick, _ in fire(minute(11))] == [minute(11)]


def test_none_fires_a_tick_within_grace() -> None:
    every_minute("s", catch_up="none")
    assert [tick for _, tick, _ in fire(minute(1.5))] == [minute(1)]


def test_a_paused_schedule_fires_nothing_and_resumes_with_the_next_tick() -> None:
    every_minute("s", catch_up="all", max_catch_up=100)
    pause_schedule("s", detail="maintenance")
    assert fire(minute(5)) == []
    assert ledger("s") == [] and runs_of() == 0
    resume_schedule("s", now=minute(5.5))
    assert fire(minute(5.6)) == []
    assert [tick for _, tick, _ in fire(minute(6))] == [minute(6)]
    assert get_schedule("s").missed_ticks == 5
