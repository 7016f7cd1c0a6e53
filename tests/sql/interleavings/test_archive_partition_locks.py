"""Partitioning a queue's archive, and dropping its old partitions, while another transaction archives
into it: the worker's pass (no wait) leaves a busy archive for later, the command waits for the
archiving transaction, retention's drop waits for it too, and no archived message is lost. A
session that archived before the conversion archives into the partitioned table after it.

Runs on a scratch database: a partitioned history is committed here, which the shared test database
must not get."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgflow_django.sql import schema_sql
from tests.sql.interleavings.support import Background, backend_pid, wait_for_lock_wait
from tests.support.scratch import scratch_database, server_params

FLOWS = ("ilv_arch_a", "ilv_arch_b")


def _make_flow(conn: psycopg.Connection[Any], flow: str) -> None:
    conn.execute("select pgflow.create_flow(%s)", [flow])
    conn.execute("select pgflow.add_step(%s, 'a')", [flow])


@pytest.fixture
def database(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """libpq parameters of a scratch database with a partitioned history and a one-step flow made
    after it (its archive still a plain table)."""
    with django_db_blocker.unblock():
        params = server_params()
    with scratch_database("archparts", params, schema_sql()) as conn:
        conn.execute("select count(*) from pgflow.partition_history('1 day', 3, true)")
        _make_flow(conn, FLOWS[0])
        yield {**params, "dbname": conn.info.dbname}


def _connect(params: dict[str, Any]) -> psycopg.Connection[Any]:
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute("set lock_timeout = '10s'")
    return conn


def _archive_one(conn: psycopg.Connection[Any], flow: str) -> int:
    """A task run to completion through the engine's SQL (its message archived by queue_access)."""
    conn.execute("select pgflow.start_flow(%s, '{}'::jsonb)", [flow])
    worker = conn.execute(
        "insert into pgflow.workers (worker_id, queue_name, function_name)"
        " values (gen_random_uuid(), %s, 'tests') returning worker_id",
        [flow],
    ).fetchone()
    msg = conn.execute("select msg_id from pgmq.read(%s, 30, 1)", [flow]).fetchone()
    assert worker is not None and msg is not None
    task = conn.execute(
        "select run_id, attempt from pgflow.start_tasks(%s, %s, array[%s]::bigint[], %s)",
        [flow, flow, msg[0], worker[0]],
    ).fetchone()
    assert task is not None
    outcome = conn.execute(
        "select pgflow.complete_task(%s, 'a', 0, %s, '1'::jsonb)", [task[0], task[1]]
    ).fetchone()
    assert outcome == ("completed",)
    return int(msg[0])


def _kind(conn: psycopg.Connection[Any], flow: str) -> str:
    row = conn.execute("select relkind::text from pg_class where oid = to_regclass(%s)", [f"pgmq.a_{flow}"])
    found = row.fetchone()
    assert found is not None
    return str(found[0])


def _archived(conn: psycopg.Connection[Any], flow: str) -> set[int]:
    return {int(row[0]) for row in conn.execute(f"select msg_id from pgmq.a_{flow}").fetchall()}


def test_the_workers_pass_skips_a_busy_archive_and_the_command_waits_for_it(database: dict[str, Any]) -> None:
    first, second, observer = (_connect(database) for _ in range(3))
    with first, second, observer:
        settled = _archive_one(observer, FLOWS[0])  # compiles queue_access's plans on the plain archive
        with first.transaction():
            held = _archive_one(first, FLOWS[0])
            second.execute("set lock_timeout = '1s'")
            second.execute("select pgflow.create_history_partitions()")  # fails after 1 s if it waited
            assert _kind(observer, FLOWS[0]) == "r", "a busy archive is left for a later pass"
        second.execute("select pgflow.create_history_partitions()")
        assert _kind(observer, FLOWS[0]) == "p"
        after = _archive_one(observer, FLOWS[0])
        assert _archived(observer, FLOWS[0]) == {settled, held, after}

        second.execute("set lock_timeout = '10s'")
        _make_flow(observer, FLOWS[1])
        with first.transaction():
            held = _archive_one(first, FLOWS[1])
            job = Background(
                lambda: second.execute("select pgflow.partition_queue_archive(%s)", [FLOWS[1]]).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "relation"
        assert job.result() == (True,)
        assert _kind(observer, FLOWS[1]) == "p" and _archived(observer, FLOWS[1]) == {held}


def test_retention_drops_an_old_partition_after_an_archiving_transaction_commits(
    database: dict[str, Any],
) -> None:
    first, second, observer = (_connect(database) for _ in range(3))
    with first, second, observer:
        flow = FLOWS[0]
        observer.execute("select pgflow.create_history_partitions(now() - interval '10 days')")
        assert _kind(observer, flow) == "p"
        old = _archive_one(observer, flow)
        observer.execute(
            f"update pgmq.a_{flow} set archived_at = now() - interval '9 days' where msg_id = %s", [old]
        )
        with first.transaction():
            held = _archive_one(first, flow)
            job = Background(
                lambda: second.execute("select pgflow.prune_data_older_than(interval '3 days')").fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "relation"
        result = job.result()
        assert result is not None and result[0]["archived_messages"] == 1
        assert _archived(observer, flow) == {held}


def test_two_callers_at_once_partition_the_archive_once(database: dict[str, Any]) -> None:
    first, second, observer = (_connect(database) for _ in range(3))
    with first, second, observer:
        flow = FLOWS[0]
        with first.transaction():
            assert first.execute("select pgflow.partition_queue_archive(%s)", [flow]).fetchone() == (True,)
            job = Background(
                lambda: second.execute("select pgflow.partition_queue_archive(%s)", [flow]).fetchone()
            )
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "relation"
        assert job.result() == (False,), "the second caller finds it partitioned once it has the lock"
        nested = observer.execute(
            "select count(*) from pg_inherits as i join pg_class as c on c.oid = i.inhrelid"
            " where i.inhparent = to_regclass(%s) and c.relkind = 'p'",
            [f"pgmq.a_{flow}"],
        ).fetchone()
        assert nested == (0,)
        msg_id = _archive_one(observer, flow)
        assert _archived(observer, flow) == {msg_id}
