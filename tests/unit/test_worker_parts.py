"""The worker's pure pieces: options, back-off, output encoding, completion items, channel names."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import threading
import time
import uuid

import pytest

from pgflow_django.flows.context import TaskContext
from pgflow_django.runs.encoding import OutputNotSerialisable, encode_output
from pgflow_django.runs.recorded_errors import error_text
from pgflow_django.worker.backoff import Backoff
from pgflow_django.worker.completer import Completer
from pgflow_django.worker.connection import ClaimedTask, Engine, completion_item
from pgflow_django.worker.listener import insert_channel
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.pool import HandlerPool, PoolClosed
from pgflow_django.worker.slots import WorkerState
from tests.workers import url_from_settings

TASK = ClaimedTask("f", uuid.UUID(int=1), "step", 3, 12345678901234, 2, {"secret": 1})


def test_options_take_settings_defaults_and_overrides() -> None:
    options = WorkerOptions.from_settings(concurrency=3, batch_size=None)
    assert (options.concurrency, options.batch_size) == (3, 10)
    assert options.max_connections == 6


@pytest.mark.parametrize(
    ("name", "value"),
    [("concurrency", 0), ("batch_size", True), ("poll_interval", 0.0), ("shutdown_timeout", -1.0)],
)
def test_options_out_of_range(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name.replace("_", "-")):
        WorkerOptions.from_settings(**{name: value})


def test_backoff_grows_to_its_cap_and_resets() -> None:
    backoff = Backoff(initial=0.1, cap=1.0)
    delays = [backoff.next() for _ in range(8)]
    assert delays[0] <= 0.12
    assert max(delays) <= 1.0
    assert delays[-1] >= 0.8
    backoff.reset()
    assert backoff.next() <= 0.12


@pytest.mark.parametrize("value", [0, "", False, [], {}, None])
def test_falsy_outputs_stay_themselves(value: object) -> None:
    assert json.loads(encode_output(value)) == value


def test_outputs_use_djangos_encoder() -> None:
    encoded = encode_output({"at": datetime.date(2026, 1, 2), "amount": decimal.Decimal("1.50")})
    assert json.loads(encoded) == {"at": "2026-01-02", "amount": "1.50"}


@pytest.mark.parametrize("value", [float("nan"), object(), {1, 2}])
def test_unserialisable_outputs_are_refused(value: object) -> None:
    with pytest.raises(OutputNotSerialisable, match="not JSON-serialisable"):
        encode_output(value)


def test_completion_item_embeds_the_encoded_output_verbatim() -> None:
    item = json.loads(completion_item(TASK, '{"a":[1,2]}'))
    assert item == {
        "run_id": str(TASK.run_id),
        "step_slug": "step",
        "task_index": 3,
        "attempt": 2,
        "output": {"a": [1, 2]},
    }


def test_task_description_names_ids_but_not_the_input() -> None:
    text = TASK.describe()
    assert "msg_id=12345678901234" in text
    assert "queue=f" in text
    assert "secret" not in text


def test_error_text() -> None:
    assert error_text(ValueError("bad")) == "ValueError: bad"
    assert error_text(KeyError()) == "KeyError"


def test_insert_channel_is_pgmqs() -> None:
    assert insert_channel("q_orders") == "pgmq.q_orders.INSERT"


def test_freed_slot_wakes_the_waiting_loop() -> None:
    state = WorkerState(capacity=1)
    state.take(TASK)
    threading.Timer(0.05, state.release, args=[TASK]).start()
    started = time.monotonic()
    assert state.wait_for_slot(5.0)
    assert time.monotonic() - started < 2


def test_stop_request_wakes_every_wait() -> None:
    state = WorkerState(capacity=1)
    threading.Timer(0.05, state.request_stop).start()
    assert state.wait_for_messages(5.0)


@pytest.mark.parametrize(
    ("settings_dict", "url"),
    [
        (
            {"NAME": "db", "USER": "u", "PASSWORD": "", "HOST": "127.0.0.1", "PORT": "5432"},
            "postgresql://u@127.0.0.1:5432/db",
        ),
        (
            {"NAME": "db", "USER": "u", "PASSWORD": "p w", "HOST": "/tmp/s", "PORT": ""},
            "postgresql://u:p%20w@/db?host=%2Ftmp%2Fs",
        ),
    ],
)
def test_test_database_urls(settings_dict: dict[str, str], url: str) -> None:
    assert url_from_settings(settings_dict) == url


def _task(index: int) -> ClaimedTask:
    return ClaimedTask(
        flow_slug="f",
        run_id=uuid.uuid4(),
        step_slug="s",
        task_index=index,
        message_id=index,
        attempt=1,
        input=None,
    )


def test_a_freed_slot_wakes_a_loop_waiting_for_several_only_once_it_has_them() -> None:
    state = WorkerState(capacity=3)
    tasks = [_task(index) for index in range(3)]
    for task in tasks:
        state.take(task)
    woke: list[float] = []
    waiter = threading.Thread(
        target=lambda: woke.append(time.monotonic()) if state.wait_for_slots(2, 5.0) else None
    )
    waiter.start()
    state.release(tasks[0])
    waiter.join(0.2)
    assert waiter.is_alive() and not woke, "one free slot of the two wanted must not end the wait"
    released_at = time.monotonic()
    state.release(tasks[1])
    waiter.join(2.0)
    assert woke and woke[0] - released_at < 1.0


def test_pool_runs_every_item_and_starts_threads_only_while_all_are_busy() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def run(item: int) -> None:
        with lock:
            done.append(item)

    pool: HandlerPool[int] = HandlerPool(8, run)
    for item in range(200):
        pool.submit(item)
        if item % 10 == 9:
            time.sleep(0.01)
    deadline = time.monotonic() + 5
    while len(done) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(done) == list(range(200))
    assert 1 <= pool.thread_count <= 8
    assert pool.shutdown() == []


def test_pool_shutdown_returns_what_no_thread_started_and_refuses_more() -> None:
    gate = threading.Event()
    started: list[int] = []

    def run(item: int) -> None:
        started.append(item)
        gate.wait(5)

    pool: HandlerPool[int] = HandlerPool(2, run)
    for item in range(5):
        pool.submit(item)
    deadline = time.monotonic() + 5
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    pending = pool.shutdown()
    gate.set()
    assert sorted(started + pending) == [0, 1, 2, 3, 4]
    assert len(started) == 2
    with pytest.raises(PoolClosed):
        pool.submit(9)


def test_pool_runs_what_waits_for_a_thread_highest_priority_first_then_in_order() -> None:
    gate = threading.Event()
    ran: list[tuple[int, int]] = []

    def run(item: tuple[int, int]) -> None:
        gate.wait(5)
        ran.append(item)

    pool: HandlerPool[tuple[int, int]] = HandlerPool(1, run, priority=lambda item: item[0])
    items = [(0, 0), (-5, 1), (0, 2), (10, 3), (-5, 4), (10, 5)]
    pool.submit(items[0])
    deadline = time.monotonic() + 5
    while pool.oldest_wait() is not None and time.monotonic() < deadline:
        time.sleep(0.001)
    for item in items[1:]:
        pool.submit(item)
    gate.set()
    deadline = time.monotonic() + 5
    while len(ran) < len(items) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran[1:] == [(10, 3), (10, 5), (0, 2), (-5, 1), (-5, 4)], "the first one was already running"
    pool.shutdown()


def test_pool_withdraws_only_what_waited_long_enough_and_no_thread_started() -> None:
    gate = threading.Event()
    started: list[int] = []

    def run(item: int) -> None:
        started.append(item)
        gate.wait(5)

    pool: HandlerPool[int] = HandlerPool(1, run)
    pool.submit(0)
    pool.submit(1)
    deadline = time.monotonic() + 5
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    oldest = pool.oldest_wait()
    assert oldest is not None
    pool.submit(2)
    assert pool.withdraw(oldest) == [], "nothing waited from before its oldest entry"
    assert pool.withdraw(oldest + 1e-9) == [1]
    assert pool.withdraw(time.monotonic() + 1) == [2]
    assert pool.oldest_wait() is None
    pool.submit(3)
    gate.set()
    deadline = time.monotonic() + 5
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == [0, 3], "a withdrawn item's wake-up finds nothing; the next one still runs"
    assert pool.shutdown() == []


def _completer(state: WorkerState, flush_ms: float) -> Completer:
    return Completer(Engine({}, "completer"), state, batch_size=100, flush_ms=flush_ms)


def test_a_completion_batch_waits_for_the_results_still_owed_by_held_tasks() -> None:
    state = WorkerState(capacity=10)
    tasks = [_task(index) for index in range(3)]
    for task in tasks:
        state.take(task)
    completer = _completer(state, flush_ms=2000)
    completer.complete(tasks[0], "1")
    first = completer._queue.get_nowait()

    def finish_the_others() -> None:
        time.sleep(0.05)
        completer.complete(tasks[1], "2")
        completer.fail(tasks[2], "boom")

    threading.Thread(target=finish_the_others).start()
    started = time.monotonic()
    batch = completer._collect(first)
    assert [item.task.task_index for item in batch] == [0, 1, 2]
    assert time.monotonic() - started < 1.5, "the batch closes once no held task owes a result"


def test_a_completion_batch_closes_at_once_when_nothing_else_is_owed_and_at_its_window_otherwise() -> None:
    state = WorkerState(capacity=10)
    alone, busy = _task(0), _task(1)
    state.take(alone)
    completer = _completer(state, flush_ms=2000)
    completer.complete(alone, "1")
    started = time.monotonic()
    assert len(completer._collect(completer._queue.get_nowait())) == 1
    assert time.monotonic() - started < 0.5, "an idle worker's result is recorded without waiting"

    state.take(alone)
    state.take(busy)
    completer = _completer(state, flush_ms=100)
    completer.complete(alone, "1")
    started = time.monotonic()
    assert len(completer._collect(completer._queue.get_nowait())) == 1
    assert 0.09 <= time.monotonic() - started < 1.0, "a task still running holds the batch for its window"


@pytest.mark.parametrize("escaping", [SystemExit, KeyboardInterrupt])
def test_a_handler_escaping_with_a_base_exception_does_not_cost_the_pool_its_thread(
    escaping: type[BaseException],
) -> None:
    ran: list[int] = []

    def run(item: int) -> None:
        if item == 0:
            raise escaping()
        ran.append(item)

    pool: HandlerPool[int] = HandlerPool(1, run)
    pool.submit(0)
    pool.submit(1)
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [1]
    assert pool.thread_count == 1
    pool.shutdown()


def test_a_cancellation_reaches_only_the_held_task_it_names_and_leaves_with_it() -> None:
    state = WorkerState(2)
    other = _task(1)
    state.take(TASK)
    state.take(other)
    event = state.cancellation(TASK)
    assert state.cancel({TASK.key, (uuid.UUID(int=9), "gone", 0)}) == 1
    assert state.cancel({TASK.key}) == 0, "a task is told once"
    assert event.is_set() and not state.cancellation(other).is_set()
    state.release(TASK)
    assert not state.cancellation(TASK).is_set(), "a released task's key holds no cancellation"


def test_wait_cancelled_returns_once_another_thread_cancels() -> None:
    event = threading.Event()
    ctx = TaskContext(
        flow_slug="f",
        run_id=uuid.UUID(int=1),
        step_slug="s",
        task_index=0,
        attempt=1,
        queue_name="f",
        message_id=1,
        shutdown_event=threading.Event(),
        cancel_event=event,
    )
    assert not ctx.cancelled
    threading.Timer(0.1, event.set).start()
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(ctx.wait_cancelled(), timeout=5))
    assert ctx.cancelled and time.monotonic() - started < 2
