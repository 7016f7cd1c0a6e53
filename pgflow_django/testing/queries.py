"""The statements only the testing toolkit sends: the in-process claim and completion, the clock
that brings delays forward, and what a test inspects after a run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Final, NamedTuple

from psycopg import sql

from pgflow_django.db.query import Query, value_query

SAVEPOINT: Final = value_query("savepoint", 'savepoint "pgflow_testing"')


RELEASE_SAVEPOINT: Final = value_query("release_savepoint", 'release savepoint "pgflow_testing"')


ROLLBACK_TO_SAVEPOINT: Final = value_query("rollback_to_savepoint", 'rollback to savepoint "pgflow_testing"')
"""In-process statements each run in this savepoint of the test's transaction, as a worker's each
stand alone: an error undoes only that statement."""


class StartedFlow(NamedTuple):
    flow_slug: str
    version_of: str
    version: str | None
    """The version's identity (``Flow.version_key``); None when no compile has claimed it."""


FLOWS_WITH_STARTED_RUNS: Final = Query(
    "flows_with_started_runs",
    """
    select f.flow_slug, f.version_of, f.version
      from pgflow.flows as f
     where exists (select 1 from pgflow.runs as r where r.flow_slug = f.flow_slug and r.status = 'started')
     order by 1
    """,
    StartedFlow,
)
"""The flows (each version apart) with an unfinished run."""


EVERY_VERSION: Final = value_query(
    "every_version",
    """
    select coalesce(array_agg(f.flow_slug order by f.flow_slug), '{}') as value
      from pgflow.flows as f
     where f.flow_slug = any(%(slugs)s::text[]) or f.version_of = any(%(slugs)s::text[])
    """,
)
"""The stored slugs of every version of some flows (``advance(flows=...)`` moves all their work)."""


BOUND_VERSIONS: Final = value_query(
    "bound_versions",
    """
    select coalesce(array_agg(coalesce(pgflow.flow_version(f.slug, f.version), f.slug) order by f.n), '{}')
           as value
      from unnest(%s::text[], %s::text[]) with ordinality as f(slug, version, n)
    """,
)
"""The stored slug of the version each (flow slug, version key) names: what ``drain`` binds flows to."""


class PausedStep(NamedTuple):
    flow_slug: str
    step_slug: str
    reason: str


PAUSED_STEPS: Final = Query(
    "paused_steps",
    """
    select s.flow_slug, s.step_slug, p.reason
      from pgflow.steps as s
     cross join lateral pgflow.subscription_pause(s.flow_slug, s.step_slug) as p
     where s.flow_slug = any(%s) and p.flow_slug is not null
    """,
    PausedStep,
)
"""Each step of some flows that a pause holds (``pgflow.subscription_pause``), with that pause's reason."""


class OpenTask(NamedTuple):
    """A started run and one of its queued or started tasks (task columns null when it has none)."""

    run_id: uuid.UUID
    flow_slug: str
    step_slug: str | None
    task_index: int | None
    status: str | None
    attempts: int | None
    last_worker_id: uuid.UUID | None
    message_id: int | None


class ShiftedWait(NamedTuple):
    run_id: uuid.UUID


OPEN_TASKS: Final = Query(
    "open_tasks",
    """
    select r.run_id, r.flow_slug, t.step_slug, t.task_index, t.status, t.attempts_count as attempts,
           t.last_worker_id, t.message_id
      from pgflow.runs as r
      left join pgflow.step_tasks as t
             on t.run_id = r.run_id and t.status in ('queued', 'started')
            and not exists (select 1 from pgflow.step_waits as w
                             where w.run_id = t.run_id and w.step_slug = t.step_slug
                               and w.task_index = t.task_index)
     where r.status = 'started' and (%(flows)s::text[] is null or r.flow_slug = any(%(flows)s::text[]))
       and (t.run_id is not null
            or not exists (select 1 from pgflow.step_waits as w where w.run_id = r.run_id))
     order by r.started_at, r.run_id, t.step_slug, t.task_index
     limit 200
    """,
    OpenTask,
)
"""What a drain left unfinished: started runs and their open tasks, oldest first. A task that waits
for an event or a time is not unfinished work (``advance()`` and ``send_event`` move it on)."""


SHIFT_WAITS: Final = Query(
    "shift_waits",
    """
    update pgflow.step_waits as w
       set due_at = w.due_at - make_interval(secs => %(secs)s)
     where w.due_at is not null and (%(flows)s::text[] is null or w.flow_slug = any(%(flows)s::text[]))
    returning w.run_id
    """,
    ShiftedWait,
)
"""Bring the sleeps' times and the event waits' timeouts ``secs`` seconds earlier (``advance()``)."""


