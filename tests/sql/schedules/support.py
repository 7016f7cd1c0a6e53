"""Helpers of the schedule tests: a probe flow, schedules planned over simulated time, the ledger."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

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
