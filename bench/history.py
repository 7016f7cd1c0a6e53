"""The history phase's preload: many finished runs written set-based, as years of use would leave them.

Each preloaded run is a completed run of the given flow with its one step state and task completed
(the task's message id taken from the queue's own sequence, so the (queue_name, message_id) key stays
unique and later messages come after it). The rows are consistent by construction, so foreign-key
triggers are skipped while they are written (``session_replication_role = replica``); statistics are
taken afterwards, as autovacuum would.
"""

from __future__ import annotations

import time

from psycopg import sql

from bench.db import connect

CHUNK = 250_000
"""Runs per transaction: bounded memory and WAL per statement on a small machine."""


def preload_finished_runs(url: str, flow_slug: str, runs: int) -> float:
    """Write ``runs`` finished one-step runs of ``flow_slug``; returns the seconds it took."""
    began = time.monotonic()
    with connect(url, "pgflow bench history") as conn:
        row = conn.execute(
            "select s.step_slug, s.queue_name from pgflow.steps as s where s.flow_slug = %s"
            " order by s.step_index limit 1",
            [flow_slug],
        ).fetchone()
        if row is None:
            raise RuntimeError(f"flow {flow_slug} has no step to preload history for")
        step_slug, queue_name = row
        sequence = conn.execute(
            "select pg_get_serial_sequence(format('pgmq.%%I', pgmq.format_table_name(%s, 'q')), 'msg_id')",
            [queue_name],
        ).fetchone()
        assert sequence is not None and sequence[0] is not None
        for offset in range(0, runs, CHUNK):
            size = min(CHUNK, runs - offset)
            with conn.transaction():
                conn.execute("set local session_replication_role = replica")
                first = conn.execute(
                    sql.SQL("select setval({seq}, nextval({seq}) + %s) - %s + 1").format(
                        seq=sql.Literal(sequence[0])
                    ),
                    [size, size],
                ).fetchone()
                assert first is not None
                conn.execute(
                    "create temporary table history on commit drop as"
                    " select gen_random_uuid() as run_id, %s::bigint + n - 1 as message_id"
                    "   from generate_series(1, %s) as n",
                    [first[0], size],
                )
                conn.execute(
                    "insert into pgflow.runs"
                    " (run_id, flow_slug, status, input, output, remaining_steps, completed_at)"
                    " select h.run_id, %s, 'completed', '{}', '{}', 0, clock_timestamp() from history as h",
                    [flow_slug],
                )
                conn.execute(
                    "insert into pgflow.step_states (flow_slug, run_id, step_slug, status, remaining_tasks,"
                    "  initial_tasks, output, started_at, completed_at)"
                    " select %s, h.run_id, %s, 'completed', 0, 1, 'null',"
                    "        clock_timestamp(), clock_timestamp()"
                    "   from history as h",
                    [flow_slug, step_slug],
                )
                conn.execute(
                    "insert into pgflow.step_tasks (flow_slug, run_id, step_slug, message_id, status,"
                    "  attempts_count, output, queue_name, started_at, completed_at)"
                    " select %s, h.run_id, %s, h.message_id, 'completed', 1, 'null', %s,"
                    "        clock_timestamp(), clock_timestamp()"
                    "   from history as h",
                    [flow_slug, step_slug, queue_name],
                )
        conn.execute("analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks")
    return time.monotonic() - began
