"""Queue coverage: which persisted routes (and live task snapshots) have no live worker to run them.

Before callers switch to a new concrete flow version, every (queue, flow, step) it routes to must have
a live worker that polls that queue *and* runs that step. The check is one plain SQL statement
(:data:`COVERAGE_SQL`) so that an operator can run exactly what ``manage.py pgflow_coverage`` ran:
:func:`coverage_sql` renders it with its two parameters as SQL literals on the first lines (edit them
there), and :func:`coverage` executes that very text.

One row per (queue, flow, step) that is needed:

- every persisted route: each row of ``pgflow.steps`` with the queue its tasks are sent to
  (``in_route`` true);
- every (queue, flow, step) that a live task snapshot (a ``queued`` or ``started`` task's
  ``queue_name``) references but the persisted route does not, e.g. tasks left on an older route
  (``in_route`` false). Such work still needs a worker on the queue its message is in.

A worker counts for a row when it is live (not stopped, not deprecated, heartbeat within the window),
its ``pgflow.workers.queue_name`` is the row's queue, and its ``pgflow.worker_support`` set holds the
row's (flow, step). The query is written per (queue, flow, step) rather than per flow, so several
flows, versions or steps sharing one queue are each checked against their own handlers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from django.db import connections
from psycopg import sql

from pgflow_django.conf import get_settings
from pgflow_django.operations import FlowNotFound
from pgflow_django.slugs import validate_flow_slug

LIVE_HEARTBEATS: Final = 3
"""A worker is live while its last heartbeat is younger than this many heartbeat periods."""

COVERAGE_SQL: Final = """\
-- pgflow coverage: each (queue, flow, step) that a persisted route or a live task needs,
-- with the live workers that poll that queue and run that step. Parameters: the first lines.
with params (live_seconds, flow_slug) as (
  values ({live_seconds}::float8, {flow}::text)  -- heartbeat window in seconds; one flow, or null for all
),
live_support as (
  select w.worker_id, w.queue_name, ws.flow_slug, ws.step_slug
    from pgflow.workers as w
    join pgflow.worker_support as ws on ws.worker_id = w.worker_id
   cross join params as p
   where w.stopped_at is null
     and w.deprecated_at is null
     and w.last_heartbeat_at > now() - make_interval(secs => p.live_seconds)
),
routes as (
  select s.queue_name, s.flow_slug, s.step_slug
    from pgflow.steps as s
   cross join params as p
   where p.flow_slug is null or s.flow_slug = p.flow_slug
),
pending as (
  select t.queue_name, t.flow_slug, t.step_slug, count(*) as pending_tasks
    from pgflow.step_tasks as t
   cross join params as p
   where t.status in ('queued', 'started')
     and (p.flow_slug is null or t.flow_slug = p.flow_slug)
   group by t.queue_name, t.flow_slug, t.step_slug
),
needed as (
  select coalesce(r.queue_name, t.queue_name) as queue_name,
         coalesce(r.flow_slug, t.flow_slug) as flow_slug,
         coalesce(r.step_slug, t.step_slug) as step_slug,
         r.step_slug is not null as in_route,
         coalesce(t.pending_tasks, 0) as pending_tasks
    from routes as r
    full join pending as t
      on t.queue_name = r.queue_name and t.flow_slug = r.flow_slug and t.step_slug = r.step_slug
)
select n.flow_slug, n.step_slug, s.step_index, n.queue_name, f.queue_mode, n.in_route, n.pending_tasks,
       (select count(*) from live_support as ls
         where ls.queue_name = n.queue_name and ls.flow_slug = n.flow_slug
           and ls.step_slug = n.step_slug) as live_workers,
       (select wp.reason from pgflow.worker_pauses as wp
         where wp.flow_slug = n.flow_slug and wp.step_slug in ('', n.step_slug)
         order by wp.reason = 'fatal' desc, wp.step_slug desc
         limit 1) as paused
  from needed as n
  join pgflow.flows as f on f.flow_slug = n.flow_slug
  join pgflow.steps as s on s.flow_slug = n.flow_slug and s.step_slug = n.step_slug
 order by n.flow_slug, s.step_index, n.in_route desc, n.queue_name;
