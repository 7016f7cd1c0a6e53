"""What a worker holds: never claimed work that no thread runs while another worker could run it.

Workers run in this process (real threads, real connections), so a handler can tell the test it has
begun and wait for the test to let it finish: "claimed" is read from the database, "running" from the
handlers, and a task claimed but not running is one a worker holds without running it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from pgflow_django import Flow, compile_flow, start_flow, start_flows, wait_for_run
from pgflow_django.flows.context import TaskContext
from pgflow_django.worker.queue_worker import HOLD_SECONDS
from tests.support.db import tuples, value
from tests.workers import InProcessWorker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Handlers:
    """Which tasks' handlers began (by worker thread), and the gate the slow ones wait behind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.began: list[tuple[str, Any]] = []
        self.gate = threading.Event()

    def begin(self, item: Any) -> None:
        with self.lock:
            self.began.append((threading.current_thread().name, item))

    def count(self) -> int:
        with self.lock:
            return len(self.began)


handlers = Handlers()

fan = Flow("otest_prefetch_fan", max_attempts=3, base_delay=0, timeout=2)


@fan.step()
def first(flow_input: Any) -> Any:
    return list(range(flow_input["n"]))


@fan.map(array=first)
def each(item: Any) -> Any:
    handlers.begin(item)
    handlers.gate.wait(20)
    return item


single = Flow("otest_prefetch_single", max_attempts=3, base_delay=0, timeout=2)


@single.step()
def work(flow_input: Any, ctx: TaskContext) -> Any:
    if flow_input.get("slow"):
        handlers.begin(flow_input["n"])
        handlers.gate.wait(20)
    elif "n" in flow_input:
        handlers.begin(flow_input["n"])
    return None


@pytest.fixture
def started(transactional_db: None) -> Iterator[list[InProcessWorker]]:
    handlers.began.clear()
    handlers.gate.clear()
    for flow in (fan, single):
        compile_flow(flow, on_change="replace")
    workers: list[InProcessWorker] = []
    yield workers
    handlers.gate.set()
    for worker in workers:
        worker.stop()
    for flow in (fan, single):
        tuples("select pgflow.delete_flow_and_data(%s)", [flow.slug])
        tuples("delete from pgflow.workers where queue_name = %s", [flow.slug])


def claimed(slug: str, step: str) -> int:
    """Tasks of the step claimed by some worker right now."""
    return int(
        value(
            "select count(*) from pgflow.step_tasks"
            " where flow_slug = %s and step_slug = %s and status = 'started'",
            [slug, step],
        )
    )


def test_tasks_a_fast_step_makes_ready_for_a_slow_one_wait_in_the_queue_for_an_idle_worker(
    started: list[InProcessWorker],
) -> None:
    started.append(InProcessWorker(fan, "worker-a", concurrency=4, prefetch=100))
    warm = start_flow(fan, {"n": 0})
    assert wait_for_run(warm, timeout=10).status == "completed", "the fast step is known to be short"
    run_id = start_flow(fan, {"n": 12})
    wait_until(lambda: handlers.count() == 4, 10, "four handlers running")
    time.sleep(0.3)  # a claim round or two: what the worker holds now, it holds without a thread
    assert claimed(fan.slug, "each") == 4, "only the tasks its four threads run are claimed"

    started.append(InProcessWorker(fan, "worker-b", concurrency=4, prefetch=100))
    wait_until(lambda: handlers.count() == 8, 10, "the idle worker took four of the rest")
    time.sleep(0.3)
    assert claimed(fan.slug, "each") == 8
    claimers = value(
        "select count(distinct last_worker_id) from pgflow.step_tasks"
        " where run_id = %s and step_slug = 'each' and status = 'started'",
        [run_id],
    )
    assert claimers == 2

    handlers.gate.set()
    assert wait_for_run(run_id, timeout=20).status == "completed"
    attempts = tuples(
        "select attempts_count, count(*) from pgflow.step_tasks where run_id = %s and step_slug = 'each'"
        " group by 1",
        [run_id],
    )
    assert attempts == [(1, 12)], "no attempt was spent on a task that waited for a thread"
    assert sorted(item for _, item in handlers.began) == list(range(12)), "each ran once"


