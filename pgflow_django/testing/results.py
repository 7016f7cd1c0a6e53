"""What a test inspects after a run: the run, its step states, and each task's attempts and errors."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.db import connections

from pgflow_django.client import RunView, get_run


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


_TASKS_SQL = """
select step_slug, task_index, status, attempts_count, output::text, error_message,
       coalesce((select jsonb_agg(e->>'error' order by n) from jsonb_array_elements(attempt_errors)
                 with ordinality as a(e, n)), '[]'::jsonb)::text,
       queued_at, started_at, completed_at, failed_at
  from pgflow.step_tasks where run_id = %s order by step_slug, task_index
"""


def load_run(run_id: uuid.UUID | str, *, using: str = "default") -> Run:
    """The run with its step states and tasks, on the caller's connection; ``RunNotFound`` if none."""
    view = get_run(run_id, using=using)
    with connections[using].cursor() as cursor:
        cursor.execute(_TASKS_SQL, [view.run_id])
        rows = cursor.fetchall()
    order = {state.step_slug: state.step_index for state in view.steps}
    tasks = sorted(
        (
            TaskView(
                step_slug=row[0],
                task_index=row[1],
                status=row[2],
                attempts=row[3],
                output=None if row[4] is None else json.loads(row[4]),
                error_message=row[5],
                errors=tuple(json.loads(row[6])),
                queued_at=row[7],
                started_at=row[8],
                completed_at=row[9],
                failed_at=row[10],
            )
            for row in rows
        ),
        key=lambda task: (order.get(task.step_slug, 0), task.task_index),
    )
    return Run(**{f.name: getattr(view, f.name) for f in fields(RunView)}, tasks=tuple(tasks))
