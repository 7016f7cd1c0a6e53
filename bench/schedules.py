"""The cost of ``pgflow.fire_due_schedules``: 10,000 schedules of which 100 are due per call.

``python -m bench.schedules [--schedules N] [--due D] [--rounds R]`` makes its own database on the
bench server (``DATABASE_URL``, else the embedded PostgreSQL), migrates it, and stores N schedules of
one single-step flow whose planned ticks make exactly D of them due at each simulated minute. Each
round calls the function once, in its own transaction, at the next minute, as a worker's scheduler
pass does, and times it from the client (the call starts D runs). An idle call (nothing due) is timed
too. Target: <= 50 ms per call for 10,000 schedules with 100 due.

Then planning, as a scheduler pass runs it (``planner.plan_schedules``) beside those schedules, with
``--broken`` of them (default 100) stored with a cron that no longer parses: the first pass records
why each cannot be planned, the later passes leave them alone until ``PLAN_RETRY`` has passed, and a
pass after it tries them again. The schedules that plan are marked as planned to their end, so the
figures are the cost of finding candidates and of the broken ones, not of cron arithmetic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.db import connect, drop_database, recreate_database, server_url, with_database

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TARGET_MS = 50.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=100, help="schedules due at each call")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--broken", type=int, default=100, help="schedules that cannot be planned")
    parser.add_argument("--database", default="pgflow_bench_schedules")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--drop", action="store_true", help="drop the bench database at the end")
    return parser.parse_args(argv)


def migrate(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def populate(url: str, schedules: int, due: int, rounds: int) -> None:
    """``schedules`` rows; schedule i has planned ticks every (schedules/due) minutes from minute i mod
    (schedules/due), so each minute exactly ``due`` of them are due."""
    period = max(schedules // due, 1)
    ticks = max(rounds // period + 2, 2)
    with connect(url) as conn:
        conn.execute("select pgflow.create_flow('bench_scheduled')")
        conn.execute("select pgflow.add_step('bench_scheduled', 'only')")
        conn.execute(
            """
            insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, upcoming,
                                          planned_until, next_fire_at)
            select 'bench-' || i, 'bench_scheduled', '* * * * *', 'runtime', u.ticks, u.ticks[%(n)s],
                   u.ticks[1]
              from generate_series(0, %(count)s - 1) as i
              cross join lateral (
                select array(select %(t0)s::timestamptz
                                    + make_interval(mins => (i %% %(period)s) + k * %(period)s + 1)
                               from generate_series(0, %(n)s - 1) as k) as ticks
              ) as u
            """,
            {"count": schedules, "period": period, "n": ticks, "t0": T0},
        )
        conn.execute("vacuum analyze pgflow.schedules")


def timed_call(conn: psycopg.Connection[Any], now: datetime) -> tuple[float, int]:
    """One call in its own transaction on a connection kept open, as a worker's scheduler pass."""
    started = time.perf_counter()
    with conn.transaction():
        rows = conn.execute("select count(*) from pgflow.fire_due_schedules(%s)", [now]).fetchone()
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, int(rows[0]) if rows else 0


def timed_start(conn: psycopg.Connection[Any], runs: int) -> float:
    """The engine's own cost of starting ``runs`` runs in one ``pgflow.start_flows`` call: the part
    of a firing call that is not the scheduler's."""
    started = time.perf_counter()
    with conn.transaction():
        conn.execute(
            "select count(*) from pgflow.start_flows('bench_scheduled', "
            "(select jsonb_agg('{}'::jsonb) from generate_series(1, %s)))",
            [runs],
        )
    return (time.perf_counter() - started) * 1000


