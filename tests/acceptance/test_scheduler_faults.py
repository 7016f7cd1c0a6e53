"""The scheduler under two faults at once (issue 35, items 2 and 3): every worker was down for 3 hours,
longer than the 100 ticks each per-minute schedule had planned, and the workers that come back run
on hosts whose clocks are fast. Whatever the host's clock says, the ticks that fire are the ones the
catch-up policy allows at the database's time: no stale tick from the old plan's end, none from the
host's future.

Two scheduler passes on two connections stand for two workers (a worker process cannot be given a
fast clock); then a real worker comes back to a 3-hour outage and its first pass fires the latest
tick, not the old plan's end. Time is simulated by back-dating the plan, never by sleeping.

Last, a real worker beside a schedule whose stored cron no longer parses: the worker skips that one
and fires the others (one bad schedule used to stop every scheduler pass).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgflow_django.schedules.planner import plan_schedules
from pgflow_django.schedules.service import run_pass
from tests.acceptance.faults import Db
from tests.sql.schedules.support import host_clock_ahead
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FLOW = "sched_fault_probe"
POLICIES = {"latest": ("latest", 10), "all-5": ("all", 5), "none": ("none", 10)}
"""Schedule name -> (catch_up, max_catch_up)."""
OUTAGE = timedelta(hours=3)


@pytest.fixture
def db(database_url: str) -> Iterator[Db]:
    setup = Db(database_url)
    setup.conn.execute("select pgflow.create_flow(%s)", [FLOW])
    setup.conn.execute("select pgflow.add_step(%s, 'only')", [FLOW])
    yield setup
    setup.conn.execute("delete from pgflow.schedules")
    setup.conn.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
    setup.close()


def planned_before_the_outage(db: Db, flow: str, names: dict[str, tuple[str, int]]) -> datetime:
    """Per-minute schedules planned 3 hours before the database's now, as the last worker left them;
    returns that moment."""
    left = db.now() - OUTAGE
    for name, (policy, most) in names.items():
        db.conn.execute(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, catch_up, max_catch_up, "
            "planned_until) values (%s, %s, '* * * * *', 'runtime', %s, %s, %s)",
            [name, flow, policy, most, left],
        )
    with db.conn.transaction(), db.conn.cursor() as cursor:
        assert sorted(plan_schedules(cursor, now=left)) == sorted(names)
    return left


def fired(db: Db) -> dict[str, list[datetime]]:
    found: dict[str, list[datetime]] = {}
    for name, tick in db.rows("select schedule_name, tick from pgflow.schedule_ticks order by tick"):
        found.setdefault(str(name), []).append(tick)
    return found


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@pytest.mark.parametrize("ahead", [timedelta(seconds=30), timedelta(hours=3)], ids=["30s", "3h"])
def test_fast_schedulers_after_a_three_hour_outage_fire_what_the_policy_allows(
    db: Db, ahead: timedelta, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    left = planned_before_the_outage(db, FLOW, POLICIES)
    plan_end = db.val("select max(upcoming[100]) from pgflow.schedules")
    assert plan_end == minute_floor(left) + timedelta(minutes=100)
    host_clock_ahead(monkeypatch, ahead)
    caplog.set_level(logging.WARNING, logger="pgflow_django.schedules")
    workers = [psycopg.connect(db.url, autocommit=True) for _ in range(2)]
    try:
        before = db.now()
        for n in range(4):
            run_pass(workers[n % 2])
        after = db.now()
    finally:
        for conn in workers:
            conn.close()

    # the latest minute by the database's clock, and the next one on time should a pass cross into it
    latest = minute_floor(before)
    on_time = [minute_floor(after)] if minute_floor(after) != latest else []
    ticks = fired(db)
    assert ticks["latest"] == [latest, *on_time]
    assert ticks["all-5"] == [*(latest - timedelta(minutes=n) for n in range(4, -1, -1)), *on_time]
    assert ticks["none"] == [latest, *on_time], "within its 60 s grace: the on-time tick, nothing stale"
    assert all(plan_end < tick <= after for found in ticks.values() for tick in found)
    missed = dict(db.rows("select schedule_name, missed_ticks from pgflow.schedules"))
    assert missed == {"latest": 100, "all-5": 100, "none": 100}
    run_ids = db.val("select count(*) from pgflow.runs where flow_slug = %s", [FLOW])
    assert run_ids == sum(len(found) for found in ticks.values())
    skew = [r.getMessage() for r in caplog.records if "clock is" in r.getMessage()]
    assert len(skew) == 1 and " ahead of the database server's" in skew[0]


def test_a_worker_back_from_a_three_hour_outage_fires_the_latest_tick_first(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    db = Db(database_url)
    try:
        planned_before_the_outage(db, "example_chain", {"latest": ("latest", 10)})
        spawn_worker("example_chain")
        first: Any = wait_until(
            lambda: db.rows("select tick, fired_at from pgflow.schedule_ticks order by tick limit 1"),
            30,
            "the worker's first scheduler pass to fire a tick",
        )
        (tick, fired_at) = first[0]
        assert fired_at - timedelta(minutes=1, seconds=1) < tick <= fired_at, "not the old plan's end"
    finally:
        db.conn.execute("delete from pgflow.schedules")
        db.close()


def test_a_worker_fires_the_good_schedules_beside_one_that_cannot_be_planned(
    spawn_worker: Callable[..., WorkerProcess], database_url: str
) -> None:
    """A stored cron that no longer parses used to stop every scheduler pass of every worker: no
    schedule fired at all. The worker now skips that one schedule, records why and logs it once, and
    fires the others on their ticks."""
    db = Db(database_url)
    try:
        for name, cron in (("every-second", "* * * * * *"), ("broken", "61 * * * * *")):
            db.conn.execute(
                "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, planned_until) "
                "values (%s, 'example_chain', %s, 'runtime', clock_timestamp())",
                [name, cron],
            )
        worker = spawn_worker("example_chain")
        wait_until(
            lambda: (
                db.val("select count(*) from pgflow.schedule_ticks where schedule_name = 'every-second'") >= 3
            ),
            30,
            "the good schedule to fire three ticks",
        )
        error = db.val("select plan_error from pgflow.schedules where schedule_name = 'broken'")
        assert error == "cron '61 * * * * *' is not valid: Bad second"
        assert db.val("select count(*) from pgflow.schedule_ticks where schedule_name = 'broken'") == 0
        logged = [line for line in worker.log().splitlines() if "cannot be planned" in line]
        assert len(logged) == 1 and "schedule 'broken' cannot be planned" in logged[0], logged
    finally:
        db.conn.execute("delete from pgflow.schedules")
        db.close()
