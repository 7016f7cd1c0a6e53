"""The statements only Django's tasks backend sends: reading a task's result."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Final, NamedTuple

from pgflow_django.db.query import Query


class TaskRunRow(NamedTuple):
    """A task's run, its one task and its output; fields named as the backend's result reads them."""

    flow_slug: str
    run_status: str
    payload: Any
    enqueued_at: datetime
    finished_at: datetime | None
    task_status: str | None
    started_at: datetime | None
    last_worker_id: uuid.UUID | None
    attempt_errors: Any
    output: Any
    queue_name: str
    exhausted_by_recovery: bool
    task_error: str | None
    priority: int


TASK_RESULT: Final = Query(
    "task_result",
    """
    select r.flow_slug, r.status as run_status, r.input as payload, r.started_at as enqueued_at,
           coalesce(r.completed_at, r.failed_at) as finished_at,
           t.status as task_status, t.started_at, t.last_worker_id,
           coalesce(t.attempt_errors, '[]'::jsonb) as attempt_errors,
           ss.output, s.queue_name, t.permanently_stalled_at is not null as exhausted_by_recovery,
           t.error_message as task_error, coalesce(r.priority, 0) as priority
      from pgflow.runs as r
      join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = %s
      left join pgflow.step_tasks as t
        on t.run_id = r.run_id and t.step_slug = s.step_slug and t.task_index = 0
      left join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = s.step_slug
     where r.run_id = %s
    """,
    TaskRunRow,
)
"""A task run's state (step slug, run id): its run, its one task (attempts, errors, worker), its output."""
