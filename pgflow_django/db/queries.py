"""The statements more than one package sends (each package keeps its own in its ``queries``
module), and those of the database checks: pauses, stalled-task recovery, queue depths and tables,
run statuses, flow control, locks and PGMQ versions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from psycopg import sql

from pgflow_django.db.query import Query, fetch_all, fetch_value, value_query

# -- worker registration and heartbeats ------------------------------------------------------------------


SEVERAL_QUEUES: Final = "*"
"""``pgflow.workers.queue_name`` of a worker that polls several queues (``worker_support`` names each)."""


LIVE_WORKER: Final = """
w.stopped_at is null and w.deprecated_at is null
and w.last_heartbeat_at > now() - make_interval(secs => {live_seconds})
"""
"""The one definition of a live worker ``w`` (not stopped, not deprecated, a recent heartbeat), with
``{live_seconds}`` the window (``conf.live_worker_seconds``: ``LIVE_HEARTBEATS`` heartbeat periods)."""


# -- pauses -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    """A paused worker subscription (``step_slug`` is '' for a whole flow)."""

    flow_slug: str
    step_slug: str
    queue_name: str
    reason: str
    detail: str | None

    @property
    def what(self) -> str:
        """``flow=F`` or ``flow=F step=S``: what was paused, as logs and errors name it."""
        return f"flow={self.flow_slug}" + (f" step={self.step_slug}" if self.step_slug else "")


ALL_PAUSES: Final = Query(
    "all_pauses",
    "select flow_slug, step_slug, queue_name, reason, detail from pgflow.worker_pauses order by paused_at",
    Pause,
)


# -- stalled-task recovery -------------------------------------------------------------------------------


STALLED_LOCK_KEY: Final = "pgflow:requeue_stalled"
"""Advisory-lock name that lets one caller at a time run stalled-task recovery."""


STALLED_LOCK_TIMEOUT: Final = "2s"
"""How long recovery waits for a row another transaction holds before it gives up until its next pass.

Recovery holds its runs' locks while it requeues their tasks; waiting without bound for a message a
claim holds would hold up every completion of those runs behind it (and keep vacuum from the queue)."""


TRY_STALLED_LOCK: Final = value_query(
    "try_stalled_lock", "select pg_try_advisory_xact_lock(hashtext(%s)) as value"
)


WAIT_STALLED_LOCK: Final = value_query(
    "wait_stalled_lock", "select pg_advisory_xact_lock(hashtext(%s)) is null as value"
)


SET_STALLED_LOCK_TIMEOUT: Final = value_query(
    "set_stalled_lock_timeout", "select set_config('lock_timeout', %s, true) as value"
)


class RecoveryCount(NamedTuple):
    outcome: str
    task_count: int


REQUEUE_STALLED: Final = Query(
    "requeue_stalled",
    "select outcome, task_count from pgflow.requeue_stalled_tasks()",
    RecoveryCount,
)


def requeue_stalled(cursor: Any, *, wait: bool) -> list[RecoveryCount] | None:
    """Stalled-task recovery, the one path of workers and commands: inside the caller's transaction,
    under the recovery advisory lock (``wait=False``: None when another caller holds it) and with
    ``STALLED_LOCK_TIMEOUT`` (``LockNotAvailable`` when rows it needs stay busy; nothing changed)."""
    if wait:
        fetch_value(cursor, WAIT_STALLED_LOCK, [STALLED_LOCK_KEY])
    elif not fetch_value(cursor, TRY_STALLED_LOCK, [STALLED_LOCK_KEY]):
        return None
    fetch_value(cursor, SET_STALLED_LOCK_TIMEOUT, [STALLED_LOCK_TIMEOUT])
    return fetch_all(cursor, REQUEUE_STALLED)


class WakeCount(NamedTuple):
    outcome: str
    wait_count: int


WAKE_WAITS: Final = Query(
    "wake_waits",
    "select outcome, wait_count from pgflow.wake_waits(%s)",
    WakeCount,
)
"""End the due waits: sleeps past their time, waits pinned to an event, event waits past their
timeout (docs/durable.md). Sent by the worker's wait pass and by the testing toolkit."""

WAKE_BATCH: Final = 1000
"""The most waits one pass ends; the next pass takes the rest."""


def wake_waits(cursor: Any) -> dict[str, int]:
    """One pass of ``pgflow.wake_waits`` in the caller's transaction: waits ended, by outcome."""
    return {row.outcome: int(row.wait_count) for row in fetch_all(cursor, WAKE_WAITS, [WAKE_BATCH])}


# -- flow control and queue depths ----------------------------------------------------------------------


class FlowControlRow(NamedTuple):
    """One key of one limit: its settings, and what the key has now."""

    flow_slug: str
    step_slug: str
    kind: str
    key_source: str
    key_field: str | None
    amount: int
    period: float | None
    burst: int | None
    key: str | None
    started: int
    deferred: int
    tokens: float | None


