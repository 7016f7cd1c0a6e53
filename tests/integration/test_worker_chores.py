"""Each of the worker's chores on its own, on a real database: the heartbeat (deprecation, pauses),
stalled-task recovery, history upkeep, and the loop's timing of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.runs import operations
from pgflow_django.worker.chores import Chore, next_due, run_due
from pgflow_django.worker.chores.heartbeat import Heartbeat
from pgflow_django.worker.chores.recovery import StalledRecovery
from pgflow_django.worker.chores.upkeep import HistoryUpkeep
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.observe import Observer
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker
from pgflow_django.worker.slots import ALL_QUEUES, WorkerState
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db(transaction=True)

first = Flow("ctest_first", timeout=5)
second = Flow("ctest_second", timeout=5)


@first.step()
def one(flow_input: Any) -> Any:
    return flow_input


@second.step()
def two(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def worker(transactional_db: None) -> Iterator[QueueWorker]:
    prepared = QueueWorker([first, second], WorkerOptions.from_settings())
    prepared.prepare()
    assert prepared.engine is not None
    prepared.engine.register(prepared.registration)
    yield prepared
    prepared.engine.close()
    with connection.cursor() as cursor:
        for flow in (first, second):
            operations.resume(flow.slug)
            cursor.execute("select pgflow.delete_flow_and_data(%s)", [flow.slug])
        cursor.execute("delete from pgflow.workers where worker_id = %s", [prepared.worker_id])


def test_the_heartbeat_stops_a_deprecated_worker(worker: QueueWorker) -> None:
    assert worker.engine is not None
    heartbeat = Heartbeat(worker, 5.0)
    assert heartbeat.run(worker.engine) is True
    q("update pgflow.workers set deprecated_at = now() where worker_id = %s", [worker.worker_id])
    assert heartbeat.run(worker.engine) is False
    assert worker.state.stopping.is_set()


def test_the_heartbeat_stops_polling_a_paused_queue_and_the_worker_once_all_are(worker: QueueWorker) -> None:
    assert worker.engine is not None
    heartbeat = Heartbeat(worker, 5.0)
    operations.pause(first.slug)
    assert heartbeat.run(worker.engine) is True
    paused = {sub.queue: sub.paused for sub in worker.subscriptions}
    assert paused == {"ctest_first": "operator", "ctest_second": None}
    operations.pause(second.slug)
    assert heartbeat.run(worker.engine) is False
    assert worker.state.stopping.is_set()


def test_recovery_requeues_a_stalled_task_and_wakes_the_loop(worker: QueueWorker) -> None:
    engine = Engine(connection_params(), "test")
    try:
        start_flows(first, [{"i": 1}])
        table = engine.queue_table(first.slug)
        [task] = engine.claim(first.slug, first.slug, table, uuid.uuid4(), 5, 10).tasks
        q(
            "update pgflow.step_tasks set started_at = now() - interval '60 seconds' where run_id = %s",
            [task.run_id],
        )
        state = WorkerState(2)
        assert StalledRecovery(state, Observer(), 15.0).run(engine) is True
        assert val("select status from pgflow.step_tasks where run_id = %s", [task.run_id]) == "queued"
        assert state.take_notifications() == {ALL_QUEUES}
    finally:
        engine.close()


def test_history_upkeep_on_a_plain_install_creates_nothing(worker: QueueWorker) -> None:
    assert worker.engine is not None
    assert HistoryUpkeep(Observer(), 15.0).run(worker.engine) is True


class Counted(Chore):
    def __init__(self, period: float, first_in: float, verdict: bool = True) -> None:
        super().__init__(period, first_in)
        self.runs = 0
        self.verdict = verdict

    def run(self, engine: Engine) -> bool:
        self.runs += 1
        return self.verdict


def test_the_loop_runs_what_is_due_in_order_and_stops_at_the_first_refusal() -> None:
    engine = Engine({}, "unused")  # no chore here touches it
    now = Counted(10.0, 0.0)
    later = Counted(10.0, 60.0)
    refusing = Counted(10.0, 0.0, verdict=False)
    after = Counted(10.0, 0.0)
    assert run_due([now, later], engine, now.next_at) is True
    assert (now.runs, later.runs) == (1, 0)
    assert next_due([now, later]) == now.next_at < later.next_at  # ran: due again in 10 s, before 60
    assert run_due([refusing, after], engine, after.next_at) is False
    assert (refusing.runs, after.runs) == (1, 0)
