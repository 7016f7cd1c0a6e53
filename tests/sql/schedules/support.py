"""Helpers of the schedule tests: a probe flow, schedules planned over simulated time, the ledger."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pytest

from pgflow_django.schedules import create_schedule, fire_due
from pgflow_django.schedules.planner import plan_schedules
from tests.sql.support import make_flow, q, step, val

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
"""A Monday noon, UTC: the simulated clock's origin."""


def minute(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def probe_flow(slug: str = "sched_probe") -> str:
    return make_flow(slug, step("only"))


def every_minute(name: str, flow: str = "sched_probe", *, at: datetime = T0, **options: Any) -> None:
    """A runtime schedule firing on each minute, planned from ``at`` (the simulated now)."""
    create_schedule(flow, cron="* * * * *", name=name, **options)
    q(
        "update pgflow.schedules set upcoming = '{}', planned_until = %s, next_fire_at = null "
        "where schedule_name = %s",
        [at, name],
    )
    plan(at, [name])


def plan(now: datetime, names: list[str] | None = None) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        plan_schedules(cursor, now=now, names=names)


def fire(now: datetime, **options: Any) -> list[tuple[str, datetime, uuid.UUID]]:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_due(cursor, now=now, **options)
    return [(tick.schedule_name, tick.tick, tick.run_id) for tick in result.fired]


def ledger(name: str) -> list[datetime]:
    return [
        row["tick"]
        for row in q("select tick from pgflow.schedule_ticks where schedule_name = %s order by tick", [name])
    ]


def runs_of(flow: str = "sched_probe") -> int:
    return int(val("select count(*) from pgflow.runs where flow_slug = %s", [flow]))


def host_clock_ahead(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """A host whose clock runs ``offset`` ahead of the database's: ``datetime.now`` of every scheduler
    module reads the real clock plus ``offset``. The once-per-process skew warning is armed again."""

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Any:
            return datetime.now(tz) + offset

    for name, module in list(sys.modules.items()):
        if name.startswith("pgflow_django.schedules") and getattr(module, "datetime", None) is datetime:
            monkeypatch.setattr(module, "datetime", Ahead)
    clock = sys.modules.get("pgflow_django.schedules.clock")
    if clock is not None:
        monkeypatch.setattr(clock, "_warned", False)


def database_now() -> datetime:
    return val("select clock_timestamp()")  # type: ignore[no-any-return]
