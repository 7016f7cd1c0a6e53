"""What a run writes besides its own rows: nothing on its flow's or steps' rows (the history tables keep
no foreign key to them, whose checks locked those rows FOR KEY SHARE on every start and new task),
and the updates that move a run along without finishing it are HOT (no indexed column changes)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.sql.support import make_flow, other_connection, q1, run, run_step, start, step


def _definition_row_versions(conn: Any, flow_slug: str) -> list[tuple[str, str]]:
    """(row, xmax) of the flow's row and its steps' rows: a row lock writes its locker into xmax."""
    return conn.execute(
        "select '', xmax::text from pgflow.flows where flow_slug = %s"
        " union all select step_slug, xmax::text from pgflow.steps where flow_slug = %s order by 1",
        [flow_slug, flow_slug],
    ).fetchall()


def test_a_run_locks_no_row_of_its_flow_or_steps() -> None:
    flow_slug = f"rowlocks_{uuid.uuid4().hex[:12]}"
    worker_id = uuid.uuid4()
    with other_connection() as conn:
        try:
            conn.execute("select pgflow.create_flow(%s)", [flow_slug])
            conn.execute("select pgflow.add_step(%s, 'a')", [flow_slug])
            conn.execute("select pgflow.add_step(%s, 'b', array['a'])", [flow_slug])
            conn.execute(
                "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'tests')",
                [worker_id, flow_slug],
            )
            before = _definition_row_versions(conn, flow_slug)
            (run_id,) = conn.execute(
                "select run_id from pgflow.start_flows(%s, '[{}]'::jsonb)", [flow_slug]
            ).fetchone()
            for step_slug in ("a", "b"):
                (msg_id,) = conn.execute("select msg_id from pgmq.read(%s, 5, 1)", [flow_slug]).fetchone()
                (attempt,) = conn.execute(
                    "select c.attempt from pgflow.start_tasks(%s, %s, array[%s]::bigint[], %s, null) as c",
                    [flow_slug, flow_slug, msg_id, worker_id],
                ).fetchone()
                (outcome,) = conn.execute(
                    "select pgflow.complete_task(%s, %s, 0, %s, '1'::jsonb)", [run_id, step_slug, attempt]
                ).fetchone()
                assert outcome == "completed"
            assert conn.execute("select status from pgflow.runs where run_id = %s", [run_id]).fetchone() == (
                "completed",
            )
            assert _definition_row_versions(conn, flow_slug) == before
        finally:
            conn.execute("select pgflow.delete_flow_and_data(%s)", [flow_slug])
            conn.execute("delete from pgflow.workers where worker_id = %s", [worker_id])


def _run_updates() -> dict[str, Any]:
    return q1(
        "select n_tup_upd as updates, n_tup_hot_upd as hot from pg_stat_xact_user_tables"
        " where relid = 'pgflow.runs'::regclass"
    )


def test_the_updates_before_a_runs_last_step_are_hot() -> None:
    make_flow("f", step("a"), step("b", "a"), step("c", "b"))
    run_id = start("f")
    before = _run_updates()
    run_step("f", "a", 1)
    run_step("f", "b", 2)
    after = _run_updates()
    assert run(run_id)["remaining_steps"] == 1
    assert (after["updates"] - before["updates"], after["hot"] - before["hot"]) == (2, 2)
