"""``pgflow_start`` given a ``@task`` function's dotted path says how to enqueue it, in one line."""

from __future__ import annotations

import pytest

from tests.workers import run_manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_path_is_answered_with_how_to_enqueue_it(database_url: str) -> None:
    result = run_manage(database_url, "pgflow_start", "testproject.example.tasks.add", "--input", "[1, 2]")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "CommandError: testproject.example.tasks.add is a @task, not a flow: enqueue it from Python "
        "(testproject.example.tasks.add.enqueue(...)); pgflow_start starts flows"
    ]
