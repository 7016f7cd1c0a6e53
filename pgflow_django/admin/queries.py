"""The statements only the admin sends: the dashboard's panels (one bounded statement each) and
its operations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, NamedTuple

from pgflow_django.db.queries import Pause
from pgflow_django.db.query import Query, value_query

WORKER_PAUSES: Final = Query(
    "worker_pauses",
    """
    with subscription as (
      select s.flow_slug, s.step_slug from pgflow.worker_support as s where s.worker_id = %(id)s
      union all
      select w.function_name, '' from pgflow.workers as w
       where w.worker_id = %(id)s
         and not exists (select 1 from pgflow.worker_support as s where s.worker_id = w.worker_id)
    )
    select distinct p.flow_slug, p.step_slug, p.queue_name, p.reason, p.detail
      from subscription as s
     cross join lateral pgflow.subscription_pause(s.flow_slug, s.step_slug) as p
     where p.flow_slug is not null
     order by p.flow_slug, p.step_slug
    """,
    Pause,
)
"""The pauses holding one worker's subscriptions: its support set (a worker row written without one
is taken at its function name, a plain flow's subscription), each through ``pgflow.subscription_pause``."""


RERUN: Final = value_query("rerun", "select pgflow.rerun(%s) as value")
"""Start a new run linked to a finished one (the admin's re-run action); its id."""


class RunRateRow(NamedTuple):
    flow_slug: str
    minute: datetime
    started: int
    completed: int
    failed: int


DASHBOARD_RUN_RATES: Final = Query(
    "dashboard_run_rates",
    """
    with events as (
      select r.flow_slug, date_trunc('minute', r.started_at) as minute,
             1 as started, 0 as completed, 0 as failed
        from pgflow.runs as r
       where r.started_at >= now() - interval '1 hour'
      union all
      select r.flow_slug, date_trunc('minute', coalesce(r.completed_at, r.failed_at)), 0,
             (r.status = 'completed')::int, (r.status = 'failed')::int
        from pgflow.runs as r
       where r.status in ('completed', 'failed')
         and coalesce(r.completed_at, r.failed_at) >= now() - interval '1 hour'
    )
    select e.flow_slug, e.minute, sum(e.started)::int as started, sum(e.completed)::int as completed,
           sum(e.failed)::int as failed
      from events as e
     group by e.flow_slug, e.minute
     order by e.flow_slug, e.minute
     limit 6100
    """,
    RunRateRow,
)
"""Runs started, completed and failed per flow and minute over the last hour (61 minutes of at most
100 flows)."""


class LiveWorkerRow(NamedTuple):
    worker_id: uuid.UUID
    queue_name: str
    function_name: str
    heartbeat_age: float
    supports: str


DASHBOARD_LIVE_WORKERS: Final = Query(
    "dashboard_live_workers",
    """
    select w.worker_id,
           case when w.queue_name = '*'
                then (select count(distinct s.queue_name) from pgflow.worker_support as s
                       where s.worker_id = w.worker_id) || ' queues'
                else w.queue_name end as queue_name,
           w.function_name,
           extract(epoch from now() - w.last_heartbeat_at)::float8 as heartbeat_age,
           coalesce((select string_agg(s.flow_slug || coalesce('.' || nullif(s.step_slug, ''), ''), ', '
                                       order by s.flow_slug, s.step_slug)
                       from pgflow.worker_support as s where s.worker_id = w.worker_id), '') as supports
      from pgflow.workers as w
     where w.stopped_at is null and w.deprecated_at is null
     order by w.queue_name, w.started_at
     limit 100
    """,
    LiveWorkerRow,
)
"""Workers that have not stopped, with the steps each one runs (its support set); a worker polling
several queues shows how many."""


class StalledTaskRow(NamedTuple):
    run_id: uuid.UUID
    flow_slug: str
    step_slug: str
    task_index: int
    last_worker_id: uuid.UUID | None
    claimed_for: float


DASHBOARD_STALLED_TASKS: Final = Query(
    "dashboard_stalled_tasks",
    """
    select t.run_id, t.flow_slug, t.step_slug, t.task_index, t.last_worker_id,
           extract(epoch from now() - t.started_at)::float8 as claimed_for
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id and r.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.status = 'started' and s.step_kind = 'handler'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
     order by t.started_at
     limit 50
    """,
    StalledTaskRow,
)
"""Started tasks whose claim is older than their step's timeout + 30 s: what
``pgflow.requeue_stalled_tasks`` will recover on its next pass (the same condition; a task that waits
for an event, a time or a child run has no claim to lose)."""


class WaitingRow(NamedTuple):
    flow_slug: str
    kind: str
    runs: int
    waits: int
    oldest: datetime
    next_due: datetime | None


DASHBOARD_WAITS: Final = Query(
    "dashboard_waits",
    """
    select w.flow_slug, w.kind, count(distinct w.run_id)::int as runs, count(*)::int as waits,
           min(w.since) as oldest, min(w.due_at) as next_due
      from pgflow.step_waits as w
     group by w.flow_slug, w.kind
     order by w.flow_slug, w.kind
     limit 50
    """,
    WaitingRow,
)
"""The runs that wait now, by flow and kind (an event, a sleep, child runs): the table holds only
what waits, so the count reads it whole."""
