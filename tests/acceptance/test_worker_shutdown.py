"""SIGTERM/SIGINT: stop polling, let in-flight tasks finish, release what cannot, mark the worker stopped;
a second signal exits at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from pgflow_django import start_flow
from tests.sql.support import q, val
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def task_statuses(run_id: object) -> list[str]:
    rows = q("select status from pgflow.step_tasks where run_id = %s order by task_index", [run_id])
    return [row["status"] for row in rows]


def is_stopped(worker: WorkerProcess) -> bool:
    return bool(
        val("select stopped_at is not null from pgflow.workers where worker_id = %s", [worker.worker_id])
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_in_flight_tasks_and_claims_no_more(
    spawn_worker: Callable[..., WorkerProcess], signum: int
) -> None:
    worker = spawn_worker("example_sleepy", "--concurrency", "4", "--shutdown-timeout", "20")
    run_id = start_flow("example_sleepy", [{"sleep": 1.5}] * 6)
    wait_until(lambda: task_statuses(run_id).count("started") == 4, 15, "four tasks to start")
    worker.signal(signum)
    assert worker.wait(15) == 0
    assert sorted(task_statuses(run_id)) == ["completed"] * 4 + ["queued"] * 2
    assert is_stopped(worker)
    assert signal.Signals(signum).name in worker.log()


def test_tasks_still_running_at_the_timeout_are_released(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_sleepy", "--concurrency", "2", "--shutdown-timeout", "1")
    run_id = start_flow("example_sleepy", [{"sleep": 60}] * 2)
    wait_until(lambda: task_statuses(run_id) == ["started"] * 2, 15, "both tasks to start")
    started = time.monotonic()
    worker.terminate()
    assert worker.wait(15) == 0
    assert time.monotonic() - started < 10
    assert "released 2 of 2 unfinished task(s) queue=example_sleepy" in worker.log()
    assert task_statuses(run_id) == ["queued"] * 2, "released claims are queued again for any worker"
    assert val("select array_agg(attempts_count) from pgflow.step_tasks where run_id = %s", [run_id]) == [
        1,
        1,
    ], "a released claim stays counted, so its attempt number stays fenced off"
    hidden = val(
        "select count(*) from pgmq.q_example_sleepy as m join pgflow.step_tasks as t "
        "on t.message_id = m.msg_id where t.run_id = %s and m.vt > clock_timestamp()",
        [run_id],
    )
    assert hidden == 0, "released messages are visible again at once"
    assert is_stopped(worker)


def test_second_signal_exits_at_once(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker("example_sleepy", "--concurrency", "1", "--shutdown-timeout", "60")
    run_id = start_flow("example_sleepy", [{"sleep": 60}])
    wait_until(lambda: task_statuses(run_id) == ["started"], 15, "the task to start")
    worker.terminate()
    wait_until(lambda: "SIGTERM: stopped polling" in worker.log(), 10, "the first signal to be handled")
    started = time.monotonic()
    worker.terminate()
    assert worker.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 5
    assert not is_stopped(worker), "an abrupt exit leaves the worker to heartbeat expiry and recovery"
    assert task_statuses(run_id) == ["started"]