class TaskRow(NamedTuple):
    step_slug: str
    task_index: int
    status: str
    attempts: int
    output: str | None
    error_message: str | None
    errors: str
    queued_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None


RUN_TASKS: Final = Query(
    "run_tasks",
    """
    select step_slug, task_index, status, attempts_count as attempts, output::text as output, error_message,
           coalesce((select jsonb_agg(e->>'error' order by n) from jsonb_array_elements(attempt_errors)
                     with ordinality as a(e, n)), '[]'::jsonb)::text as errors,
           queued_at, started_at, completed_at, failed_at
      from pgflow.step_tasks where run_id = %s order by step_slug, task_index
    """,
    TaskRow,
)
"""Every task of a run, with the error of each failed attempt (oldest first) as a JSON array."""


class QueuedMessages(NamedTuple):
    queue_name: str
    table: str
    message_ids: list[int]


QUEUED_MESSAGES: Final = Query(
    "queued_messages",
    """
    select t.queue_name, pgmq.format_table_name(t.queue_name, 'q') as table,
           array_agg(t.message_id order by t.message_id) as message_ids
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
     where r.status = 'started' and t.status = 'queued' and t.message_id is not null
       and (%(flows)s::text[] is null or t.flow_slug = any(%(flows)s::text[]))
     group by t.queue_name
     order by t.queue_name
    """,
    QueuedMessages,
)
"""The messages of queued tasks in started runs, by queue: the only ones time control moves."""


class HiddenMessage(NamedTuple):
    msg_id: int
    seconds: float


HIDDEN_MESSAGES: Final = Query(
    "hidden_messages",
    "select msg_id, extract(epoch from vt - clock_timestamp())::float8 as seconds from pgmq.{table}"
    " where msg_id = any(%s) and vt > clock_timestamp()",
    HiddenMessage,
)
"""Which of some messages of one queue table are still hidden, and for how long."""


class TimeShift(NamedTuple):
    seconds: float | None
    visible: int
    runs: int


def time_shift(queues: Sequence[tuple[str, str]]) -> Query[TimeShift]:
    """Move the hidden messages of queued tasks on ``queues`` ((queue, table) pairs) and delayed runs'
    ``not_before`` back by ``%(secs)s`` (null: until the soonest message is due), in one statement over
    every queue table; returns the seconds moved, the messages now visible, the runs moved."""
    hidden = sql.SQL(" union all ").join(
        sql.SQL(
            "select {queue} as queue_name, m.msg_id, m.vt from pgmq.{table} as m"
            " where m.vt > clock_timestamp()"
        ).format(queue=sql.Literal(queue), table=sql.Identifier(table))
        for queue, table in queues
    )
    updates = sql.SQL(", ").join(
        sql.SQL(
            "{name} as (update pgmq.{table} as m set vt = m.vt - delta.d from due, delta"
            " where due.queue_name = {queue} and m.msg_id = due.msg_id"
            " returning m.vt <= clock_timestamp() as visible)"
        ).format(name=sql.Identifier(f"u{index}"), table=sql.Identifier(table), queue=sql.Literal(queue))
        for index, (queue, table) in enumerate(queues)
    )
    visible = sql.SQL(" + ").join(
        sql.SQL("(select count(*) from {} where visible)").format(sql.Identifier(f"u{index}"))
        for index in range(len(queues))
    )
    statement = sql.SQL(
        """
        with hidden as ({hidden}), due as (
          select h.queue_name, h.msg_id, h.vt from hidden as h
            join pgflow.step_tasks as t on t.queue_name = h.queue_name and t.message_id = h.msg_id
            join pgflow.runs as r on r.run_id = t.run_id
           where t.status = 'queued' and r.status = 'started'
             and (%(flows)s::text[] is null or t.flow_slug = any(%(flows)s::text[]))
        ), delta as (
          select coalesce(make_interval(secs => %(secs)s),
                          (select min(vt) from due) - clock_timestamp() + interval '1 millisecond') as d
        ), {updates}, runs as (
          update pgflow.runs as r set not_before = r.not_before - delta.d from delta
           where delta.d is not null and r.status = 'started' and r.not_before > clock_timestamp()
             and (%(flows)s::text[] is null or r.flow_slug = any(%(flows)s::text[]))
          returning 1
        )
        select extract(epoch from (select d from delta))::float8 as seconds, {visible} as visible,
               (select count(*) from runs) as runs
        """
    ).format(hidden=hidden, updates=updates, visible=visible)
    return Query("time_shift", statement, TimeShift)
