"""The history phase's preload: many finished runs written set-based, as years of use would leave them.

Each preloaded run is a completed run of the given flow with its one step state and task completed
(the task's message id taken from the queue's own sequence, so the (queue_name, message_id) key
stays unique and later messages come after it). The runs started over the last ``HISTORY_DAYS``
days, and their time-ordered ids say so (as pgflow makes them), so a partitioned history files them
by day. The rows are consistent by construction, so foreign-key triggers are skipped while they are
written (``session_replication_role = replica``); statistics are taken afterwards, as autovacuum
would.
"""

from __future__ import annotations

import time

from psycopg import sql

from bench.db import analyze_like_autovacuum, connect

CHUNK = 250_000
"""Runs per transaction: bounded memory and WAL per statement on a small machine."""

HISTORY_DAYS = 10
"""The preloaded runs' start times spread evenly over this many days before now."""


def partition_history(url: str) -> None:
    """Partition the bench database's history by day (``pgflow_partition --yes``), with partitions
    back over the preloaded history's days."""
    with connect(url, "pgflow bench partition") as conn, conn.transaction():
        conn.execute("select count(*) from pgflow.partition_history('1 day', 3, true)")
        conn.execute(
            "select pgflow.create_history_partitions(now() - make_interval(days => %s))", [HISTORY_DAYS]
        )


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
                    " select encode(overlay(uuid_send(gen_random_uuid()) placing"
                    "        substring(int8send(floor(1000 * extract(epoch from now()"
                    "        - make_interval(secs => 86400.0 * %s * (%s + n)::float8 / %s)))::bigint) from 3)"
                    "        from 1 for 6), 'hex')::uuid as run_id,"
                    "        %s::bigint + n - 1 as message_id"
                    "   from generate_series(1, %s) as n",
                    [HISTORY_DAYS, offset, runs, first[0], size],
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
        analyze_like_autovacuum(conn)
    return time.monotonic() - began
