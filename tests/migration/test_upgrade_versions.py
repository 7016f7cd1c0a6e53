"""Migration 0044_flow_versions on a database with live work (docs/upgrading.md): every flow becomes
version 1 of its slug, under the same slug, so a run in flight finishes, a schedule fires, a limit holds
and a chosen run id is still found; the first compile by the same code claims the version, a changed
definition becomes version 2. The down delta needs the later versions deleted first."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgflow_django import Flow
from pgflow_django.sql import migration_sql
from tests.support.scratch import scratch_database, server_params

BEFORE = [
    "0002_core.sql",
    "0003_queue_identity.sql",
    "0004_run_control.sql",
    "0005_step_queues.sql",
    "0006_shared_queues.sql",
    "0007_squashed_0038.sql",
    "0039_row_writes.sql",
    "0040_rate_refill.sql",
    "0041_complete_hop.sql",
    "0042_history_reads.sql",
    "0043_durable_waits.sql",
]
FLOW = "upg_versions"
CHOSEN = uuid.UUID("01a24d00-0000-7000-8000-000000000001")


def definition(extra: bool = False) -> Flow:
    flow = Flow(FLOW, timeout=30)
    flow.step(slug="first")(lambda run_input: run_input)
    flow.step(slug="second", depends_on=["first"])(lambda deps: deps)
    if extra:
        flow.step(slug="third", depends_on=["second"])(lambda deps: deps)
    return flow


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else tuple(row)


def _run_step(conn: psycopg.Connection[Any], step: str) -> int:
    """Claim and complete every visible task of ``step`` as a worker would; how many."""
    worker = uuid.uuid4()
    conn.execute(
        "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'upgrade')",
        [worker, FLOW],
    )
    ids = [row[0] for row in conn.execute("select msg_id from pgmq.read(%s, 30, 100)", [FLOW]).fetchall()]
    claimed = conn.execute(
        "select run_id, step_slug, task_index, attempt"
        " from pgflow.start_tasks(%s, %s, %s::bigint[], %s, null)"
        " where outcome = 'claimed' and step_slug = %s",
        [FLOW, FLOW, ids, worker, step],
    ).fetchall()
    for run_id, step_slug, task_index, attempt in claimed:
        conn.execute(
            "select pgflow.complete_task(%s, %s, %s, %s, '{\"ok\": true}'::jsonb)",
            [run_id, step_slug, task_index, attempt],
        )
    conn.execute("select pgmq.set_vt(%s, msg_id, 0) from unnest(%s::bigint[]) as msg_id", [FLOW, ids])
    return len(claimed)


@pytest.fixture
def live_at_0043(django_db_setup: None, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = server_params()
    with scratch_database("versions", params, *(migration_sql(name) for name in BEFORE)) as conn:
        answer = _one(
            conn,
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')",
            [FLOW, json.dumps(definition().shape())],
        )
        assert answer["status"] == "compiled"
        conn.execute(
            "select pgflow.set_flow_limits(%s, %s::jsonb)",
            [FLOW, json.dumps([{"step_slug": "", "kind": "concurrency", "amount": 5}])],
        )
        conn.execute("select pgflow.start_flows(%s, '[{}, {}]'::jsonb)", [FLOW])
        conn.execute("select pgflow.start_flow(%s, '{\"chosen\": 1}'::jsonb, %s)", [FLOW, CHOSEN])
        assert _run_step(conn, "first") == 3, "the runs are in flight, past their first step"
        conn.execute(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin)"
            " values ('upg_tick', %s, '* * * * *', 'runtime')",
            [FLOW],
        )
        yield conn


def test_existing_flows_become_version_1_and_keep_working(live_at_0043: psycopg.Connection[Any]) -> None:
    conn = live_at_0043
    conn.execute(migration_sql("0044_flow_versions.sql").encode("utf-8"))

    assert _one(
        conn, "select version_of, version_number, version from pgflow.flows where flow_slug = %s", [FLOW]
    ) == (
        FLOW,
        1,
        None,
    )
    assert _run_step(conn, "second") == 3, "the runs in flight finish on their version"
    assert (
        _one(conn, "select count(*) from pgflow.runs where flow_slug = %s and status = 'completed'", [FLOW])
        == 3
    )
    assert _one(conn, "select flow_slug from pgflow.runs where run_id = %s", [CHOSEN]) == FLOW
    assert _one(conn, "select count(*) from pgflow.flow_limits where flow_slug = %s", [FLOW]) == 1

    same, changed = definition(), definition(extra=True)
    verified = _one(
        conn,
        "select pgflow.compile_flow_version(%s, %s::jsonb, %s, 'version')",
        [FLOW, json.dumps(same.shape()), same.version_key],
    )
    assert (verified["status"], verified["flow_slug"], verified["version"]) == (
        "verified",
        FLOW,
        same.version_key,
    )
    added = _one(
        conn,
        "select pgflow.compile_flow_version(%s, %s::jsonb, %s, 'version')",
        [FLOW, json.dumps(changed.shape()), changed.version_key],
    )
    assert (added["status"], added["flow_slug"]) == ("versioned", f"{FLOW}___v2")

    fired = _one(conn, "select pgflow.trigger_schedule('upg_tick')")
    assert _one(conn, "select flow_slug from pgflow.runs where run_id = %s", [fired]) == f"{FLOW}___v2"
    pinned = _one(
        conn,
        "select run_id from pgflow.start_flow(pgflow.flow_version(%s, %s), '{}'::jsonb)",
        [FLOW, same.version_key],
    )
    assert _one(conn, "select flow_slug from pgflow.runs where run_id = %s", [pinned]) == FLOW

    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(migration_sql("0044_flow_versions_down.sql").encode("utf-8"))
    conn.execute("select pgflow.delete_flow_and_data(%s)", [f"{FLOW}___v2"])
    conn.execute(migration_sql("0044_flow_versions_down.sql").encode("utf-8"))
    assert _one(conn, "select count(*) from pgflow.runs where flow_slug = %s", [FLOW]) == 4
    assert (
        _one(
            conn,
            "select count(*) from information_schema.columns"
            " where table_name = 'flows' and column_name like 'version%%'",
        )
        == 0
    )
