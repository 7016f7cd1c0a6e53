"""Async handlers on the worker's event loop, and every handler's deadline.

Workers run in this process (real threads, real connections, the real engine), so the handlers can
report which thread ran them and how many ran at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.db import transaction

from pgflow_django import Flow, cancel_run, compile_flow, start_flow, wait_for_run
from pgflow_django.flows.context import TaskContext
from pgflow_django.models import Run
from tests.support.db import tuples, value
from tests.workers import InProcessWorker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Seen:
    """What the handlers saw: how many ran at once, on which threads, and the threads alive."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[str] = set()
        self.most_threads = 0
        self.cancelled_at: float | None = None

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
            self.most_threads = max(self.most_threads, threading.active_count())

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


seen = Seen()

fan = Flow("otest_async_fan", max_attempts=1, timeout=30)


@fan.step()
def items(flow_input: Any) -> Any:
    return list(range(flow_input["n"]))


@fan.map(array=items)
async def wait_a_second(item: Any) -> Any:
    seen.enter()
    try:
        await asyncio.sleep(1)
    finally:
        seen.leave()
    return item


kinds = Flow("otest_async_kinds", max_attempts=1, timeout=30)


@kinds.step()
def plain(flow_input: Any) -> Any:
    return threading.current_thread().name


@kinds.step()
async def on_loop(flow_input: Any, ctx: TaskContext) -> Any:
    exists = await Run.objects.filter(run_id=ctx.run_id).aexists()
    return {"thread": threading.current_thread().name, "run_exists": exists}


@kinds.step(atomic=True)
async def atomic_async(flow_input: Any) -> Any:
    in_transaction = await sync_to_async(lambda: transaction.get_connection().in_atomic_block)()
    return {"thread": threading.current_thread().name, "in_transaction": in_transaction}


@kinds.step()
def deadline(flow_input: Any, ctx: TaskContext) -> Any:
    return {"remaining": ctx.deadline.remaining(), "at": ctx.deadline.at.isoformat()}


sync_orm = Flow("otest_async_sync_orm", max_attempts=1)


@sync_orm.step()
async def calls_the_orm_synchronously(flow_input: Any, ctx: TaskContext) -> Any:
    return Run.objects.filter(run_id=ctx.run_id).exists()


timeouts = Flow("otest_async_timeouts", max_attempts=2, base_delay=0, timeout=1)


@timeouts.step()
async def too_slow_once(flow_input: Any, ctx: TaskContext) -> Any:
    if ctx.attempt == 1:
        try:
            await asyncio.sleep(20)
        except asyncio.CancelledError:
            seen.cancelled_at = time.monotonic()
            raise
    return "second attempt"


@timeouts.step()
def checks_its_deadline(flow_input: Any, ctx: TaskContext) -> Any:
    if ctx.attempt == 1:
        while True:
            ctx.check()
            time.sleep(0.05)
    return "second attempt"


@pytest.fixture
def workers(transactional_db: None) -> Iterator[list[InProcessWorker]]:
    global seen
    seen = Seen()
    for flow in (fan, kinds, sync_orm, timeouts):
        compile_flow(flow, on_change="replace")
    started: list[InProcessWorker] = []
    yield started
    for worker in started:
        worker.stop()
    for flow in (fan, kinds, sync_orm, timeouts):
        tuples("select pgflow.delete_flow_and_data(%s)", [flow.slug])


def test_two_hundred_async_handlers_wait_together_on_one_event_loop(
    workers: list[InProcessWorker],
) -> None:
    workers.append(InProcessWorker(fan, concurrency=4, async_concurrency=200))
    threads_before = threading.active_count()
    began = time.monotonic()
    run_id = start_flow(fan, {"n": 200})
    view = wait_for_run(run_id, timeout=60)
    elapsed = time.monotonic() - began
    assert view.status == "completed"
    assert view.outputs["wait_a_second"] == list(range(200))
    # four threads would need 50 s; the handlers waited side by side
    assert seen.most >= 150, f"at most {seen.most} handlers ran at once"
    assert seen.threads == {"pgflow-async"}, seen.threads
    # the event loop and asgiref's one executor thread: not a thread per handler
    assert seen.most_threads <= threads_before + 4, (seen.most_threads, threads_before)
    attempts = tuples(
        "select attempts_count, count(*) from pgflow.step_tasks where run_id = %s group by 1", [run_id]
    )
    assert attempts == [(1, 201)], "each task ran once"
    print(f"200 async handlers of 1 s: {elapsed:.2f} s, {seen.most} at once, {seen.most_threads} threads")


def test_async_concurrency_bounds_the_handlers_running_at_once(workers: list[InProcessWorker]) -> None:
    workers.append(InProcessWorker(fan, concurrency=4, async_concurrency=5, batch_size=10))
    run_id = start_flow(fan, {"n": 12})
    assert wait_for_run(run_id, timeout=30).status == "completed"
    assert seen.most == 5
    # tasks held never exceed the slots: no claimed task waited for one
    assert value("select max(attempts_count) from pgflow.step_tasks where run_id = %s", [run_id]) == 1