FLOW_CONTROL: Final = Query(
    "flow_control",
    """
    select l.flow_slug, l.step_slug, l.kind, l.key_source, l.key_field, l.amount, l.period, l.burst,
           k.key, coalesce(k.started, 0)::integer as started, coalesce(k.deferred, 0)::integer as deferred,
           k.tokens
      from pgflow.flow_limits as l
      left join lateral (
        select g.key,
               (select count(*) from pgflow.limit_holds as h
                  join pgflow.step_tasks as t
                    on t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 where h.flow_slug = l.flow_slug and h.step_slug = l.step_slug and h.key = g.key
                   and l.kind = 'concurrency' and t.status = 'started'
                   and t.attempts_count = h.attempt) as started,
               (select count(*) from pgflow.limit_waits as w
                  join pgflow.step_tasks as t
                    on t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
                 where w.flow_slug = l.flow_slug and w.step_slug = l.step_slug and w.kind = l.kind
                   and w.key = g.key and t.status = 'queued') as deferred,
               case when l.kind = 'rate' then least(l.burst::float8, s.tokens + l.amount / l.period
                      * greatest(0, extract(epoch from clock_timestamp() - s.refilled_at)))
               end as tokens
          from pgflow.limit_slots as s
          cross join lateral (select s.key) as g
         where s.flow_slug = l.flow_slug and s.step_slug = l.step_slug and s.kind = l.kind
      ) as k on true
     where %(flow)s::text is null or l.flow_slug = %(flow)s
     order by l.flow_slug, l.step_slug, l.kind, k.deferred desc nulls last, k.started desc nulls last, k.key
     limit %(limit)s
    """,
    FlowControlRow,
)
"""Each limit of each flow (or of ``flow``) with every key its claims have met: tasks started now in
a slot of the key, tasks deferred and still queued, and a rate key's tokens now; the busiest keys first,
at most ``limit`` rows."""


class QueueDepthRow(NamedTuple):
    queue_name: str
    queue_length: int
    visible: int | None
    oldest_msg_age_sec: int | None


FLOW_QUEUE_DEPTHS: Final = Query(
    "flow_queue_depths",
    """
    select m.queue_name, m.queue_length,
           (to_jsonb(m) ->> 'queue_visible_length')::bigint as visible,
           m.oldest_msg_age_sec
    from pgmq.metrics_all() m
    where m.queue_name in (
        select queue_name from pgflow.steps
         where %(flow)s::text is null or flow_slug = %(flow)s or pgflow.version_of(flow_slug) = %(flow)s
    )
    order by m.queue_name
    """,
    QueueDepthRow,
)
"""PGMQ's metrics of the queues the flows' steps use (``flow``: every version of one flow).
``queue_visible_length`` is read through jsonb because older PGMQ releases do not report it."""


# -- database checks ------------------------------------------------------------------------------------


HAS_PGMQ_SCHEMA: Final = value_query(
    "has_pgmq_schema", "select exists (select 1 from pg_namespace where nspname = 'pgmq') as value"
)


class PgmqVersions(NamedTuple):
    installed: str | None
    available: str | None


PGMQ_VERSIONS: Final = Query(
    "pgmq_versions",
    "select (select extversion from pg_extension where extname = 'pgmq') as installed,"
    " (select default_version from pg_available_extensions where name = 'pgmq') as available",
    PgmqVersions,
)
"""The pgmq extension's installed version and the server's default one (None: not there)."""


BACKEND_PID: Final = value_query("backend_pid", "select pg_backend_pid() as value")
"""The server process of this session (two sessions on one pooled server connection share it)."""


# -- the upgrade preflight (migration 0003) and its audit ---------------------------------------------


HAS_QUEUE_MODES: Final = value_query(
    "has_queue_modes",
    "select exists (select 1 from pg_attribute where attrelid = to_regclass('pgflow.flows') "
    "and attname = 'queue_mode' and not attisdropped) as value",
)
"""Whether the database has migration 0005's queue modes (the refined audit checks apply)."""


SET_LOCK_TIMEOUT: Final = value_query(
    "set_lock_timeout", "select set_config('lock_timeout', %s, true) as value"
)


MIGRATE_LOCK: Final = value_query(
    "migrate_lock", "select pg_advisory_xact_lock(hashtextextended(%s, 0)) is null as value"
)


HOLDS_MIGRATE_LOCK: Final = value_query(
    "holds_migrate_lock",
    "select exists (select 1 from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()"
    " and granted and mode = 'ExclusiveLock' and objsubid = 1"
    " and ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, 0)) as value",
)
"""Whether this transaction holds the migration advisory lock exclusively."""


UPGRADE_LOCKED_TABLES: Final = (
    "pgflow.flows",
    "pgflow.steps",
    "pgflow.deps",
    "pgflow.runs",
    "pgflow.step_states",
    "pgflow.step_tasks",
    "pgflow.workers",
)


