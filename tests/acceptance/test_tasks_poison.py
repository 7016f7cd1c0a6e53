"""Poison paths of the tasks backend with real ``pgflow_worker --tasks`` processes (issue 15, items 2
and 3; issue 14, item 9): a task function's SystemExit, KeyboardInterrupt, CancelledError or
GeneratorExit fails its attempt (get_result() does not stay RUNNING) and task_finished says FAILED;
an error with NUL and a lone surrogate is recorded; a result past the engine's bounds fails at once.
One worker runs them all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow_django.runs.encoding import MAX_JSON_DEPTH
from testproject.example.models import LedgerEntry
from tests.acceptance.faults import alive
from tests.support.db import scalar
from tests.tasks_support import TaskWorkerProcess, TaskWorkerSpawner, clean_task_flows, status, tasks_api
from tests.tasks_worker import SIGNAL_LEDGER, nested_result, raises
from tests.workers import url_from_settings, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def module_task_worker(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TaskWorkerProcess]:
    """One ``--tasks`` worker for the module: each test needs its tasks run by a real worker, which has
    to survive them, not a fresh one. The task flows it compiles at start-up stay to the end (a worker
    whose flow is deleted stops)."""
    with django_db_blocker.unblock():
        url = url_from_settings(connection.settings_dict)
        clean_task_flows()
    spawner = TaskWorkerSpawner(url, tmp_path_factory.mktemp("task-worker"))
    try:
        yield spawner()
    finally:
        spawner.stop_all()
        with django_db_blocker.unblock():
            clean_task_flows()


@pytest.fixture
def task_worker(database_url: str, module_task_worker: TaskWorkerProcess) -> Iterator[TaskWorkerProcess]:
    """The module's worker, still running; the test's finished runs are pruned after it."""
    alive(module_task_worker)
    yield module_task_worker
    scalar("select pgflow.prune_data_older_than('0')")


def _finished(task: Any, result_id: str, timeout: float = 30) -> Any:
    def done() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(done, timeout, f"task result {result_id} to finish")


def _finished_signals(result_id: str) -> list[str]:
    entries = LedgerEntry.objects.filter(flow=SIGNAL_LEDGER, key__startswith=f"task_finished {result_id} ")
    return [entry.key.split(" ")[2] for entry in entries.order_by("id")]


@pytest.mark.parametrize(
    ("kind", "class_path"),
    [
        ("exit", "builtins.SystemExit"),
        ("interrupt", "builtins.KeyboardInterrupt"),
        ("cancel", "asyncio.exceptions.CancelledError"),
        ("genexit", "builtins.GeneratorExit"),
    ],
)
def test_a_task_s_base_exception_fails_each_attempt(
    task_worker: TaskWorkerProcess, kind: str, class_path: str
) -> None:
    result = raises.enqueue(kind)
    failed = _finished(raises, result.id)
    assert failed.status == status.FAILED
    assert [error.exception_class_path for error in failed.errors] == [class_path] * 2
    assert failed.attempts == 2, "the retry policy (max_attempts=2) applies"
    wait_until(lambda: len(_finished_signals(result.id)) == 2, 10, "task_finished of both attempts")
    assert _finished_signals(result.id) == ["FAILED", "FAILED"]
    alive(task_worker)  # the worker keeps running


def test_a_task_error_with_nul_and_a_lone_surrogate_is_recorded(task_worker: TaskWorkerProcess) -> None:
    result = raises.enqueue("nul")
    failed = _finished(raises, result.id)
    assert failed.status == status.FAILED and failed.attempts == 2
    assert [error.exception_class_path for error in failed.errors] == ["builtins.ValueError"] * 2
    assert "ValueError: bad \\u0000 byte and lone \\ud800 surrogate" in failed.errors[0].traceback


def test_a_result_past_the_depth_bound_fails_at_once(task_worker: TaskWorkerProcess) -> None:
    at_limit = nested_result.enqueue(400)  # Django's normalize_json recurses twice per level
    past = nested_result.enqueue(MAX_JSON_DEPTH + 1)
    done = _finished(nested_result, at_limit.id)
    assert done.status == status.SUCCESSFUL
    failed = _finished(nested_result, past.id)
    assert failed.status == status.FAILED
    assert failed.attempts == 1, "no retry can make it storable"
    # what Django's ImmediateBackend records for it: normalize_json meets Python's recursion limit
    # first on the django-tasks backport; Django 6's accepts it, and the engine's depth bound refuses it
    try:
        tasks_api.normalize_json(nested_result.func(MAX_JSON_DEPTH + 1))
        expected = "builtins.ValueError"
    except RecursionError:
        expected = "builtins.RecursionError"
    assert [error.exception_class_path for error in failed.errors] == [expected]
    assert "output not encodable: nested deeper than " in failed.errors[0].traceback
