"""Two-connection interleavings (issue 8, item 5): one session holds its transaction open at a chosen
point while the other runs in a thread until PostgreSQL reports it waiting on a lock; then the first
commits and the second finishes. The step order is driven by lock waits seen in ``pg_stat_activity``,
never by sleeping.

Both sessions must see committed rows, so every scenario runs on separate autocommit connections with
a probe flow of its own, deleted afterwards.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from tests.ledger import assert_invariants
from tests.sql.support import other_connection

Conn = psycopg.Connection[Any]


class Background:
    """Runs ``call`` on a thread; ``result()`` joins it and returns its value or raises its error."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except BaseException as exc:
            self._error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float = 15) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the second session is still blocked"
        if self._error is not None:
            raise self._error
        return self._value


def backend_pid(conn: Conn) -> int:
    """From libpq, not a query: the connection may be busy in another thread."""
    return int(conn.info.backend_pid)


def wait_for_lock_wait(observer: Conn, pid: int, job: Background, timeout: float = 10) -> str:
    """Poll until backend ``pid`` waits on a heavyweight lock; returns the wait event (e.g.
    ``transactionid``, ``tuple``, ``advisory``). Fails if the job finished instead of blocking."""
    deadline = time.monotonic() + timeout
    while True:
        row = observer.execute(
            "select wait_event_type, wait_event from pg_stat_activity where pid = %s", [pid]
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return str(row[1])
        if not job.running:
            job.result()
            raise AssertionError("the second session finished without waiting for the first one's lock")
        if time.monotonic() > deadline:
            raise AssertionError(f"backend {pid} never waited on a lock (last state {row})")
        time.sleep(0.01)


@contextmanager
def sessions(flow_slug: str) -> Iterator[tuple[Conn, Conn, Conn]]:
    """Three autocommit connections (first, second, observer) with statement and lock timeouts, so a
    wrong interleaving fails fast instead of hanging; the probe flow is deleted before and after."""
    first, second, observer = other_connection(), other_connection(), other_connection()
    try:
        for conn in (first, second):
            conn.execute("set statement_timeout = '20s'")
            conn.execute("set lock_timeout = '15s'")
        _drop(observer, flow_slug)
        yield first, second, observer
    finally:
        for conn in (first, second):
            conn.rollback()
            conn.close()
        _drop(observer, flow_slug)
        observer.close()


def _drop(conn: Conn, flow_slug: str) -> None:
    conn.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows"
        " where version_of = pgflow.version_of(%s) order by version_number desc",
        [flow_slug],
    )
    conn.execute("delete from pgflow.events where event_name like 'ilv.%'")  # kept a day otherwise


def start_run(conn: Conn, flow_slug: str, flow_input: str = "{}") -> uuid.UUID:
    row = conn.execute(
        "select run_id from pgflow.start_flow(%s, %s::jsonb)", [flow_slug, flow_input]
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def message_ids(conn: Conn, run_id: uuid.UUID) -> list[int]:
    rows = conn.execute(
        "select message_id from pgflow.step_tasks where run_id = %s order by step_slug, task_index", [run_id]
    ).fetchall()
    return [int(row[0]) for row in rows]


def claim(conn: Conn, flow_slug: str, ids: list[int], worker_id: uuid.UUID) -> list[tuple[Any, ...]]:
    """The queue-aware claim: (outcome, message_id, attempt) per message, by message id."""
    return [
        tuple(row)
        for row in conn.execute(
            "select outcome, message_id, attempt from pgflow.start_tasks(%s, %s, %s::bigint[], %s) "
            "order by message_id",
            [flow_slug.lower(), flow_slug, ids, worker_id],
        ).fetchall()
    ]


def tasks(conn: Conn, run_id: uuid.UUID) -> list[tuple[Any, ...]]:
    """(step_slug, task_index, status, attempts_count, requeued_count, last_worker_id) per task."""
    return [
        tuple(row)
        for row in conn.execute(
            "select step_slug, task_index, status, attempts_count, requeued_count, last_worker_id "
            "from pgflow.step_tasks where run_id = %s order by step_slug, task_index",
            [run_id],
        ).fetchall()
    ]


def live(conn: Conn, flow_slug: str) -> dict[int, float]:
    """Live messages of the flow's queue: id -> seconds until visible (negative: visible now)."""
    table = conn.execute("select pgmq.format_table_name(%s, 'q')", [flow_slug.lower()]).fetchone()
    assert table is not None
    rows = conn.execute(
        f'select msg_id, extract(epoch from vt - clock_timestamp())::float8 from pgmq."{table[0]}"'
    ).fetchall()
    return {int(msg_id): float(vt_in) for msg_id, vt_in in rows}


def backdate(conn: Conn, run_id: uuid.UUID, seconds: int) -> None:
    conn.execute(
        "update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
        "where run_id = %s and status = 'started'",
        [seconds, run_id],
    )


def requeue_stalled(conn: Conn) -> dict[str, int]:
    return {
        str(o): int(n) for o, n in conn.execute("select * from pgflow.requeue_stalled_tasks()").fetchall()
    }


def check_invariants(conn: Conn, *, require_terminal: bool = False) -> None:
    with conn.cursor() as cursor:
        assert_invariants(cursor, require_terminal=require_terminal)