def test_each_kind_of_handler_runs_where_it_should(workers: list[InProcessWorker]) -> None:
    workers.append(InProcessWorker(kinds, concurrency=2, async_concurrency=10))
    before = datetime.now(UTC)
    run = wait_for_run(start_flow(kinds, {}), timeout=30)
    assert run.status == "completed", run.error_message
    assert run.outputs["plain"].startswith("pgflow-handler")
    assert run.outputs["on_loop"] == {"thread": "pgflow-async", "run_exists": True}
    assert run.outputs["atomic_async"]["in_transaction"], "its ORM calls run in its completion's transaction"
    assert run.outputs["atomic_async"]["thread"] != "pgflow-async", "that transaction needs a thread"
    assert 25 < run.outputs["deadline"]["remaining"] <= 30
    at = datetime.fromisoformat(run.outputs["deadline"]["at"])
    assert before.timestamp() + 25 < at.timestamp() < time.time() + 31


def test_without_async_slots_async_handlers_run_on_the_threads(workers: list[InProcessWorker]) -> None:
    workers.append(InProcessWorker(kinds, concurrency=2, async_concurrency=0))
    run = wait_for_run(start_flow(kinds, {}), timeout=30)
    assert run.status == "completed", run.error_message
    assert run.outputs["on_loop"]["thread"] != "pgflow-async"
    assert workers[0].worker.handler_loop is None


def test_a_sync_orm_call_in_an_async_handler_fails_that_attempt_with_djangos_error(
    workers: list[InProcessWorker],
) -> None:
    workers.append(InProcessWorker(sync_orm, concurrency=1, async_concurrency=10))
    run = wait_for_run(start_flow(sync_orm, {}), timeout=30)
    assert run.status == "failed"
    assert SynchronousOnlyOperation.__name__ in (run.step("calls_the_orm_synchronously").error_message or "")


def test_a_handler_past_its_timeout_fails_the_attempt_as_a_timeout_and_is_retried(
    workers: list[InProcessWorker],
) -> None:
    workers.append(InProcessWorker(timeouts, concurrency=2, async_concurrency=10))
    began = time.monotonic()
    run_id = start_flow(timeouts, {})
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed", run.error_message
    assert run.outputs == {"too_slow_once": "second attempt", "checks_its_deadline": "second attempt"}
    assert seen.cancelled_at is not None and seen.cancelled_at - began < 5, "cancelled at its deadline"
    errors = dict(
        tuples("select step_slug, attempt_errors from pgflow.step_tasks where run_id = %s", [run_id])
    )
    assert [e["error"] for e in errors["too_slow_once"]] == [
        "TaskTimeout: step 'too_slow_once' passed its timeout of 1s"
    ]
    assert [e["error"] for e in errors["checks_its_deadline"]] == [
        "TaskTimeout: step 'checks_its_deadline' passed its timeout of 1s"
    ]


blocking = Flow("otest_async_blocking", max_attempts=1)


@blocking.step()
async def sleeps_without_await(flow_input: Any) -> Any:
    time.sleep(1.2)
    return "done"


def test_a_handler_that_blocks_the_event_loop_is_named_in_a_warning(
    workers: list[InProcessWorker], caplog: pytest.LogCaptureFixture
) -> None:
    compile_flow(blocking, on_change="replace")
    caplog.set_level("WARNING", logger="pgflow_django.worker")
    workers.append(InProcessWorker(blocking, concurrency=1, async_concurrency=10))
    try:
        assert wait_for_run(start_flow(blocking, {}), timeout=30).status == "completed"
        wait_until(lambda: "blocked the worker's event loop" in caplog.text, 5, "the lag warning")
        assert "otest_async_blocking.sleeps_without_await" in caplog.text
    finally:
        workers.pop().stop()
        tuples("select pgflow.delete_flow_and_data(%s)", [blocking.slug])


cancellable = Flow("otest_async_cancellable", max_attempts=1, timeout=60)


@cancellable.step()
async def waits_long(flow_input: Any) -> Any:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen.cancelled_at = time.monotonic()
        raise
    return "never recorded"


def test_a_cancelled_runs_async_handler_is_cancelled_at_its_await_and_nothing_is_recorded(
    workers: list[InProcessWorker], caplog: pytest.LogCaptureFixture
) -> None:
    compile_flow(cancellable, on_change="replace")
    caplog.set_level("INFO", logger="pgflow_django.worker")
    worker = InProcessWorker(cancellable, concurrency=1, async_concurrency=1, heartbeat_seconds=0.2)
    try:
        run_id = start_flow(cancellable, {})
        wait_until(
            lambda: value("select status from pgflow.step_tasks where run_id = %s", [run_id]) == "started",
            10,
            "the handler to start",
        )
        assert cancel_run(run_id).cancelled
        cancelled = time.monotonic()
        wait_until(lambda: seen.cancelled_at is not None, 10, "the handler to be cancelled")
        assert seen.cancelled_at is not None and seen.cancelled_at - cancelled < 5
        wait_until(lambda: worker.worker.state.in_flight == 0, 5, "its slot to be free")
        assert "handler cancelled at an await: its run was cancelled" in caplog.text
        assert "handler failed" not in caplog.text
        assert tuples("select status, output from pgflow.step_tasks where run_id = %s", [run_id]) == [
            ("cancelled", None)
        ]
    finally:
        worker.stop()
        tuples("select pgflow.delete_flow_and_data(%s)", [cancellable.slug])