LOCK_UPGRADE_TABLES: Final = value_query(
    "lock_upgrade_tables", f"lock table {', '.join(UPGRADE_LOCKED_TABLES)} in share row exclusive mode"
)
"""The tables the upgrade converts, locked against writers until the migration commits."""


LOCK_PGMQ_META: Final = value_query("lock_pgmq_meta", "lock table pgmq.meta in share mode")


# -- runs, queue tables and metrics ---------------------------------------------------------------------


class FlowSlugRow(NamedTuple):
    flow_slug: str


class RunStatusRow(NamedTuple):
    run_id: uuid.UUID
    status: str


RUN_STATUSES: Final = Query(
    "run_statuses", "select run_id, status from pgflow.runs where run_id = any(%s)", RunStatusRow
)


class QueueTable(NamedTuple):
    queue_name: str
    table: str


FLOW_QUEUE_TABLES: Final = Query(
    "flow_queue_tables",
    "select distinct queue_name, pgmq.format_table_name(queue_name, 'q') as table from pgflow.steps"
    " where %(flows)s::text[] is null or flow_slug = any(%(flows)s::text[]) order by 1",
    QueueTable,
)
"""(queue, PGMQ table) of every queue some flows' steps use (all flows for null)."""


class MetricSample(NamedTuple):
    """One database-wide gauge value; labels a sample does not use are ''."""

    name: str
    queue_name: str
    flow_slug: str
    step_slug: str
    status: str
    value: float


def database_metrics(queue_tables: Sequence[tuple[str, str]]) -> Query[MetricSample]:
    """Every database-wide gauge in one statement: per queue (given as (queue, table) pairs) its
        visible and hidden messages and the age of its oldest visible one; runs by flow and status;
        stalled tasks by flow and step; live workers (status ``superseded`` for an earlier version of a flow
    with unfinished runs) and pauses by flow and step, for the versions that need workers. Its parameter is
        ``%(live_seconds)s``; its size grows with queues and steps, never with runs or messages' ids."""
    per_queue = sql.SQL(" union all ").join(
        sql.SQL(
            "select {queue}::text as queue_name,"
            " count(*) filter (where m.vt <= clock_timestamp())::float8 as visible,"
            " count(*) filter (where m.vt > clock_timestamp())::float8 as hidden,"
            " coalesce(extract(epoch from clock_timestamp()"
            " - min(m.enqueued_at) filter (where m.vt <= clock_timestamp())), 0)::float8 as oldest"
            " from pgmq.{table} as m"
        ).format(queue=sql.Literal(queue), table=sql.Identifier(table))
        for queue, table in queue_tables
    )
    queues = (
        per_queue
        if queue_tables
        else sql.SQL("select null::text, null::float8, null::float8, null::float8 where false")
    )
    statement = sql.SQL(
        """
        with q(queue_name, visible, hidden, oldest) as ({queues}),
        support as (  -- the steps of the versions that need workers (pgflow.version_in_service)
          select s.flow_slug, s.step_slug, s.queue_name,
                 case when exists (select 1 from pgflow.flows as newer
                                    where newer.version_of = pgflow.version_of(s.flow_slug)
                                      and newer.version_number > f.version_number)
                      then 'superseded' else '' end as superseded,
                 (select count(*) from pgflow.worker_support as ws join pgflow.workers as w
                      on w.worker_id = ws.worker_id
                   where ws.flow_slug = s.flow_slug and ws.step_slug = s.step_slug
                     and coalesce(ws.queue_name, w.queue_name) = s.queue_name and {live}) as live,
                 p.reason
            from pgflow.steps as s
            join pgflow.flows as f on f.flow_slug = s.flow_slug
            left join lateral pgflow.subscription_pause(s.flow_slug, s.step_slug) as p on true
           where pgflow.version_in_service(s.flow_slug)
        )
        select 'queue_visible' as name, queue_name, '' as flow_slug, '' as step_slug, '' as status,
               visible as value from q
        union all select 'queue_hidden', queue_name, '', '', '', hidden from q
        union all select 'queue_oldest_visible_age', queue_name, '', '', '', oldest from q
        union all select 'runs', '', flow_slug, '', status, count(*)::float8
                    from pgflow.runs group by flow_slug, status
        union all select 'stalled_tasks', t.queue_name, t.flow_slug, t.step_slug, '', count(*)::float8
                    from pgflow.step_tasks as t
                    join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
                    join pgflow.flows as f on f.flow_slug = t.flow_slug
                   where t.status = 'started'
                     and t.started_at
                         < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                   group by t.queue_name, t.flow_slug, t.step_slug
        union all select 'live_workers', queue_name, flow_slug, step_slug, superseded, live::float8
                    from support
        union all select 'paused', '', flow_slug, step_slug, coalesce(reason, ''),
                         (reason is not null)::int::float8 from support
        """
    ).format(
        queues=queues,
        live=sql.SQL(LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip()),
    )
    return Query("database_metrics", statement, MetricSample)