"""
"""The coverage query, with ``{live_seconds}`` and ``{flow}`` placeholders for SQL literals (see
:func:`coverage_sql`). Its columns are the fields of :class:`RouteCoverage`, in order."""


@dataclass(frozen=True)
class RouteCoverage:
    """One (queue, flow, step) that needs a worker, and how many live workers run it."""

    flow_slug: str
    step_slug: str
    step_index: int
    queue_name: str
    queue_mode: str
    """The flow's queue mode: ``flow`` (every step on ``lower(flow_slug)``), ``step`` (private queues)
    or ``routed`` (declared shared queues)."""
    in_route: bool
    """True: the flow's persisted route. False: only live tasks still use this queue (an older route)."""
    pending_tasks: int
    """Queued or started tasks of this (flow, step) whose message is in this queue."""
    live_workers: int
    """Live workers polling this queue whose support set holds this (flow, step)."""
    paused: str | None
    """The reason (``operator`` or ``fatal``) when this step's worker subscription is paused."""

    @property
    def covered(self) -> bool:
        return self.live_workers > 0


def default_live_seconds() -> float:
    """``LIVE_HEARTBEATS`` x ``PGFLOW["WORKER_HEARTBEAT_SECONDS"]`` (15 s with the defaults)."""
    return LIVE_HEARTBEATS * get_settings().worker_heartbeat_seconds


def coverage_sql(
    *, using: str = "default", flow: str | None = None, live_seconds: float | None = None
) -> str:
    """:data:`COVERAGE_SQL` with its parameters as SQL literals: the text to paste into psql.

    ``flow`` is validated as a slug, and checked against the database (``FlowNotFound``); the literals
    are quoted by psycopg for the connection, so the text runs unchanged.
    """
    seconds = default_live_seconds() if live_seconds is None else float(live_seconds)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"live_seconds must be a number of seconds > 0, got {live_seconds!r}")
    connection = connections[using]
    if flow is not None:
        validate_flow_slug(flow)
        _check_flow_exists(flow, using)
    connection.ensure_connection()
    query = sql.SQL(COVERAGE_SQL).format(live_seconds=sql.Literal(seconds), flow=sql.Literal(flow))
    return query.as_string(connection.connection)


def coverage(
    using: str = "default", flow: str | None = None, live_seconds: float | None = None
) -> list[RouteCoverage]:
    """Every (queue, flow, step) that persisted routes and live tasks need, with its live workers.

    Runs exactly the text :func:`coverage_sql` returns for the same arguments.
    """
    query = coverage_sql(using=using, flow=flow, live_seconds=live_seconds)
    with connections[using].cursor() as cursor:
        cursor.execute(query)
        return [_route(row) for row in cursor.fetchall()]


def compiled_flow_count(using: str = "default") -> int:
    with connections[using].cursor() as cursor:
        cursor.execute("select count(*) from pgflow.flows")
        return int(cursor.fetchone()[0])


def _route(row: tuple[Any, ...]) -> RouteCoverage:
    flow_slug, step_slug, step_index, queue_name, queue_mode, in_route, pending, live, paused = row
    return RouteCoverage(
        flow_slug=str(flow_slug),
        step_slug=str(step_slug),
        step_index=int(step_index),
        queue_name=str(queue_name),
        queue_mode=str(queue_mode),
        in_route=bool(in_route),
        pending_tasks=int(pending),
        live_workers=int(live),
        paused=None if paused is None else str(paused),
    )


def _check_flow_exists(flow: str, using: str) -> None:
    with connections[using].cursor() as cursor:
        cursor.execute("select flow_slug from pgflow.flows order by flow_slug")
        known = [row[0] for row in cursor.fetchall()]
    if flow not in known:
        raise FlowNotFound(f"no flow {flow!r} in the database (compiled flows: {', '.join(known) or 'none'})")
