"""Fixtures of the integration tests: worker subprocesses on pytest-django's test database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.workers import WorkerProcess, url_from_settings

EXAMPLE_FLOWS = (
    "example_chain",
    "example_map",
    "example_condition",
    "example_flaky",
    "example_ledger",
    "example_sleepy",
)


@pytest.fixture
def database_url(transactional_db: None) -> str:
    """The test database, committed data visible to other processes (hence ``transactional_db``)."""
    return url_from_settings(connection.settings_dict)


@pytest.fixture
def clean_example_flows(transactional_db: None) -> None:
    """Drop what earlier tests left of the example flows (runs, queues), so counts start at zero."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(EXAMPLE_FLOWS)],
        )
        cursor.execute("update pgflow.workers set stopped_at = now() where stopped_at is null")


@pytest.fixture
def spawn_worker(
    database_url: str, clean_example_flows: None, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """``spawn_worker("example_chain", "--concurrency", "2")`` -> a started (not yet ready) worker."""
    started: list[WorkerProcess] = []

    def spawn(flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        worker = WorkerProcess(database_url, flow, list(args), tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker.wait_ready() if ready else worker

    yield spawn
    for worker in started:
        worker.stop()
