"""What a test inspects after a run: the run, its step states, and each task's attempts and errors."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.db import connections

from pgflow_django.db.query import fetch_all
from pgflow_django.runs.client import RunView, get_run
from pgflow_django.testing import queries


@dataclass(frozen=True)
class TaskView:
    """One task of one run, as ``pgflow.step_tasks`` records it."""

    step_slug: str
    task_index: int
    status: str
    attempts: int
    """Attempts started (``attempts_count``): the first try counts, as ``max_attempts`` does."""
    output: Any
    error_message: str | None
    errors: tuple[str, ...]
    """The error of each failed attempt, oldest first (``attempt_errors``)."""
    queued_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None


@dataclass(frozen=True)
class Run(RunView):
    """``get_run``'s view plus every task: what ``run_flow`` returns."""

    tasks: tuple[TaskView, ...] = ()

    def tasks_of(self, step: str) -> tuple[TaskView, ...]:
        """The step's tasks in index order (one for a single step, one per element for a map)."""
        self.step(step)  # unknown slugs raise, listing the run's steps
        return tuple(task for task in self.tasks if task.step_slug == step)

    def task(self, step: str, index: int = 0) -> TaskView:
        for task in self.tasks_of(step):
            if task.task_index == index:
                return task
        raise KeyError(f"run {self.run_id}: step {step!r} has no task {index}")

    def attempts(self, step: str) -> int:
        """Attempts of the step's tasks added up."""
        return sum(task.attempts for task in self.tasks_of(step))


def load_run(run_id: uuid.UUID | str, *, using: str = "default") -> Run:
    """The run with its step states and tasks, on the caller's connection; ``RunNotFound`` if none."""
    view = get_run(run_id, using=using)
    with connections[using].cursor() as cursor:
        rows = fetch_all(cursor, queries.RUN_TASKS, [view.run_id])
    order = {state.step_slug: state.step_index for state in view.steps}
    tasks = sorted(
        (
            TaskView(
                step_slug=row.step_slug,
                task_index=row.task_index,
                status=row.status,
                attempts=row.attempts,
                output=None if row.output is None else json.loads(row.output),
                error_message=row.error_message,
                errors=tuple(json.loads(row.errors)),
                queued_at=row.queued_at,
                started_at=row.started_at,
                completed_at=row.completed_at,
                failed_at=row.failed_at,
            )
            for row in rows
        ),
        key=lambda task: (order.get(task.step_slug, 0), task.task_index),
    )
    return Run(**{f.name: getattr(view, f.name) for f in fields(RunView)}, tasks=tuple(tasks))
