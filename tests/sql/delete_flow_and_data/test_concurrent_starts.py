"""Deleting a flow while runs of it are being started (issue 15, item 6). A start holds the flow's
start lock in shared mode until its transaction ends and a deletion takes it exclusively, so the
deletion waits for starts in progress and deletes their runs too, and a start that comes during a
deletion waits, then finds the flow gone. Before, the deletion's statements saw runs committed between
them and failed on ``step_tasks_run_id_step_slug_fkey``.

Every scenario runs on separate autocommit connections (threads for the concurrent starters)."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg

from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    sessions,
    start_run,
    wait_for_lock_wait,
)
from tests.sql.support import other_connection

FLOW = "del_starts"
STARTERS = 4


def _make_flow(conn: Conn) -> None:
    conn.execute("select pgflow.create_flow(%s, timeout => 10)", [FLOW])
    conn.execute("select pgflow.add_step(%s, 'a')", [FLOW])
    conn.execute("select pgflow.add_step(%s, 'm', array['a'], step_type => 'map')", [FLOW])


def _left(conn: Conn) -> tuple[int, ...]:
    row = conn.execute(
        "select (select count(*) from pgflow.flows where flow_slug = %(f)s), "
        "(select count(*) from pgflow.runs where flow_slug = %(f)s), "
        "(select count(*) from pgflow.step_states where flow_slug = %(f)s), "
        "(select count(*) from pgflow.step_tasks where flow_slug = %(f)s), "
        "(select count(*) from pgflow.worker_support where flow_slug = %(f)s), "
        "(select count(*) from pgmq.meta where queue_name = %(f)s)",
        {"f": FLOW},
    ).fetchone()
    assert row is not None
    return tuple(int(n) for n in row)


def test_a_deletion_waits_for_a_start_in_progress_and_deletes_its_run() -> None:
    with sessions(FLOW) as (first, second, observer):
        _make_flow(observer)
        with first.transaction():
            start_run(first, FLOW)
            job = Background(lambda: second.execute("select pgflow.delete_flow_and_data(%s)", [FLOW]))
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        job.result()
        assert _left(observer) == (0, 0, 0, 0, 0, 0)
        check_invariants(observer, require_terminal=True)


def test_a_start_during_a_deletion_waits_then_finds_the_flow_gone() -> None:
    with sessions(FLOW) as (first, second, observer):
        _make_flow(observer)
        with first.transaction():
            first.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
            job = Background(lambda: start_run(second, FLOW))
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        try:
            job.result()
        except psycopg.errors.InvalidParameterValue as exc:
            assert f"flow '{FLOW}' does not exist" in str(exc)
        else:
            raise AssertionError("the start succeeded on a deleted flow")
        assert _left(observer) == (0, 0, 0, 0, 0, 0)


def test_the_workers_support_rows_of_the_flow_are_deleted_and_others_kept() -> None:
    with sessions(FLOW) as (_, _second, observer):
        _make_flow(observer)
        worker = uuid.uuid4()
        observer.execute(
            "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'tests')",
            [worker, FLOW],
        )
        observer.execute(
            "insert into pgflow.worker_support (worker_id, flow_slug, step_slug) "
            "values (%s, %s, 'a'), (%s, %s, 'm'), (%s, 'other_flow', 'x')",
            [worker, FLOW, worker, FLOW, worker],
        )
        observer.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
        kept = observer.execute(
            "select flow_slug, step_slug from pgflow.worker_support where worker_id = %s", [worker]
        ).fetchall()
        observer.execute("delete from pgflow.workers where worker_id = %s", [worker])
        assert kept == [("other_flow", "x")]


def test_deleting_while_starters_keep_starting_succeeds_and_leaves_nothing() -> None:
    """Threads start runs in a loop, each on its own connection, some in batches and some inside a
    longer transaction; the deletion comes while they run. It must succeed the first time, and each
    starter may only ever be told that the flow does not exist."""
    stop = threading.Event()
    started = [0] * STARTERS
    errors: list[BaseException] = []

    def starter(n: int) -> None:
        conn = other_connection()
        try:
            conn.execute("set lock_timeout = '15s'")
            while not stop.is_set():
                try:
                    with conn.transaction():
                        rows = conn.execute(
                            "select run_id from pgflow.start_flows(%s, %s::jsonb)", [FLOW, "[{}, {}, {}]"]
                        ).fetchall()
                        if n % 2:
                            time.sleep(0.005)
                            rows += conn.execute(
                                "select run_id from pgflow.start_flow(%s, '{}'::jsonb)", [FLOW]
                            ).fetchall()
                    started[n] += len(rows)
                except psycopg.errors.InvalidParameterValue as exc:
                    if "does not exist" not in str(exc):
                        raise
                    time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    with sessions(FLOW) as (_, deleter, observer):
        _make_flow(observer)
        threads = [threading.Thread(target=starter, args=(n,), daemon=True) for n in range(STARTERS)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            before = sum(started)
            deleter.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
            assert _left(observer) == (0, 0, 0, 0, 0, 0)
            time.sleep(0.2)
        finally:
            stop.set()
            for thread in threads:
                thread.join(20)
        assert not errors, errors
        assert before > 0, "the starters were starting runs when the deletion came"
        assert _left(observer) == (0, 0, 0, 0, 0, 0), "no start got through after the deletion"
        check_invariants(observer, require_terminal=True)
