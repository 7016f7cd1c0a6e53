"""A ``@task`` enqueued for a function the worker's code does not define: the worker names the task
once, and says that it must be restarted or deployed with the code that defines it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgflow_django.tasks import task_flow_slug
from testproject.example.task_api import task
from tests.sql.support import val
from tests.tasks_support import TaskWorkerSpawner, clean_task_flows, status
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASK_PATH = f"{__name__}.only_in_the_new_release"


@task()
def only_in_the_new_release(n: int) -> int:
    """Defined here, in the enqueuing process only: the worker's settings do not discover it."""
    return n


@pytest.fixture
def task_worker(database_url: str, tmp_path: Path) -> Iterator[TaskWorkerSpawner]:
    clean_task_flows()
    spawner = TaskWorkerSpawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()
    clean_task_flows()


def test_the_worker_names_the_undefined_task_once(task_worker: TaskWorkerSpawner) -> None:
    result = only_in_the_new_release.enqueue(1)
    message_id = val("select message_id from pgflow.step_tasks where run_id = %s", [result.id])
    worker = task_worker()
    wanted = f"task {TASK_PATH} was enqueued on queue=default, but this worker's code does not define it"
    wait_until(lambda: wanted in worker.log(), 30, "the warning naming the task")
    line = next(line for line in worker.log().splitlines() if wanted in line)
    assert "restart or deploy this worker with the code that defines it" in line
    assert f"flow {task_flow_slug(TASK_PATH, 'default')} msg_ids={message_id}" in line

    for reads in (2, 3):  # make the message visible again: the worker reads it again, and stays quiet
        val("update pgmq.q_default set vt = clock_timestamp() where msg_id = %s returning 1", [message_id])
        wait_until(
            lambda reads=reads: (
                (val("select read_ct from pgmq.q_default where msg_id = %s", [message_id]) or 0) >= reads
            ),
            30,
            f"read {reads} of the message",
        )
    assert worker.log().count(wanted) == 1, worker.log()
    assert "does not run" not in worker.log()
    assert only_in_the_new_release.get_result(result.id).status == status.READY
    assert worker.process.poll() is None, "the worker keeps running"
