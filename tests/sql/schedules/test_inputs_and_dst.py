"""Callable inputs (called with each tick, in the schedule's time zone) and a DST day fired end to end."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgflow_django.schedules import create_schedule, get_schedule, trigger_now
from pgflow_django.schedules.cron import InvalidSchedule
from tests.sql.schedules.support import every_minute, fire, ledger, minute, plan, probe_flow
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db


def report_input(tick: datetime) -> dict[str, Any]:
    return {"day": tick.date().isoformat(), "hour": tick.hour, "tz": str(tick.tzinfo)}


def broken_input(tick: datetime) -> dict[str, Any]:
    raise RuntimeError("no report today")


def _inputs(flow: str = "sched_probe") -> list[Any]:
    return [
        json.loads(row["input"]) if isinstance(row["input"], str) else row["input"]
        for row in q("select input from pgflow.runs where flow_slug = %s order by started_at", [flow])
    ]


def test_a_callable_input_is_called_with_each_tick_in_the_schedule_timezone() -> None:
    probe_flow()
    every_minute("report", input=report_input, timezone="Asia/Tokyo")
    fire(minute(2.5))
    assert ledger("report") == [minute(2)]  # catch_up="latest"
    assert _inputs() == [{"day": "2026-01-05", "hour": 21, "tz": "Asia/Tokyo"}]


def test_a_raising_callable_holds_its_schedule_back_and_others_still_fire() -> None:
    probe_flow()
    every_minute("broken", input=broken_input)
    every_minute("plain", input={"n": 1})
    fired = fire(minute(1.5))
    assert [name for name, _, _ in fired] == ["plain"]
    view = get_schedule("broken")
    assert view.last_error and "no report today" in view.last_error
    assert view.next_fire_at == minute(1)  # still due: it fires once its callable works


def test_pg_cron_style_calls_leave_callable_schedules_alone() -> None:
    probe_flow()
    every_minute("report", input=report_input)
    assert q("select * from pgflow.fire_due_schedules(%s)", [minute(1.5)]) == []
    assert ledger("report") == []


def test_a_lambda_input_is_refused() -> None:
    probe_flow()
    with pytest.raises(InvalidSchedule, match="module-level function"):
        create_schedule("sched_probe", cron="* * * * *", name="x", input=lambda tick: {})


def test_trigger_now_records_a_manual_tick() -> None:
    probe_flow()
    every_minute("plain", input={"n": 1})
    run_id = trigger_now("plain")
    assert val("select kind from pgflow.schedule_ticks where run_id = %s", [run_id]) == "manual"
    assert get_schedule("plain").last_run_id == run_id


def test_a_daily_0230_paris_schedule_fires_once_on_each_dst_day() -> None:
    probe_flow()
    for day_before, fired_at in (
        (datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        (datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
    ):
        name = f"nightly-{day_before.month}"
        create_schedule("sched_probe", cron="30 2 * * *", timezone="Europe/Paris", name=name)
        q(
            "update pgflow.schedules set upcoming = '{}', planned_until = %s where schedule_name = %s",
            [day_before, name],
        )
        plan(day_before, [name])
        # fire every 10 minutes through the night: the tick fires once, at its instant
        fired = []
        for step in range(0, 24 * 6):
            moment = day_before.replace(hour=18) + timedelta(minutes=10 * step)
            fired += [tick for schedule, tick, _ in fire(moment) if schedule == name]
        assert fired == [fired_at]
        assert ledger(name) == [fired_at]
