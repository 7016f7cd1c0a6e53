"""Committed fixtures for the concurrency tests: a probe flow and a per-second schedule that other
connections and processes can see, deleted afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg

from pgflow_django.schedules.planner import plan_schedules
from tests.sql.support import other_connection

T0 = datetime(2026, 2, 2, 8, 0, tzinfo=UTC)


@contextmanager
def committed_schedule(flow: str, name: str, cron: str = "* * * * * *") -> Iterator[psycopg.Connection[Any]]:
    conn = other_connection()
    try:
        conn.execute("select pgflow.create_flow(%s)", [flow])
        conn.execute("select pgflow.add_step(%s, 'only')", [flow])
        conn.execute(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, catch_up, planned_until) "
            "values (%s, %s, %s, 'runtime', 'all', %s)",
            [name, flow, cron, T0],
        )
        with conn.transaction(), conn.cursor() as cursor:
            plan_schedules(cursor, now=T0, names=[name])
        yield conn
    finally:
        conn.execute("delete from pgflow.schedules where schedule_name = %s", [name])
        conn.execute("select pgflow.delete_flow_and_data(%s)", [flow])
        conn.close()


def ledger(conn: psycopg.Connection[Any], name: str) -> list[tuple[datetime, Any]]:
    return [
        (row[0], row[1])
        for row in conn.execute(
            "select tick, run_id from pgflow.schedule_ticks where schedule_name = %s order by tick", [name]
        ).fetchall()
    ]


def run_ids(conn: psycopg.Connection[Any], flow: str) -> set[Any]:
    return {row[0] for row in conn.execute("select run_id from pgflow.runs where flow_slug = %s", [flow])}
