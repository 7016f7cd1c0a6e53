"""How one worker shares its threads among several queues, on real queues in this process.

Two slow flows with a backlog each, beside a short flow whose handlers let the worker prefetch: the
slow queues take turns for every thread that frees (neither waits for the other's backlog), and they
never hold a task beyond the threads (extra slots are for the short queue's tasks only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pgflow_django import Flow, compile_flow, start_flow, start_flows, wait_for_run
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker
from tests.support.db import tuples, value
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

short = Flow("rtest_short", timeout=5)


@short.step()
def quick(flow_input: Any) -> Any:
    return None


slow_a = Flow("rtest_slow_a", timeout=5)
slow_b = Flow("rtest_slow_b", timeout=5)


@slow_a.step()
def nap_a(flow_input: Any) -> Any:
    time.sleep(0.03)


@slow_b.step()
def nap_b(flow_input: Any) -> Any:
    time.sleep(0.03)


FLOWS = (short, slow_a, slow_b)


@pytest.fixture
def worker(transactional_db: None) -> Iterator[QueueWorker]:
    for flow in FLOWS:
        compile_flow(flow, on_change="replace")
    running = QueueWorker(
        list(FLOWS), WorkerOptions.from_settings(concurrency=2, prefetch=20, poll_interval=0.1)
    )
    running.prepare()
    thread = threading.Thread(target=running.run, name="rounds-worker")
    thread.start()
    wait_until(lambda: running.ready, 10, "the worker ready")
    yield running
    running.state.request_stop()
    thread.join(30)
    assert not thread.is_alive()
    for flow in FLOWS:
        tuples("select pgflow.delete_flow_and_data(%s)", [flow.slug])
    tuples("delete from pgflow.workers where worker_id = %s", [running.worker_id])


def test_slow_queues_take_turns_and_hold_no_task_beyond_the_threads(worker: QueueWorker) -> None:
    for _ in range(3):
        assert wait_for_run(start_flow(short, {}), timeout=10).status == "completed"
    wait_until(lambda: worker.state.free_slots() > 2, 10, "the short queue's pace to grant extra slots")
    start_flows(slow_a, [{}] * 60)
    start_flows(slow_b, [{}] * 60)
    held: list[int] = []
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        slow = {slow_a.slug, slow_b.slug}
        held.append(sum(1 for task in worker.state.held_tasks() if task.flow_slug in slow))
        time.sleep(0.02)
    done = {
        flow.slug: int(
            value(
                "select count(*) from pgflow.step_tasks where flow_slug = %s and status = 'completed'",
                [flow.slug],
            )
        )
        for flow in (slow_a, slow_b)
    }
    assert max(held) <= 2, f"slow tasks held (running or waiting for a thread) beyond the 2 threads: {held}"
    assert min(done.values()) >= 8, done
    assert max(done.values()) <= 2 * min(done.values()) + 2, f"the slow queues did not take turns: {done}"
