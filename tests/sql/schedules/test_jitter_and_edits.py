"""Jitter delays each tick by a fixed offset within its bound; editing a runtime schedule replans
only when its ticks move; triggering works on paused and callable-input schedules."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pgflow_django.schedules import edit_schedule, get_schedule, pause_schedule, recent_ticks, trigger_now
from tests.sql.schedules.support import every_minute, fire, ledger, minute, probe_flow
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db


def stamp_input(tick: datetime) -> dict[str, Any]:
    return {"at": tick.isoformat()}


@pytest.fixture(autouse=True)
def flow() -> str:
    return probe_flow()


def test_jitter_offsets_are_fixed_per_tick_and_within_bounds() -> None:
    every_minute("spread", jitter=30)
    offsets = [
        val("select pgflow.schedule_fire_at('spread', %s, 30) - %s", [minute(n), minute(n)])
        for n in range(1, 40)
    ]
    assert all(timedelta(0) <= offset <= timedelta(seconds=30) for offset in offsets)
    assert len(set(offsets)) > 1
    assert offsets[0] == val("select pgflow.schedule_fire_at('spread', %s, 30) - %s", [minute(1), minute(1)])
    fire_at = minute(1) + offsets[0]
    assert get_schedule("spread").next_fire_at == fire_at
    assert fire(fire_at - timedelta(milliseconds=1)) == []
    assert [tick for _, tick, _ in fire(fire_at)] == [minute(1)]


def test_an_edit_replans_only_when_the_ticks_move() -> None:
    # planned from the database's now: the edit plans on that clock, and plans a plan wholly in its
    # past again whatever changed
    every_minute("r", at=val("select clock_timestamp()"), input={"v": 1})
    before = get_schedule("r")
    after = edit_schedule("r", input={"v": 2}, catch_up="all")
    assert (
        after.upcoming == before.upcoming
        and after.input == {"v": 2}
        and after.revision == before.revision + 1
    )
    moved = edit_schedule("r", cron="*/10 * * * *")
    assert moved.upcoming and all(tick.minute % 10 == 0 for tick in moved.upcoming)
    assert moved.input == {"v": 2} and moved.catch_up == "all"


def test_trigger_now_on_a_paused_schedule_and_a_callable_input() -> None:
    every_minute("stamped", input=stamp_input, timezone="Europe/Paris")
    pause_schedule("stamped")
    run_id = trigger_now("stamped")
    run_input = q("select input from pgflow.runs where run_id = %s", [run_id])[0]["input"]
    paris_offset = datetime.now(ZoneInfo("Europe/Paris")).isoformat()[-6:]
    assert paris_offset in str(run_input)  # the callable got the moment in the schedule's time zone
    assert [tick.kind for tick in recent_ticks("stamped")] == ["manual"]
    assert ledger("stamped") and get_schedule("stamped").paused_reason == "operator"
    override = trigger_now("stamped", input={"at": "given"})
    assert "given" in str(q("select input from pgflow.runs where run_id = %s", [override])[0]["input"])
