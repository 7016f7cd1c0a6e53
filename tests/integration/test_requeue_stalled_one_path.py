"""``pgflow_requeue_stalled`` (``operations.requeue_stalled``) takes the workers' recovery path: the
same advisory lock (it waits for a pass a worker is running, then runs; never two passes at once) and
the same lock timeout (a row another transaction holds makes it give up, changing nothing)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection, connections

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db import queries as db_queries
from pgflow_django.db.connect import connection_params
from pgflow_django.runs.operations import RequeueResult, requeue_stalled
from pgflow_django.worker.connection import ClaimedTask, Engine
from tests.sql.support import q

pytestmark = pytest.mark.django_db(transaction=True)

stalled = Flow("wtest_requeue_one_path", timeout=5)


@stalled.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def engine(transactional_db: None) -> Iterator[Engine]:
    compile_flow(stalled, on_change="replace")
    engine = Engine(connection_params(), "test")
    yield engine
    engine.close()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data(%s)", [stalled.slug])


def _stalled_task(engine: Engine) -> tuple[ClaimedTask, str]:
    start_flows(stalled, [{"i": 1}])
    table = engine.queue_table(stalled.slug)
    [task] = engine.claim(stalled.slug, stalled.slug, table, uuid.uuid4(), 5, 10).tasks
    q(
        "update pgflow.step_tasks set started_at = now() - interval '60 seconds' where run_id = %s",
        [task.run_id],
    )
    return task, table


def _status(task: ClaimedTask) -> str:
    return str(q("select status from pgflow.step_tasks where run_id = %s", [task.run_id])[0]["status"])


def test_the_command_gives_up_on_a_busy_message_after_the_lock_timeout(engine: Engine) -> None:
    task, table = _stalled_task(engine)
    with psycopg.connect(**connection_params(), autocommit=False) as holder:
        holder.execute(f"select 1 from pgmq.{table} where msg_id = %s for update", [task.message_id])
        began = time.monotonic()
        with pytest.raises(OperationalError) as raised:
            requeue_stalled()
        assert isinstance(raised.value.__cause__, psycopg.errors.LockNotAvailable)
        assert time.monotonic() - began < 10
        assert _status(task) == "started", "the pass that gave up changed nothing"
        holder.rollback()
    assert requeue_stalled() == RequeueResult(requeued=1, permanently_stalled=0)
    assert _status(task) == "queued"


def test_the_command_waits_for_a_pass_in_progress_and_then_runs_once(engine: Engine) -> None:
    task, _ = _stalled_task(engine)
    results: list[RequeueResult] = []
    with psycopg.connect(**connection_params(), autocommit=False) as worker_pass:
        worker_pass.execute(db_queries.TRY_STALLED_LOCK.text, [db_queries.STALLED_LOCK_KEY])

        def command() -> None:
            try:
                results.append(requeue_stalled())
            finally:
                connections.close_all()

        thread = threading.Thread(target=command)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the command ran while a worker's pass held the recovery lock"
        assert engine.requeue_stalled() is None, "a worker skips while the command waits or runs"
        assert _status(task) == "started"
        worker_pass.commit()
    thread.join(10)
    assert not thread.is_alive()
    assert results == [RequeueResult(requeued=1, permanently_stalled=0)]
    assert _status(task) == "queued"
