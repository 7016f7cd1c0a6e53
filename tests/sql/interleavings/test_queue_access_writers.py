"""Writers of pgflow.queue_access serialise on one advisory lock held to commit. A transaction that
creates a queue while another writer holds it does not wait (it may hold PGMQ's queue locks the
holder needs next, a deadlock): it writes nothing, and the next write that may wait (a worker's
start-up) gives both queues their branches. A session that ran the old function runs the new one at
its next call."""

from __future__ import annotations

from tests.sql.interleavings.support import Background, backend_pid, sessions, wait_for_lock_wait
from tests.sql.queue_access.support import BRANCH_SOURCES

FIRST, SECOND = "ilv_qa_first", "ilv_qa_second"


def _create(conn, flow_slug: str) -> None:
    conn.execute("select pgflow.create_flow(%s)", [flow_slug])
    conn.execute("select pgflow.add_step(%s, 'a')", [flow_slug])


def _source(conn) -> str:
    row = conn.execute(BRANCH_SOURCES).fetchone()
    assert row is not None
    return str(row[0])


def _branch(queue: str) -> str:
    return f"if v_queue = '{queue}' then"


def _sent_through_access(conn, queue: str) -> int:
    row = conn.execute(
        "select m.msg_id from pgflow.queue_access('send', %s, null, array[0], array['{}'::jsonb], null) as m",
        [queue],
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_queue_created_while_another_writer_holds_the_lock_waits_for_nothing() -> None:
    with sessions(SECOND) as (first, second, observer):
        observer.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = %s", [FIRST]
        )
        observer.execute("select pgmq.create('ilv_qa_raw')")
        _sent_through_access(observer, "ilv_qa_raw")  # the observer has the old function compiled
        with first.transaction():
            _create(first, FIRST)
            with second.transaction():
                second.execute("set local lock_timeout = '1s'")
                _create(second, SECOND)  # would fail after 1 s if it waited for the first writer
                assert second.execute("select pgflow.write_queue_access(wait => false)").fetchone() == (None,)
        text = _source(observer)
        assert _branch(FIRST) in text and _branch(SECOND) not in text
        assert _sent_through_access(observer, SECOND) > 0, "a queue without a branch goes through PGMQ"

        queues = observer.execute("select pgflow.write_queue_access()").fetchone()
        assert queues is not None and {FIRST, SECOND} <= set(queues[0])
        text = _source(observer)
        assert _branch(FIRST) in text and _branch(SECOND) in text
        for queue in (FIRST, SECOND):
            msg_id = _sent_through_access(observer, queue)
            row = observer.execute(
                f"select count(*) from pgmq.q_{queue} where msg_id = %s", [msg_id]
            ).fetchone()
            assert row == (1,)
        observer.execute("select pgflow.delete_flow_and_data(%s)", [FIRST])
        assert _branch(FIRST) not in _source(observer) and _branch(SECOND) in _source(observer)
        observer.execute("select pgmq.drop_queue('ilv_qa_raw')")


def test_a_writer_that_may_wait_waits_for_the_holder_and_sees_its_queue() -> None:
    with sessions(SECOND) as (first, second, observer):
        with first.transaction():
            _create(first, SECOND)
            job = Background(lambda: second.execute("select pgflow.write_queue_access()").fetchone())
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        queues = job.result()
        assert queues is not None and SECOND in queues[0]
        assert _branch(SECOND) in _source(observer)
