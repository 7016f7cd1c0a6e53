"""Stalled-task recovery inside a worker gives up on a row another transaction holds after a short lock
timeout, changing nothing, instead of waiting behind it (holding its runs' locks, so every completion
of those runs waited too); the next pass recovers the task."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.worker.connection import Engine
from tests.sql.support import q

pytestmark = pytest.mark.django_db(transaction=True)

recovered = Flow("wtest_recovery_lock", timeout=5)


@recovered.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def engine(transactional_db: None) -> Iterator[Engine]:
    compile_flow(recovered, on_change="replace")
    engine = Engine(connection_params(), "test")
    yield engine
    engine.close()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data('wtest_recovery_lock')")


def test_recovery_gives_up_on_a_busy_message_and_recovers_it_on_the_next_pass(engine: Engine) -> None:
    start_flows(recovered, [{"i": 1}])
    table = engine.queue_table(recovered.slug)
    [task] = engine.claim(recovered.slug, recovered.slug, table, uuid.uuid4(), 5, 10).tasks
    q(
        "update pgflow.step_tasks set started_at = now() - interval '60 seconds' where run_id = %s",
        [task.run_id],
    )
    with psycopg.connect(**connection_params(), autocommit=False) as holder:
        holder.execute(f"select 1 from pgmq.{table} where msg_id = %s for update", [task.message_id])
        began = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            engine.requeue_stalled()
        assert time.monotonic() - began < 10
        assert q("select status from pgflow.step_tasks where run_id = %s", [task.run_id])[0]["status"] == (
            "started"
        ), "the pass that gave up changed nothing"
        holder.rollback()
    rows = engine.requeue_stalled()
    assert rows is not None and ("requeued", 1) in [(str(r[0]), int(r[1])) for r in rows]
    assert q("select status from pgflow.step_tasks where run_id = %s", [task.run_id])[0]["status"] == "queued"
