"""``pgflow_start`` given a ``@task`` function's dotted path says how to enqueue it, in one line."""

from __future__ import annotations

from tests.integration.commands_support import manage_in_process


def test_a_task_path_is_answered_with_how_to_enqueue_it() -> None:
    result = manage_in_process(
        "pgflow_start", "testproject.example.tasks.add", "--input", "[1, 2]", settings={}
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "CommandError: testproject.example.tasks.add is a @task, not a flow: enqueue it from Python "
        "(testproject.example.tasks.add.enqueue(...)); pgflow_start starts flows"
    ]
