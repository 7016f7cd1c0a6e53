"""The statements only the management commands send."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Final, NamedTuple

from psycopg import sql

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


class ChosenRunRow(NamedTuple):
    run_id: uuid.UUID
    flow_slug: str
    at: datetime | None


FAILED_RUNS: Final = Query(
    "failed_runs",
    """
    select r.run_id, r.flow_slug, r.failed_at as at
      from pgflow.runs as r
     where r.flow_slug = any(%(flows)s::text[]) and r.status = 'failed'
       and (%(within)s::interval is null or r.failed_at >= clock_timestamp() - %(within)s::interval)
       and r.parent_run_id is null
       and coalesce(r.error_message, '') <> 'cancelled'
       and coalesce(r.error_message, '') not like 'cancelled: %%'
     order by r.failed_at, r.run_id
    """,
    ChosenRunRow,
)
"""The failed runs of some flows (stored slugs), in the last ``within`` when given, oldest failure first
(``pgflow_retry --flow``): not the cancelled ones (an operator stopped them) nor child runs (a retry of
their parent starts a new child)."""


def _hidden_messages(queue_tables: Sequence[tuple[str, str]]) -> sql.Composable:
    """The messages hidden until later on some queues ((queue, PGMQ table) pairs): queue, id, vt."""
    return sql.SQL(" union all ").join(
        sql.SQL(
            "select {queue}::text as queue_name, m.msg_id, m.vt from pgmq.{table} as m"
            " where m.vt > clock_timestamp()"
        ).format(queue=sql.Literal(queue), table=sql.Identifier(table))
        for queue, table in queue_tables
    )


def waiting_runs(queue_tables: Sequence[tuple[str, str]]) -> Query[ChosenRunRow]:
    """The started runs of some flows (``%(flows)s``, stored slugs) with work ``pgflow.run_now`` would
    make visible now: a queued task whose message on one of ``queue_tables`` ((queue, PGMQ table)
    pairs, the flows' queues) is hidden until later, and that no limit deferred; oldest start first
    (``pgflow_run_now --flow``), each with the time its first such message is due (``at``: when it
    would run anyway). Reads the queues without a lock."""
    statement = sql.SQL(
        """
        with hidden as ({hidden})
        select r.run_id, r.flow_slug, w.at
          from pgflow.runs as r
          cross join lateral (
             select min(h.vt) as at from pgflow.step_tasks as t
               join hidden as h on h.queue_name = t.queue_name and h.msg_id = t.message_id
              where t.run_id = r.run_id and t.status = 'queued'
                and not exists (select 1 from pgflow.limit_waits as w
                                 where w.run_id = t.run_id and w.task_step_slug = t.step_slug
                                   and w.task_index = t.task_index)) as w
         where r.flow_slug = any(%(flows)s::text[]) and r.status = 'started' and w.at is not null
         order by r.started_at, r.run_id
        """
    ).format(hidden=_hidden_messages(queue_tables))
    return Query("waiting_runs", statement, ChosenRunRow)
