"""The completer on the real database: a batch that raises is retried item by item, so one bad item
never undoes the others; a stale item in a batch is reported and changes nothing."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.worker.completer import Completer, Completion
from pgflow_django.worker.connection import ClaimedTask, Engine
from pgflow_django.worker.slots import WorkerState
from tests.sql.support import q

pytestmark = pytest.mark.django_db(transaction=True)

batch_flow = Flow("wtest_completer", max_attempts=3, base_delay=0)


@batch_flow.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def engine(transactional_db: None) -> Iterator[Engine]:
    compile_flow(batch_flow, on_change="replace")
    engine = Engine(connection_params(), "test")
    yield engine
    engine.close()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data('wtest_completer')")


def claim(engine: Engine, count: int) -> list[ClaimedTask]:
    start_flows(batch_flow, [{"i": i} for i in range(count)])
    table = engine.queue_table(batch_flow.slug)
    tasks = engine.claim(batch_flow.slug, batch_flow.slug, table, uuid.uuid4(), 5, count).tasks
    assert len(tasks) == count
    return sorted(tasks, key=lambda task: task.input["i"])


def statuses(tasks: list[ClaimedTask]) -> list[tuple[str, Any, str | None]]:
    rows = {
        row["run_id"]: row
        for row in q(
            "select run_id, status, output, error_message from pgflow.step_tasks where run_id = any(%s)",
            [[task.run_id for task in tasks]],
        )
    }
    return [
        (rows[t.run_id]["status"], rows[t.run_id]["output"], rows[t.run_id]["error_message"]) for t in tasks
    ]


def test_a_batch_that_raises_is_retried_item_by_item(engine: Engine) -> None:
    tasks = claim(engine, 3)
    completer = Completer(Engine(connection_params(), "test-completer"), WorkerState(4), 100, 2.0)
    completer.flush(
        [Completion(tasks[0], '{"ok": 0}'), Completion(tasks[1], "{not json"), Completion(tasks[2], "[]")]
    )
    completer.engine.close()
    first, second, third = statuses(tasks)
    assert first == ("completed", {"ok": 0}, None)
    assert third == ("completed", [], None)
    assert second[0] == "failed", "the bad item is failed at once (no retry stores it), not left started"
    assert second[2] is not None and second[2].startswith("could not record the task's output")


def test_a_stale_item_does_not_undo_the_batch(engine: Engine) -> None:
    tasks = claim(engine, 3)
    stale = dataclasses.replace(tasks[1], attempt=tasks[1].attempt + 1)
    completer = Completer(Engine(connection_params(), "test-completer"), WorkerState(4), 100, 2.0)
    completer.flush([Completion(tasks[0], "0"), Completion(stale, "1"), Completion(tasks[2], "false")])
    completer.engine.close()
    assert statuses(tasks) == [("completed", 0, None), ("started", None, None), ("completed", False, None)]


def test_a_batch_past_a_program_limit_is_not_retried_forever(engine: Engine) -> None:
    """PostgreSQL refuses JSON nested past its stack depth with SQLSTATE 54001, which psycopg files
    under OperationalError: the batch falls back to one item at a time instead of retrying the same
    statement forever, and the item past the limit fails alone."""
    import threading

    tasks = claim(engine, 3)
    too_deep = "[" * 200_000 + "]" * 200_000
    completer = Completer(Engine(connection_params(), "test-completer"), WorkerState(4), 100, 2.0)
    batch = [Completion(tasks[0], "1"), Completion(tasks[1], too_deep), Completion(tasks[2], "2")]
    flush = threading.Thread(target=completer.flush, args=(batch,), daemon=True)
    flush.start()
    flush.join(timeout=30)
    try:
        assert not flush.is_alive(), "the completer retried a statement that fails the same way every time"
    finally:
        completer.engine.close()
    first, second, third = statuses(tasks)
    assert first == ("completed", 1, None)
    assert third == ("completed", 2, None)
    assert second[0] == "failed"
