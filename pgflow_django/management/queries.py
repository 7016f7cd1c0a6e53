"""The statements only the management commands send."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, NamedTuple

from pgflow_django.db.query import Query, value_query


class ActiveRunStep(NamedTuple):
    run_id: uuid.UUID
    flow_slug: str
    started_at: datetime
    remaining_steps: int
    step_slug: str
    status: str
    initial_tasks: int | None
    completed_tasks: int
    tasks: int


ACTIVE_RUN_STEPS: Final = Query(
    "active_run_steps",
    """
    with active as (
        select run_id, flow_slug, started_at, remaining_steps
        from pgflow.runs
        where status = 'started'
          and (%(flow)s::text is null
               or flow_slug in (select f.flow_slug from pgflow.flows as f  -- every version of the flow
                                 where f.flow_slug = %(flow)s or f.version_of = %(flow)s))
        order by started_at desc, run_id
        limit %(limit)s
    )
    select a.run_id, a.flow_slug, a.started_at, a.remaining_steps,
           ss.step_slug, ss.status, ss.initial_tasks,
           count(t.task_index) filter (where t.status = 'completed') as completed_tasks,
           count(t.task_index) as tasks
    from active a
    join pgflow.step_states ss on ss.run_id = a.run_id
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    left join pgflow.step_tasks t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
    group by a.run_id, a.flow_slug, a.started_at, a.remaining_steps,
             ss.step_slug, ss.status, ss.initial_tasks, s.step_index
    order by a.started_at desc, a.run_id, s.step_index
    """,
    ActiveRunStep,
)
"""The newest started runs (of one flow, or all) with each step's task progress (``pgflow_runs --watch``)."""


READ_ONLY_TRANSACTION: Final = value_query("read_only_transaction", "set transaction read only")
"""Make the current transaction read-only (``pgflow_audit`` reads, never writes)."""
