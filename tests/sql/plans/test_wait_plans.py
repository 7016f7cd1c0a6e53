"""The wait statements (docs/durable.md) reach their rows by key in a session that planned them on
empty tables: a worker's session keeps each function's generic plan, and a plan made when no run
waited must stay a probe once thousands wait. Found by the bench's waiting phase: the start's check
that a task had no wait yet was planned as an anti-join that read every wait for each task (10,000
waiting runs took 32 s to start; now 1 s).

The session starts waiting runs (an event keyed by the input, and a sleep), sends events by key and
by run, and runs the wait pass, twice: first on the empty tables, then with 3,000 runs waiting,
under ``auto_explain``; every read of ``step_waits`` and ``events`` must bind a key column."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.waiting import SHAPE, WAITING_FLOW
from pgflow_django.sql import schema_sql
from tests.sql.plans.test_hot_path_plans import EXPLAIN, scans
from tests.support.scratch import scratch_database, server_params

pytestmark = [pytest.mark.django_db]

KEYED = {
    "step_waits": ("run_id", "event_name", "child_run_id", "due_at", "event_seq"),
    "events": ("event_seq", "event_name", "expires_at"),
}
"""A read of these tables must bind one of these columns in its index condition."""


@pytest.fixture
def session(django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = server_params()
    with scratch_database("waitplans", params, schema_sql()) as conn:
        conn.execute("vacuum analyze")
        conn.execute(
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')", [WAITING_FLOW, json.dumps(SHAPE)]
        )
        yield conn


def unkeyed_reads(plans: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    found = set()
    for plan in plans:
        text = " ".join(str(plan.get("Query Text", "")).split())
        if text.startswith("select run_id from pgflow.step_waits"):
            continue  # the test's own lookup
        for node, table in scans(plan, {}):
            if table not in KEYED or node == "ModifyTable":
                continue
            condition = _conditions(plan, table)
            if node == "Seq Scan" or not any(f"{column} " in condition for column in KEYED[table]):
                found.add((node, table, text[:160]))
    return found


def _conditions(plan: dict[str, Any], table: str) -> str:
    """Every index condition of the plan's scans of ``table`` (a bitmap scan's: its recheck)."""
    own = ""
    if plan.get("Relation Name") == table:
        own = f"{plan.get('Index Cond', '')} {plan.get('Recheck Cond', '')}"
    return own + " ".join(_conditions(child, table) for child in plan.get("Plans", ()))


def test_wait_statements_probe_by_key_after_being_planned_on_empty_tables(
    session: psycopg.Connection[Any],
) -> None:
    plans: list[dict[str, Any]] = []

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        text = notice.message_primary or ""
        if "plan:" in text:
            found = json.loads(text.split("plan:", 1)[1])
            plans.append({**found["Plan"], "Query Text": found.get("Query Text", "")})

    with psycopg.connect(session.info.dsn, autocommit=True) as conn:
        for setting in EXPLAIN:
            conn.execute(setting)
        conn.execute("set jit = off")
        conn.add_notice_handler(keep)
        for round_, size in enumerate((2, 3000)):
            inputs = [{"k": f"{round_}-{n}"} for n in range(size)]
            conn.execute(
                "select count(*) from pgflow.start_flows(%s, %s::jsonb)", [WAITING_FLOW, json.dumps(inputs)]
            )
            assert conn.execute(
                "select pgflow.send_event('bench.approved', null, key => %s)", [f"{round_}-0"]
            ).fetchone() == (1,)
            run = conn.execute(
                "select run_id from pgflow.step_waits where event_key = %s", [f"{round_}-1"]
            ).fetchone()
            assert run is not None
            conn.execute("select pgflow.send_event('bench.approved', null, %s)", [run[0]])
            conn.execute("select pgflow.send_event('bench.early', null, key => 'nobody')")
            conn.execute("select * from pgflow.wake_waits()")
    assert len(plans) > 20, "auto_explain reported almost no statements: the check would be vacuous"
    assert any(table == "step_waits" for plan in plans for _, table in scans(plan, {}))
    assert unkeyed_reads(plans) == set()