def test_a_task_left_waiting_for_a_thread_goes_back_to_the_queue_for_another_worker(
    started: list[InProcessWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgflow_django.worker")
    first_worker = InProcessWorker(single, "worker-a", concurrency=2, prefetch=50)
    started.append(first_worker)
    for run_id in start_flows(single, [{} for _ in range(5)]):
        assert wait_for_run(run_id, timeout=10).status == "completed"
    assert first_worker.worker.state.free_slots() == 50, "its step is known short: it prefetches"

    run_ids = start_flows(single, [{"slow": True, "n": n} for n in range(10)])
    wait_until(lambda: handlers.count() == 2, 10, "both threads busy with slow tasks")
    returned = time.monotonic()
    wait_until(
        lambda: "returned 8 task(s) no handler thread took" in caplog.text,
        HOLD_SECONDS * 6,
        "the eight tasks that waited for a thread returned to the queue",
    )
    assert time.monotonic() - returned < HOLD_SECONDS * 4
    assert claimed(single.slug, "work") == 2
    assert first_worker.worker.state.free_slots() == 0, "its step is no longer taken for short"

    started.append(InProcessWorker(single, "worker-b", concurrency=8))
    wait_until(lambda: handlers.count() == 10, 10, "the other worker took the eight")
    handlers.gate.set()
    for run_id in run_ids:
        assert wait_for_run(run_id, timeout=20).status == "completed"
    rows = tuples(
        "select attempts_count, count(*) from pgflow.step_tasks where run_id = any(%s::uuid[]) group by 1",
        [[str(run_id) for run_id in run_ids]],
    )
    assert rows == [(1, 10)], "a returned task's attempt was given back"
    assert sorted(n for _, n in handlers.began) == list(range(10)), "each ran once"


def _start_by_priority(priorities: list[int]) -> list[uuid.UUID]:
    with transaction.atomic():
        return [start_flow(single, {"n": n}, priority=priority) for n, priority in enumerate(priorities)]


PRIORITIES = [0, -5, 10, 0, -5, 10, 0, -5, 10, 0, -5, 10]
BY_PRIORITY = sorted(range(len(PRIORITIES)), key=lambda n: (-PRIORITIES[n], n))


def test_explicit_concurrency_and_batch_size_are_honoured_and_runs_go_by_priority(
    started: list[InProcessWorker],
) -> None:
    _start_by_priority(PRIORITIES)
    worker = InProcessWorker(single, "worker-a", concurrency=1, batch_size=1)
    started.append(worker)
    assert worker.worker.options.prefetch == 0
    wait_until(lambda: handlers.count() == len(PRIORITIES), 20, "every run's task ran")
    assert [n for _, n in handlers.began] == BY_PRIORITY


def test_the_tasks_a_worker_holds_run_highest_priority_first(started: list[InProcessWorker]) -> None:
    worker = InProcessWorker(single, "worker-a", concurrency=1, prefetch=100)
    started.append(worker)
    for run_id in start_flows(single, [{} for _ in range(3)]):
        assert wait_for_run(run_id, timeout=10).status == "completed"
    assert worker.worker.state.free_slots() == 100
    _start_by_priority(PRIORITIES)
    wait_until(lambda: handlers.count() == len(PRIORITIES), 20, "every run's task ran")
    assert [n for _, n in handlers.began] == BY_PRIORITY


def test_a_stopping_worker_returns_what_no_thread_started_and_releases_what_runs(
    started: list[InProcessWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgflow_django.worker")
    worker = InProcessWorker(single, "worker-a", concurrency=1, prefetch=50, shutdown_timeout=0.2)
    for run_id in start_flows(single, [{} for _ in range(3)]):
        assert wait_for_run(run_id, timeout=10).status == "completed"
    run_ids = start_flows(single, [{"slow": True, "n": n} for n in range(5)])
    wait_until(lambda: handlers.count() == 1, 10, "the one thread busy")
    assert claimed(single.slug, "work") == 5, "its step is short: it held the other four"
    worker.worker.state.request_stop()
    wait_until(lambda: "returned 4 of 4 task(s) no handler started" in caplog.text, 10, "the four returned")
    handlers.gate.set()
    worker.stop()
    rows = tuples(
        "select status, attempts_count, count(*) from pgflow.step_tasks where run_id = any(%s::uuid[])"
        " group by 1, 2 order by 1, 2",
        [[str(run_id) for run_id in run_ids]],
    )
    assert rows == [("queued", 0, 4), ("queued", 1, 1)], "the running one released, its attempt counted"
