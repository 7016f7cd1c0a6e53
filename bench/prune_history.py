"""``python -m bench.prune_history``: pruning a large finished history by DELETE vs by partition drop.

Each variant gets a fresh database with PGMQ and the schema files, one one-step flow, and (variant
``drop``) a history partitioned by day with partitions back to the oldest run. ``--runs`` finished
runs are written set-based (``generate_series``, not through the engine), each with its one step
state and one task, as a one-step flow leaves them; their UUIDv7 ids and timestamps are spread
evenly over ``--days`` days ending two days ago, so all of them are older than the one-day retention.
``--keep`` runs finished within the last hour stay behind. Then ``pgflow.prune_data_older_than('1
day')`` runs once, timed, with the WAL it wrote (``pg_current_wal_lsn()`` before and after), and
the tables' size and dead rows afterwards; the DELETE variant also times the VACUUM that makes its
space reusable. Prints one JSON object per variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from bench.db import connect, recreate_database, server_url, with_database
from pgflow_django.db.pgmq_install import ensure_pgmq
from pgflow_django.sql import schema_sql

FLOW = "history"
CHUNK = 1_000_000
"""Runs per transaction while loading."""

HISTORY_TABLES = ("runs", "step_states", "step_tasks")

RUN_ID = (
    "encode(set_byte(overlay(uuid_send(gen_random_uuid()) placing"
    " substring(int8send(floor(extract(epoch from h.at) * 1000)::bigint) from 3) from 1 for 6),"
    " 6, 112 + (n % 16)::integer), 'hex')::uuid"
)
"""A UUIDv7 of the history row's own start time (``pgflow.uuid_v7`` uses the clock instead)."""


def install(conn: psycopg.Connection[Any], partitioned: bool, days: int) -> None:
    with conn.transaction(), conn.cursor() as cursor:
        ensure_pgmq(cursor)
        cursor.execute(schema_sql())
        cursor.execute("select pgflow.create_flow(%s)", [FLOW])
        cursor.execute("select pgflow.add_step(%s, 'only')", [FLOW])
        if partitioned:
            cursor.execute("select count(*) from pgflow.partition_history('1 day', 3, true)")
            cursor.execute(
                "select pgflow.create_history_partitions(now() - make_interval(days => %s))", [days + 3]
            )


def load(conn: psycopg.Connection[Any], runs: int, days: int, keep: int) -> None:
    """``runs`` runs finished 2 to 2 + ``days`` days ago, then ``keep`` finished in the last hour."""
    span = days * 86400.0
    for first, count, newest, width in (
        *((offset, min(CHUNK, runs - offset), 2 * 86400.0, span) for offset in range(0, runs, CHUNK)),
        (runs, keep, 0.0, 3600.0),
    ):
        if count <= 0:
            continue
        total = runs if width == span else keep
        with conn.transaction():
            conn.execute("set local session_replication_role = replica")
            conn.execute(
                "create temporary table h on commit drop as"
                " select n, now() - make_interval(secs => %s::float8"
                "        + %s::float8 * (1 - (n - %s::bigint)::float8 / %s::bigint)) as at"
                "   from generate_series(%s::bigint, %s::bigint) as n",
                [newest, width, first if width == span else runs, total, first, first + count - 1],
            )
            conn.execute(
                f"create temporary table hr on commit drop as select n, at, {RUN_ID} as run_id from h"
            )
            conn.execute(
                "insert into pgflow.runs (run_id, flow_slug, status, input, output, remaining_steps,"
                "  started_at, completed_at)"
                " select run_id, %s, 'completed', '{}', '{}', 0, at, at + interval '1 second' from hr",
                [FLOW],
            )
            conn.execute(
                "insert into pgflow.step_states (flow_slug, run_id, step_slug, status, remaining_tasks,"
                "  initial_tasks, output, created_at, started_at, completed_at)"
                " select %s, run_id, 'only', 'completed', 0, 1, '{}', at, at, at + interval '1 second'"
                "   from hr",
                [FLOW],
            )
            conn.execute(
                "insert into pgflow.step_tasks (flow_slug, run_id, step_slug, message_id, status,"
                "  attempts_count, output, queue_name, queued_at, started_at, completed_at)"
                " select %s, run_id, 'only', n, 'completed', 1, '{}', %s, at, at, at + interval '1 second'"
                "   from hr",
                [FLOW, FLOW],
            )
    conn.execute("vacuum (analyze) pgflow.runs, pgflow.step_states, pgflow.step_tasks")


