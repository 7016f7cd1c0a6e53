"""Helpers of the django.tasks backend tests: the framework of this Django version, cleanup of task
flows, and ``pgflow_worker --tasks`` subprocesses.

The framework is imported exactly as ``pgflow_django.tasks`` does (Django 6's ``django.tasks``, else the
``django_tasks`` backport), so every test runs unchanged on both: exception classes, signals and
``TaskResultStatus`` come from ``tasks_api``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection

from pgflow_django.tasks import FRAMEWORK, PgflowTaskBackend, tasks_api
from tests.workers import MANAGE, REPO, WorkerProcess, drop_shared_queues, stop_all

__all__ = [
    "FRAMEWORK",
    "SETTINGS_MODULE",
    "TaskWorkerSpawner",
    "backend",
    "clean_task_flows",
    "status",
    "task",
    "tasks_api",
]

task = tasks_api.package.task
"""``@task`` of this Django version's framework."""
status = tasks_api.TaskResultStatus

SETTINGS_MODULE = "tests.tasks_settings"
"""Worker subprocess settings: the example project's TASKS plus ``tests.tasks_worker`` in MODULES."""

TASK_MODULE_PREFIXES = (
    "testproject_example_tasks_",
    "tests_tasks_",
    "tests_integration_test_tasks_backend_",
    "tests_acceptance_test_tasks_worker_",
    "tests_integration_test_task_names_",
)
"""Slug prefixes of the task flows the tests create (``task_flow_slug`` of their module paths)."""


def backend(alias: str = "default") -> PgflowTaskBackend:
    found = tasks_api.package.task_backends[alias]
    assert isinstance(found, PgflowTaskBackend)
    return found


def clean_task_flows() -> None:
    """Drop the tests' task flows with their runs and messages, the ledger, and the workers of the
    task queues; forget this process's compilations (the flows they remember are gone)."""
    patterns = [f"{prefix}%" for prefix in TASK_MODULE_PREFIXES]
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug like any(%s)",
            [patterns],
        )
        cursor.execute("delete from example_ledgerentry")
        cursor.execute("delete from pgflow.workers where queue_name in ('default', 'mail')")
        drop_shared_queues(cursor, ["default", "mail"])
    for alias in tasks_api.package.task_backends.settings:
        found = tasks_api.package.task_backends[alias]
        if isinstance(found, PgflowTaskBackend):
            found._compiled.clear()


class TaskWorkerProcess(WorkerProcess):
    """``manage.py pgflow_worker --tasks [args]`` with ``tests/tasks_settings.py``."""

    def __init__(self, database_url: str, args: list[str], log_path: Path) -> None:
        self.flow = "--tasks " + " ".join(args)
        self.log_path = log_path
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "PYTHONUNBUFFERED": "1",
            "PGFLOW_LOG_LEVEL": os.environ.get("PGFLOW_TEST_WORKER_LOG_LEVEL", "INFO"),
        }
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(MANAGE), "pgflow_worker", "--tasks", *args],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )


class TaskWorkerSpawner:
    """Starts task workers on one database and stops every one of them at teardown."""

    def __init__(self, database_url: str, log_dir: Path) -> None:
        self.database_url = database_url
        self.log_dir = log_dir
        self.started: list[TaskWorkerProcess] = []

    def __call__(self, *args: str, ready: bool = True) -> TaskWorkerProcess:
        log = self.log_dir / f"task-worker-{len(self.started)}.log"
        worker = TaskWorkerProcess(self.database_url, list(args), log)
        self.started.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def stop_all(self) -> None:
        stop_all(self.started)


@contextmanager
def captured(signal: Any) -> Iterator[list[dict[str, Any]]]:
    """Every ``signal`` sent in this process while the block runs, as its keyword arguments plus
    ``status`` (the result's status when sent: backends, like Django's own, update the result that
    they sent afterwards)."""
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append({"sender": sender, "status": kwargs["task_result"].status, **kwargs})

    signal.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        signal.disconnect(receiver)
