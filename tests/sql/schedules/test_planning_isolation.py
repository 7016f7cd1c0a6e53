"""One schedule that cannot be planned harms no other: its stored cron no longer parses, or its time
zone is one this host's zoneinfo does not know. Scheduler passes skip it alone, record why in
``plan_error`` and log it once per pass that tries it; the other schedules plan and fire their ticks
exactly once in the same passes. Once repaired, it plans again (the error is cleared) and fires.

All data is committed and the passes run on their own connection, as a worker's do; time is
simulated by passing ``now``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgflow_django.schedules import planner
from pgflow_django.schedules.service import run_pass
from tests.sql.support import other_connection

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FLOW = "sched_isolation"
GOOD = ("good-a", "good-b")
BAD = "bad\x1b[31m"
"""A name with a control character: it must reach the log escaped."""

BREAKAGES = {
    "cron": ("cron", "61 * * * * *", "cron '61 * * * * *' is not valid"),
    "zone": ("timezone", "Mars/Olympus", "timezone 'Mars/Olympus' is not a known IANA time zone"),
}
"""How the bad schedule is broken: (column, stored value, what its recorded reason says)."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    """A committed flow and three per-second schedules (catch_up "latest"), planned from T0 by the
    first pass."""
    conn = other_connection()
    try:
        conn.execute("select pgflow.create_flow(%s)", [FLOW])
        conn.execute("select pgflow.add_step(%s, 'only')", [FLOW])
        for name in (*GOOD, BAD):
            conn.execute(
                "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, planned_until)"
                " values (%s, %s, '* * * * * *', 'runtime', %s)",
                [name, FLOW, T0],
            )
        yield conn
    finally:
        conn.execute("delete from pgflow.schedules where flow_slug = %s", [FLOW])
        conn.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
        conn.close()


def break_schedule(conn: psycopg.Connection[Any], column: str, value: str) -> None:
    """Store a definition that no longer plans, as a release of cronsim or of the host's zoneinfo
    would leave it: written straight to the row, with no ticks planned."""
    conn.execute(
        sql.SQL(
            "update pgflow.schedules set {} = %s, upcoming = '{{}}', next_fire_at = null"
            " where schedule_name = %s"
        ).format(sql.Identifier(column)),
        [value, BAD],
    )


def ledger(conn: psycopg.Connection[Any]) -> dict[str, list[datetime]]:
    found: dict[str, list[datetime]] = {}
    for name, tick in conn.execute(
        "select schedule_name, tick from pgflow.schedule_ticks where schedule_name = any(%s) "
        "order by schedule_name, tick",
        [[*GOOD, BAD]],
    ).fetchall():
        found.setdefault(name, []).append(tick)
    return found


def errors(conn: psycopg.Connection[Any]) -> tuple[str | None, datetime | None]:
    row = conn.execute(
        "select plan_error, plan_failed_at from pgflow.schedules where schedule_name = %s", [BAD]
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def warnings_about_bad(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "cannot be planned" in record.getMessage()
    ]


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_schedule_that_cannot_be_planned_is_skipped_alone_and_plans_again_once_repaired(
    conn: psycopg.Connection[Any], breakage: str, caplog: pytest.LogCaptureFixture
) -> None:
    column, value, reason = BREAKAGES[breakage]
    break_schedule(conn, column, value)
    caplog.set_level(logging.WARNING, logger="pgflow_django.schedules")

    for second in (1, 2, 3):
        result = run_pass(conn, now=at(second + 0.5))
        assert result.locked, "the pass fired: planning the bad schedule did not stop it"
        assert sorted(tick.schedule_name for tick in result.fired) == sorted(GOOD)
    ticks = ledger(conn)
    assert ticks == {name: [at(1), at(2), at(3)] for name in GOOD}, "each good tick exactly once"
    error, failed_at = errors(conn)
    assert error is not None and reason in error
    assert failed_at == at(1.5), "tried once on the first pass, then left alone until PLAN_RETRY"
    logged = warnings_about_bad(caplog)
    assert len(logged) == 1
    assert repr(BAD) in logged[0] and "\x1b" not in logged[0], "the name is escaped"
    assert reason in logged[0]

    # tried again once PLAN_RETRY has passed: still bad, logged once more, the good ones still fire
    later = at(1.5) + planner.PLAN_RETRY
    result = run_pass(conn, now=later)
    assert sorted({tick.schedule_name for tick in result.fired}) == sorted(GOOD)
    assert len(warnings_about_bad(caplog)) == 2
    assert errors(conn)[1] == later

    # repaired in the row: the next try plans it, clears the error, and it fires in that same pass
    # (its latest tick, as after any outage with catch_up="latest"), then on every tick
    conn.execute(
        sql.SQL("update pgflow.schedules set {} = %s where schedule_name = %s").format(
            sql.Identifier(column)
        ),
        ["* * * * * *" if column == "cron" else "UTC", BAD],
    )
    repaired = later + planner.PLAN_RETRY
    fired = run_pass(conn, now=repaired).fired
    assert errors(conn) == (None, None)
    assert sorted((tick.schedule_name, tick.tick) for tick in fired) == sorted(
        (name, repaired.replace(microsecond=0)) for name in (*GOOD, BAD)
    )
    fired = run_pass(conn, now=repaired + timedelta(seconds=1)).fired
    assert sorted(tick.schedule_name for tick in fired) == sorted((*GOOD, BAD))
    assert ledger(conn)[BAD] == [repaired.replace(microsecond=0) + timedelta(seconds=n) for n in (0, 1)]
    assert len(warnings_about_bad(caplog)) == 2


def test_failed_schedules_come_last_so_they_never_take_the_batch_of_those_that_plan() -> None:
    from django.db import connection

    from tests.sql.schedules.support import probe_flow
    from tests.sql.support import q, val

    probe_flow()
    for name in ("a-bad-1", "a-bad-2", "z-good-1", "z-good-2"):
        q(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, planned_until)"
            " values (%s, 'sched_probe', %s, 'runtime', %s)",
            [name, "not a cron" if name.startswith("a-bad") else "* * * * *", T0],
        )
    with connection.cursor() as cursor:
        # by name, the broken ones come first: this call only tries them
        assert planner.plan_schedules(cursor, now=at(1), limit=2) == []
        assert val("select count(*) from pgflow.schedules where plan_error is not null") == 2
        # once they may be tried again, they come after every schedule that has not failed
        retry = at(1) + planner.PLAN_RETRY
        assert planner.plan_schedules(cursor, now=retry, limit=2) == ["z-good-1", "z-good-2"]
        assert planner.plan_schedules(cursor, now=retry, limit=2) == []  # then the broken ones, with room
        later = retry + planner.PLAN_RETRY
        assert planner.plan_schedules(cursor, now=later, limit=2) == []
    assert q(
        "select schedule_name, plan_failed_at from pgflow.schedules where plan_error is not null "
        "order by schedule_name"
    ) == [
        {"schedule_name": "a-bad-1", "plan_failed_at": later},
        {"schedule_name": "a-bad-2", "plan_failed_at": later},
    ]


def test_an_edit_plans_a_failed_schedule_at_once_and_clears_its_error() -> None:
    from django.db import connection

    from pgflow_django.schedules import create_schedule, edit_schedule, get_schedule
    from tests.sql.schedules.support import probe_flow
    from tests.sql.support import q

    probe_flow()
    create_schedule("sched_probe", cron="*/5 * * * *", name="edited")
    q(
        "update pgflow.schedules set timezone = 'Mars/Olympus', upcoming = '{}', next_fire_at = null"
        " where schedule_name = 'edited'"
    )
    with connection.cursor() as cursor:
        assert planner.plan_schedules(cursor) == []
    failed = get_schedule("edited")
    assert (
        failed.plan_error is not None and "'Mars/Olympus' is not a known IANA time zone" in failed.plan_error
    )
    assert failed.plan_failed_at is not None and failed.upcoming == ()
    edited = edit_schedule("edited", timezone="Europe/Paris")  # within PLAN_RETRY: named, so tried
    assert edited.plan_error is None and edited.plan_failed_at is None
    assert len(edited.upcoming) == planner.PLAN_AHEAD and edited.next_fire_at is not None


def test_pgflow_plan_schedules_records_failures_beside_plans_in_one_call() -> None:
    import json

    from tests.sql.schedules.support import probe_flow
    from tests.sql.support import q, val

    probe_flow()
    for name in ("planned", "failing", "edited"):
        q(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, revision, plan_error,"
            " plan_failed_at) values (%s, 'sched_probe', '* * * * *', 'runtime', 2, %s, %s)",
            [name, "earlier failure" if name == "planned" else None, T0 if name == "planned" else None],
        )
    plans = [
        {
            "schedule": "planned",
            "revision": 2,
            "ticks": [at(60).isoformat()],
            "planned_until": at(60).isoformat(),
        },
        {
            "schedule": "failing",
            "revision": 2,
            "error": "cron 'x' is not valid",
            "failed_at": at(30).isoformat(),
        },
        {
            "schedule": "edited",
            "revision": 1,
            "error": "made for an older definition",
            "failed_at": at(30).isoformat(),
        },
    ]
    returned = q("select p from pgflow.plan_schedules(%s::jsonb) as p", [json.dumps(plans)])
    assert [row["p"] for row in returned] == ["planned"]
    rows = {
        row["schedule_name"]: row
        for row in q(
            "select schedule_name, upcoming, next_fire_at, plan_error, plan_failed_at from pgflow.schedules"
        )
    }
    assert rows["planned"] == {
        "schedule_name": "planned",
        "upcoming": [at(60)],
        "next_fire_at": at(60),
        "plan_error": None,
        "plan_failed_at": None,
    }
    assert rows["failing"] == {
        "schedule_name": "failing",
        "upcoming": [],
        "next_fire_at": None,
        "plan_error": "cron 'x' is not valid",
        "plan_failed_at": at(30),
    }
    assert rows["edited"]["plan_error"] is None, "a failure for another revision is ignored"
    with pytest.raises(Exception, match="plans must be a JSON array"):
        val("select count(*) from pgflow.plan_schedules('{}'::jsonb)")
