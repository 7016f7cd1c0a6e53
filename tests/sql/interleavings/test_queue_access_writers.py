"""Two sessions create queues at once: each rewrites pgflow.queue_access under one advisory lock, so
the second waits for the first to commit and then writes a function with both queues' branches; a
session that ran the old function meanwhile runs the new one at its next call."""

from __future__ import annotations

from tests.sql.interleavings.support import Background, backend_pid, sessions, wait_for_lock_wait

FIRST, SECOND = "ilv_qa_first", "ilv_qa_second"


def _create(conn, flow_slug: str) -> None:
    conn.execute("select pgflow.create_flow(%s)", [flow_slug])
    conn.execute("select pgflow.add_step(%s, 'a')", [flow_slug])


def _source(conn) -> str:
    row = conn.execute("select prosrc from pg_proc where oid = 'pgflow.queue_access'::regproc").fetchone()
    assert row is not None
    return str(row[0])


def _sent_through_access(conn, queue: str) -> int:
    row = conn.execute(
        "select m.msg_id from pgflow.queue_access('send', %s, null, array[0], array['{}'::jsonb], null) as m",
        [queue],
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_two_queue_writers_keep_both_branches() -> None:
    with sessions(SECOND) as (first, second, observer):
        observer.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = %s", [FIRST]
        )
        observer.execute("select pgmq.create('ilv_qa_raw')")
        _sent_through_access(observer, "ilv_qa_raw")  # the observer has the old function compiled
        with first.transaction():
            _create(first, FIRST)
            job = Background(lambda: _create(second, SECOND))
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        job.result()
        text = _source(observer)
        assert f"if v_queue = '{FIRST}' then" in text and f"if v_queue = '{SECOND}' then" in text
        for queue in (FIRST, SECOND):
            msg_id = _sent_through_access(observer, queue)
            row = observer.execute(
                f"select count(*) from pgmq.q_{queue} where msg_id = %s", [msg_id]
            ).fetchone()
            assert row == (1,)
        observer.execute("select pgflow.delete_flow_and_data(%s)", [FIRST])
        assert f"'{FIRST}'" not in _source(observer) and f"'{SECOND}'" in _source(observer)
        observer.execute("select pgmq.drop_queue('ilv_qa_raw')")