def timed_planning(conn: psycopg.Connection[Any], broken: int, rounds: int) -> dict[str, Any]:
    """Scheduler passes' planning part with ``broken`` schedules that cannot be planned: the first
    pass, the median of ``rounds`` later ones, one after ``PLAN_RETRY``; each checks what it did."""
    import logging

    from pgflow_django.schedules.planner import PLAN_BATCH, PLAN_RETRY, plan_schedules

    logging.getLogger("pgflow_django.schedules").setLevel(logging.ERROR)  # one warning per broken one
    conn.execute("update pgflow.schedules set planned_until = 'infinity'")
    conn.execute(
        "update pgflow.schedules set cron = '61 * * * *', upcoming = '{}', next_fire_at = null, "
        "planned_until = %s where schedule_name in (select schedule_name from pgflow.schedules "
        "order by schedule_name limit %s)",
        [T0, broken],
    )
    conn.execute("vacuum analyze pgflow.schedules")
    now = T0 + timedelta(hours=1)

    def timed(moment: datetime) -> float:
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cursor:
            planned = plan_schedules(cursor, now=moment)
        elapsed = (time.perf_counter() - started) * 1000
        if planned:
            raise RuntimeError(f"planning at {moment}: {len(planned)} schedules planned, expected none")
        return elapsed

    first = timed(now)
    recorded = conn.execute("select count(*) from pgflow.schedules where plan_error is not null").fetchone()
    if not recorded or recorded[0] != min(broken, PLAN_BATCH):  # a pass tries PLAN_BATCH at most
        raise RuntimeError(f"{recorded} planning errors recorded, expected {min(broken, PLAN_BATCH)}")
    later = [timed(now + timedelta(seconds=second)) for second in range(1, rounds + 1)]
    retried = timed(now + PLAN_RETRY)
    return {
        "broken": broken,
        "plan_first_ms": round(first, 2),
        "plan_later_median_ms": round(statistics.median(later), 2),
        "plan_retry_ms": round(retried, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    server = server_url()
    url = with_database(server, args.database)
    recreate_database(server, args.database)
    try:
        migrate(url)
        populate(url, args.schedules, args.due, args.rounds)
        with connect(url, "pgflow bench schedules") as conn:
            timed_call(conn, T0)  # warm the connection's plan caches, as a running worker's are
            idle_ms, idle_fired = timed_call(conn, T0 + timedelta(seconds=30))
            figures = []
            baseline = []
            for minute in range(1, args.rounds + 1):
                elapsed, fired = timed_call(conn, T0 + timedelta(minutes=minute, seconds=30))
                if fired != args.due:
                    raise RuntimeError(f"round {minute}: {fired} ticks fired, expected {args.due}")
                figures.append(elapsed)
                baseline.append(timed_start(conn, args.due))
            planning = timed_planning(conn, min(args.broken, args.schedules), args.rounds)
        result = {
            "schedules": args.schedules,
            "due_per_call": args.due,
            "rounds": args.rounds,
            "idle_call_ms": round(idle_ms, 2),
            "idle_fired": idle_fired,
            "median_ms": round(statistics.median(figures), 2),
            "p95_ms": round(sorted(figures)[max(int(len(figures) * 0.95) - 1, 0)], 2),
            "max_ms": round(max(figures), 2),
            "start_flows_median_ms": round(statistics.median(baseline), 2),
            "target_ms": TARGET_MS,
            **planning,
        }
    finally:
        if args.drop:
            drop_database(server, args.database)
    print(
        f"fire_due_schedules, {result['schedules']} schedules, {result['due_per_call']} due per call "
        f"({result['rounds']} calls): median {result['median_ms']} ms, p95 {result['p95_ms']} ms, "
        f"max {result['max_ms']} ms (target <= {TARGET_MS:.0f} ms); "
        f"nothing due: {result['idle_call_ms']} ms; "
        f"the same {result['due_per_call']} runs through pgflow.start_flows alone: median "
        f"{result['start_flows_median_ms']} ms"
    )
    print(
        f"planning beside them, {result['broken']} that cannot be planned: first pass "
        f"{result['plan_first_ms']} ms, later passes median {result['plan_later_median_ms']} ms, "
        f"the pass that tries them again {result['plan_retry_ms']} ms"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