def footprint(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Bytes on disk (heap, indexes, TOAST) and live/dead rows of the three tables, partitions included."""
    conn.execute("select pg_stat_force_next_flush()")
    out: dict[str, Any] = {}
    for table in HISTORY_TABLES:
        row = conn.execute(
            "select coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,"
            "       coalesce(sum(s.n_dead_tup), 0)::bigint"
            "  from (select %s::regclass as relid"
            "        union select relid from pg_partition_tree(%s::regclass)) as t"
            "  left join pg_stat_user_tables as s on s.relid = t.relid",
            [f"pgflow.{table}", f"pgflow.{table}"],
        ).fetchone()
        rows = conn.execute(f"select count(*) from pgflow.{table}").fetchone()
        assert row is not None and rows is not None
        out[table] = {"bytes": int(row[0]), "rows": int(rows[0]), "dead_rows": int(row[1])}
    out["total_bytes"] = sum(value["bytes"] for value in out.values())
    return out


def timed_wal(conn: psycopg.Connection[Any], statement: str) -> tuple[float, int, Any]:
    """Seconds and WAL bytes of one statement, and its first value."""
    conn.execute("checkpoint")
    start = conn.execute("select pg_current_wal_lsn()").fetchone()
    began = time.monotonic()
    cursor = conn.execute(statement)
    result = cursor.fetchone() if cursor.description else None
    seconds = time.monotonic() - began
    wal = conn.execute(
        "select pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start[0] if start else None]
    ).fetchone()
    return seconds, int(wal[0]) if wal else 0, result[0] if result else None


def measure(server: str, database: str, variant: str, runs: int, days: int, keep: int) -> dict[str, Any]:
    recreate_database(server, database)
    url = with_database(server, database)
    with connect(url, f"pgflow bench prune {variant}") as conn:
        began = time.monotonic()
        install(conn, variant == "drop", days)
        say(f"{variant}: installed in {time.monotonic() - began:.1f} s")
        began = time.monotonic()
        load(conn, runs, days, keep)
        loaded = time.monotonic() - began
        say(f"{variant}: loaded {runs:,} runs in {loaded:.1f} s")
        before = footprint(conn)
        seconds, wal, result = timed_wal(conn, "select pgflow.prune_data_older_than(interval '1 day')")
        after = footprint(conn)
        report: dict[str, Any] = {
            "variant": variant,
            "runs": runs,
            "days": days,
            "kept_recent_runs": keep,
            "load_seconds": round(loaded, 1),
            "prune_seconds": round(seconds, 2),
            "prune_wal_bytes": wal,
            "pruned": result,
            "before": before,
            "after_prune": after,
        }
        if variant == "delete":
            seconds, wal, _ = timed_wal(conn, "vacuum pgflow.runs, pgflow.step_states, pgflow.step_tasks")
            report.update(
                vacuum_seconds=round(seconds, 2), vacuum_wal_bytes=wal, after_vacuum=footprint(conn)
            )
    return report


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prune_history", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--runs", type=int, default=10_000_000, help="finished runs to prune (default 10,000,000)"
    )
    parser.add_argument(
        "--days", type=int, default=20, help="days the finished runs spread over (default 20)"
    )
    parser.add_argument("--keep", type=int, default=100_000, help="recent runs that stay (default 100,000)")
    parser.add_argument("--variant", choices=["delete", "drop"], action="append", help="default: both")
    parser.add_argument("--database", default="pgflow_bench_prune", help="database prefix (recreated)")
    args = parser.parse_args(argv)
    server = server_url()
    for variant in args.variant or ["delete", "drop"]:
        report = measure(server, f"{args.database}_{variant}", variant, args.runs, args.days, args.keep)
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
