"""Every statement the Python side sends to the database, by name, with the rows it returns.

One home for the SQL run from Python (the worker, the client, commands, the admin, coverage, the
upgrade preflight, the tasks backend, schedules, the testing toolkit): each statement is a
:class:`Query`, whose result columns are named in the SELECT and read into a small typed row by those
names (never by position), through one small interface: :func:`fetch_all`, :func:`fetch_one` and
:func:`value`, on a Django cursor or a psycopg one alike. Migration-time SQL stays in ``pgflow_django/sql/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, NamedTuple, TypeVar

from psycopg import sql

from pgflow_django.schedules.views import ScheduleView, TickView

R = TypeVar("R")


@dataclass(frozen=True)
class Query(Generic[R]):
    """A named statement and the row type its result columns are read into, by column name."""

    name: str
    text: str | sql.Composed
    """The statement; composed by psycopg where it spans a list of queue tables."""
    row: Callable[..., R]

    def statement(self, **identifiers: str) -> str | sql.Composed:
        """The text, with ``{name}`` placeholders filled with quoted identifiers when it has any."""
        if not identifiers:
            return self.text
        assert isinstance(self.text, str)
        return sql.SQL(self.text).format(**{key: sql.Identifier(value) for key, value in identifiers.items()})


def read_rows(query: Query[R], description: Sequence[Any] | None, rows: Sequence[Sequence[Any]]) -> list[R]:
    """Rows read into ``query.row`` by the names of their columns (``description`` as a DB-API cursor
    gives it), so a column added or moved in the SELECT can never shift the others."""
    if description is None:
        return []
    names = [column[0] for column in description]
    return [query.row(**dict(zip(names, row, strict=True))) for row in rows]


def fetch_all(cursor: Any, query: Query[R], params: Any = None, **identifiers: str) -> list[R]:
    """Run ``query`` on a Django or psycopg cursor; every row, read into its row type."""
    cursor.execute(query.statement(**identifiers), params)
    if cursor.description is None:
        return []
    return read_rows(query, cursor.description, cursor.fetchall())


def fetch_one(cursor: Any, query: Query[R], params: Any = None, **identifiers: str) -> R | None:
    """The first row of ``query`` (None when it returned none)."""
    rows = fetch_all(cursor, query, params, **identifiers)
    return rows[0] if rows else None


class Value(NamedTuple):
    """The one column of a single-value statement (selected ``as value``)."""

    value: Any


def value(cursor: Any, query: Query[Value], params: Any = None, **identifiers: str) -> Any:
    """The single value of a one-column, one-row statement (None when it returned no row)."""
    row = fetch_one(cursor, query, params, **identifiers)
    return None if row is None else row.value


def _value(name: str, text: str) -> Query[Value]:
    return Query(name, text, Value)


# -- the worker's claim --------------------------------------------------------------------------------


class ClaimRow(NamedTuple):
    """One row of the claim: the read's totals on every row, and one task (or unclaimed message) each."""

    read_count: int
    next_visible: float | None
    flow_slug: str | None
    run_id: uuid.UUID | None
    step_slug: str | None
    task_index: int | None
    message_id: int | None
    attempt: int | None
    input: str | None
    outcome: str | None
    stale_flows: list[str] | None
    priority: int | None


_CLAIM_READ: Final = """
with stale as materialized (
  select coalesce(array_agg(g.flow_slug order by g.flow_slug), '{{}}'::text[]) as flows
    from unnest(%(gen_flows)s::text[], %(gens)s::bigint[]) as g(flow_slug, generation)
   where not exists (select 1 from pgflow.flows as f
                      where f.flow_slug = g.flow_slug and f.generation = g.generation)
), msgs as materialized (
  update pgmq.{table} as m
     set last_read_at = clock_timestamp(), vt = clock_timestamp() + make_interval(secs => %(vt)s),
         read_ct = m.read_ct + 1
    from (select msg_id from pgmq.{table}
           where vt <= clock_timestamp() and cardinality((select flows from stale)) = 0
           order by pgflow.message_priority(headers) desc, msg_id
           limit %(qty)s
             for update skip locked) as visible
   where m.msg_id = visible.msg_id
  returning m.msg_id, pgflow.message_priority(m.headers) as priority
), ids as (
  select coalesce(array_agg(msg_id order by msg_id), '{{}}'::bigint[]) as arr, count(*) as n from msgs
), next_visible as (
  select (select extract(epoch from q.vt - clock_timestamp())::float8
            from pgmq.{table} as q
           where q.msg_id <> all(ids.arr)
           order by q.vt
           limit 1) as seconds
    from ids
)
select ids.n as read_count, next_visible.seconds as next_visible,
       t.flow_slug, t.run_id, t.step_slug, t.task_index, t.message_id, t.attempt, t.input::text as input,
       t.outcome, stale.flows as stale_flows, read.priority
from ids cross join next_visible cross join stale
left join lateral """
"""Read and claim in one statement: one round trip, and a crash in between leaves nothing hidden.

The read is ``pgmq.read``'s own statement written out for this queue's table: PGMQ builds it as dynamic
SQL, planned again on every call, while psycopg prepares this statement on its connection once it has
run a few times (the planning was most of a one-message claim's cost).

It differs from ``pgmq.read`` in its order: higher message priority first (``pgflow.message_priority``
of the headers), message id (FIFO) within a priority, walking the queue's priority index
(``pgflow.index_queue_priority``), so the read stays a probe of the first visible entries. A retried or
released message is the same message made visible again: it keeps its priority and its place.

``next_visible`` (seen from the statement's snapshot, so without the messages it just read) says when
the earliest hidden message (a retry or start delay) becomes visible, from the queue's ``vt`` index
(the first entry not just read), so its cost does not grow with the backlog: notifications fire on insert
only, so a delayed message needs a timed read to be picked up on time.

Each task row carries its message's priority, so the worker runs what it holds in the claim's order.

``stale`` lists the worker's flows whose generation in ``pgflow.flows`` is no longer the one it compiled
against (replaced or recompiled since): then nothing is read. The check and the read share the
statement's snapshot, and a replaced flow's new messages are written by transactions that commit after
the replacement, so a read that could see one would also see the new generation: an old-shape worker is
never handed a task of the new shape.

The statement ends where the two claims differ: which function turns the read messages into tasks
(:func:`_claim` completes it).
"""


def _claim(name: str, start_tasks: str) -> Query[ClaimRow]:
    return Query(
        name,
        f"{_CLAIM_READ}{start_tasks} as t\n       on cardinality(ids.arr) > 0\n"
        "left join msgs as read on read.msg_id = t.message_id\n",
        ClaimRow,
    )


CLAIM: Final = _claim("claim", "pgflow.start_tasks(%(queue)s, %(flow)s, ids.arr, %(worker)s, %(step)s)")
"""The claim on a flow's queue (or one step's private queue); ``{table}`` is the queue's PGMQ table."""

CLAIM_SHARED: Final = _claim(
    "claim_shared",
    "pgflow.start_shared_tasks(%(queue)s, ids.arr, %(worker)s, %(flows)s::text[], %(steps)s::text[])",
)
"""The claim on a declared shared queue: it carries the worker's exact support set."""

CLAIM_VISIBILITY: Final = _value(
    "claim_visibility",
    """
    select max(coalesce(s.opt_timeout, f.opt_timeout)) + 2 as value
      from unnest(%s::text[], %s::text[]) as p(flow_slug, step_slug)
      join pgflow.steps as s on s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
      join pgflow.flows as f on f.flow_slug = s.flow_slug
    """,
)
"""The longest effective timeout + 2 s among (flow, step) pairs: the visibility the claim sets."""

NEXT_DEFERRED: Final = _value(
    "next_deferred",
    "select extract(epoch from min(w.visible_at) - clock_timestamp())::float8 as value"
    " from pgflow.limit_waits as w where w.queue_name = %s and w.visible_at > clock_timestamp()",
)
"""Seconds until the first task a limit deferred on this queue is due (None: none is waiting)."""

QUEUE_TABLE: Final = _value("queue_table", "select pgmq.format_table_name(%s, 'q') as value")

WRITE_QUEUE_ACCESS: Final = _value("write_queue_access", "select pgflow.write_queue_access() as value")
"""Check every pgflow queue's tables against PGMQ's layout and rewrite ``pgflow.queue_access`` if its
static branches changed; the queues that have a branch."""


class InsertNotifications(NamedTuple):
    notifies: bool
    throttle_ms: int


INSERT_NOTIFICATIONS: Final = Query(
    "insert_notifications",
    """
    select exists (
             select 1 from pg_trigger
              where tgrelid = to_regclass(format('pgmq.%%I', %s::text))
                and tgname in ('pgflow_notify_insert', 'trigger_notify_queue_insert_listeners')
                and not tgisinternal) as notifies,
           coalesce((select throttle_interval_ms from pgmq.notify_insert_throttle
                      where queue_name = %s), 0) as throttle_ms
    """,
    InsertNotifications,
)
"""Whether inserts into a queue notify listeners (the engine's trigger or PGMQ's), and PGMQ's throttle."""


class StepRoute(NamedTuple):
    flow_slug: str
    step_slug: str


SHARED_SUPPORT: Final = Query(
    "shared_support",
    "select flow_slug, step_slug from pgflow.steps where queue_name = %s and flow_slug = any(%s)"
    " order by flow_slug, step_index",
    StepRoute,
)
"""The (flow, step) pairs that the persisted routes of some flows send to one queue."""

LISTEN: Final = _value("listen", "listen {channel}")
"""Subscribe the listener's connection to a queue's insert channel."""

# -- worker registration and heartbeats ------------------------------------------------------------------

SEVERAL_QUEUES: Final = "*"
"""``pgflow.workers.queue_name`` of a worker that polls several queues (``worker_support`` names each)."""

HEARTBEAT: Final = _value(
    "heartbeat",
    """
    with worker as (
      insert into pgflow.workers (worker_id, queue_name, function_name)
      values (%(id)s, %(queue)s, %(name)s)
      on conflict (worker_id) do update set last_heartbeat_at = now()
      returning worker_id, deprecated_at is not null as deprecated, xmax = 0 as inserted
    ), support as (
      insert into pgflow.worker_support (worker_id, flow_slug, step_slug, queue_name)
      select worker.worker_id, s.flow_slug, s.step_slug, s.queue_name
        from worker
       cross join unnest(%(flows)s::text[], %(steps)s::text[], %(queues)s::text[])
             as s(flow_slug, step_slug, queue_name)
       where worker.inserted
      on conflict do nothing
    )
    select deprecated as value from worker
    """,
)
"""Register or refresh a worker (its support set too, when the row was pruned); true when deprecated."""

MARK_STOPPED: Final = _value(
    "mark_stopped",
    "update pgflow.workers set stopped_at = now(), last_heartbeat_at = now() where worker_id = %s",
)

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


SUBSCRIPTIONS_PAUSE: Final = Query(
    "subscriptions_pause",
    """
    select p.flow_slug, p.step_slug, p.queue_name, p.reason, p.detail
      from unnest(%s::text[], %s::text[]) as s(flow_slug, step_slug)
     cross join lateral pgflow.subscription_pause(s.flow_slug, s.step_slug) as p
     where p.flow_slug is not null
     order by (p.reason = 'fatal') desc, p.paused_at, p.flow_slug, p.step_slug
    """,
    Pause,
)
"""The pauses holding some of several subscriptions: each subscription's own pause is what
``pgflow.subscription_pause`` (the one definition) says; fatal ones first, then the oldest."""

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

PAUSE_SUBSCRIPTION: Final = Query(
    "pause_subscription",
    "select flow_slug, step_slug, queue_name, reason, detail "
    "from pgflow.pause_subscription(%s, %s, 'operator', %s)",
    Pause,
)
"""Set an operator pause (a fatal pause already there is kept)."""

LOCK_PAUSE: Final = Query(
    "lock_pause",
    "select flow_slug, step_slug, queue_name, reason, detail from pgflow.worker_pauses "
    "where flow_slug = %s and step_slug = %s for update",
    Pause,
)

RESUME_SUBSCRIPTION: Final = _value(
    "resume_subscription", "select pgflow.resume_subscription(%s, %s) as value"
)

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

TRY_STALLED_LOCK: Final = _value(
    "try_stalled_lock", "select pg_try_advisory_xact_lock(hashtext(%s)) as value"
)
WAIT_STALLED_LOCK: Final = _value(
    "wait_stalled_lock", "select pg_advisory_xact_lock(hashtext(%s)) is null as value"
)
SET_STALLED_LOCK_TIMEOUT: Final = _value(
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
        value(cursor, WAIT_STALLED_LOCK, [STALLED_LOCK_KEY])
    elif not value(cursor, TRY_STALLED_LOCK, [STALLED_LOCK_KEY]):
        return None
    value(cursor, SET_STALLED_LOCK_TIMEOUT, [STALLED_LOCK_TIMEOUT])
    return fetch_all(cursor, REQUEUE_STALLED)


# -- recording results -------------------------------------------------------------------------------------


class TaskOutcome(NamedTuple):
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    outcome: str


RELEASE_TASKS: Final = _value(
    "release_tasks",
    "select count(*) as value from pgflow.release_tasks(%s::jsonb) where outcome = 'released'",
)
"""Give claims back (attempt returned, message visible now); how many were still held."""

RETURN_UNSTARTED_TASKS: Final = _value(
    "return_unstarted_tasks",
    "select count(*) as value from pgflow.return_unstarted_tasks(%s::jsonb) where outcome = 'returned'",
)
"""Give back claims no handler started (attempt returned, message visible now); how many were held."""

COMPLETE_TASKS: Final = Query(
    "complete_tasks",
    "select run_id, step_slug, task_index, outcome from pgflow.complete_tasks(%s::jsonb)",
    TaskOutcome,
)


class HandOffRow(NamedTuple):
    """One row of ``pgflow.complete_and_hand_off``: an item's outcome (message columns NULL), or a task
    the completion claimed for the worker (outcome 'claimed')."""

    outcome: str
    message_id: int | None
    flow_slug: str | None
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    attempt: int | None
    input: str | None
    priority: int | None


COMPLETE_AND_HAND_OFF: Final = Query(
    "complete_and_hand_off",
    "select c.outcome, c.message_id, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.attempt,"
    " c.input::text as input,"
    " case when c.outcome = 'claimed' then (select coalesce(r.priority, s.opt_priority, f.opt_priority, 0)"
    " from pgflow.runs as r join pgflow.flows as f on f.flow_slug = r.flow_slug"
    " join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = c.step_slug"
    " where r.run_id = c.run_id) end as priority"
    " from pgflow.complete_and_hand_off(%(items)s::jsonb, %(queue)s, %(worker)s, %(flows)s::text[],"
    " %(steps)s::text[], %(gens)s::bigint[], %(slots)s) as c",
    HandOffRow,
)
"""Complete a batch and take, for this worker, the tasks it made ready on its queue (direct hand-off):
the next step of a chain starts without a notification, a read and a claim. A handed task's priority
is its message's (the run's, else the step's, else the flow's), for the order the worker runs them in."""

COMPLETE_TASK: Final = _value(
    "complete_task", "select pgflow.complete_task(%s, %s, %s, %s, %s::jsonb) as value"
)
"""One task's completion (run_id, step_slug, task_index, attempt, output json): its outcome."""

FAIL_TASK: Final = _value("fail_task", "select pgflow.fail_task(%s, %s, %s, %s, %s, %s::integer) as value")
REJECT_TASK: Final = _value("reject_task", "select pgflow.reject_task(%s, %s, %s, %s, %s) as value")

RUN_INPUT: Final = _value("run_input", "select input::text as value from pgflow.runs where run_id = %s")
"""A run's input as JSON text (a handler's ``ctx.flow_input``)."""


class TaskKeyRow(NamedTuple):
    run_id: uuid.UUID
    step_slug: str
    task_index: int


CANCELLED_TASKS: Final = Query(
    "cancelled_tasks",
    """
    select t.run_id, t.step_slug, t.task_index
      from unnest(%s::uuid[], %s::text[], %s::integer[]) as k(run_id, step_slug, task_index)
      join pgflow.step_tasks as t
        on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     where t.status = 'cancelled'
    """,
    TaskKeyRow,
)
"""Which of a worker's in-flight tasks were cancelled with their run (``cancel_run``, or a failed
run): one primary-key probe per task held, at most ``--concurrency`` of them, each heartbeat."""


class UnsupportedGroup(NamedTuple):
    flow_slug: str
    step_slug: str
    task_path: str | None
    message_ids: list[int]


UNSUPPORTED_WORK: Final = Query(
    "unsupported_work",
    """
    select t.flow_slug, t.step_slug, r.input ->> 'task' as task_path,
           array_agg(t.message_id order by t.message_id) as message_ids
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
     where t.queue_name = %s and t.message_id = any(%s)
     group by 1, 2, 3
     order by 1, 2, 3
    """,
    UnsupportedGroup,
)
"""Messages a shared-queue claim left alone, grouped by (flow, step) and the Django task they run."""

# -- starting, reading and cancelling runs -----------------------------------------------------------

START_FLOW: Final = _value(
    "start_flow",
    "select run_id as value from pgflow.start_flow(%s, %s::jsonb, %s::uuid, %s::integer, %s::integer)",
)


class ExistingRun(NamedTuple):
    flow_slug: str
    same_input: bool


EXISTING_RUN: Final = Query(
    "existing_run",
    "select flow_slug, input = %s::jsonb as same_input from pgflow.runs where run_id = %s",
    ExistingRun,
)
"""The run a chosen run id (or an idempotency key's) already names, and whether its input is this one."""


class TakenRunId(NamedTuple):
    run_id: uuid.UUID
    flow_slug: str


TAKEN_RUN_IDS: Final = Query(
    "taken_run_ids",
    "select run_id, flow_slug from pgflow.runs where run_id = any(%s::uuid[])",
    TakenRunId,
)
"""Which of a keyed ``start_flows``' run ids already name a run (they are not started again)."""
"""Start one run (flow slug, input json, run id or null, delay seconds or null); its id."""

START_FLOWS: Final = _value(
    "start_flows",
    "select count(*) as value from pgflow.start_flows(%s, %s::jsonb, %s::uuid[], null, %s::integer)",
)
"""Start one run per element of a JSON array of inputs, with the given run ids and priority."""

SET_TRACE_CONTEXT: Final = _value(
    "set_trace_context",
    "with traced as (update pgflow.runs set trace_context = %s::jsonb where run_id = any(%s::uuid[])"
    " returning 1) select count(*) as value from traced",
)
"""Record the starter's W3C trace context on runs it just started (in the starting transaction)."""

RECORD_RUN_KEYS: Final = _value(
    "record_run_keys",
    "with stored as (insert into pgflow.run_limit_keys (run_id, step_slug, kind, key)"
    " select * from unnest(%s::uuid[], %s::text[], %s::text[], %s::text[])"
    " on conflict do nothing returning 1) select count(*) as value from stored",
)
"""Store the callable limit keys of runs just started (in the starting transaction)."""


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

SET_FLOW_LIMITS: Final = _value("set_flow_limits", "select pgflow.set_flow_limits(%s, %s::jsonb) as value")
"""Replace a flow's concurrency and rate limits (after every compile or verification)."""


class TraceContextRow(NamedTuple):
    run_id: uuid.UUID
    trace_context: Any


RUN_TRACE_CONTEXTS: Final = Query(
    "run_trace_contexts",
    "select run_id, trace_context from pgflow.runs"
    " where run_id = any(%s::uuid[]) and trace_context is not null",
    TraceContextRow,
)
"""The recorded trace contexts of some runs (the worker's task spans join them)."""

CANCEL_RUN: Final = _value("cancel_run", "select pgflow.cancel_run(%s, %s) as value")
"""Cancel a started run (run id, reason or null): ``cancelled``, or the status it had finished with."""


class RunStepRow(NamedTuple):
    """A run and one of its step states (the step columns are null for a run without any)."""

    run_id: uuid.UUID
    flow_slug: str
    status: str
    input: str | None
    output: str | None
    error_message: str | None
    remaining_steps: int
    started_at: datetime
    completed_at: datetime | None
    failed_at: datetime | None
    step_slug: str | None
    step_type: str | None
    step_index: int | None
    step_status: str | None
    step_output: str | None
    step_error_message: str | None
    skip_reason: str | None
    remaining_tasks: int | None
    initial_tasks: int | None
    step_created_at: datetime | None
    step_started_at: datetime | None
    step_completed_at: datetime | None
    step_failed_at: datetime | None
    step_skipped_at: datetime | None


GET_RUN: Final = Query(
    "get_run",
    """
    select r.run_id, r.flow_slug, r.status, r.input::text as input, r.output::text as output,
           r.error_message, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
           s.step_slug, st.step_type, st.step_index, s.status as step_status,
           s.output::text as step_output, s.error_message as step_error_message, s.skip_reason,
           s.remaining_tasks, s.initial_tasks, s.created_at as step_created_at,
           s.started_at as step_started_at, s.completed_at as step_completed_at,
           s.failed_at as step_failed_at, s.skipped_at as step_skipped_at
      from pgflow.runs r
      left join pgflow.step_states s on s.run_id = r.run_id
      left join pgflow.steps st on st.flow_slug = s.flow_slug and st.step_slug = s.step_slug
     where r.run_id = %s
     order by st.step_index
    """,
    RunStepRow,
)
"""A run and its step states in one statement (one consistent snapshot), in step order."""


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
        where status = 'started' and (%(flow)s::text is null or flow_slug = %(flow)s)
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
        select queue_name from pgflow.steps where %(flow)s::text is null or flow_slug = %(flow)s
    )
    order by m.queue_name
    """,
    QueueDepthRow,
)
"""PGMQ's metrics of the queues the flows' steps use. ``queue_visible_length`` is read through jsonb
because older PGMQ releases do not report it."""

# -- the Django tasks backend ------------------------------------------------------------------------


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

# -- start-up checks ----------------------------------------------------------------------------------


class Signature(NamedTuple):
    signature: str


MISSING_FUNCTIONS: Final = Query(
    "missing_functions",
    "select sig as signature from unnest(%s::text[]) as sig where to_regprocedure(sig) is null",
    Signature,
)
"""Which of some function signatures the database does not define."""

PROTOCOL_VERSION: Final = _value("protocol_version", "select pgflow.protocol_version() as value")
HAS_WORKERS_TABLE: Final = _value(
    "has_workers_table", "select to_regclass('pgflow.workers') is not null as value"
)
HAS_PGMQ_SCHEMA: Final = _value(
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

BACKEND_PID: Final = _value("backend_pid", "select pg_backend_pid() as value")
"""The server process of this session (two sessions on one pooled server connection share it)."""

READ_ONLY_TRANSACTION: Final = _value("read_only_transaction", "set transaction read only")
"""Make the current transaction read-only (``pgflow_audit`` reads, never writes)."""

# -- the upgrade preflight (migration 0003) and its audit ---------------------------------------------

HAS_QUEUE_MODES: Final = _value(
    "has_queue_modes",
    "select exists (select 1 from pg_attribute where attrelid = to_regclass('pgflow.flows') "
    "and attname = 'queue_mode' and not attisdropped) as value",
)
"""Whether the database has migration 0005's queue modes (the refined audit checks apply)."""

SET_LOCK_TIMEOUT: Final = _value("set_lock_timeout", "select set_config('lock_timeout', %s, true) as value")
MIGRATE_LOCK: Final = _value(
    "migrate_lock", "select pg_advisory_xact_lock(hashtextextended(%s, 0)) is null as value"
)
HOLDS_MIGRATE_LOCK: Final = _value(
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
LOCK_UPGRADE_TABLES: Final = _value(
    "lock_upgrade_tables", f"lock table {', '.join(UPGRADE_LOCKED_TABLES)} in share row exclusive mode"
)
"""The tables the upgrade converts, locked against writers until the migration commits."""
LOCK_PGMQ_META: Final = _value("lock_pgmq_meta", "lock table pgmq.meta in share mode")

# -- compiling --------------------------------------------------------------------------------------

ENSURE_FLOW_COMPILED: Final = _value(
    "ensure_flow_compiled",
    "select pgflow.ensure_flow_compiled(%s, %s::jsonb, %s::text, %s::bigint)::text as value",
)
"""Compile or verify a flow (slug, shape json, shape-change policy, confirmed run count): a JSON answer."""

# -- maintenance operations -------------------------------------------------------------------------------

PRUNE: Final = _value(
    "prune", "select pgflow.prune_data_older_than(make_interval(secs => %s))::text as value"
)
PRUNE_SHARED_ARCHIVE: Final = _value(
    "prune_shared_archive", "select pgflow.prune_shared_archive(%s, make_interval(secs => %s)) as value"
)
DELETE_FLOW: Final = _value("delete_flow", "select pgflow.delete_flow_and_data(%s) as value")

# -- partitioned history ------------------------------------------------------------------------------

PARTITION_HISTORY: Final = Query(
    "partition_history",
    "select statement as value from pgflow.partition_history(make_interval(days => %s), %s, %s) as statement",
    Value,
)
"""The statements that partition the history (interval days, partitions ahead, apply): run when apply."""

PARTITION_LOCK_TIMEOUT: Final = "10s"
"""How long partitioning waits for the history tables' locks (a long transaction holding them makes the
conversion fail, with nothing changed, instead of queueing every start and claim behind it)."""


PARTITION_ARCHIVES: Final = Query(
    "partition_archives",
    "select statement as value from pgflow.partition_archives(%s) as statement",
    Value,
)
"""The statements that partition the queue archives of a history partitioned before (apply): run when
apply."""


class HistoryPartitioning(NamedTuple):
    partition_interval_days: int
    ahead: int
    partitions: int
    archives: bool
    partitioned_archives: int
    engine_archives: int


HISTORY_PARTITIONING: Final = Query(
    "history_partitioning",
    "select extract(day from hp.partition_interval)::integer as partition_interval_days, hp.ahead,"
    " (select count(*) from pg_inherits as inh where inh.inhparent = 'pgflow.runs'::regclass)::integer - 1"
    "   as partitions,"
    " hp.archives,"
    " a.partitioned_archives, a.engine_archives"
    " from pgflow.history_partitioning as hp"
    " cross join (select (count(*) filter (where c.relkind = 'p'))::integer as partitioned_archives,"
    "                    count(c.oid)::integer as engine_archives"
    "               from pgflow.engine_queues() as e(queue_name)"
    "               join pg_class as c"
    "               on c.oid = to_regclass('pgmq.' || quote_ident(pgmq.format_table_name(e.queue_name, 'a')))"
    "            ) as a",
    HistoryPartitioning,
)
"""A partitioned install's settings, how many interval partitions it has, and how many of the engine
queues' archives are partitioned."""

DEFAULT_PARTITION_RUNS: Final = _value(
    "default_partition_runs", "select count(*) as value from pgflow.runs_default"
)
"""The runs a partitioned history's default partition holds (ids that are not time-ordered)."""

CREATE_HISTORY_PARTITIONS: Final = _value(
    "create_history_partitions", "select pgflow.create_history_partitions() as value"
)
"""Create the missing future history partitions (0 on a plain install or when another caller is)."""

HISTORY_PARTITIONS_LOCK_TIMEOUT: Final = "2s"
"""How long the worker's partition upkeep waits for a lock before trying again at its next pass."""


class FlowSlugRow(NamedTuple):
    flow_slug: str


COMPILED_FLOWS: Final = Query(
    "compiled_flows", "select flow_slug from pgflow.flows order by flow_slug", FlowSlugRow
)
COMPILED_FLOW_COUNT: Final = _value("compiled_flow_count", "select count(*) as value from pgflow.flows")


class TaskFlowRow(NamedTuple):
    flow_slug: str
    queue_name: str
    task_path: str | None
    """The function a run of it names (``input ->> 'task'``; every run names the same one, which the
    slug's hash fixes); None when it has no run."""


TASK_FLOWS: Final = Query(
    "task_flows",
    """
    select f.flow_slug, s.queue_name,
           (select r.input ->> 'task' from pgflow.runs r
             where r.flow_slug = f.flow_slug limit 1) as task_path
      from pgflow.flows f
      join pgflow.steps s on s.flow_slug = f.flow_slug and s.step_slug = %(step)s
     where f.queue_mode = 'routed' and f.flow_slug ~ %(pattern)s
     order by f.flow_slug
    """,
    TaskFlowRow,
)
"""The flows the tasks backend made (routed, a ``call`` step, a hashed slug), each with the function
path one of its runs names: one probe of the index ``runs (flow_slug, status)`` per task flow."""


class FlowUsage(NamedTuple):
    exists: bool
    runs: int
    active_runs: int
    live_workers: int
    shared_queues: list[str]


FLOW_USAGE: Final = Query(
    "flow_usage",
    """
    select exists (select 1 from pgflow.flows where flow_slug = %(slug)s) as exists,
           (select count(*) from pgflow.runs where flow_slug = %(slug)s) as runs,
           (select count(*) from pgflow.runs
             where flow_slug = %(slug)s and status = 'started') as active_runs,
           (select count(*) from pgflow.workers as w
             where """
    + LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip()
    + """
               and exists (select 1 from pgflow.worker_support as s
                            where s.worker_id = w.worker_id and s.flow_slug = %(slug)s)) as live_workers,
           (select coalesce(array_agg(distinct s.queue_name order by s.queue_name), '{}')
              from pgflow.steps as s
              join pgflow.shared_queues as sq on sq.queue_name = s.queue_name
             where s.flow_slug = %(slug)s) as shared_queues
    """,
    FlowUsage,
)
"""What deleting a flow would remove, and who still uses it."""


RERUN: Final = _value("rerun", "select pgflow.rerun(%s) as value")
"""Start a new run linked to a finished one (the admin's re-run action); its id."""

RETRY_RUN: Final = _value("retry_run", "select pgflow.retry_run(%s) as value")
"""Continue a failed run from where it failed (the admin's retry action); how many tasks it queued."""

# -- coverage ------------------------------------------------------------------------------------------


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


COVERAGE_SQL: Final = (
    """\
-- pgflow coverage: each (queue, flow, step) that a persisted route or a live task needs,
-- with the live workers that poll that queue and run that step. Parameters: the first lines.
with params (live_seconds, flow_slug) as (
  values ({live_seconds}::float8, {flow}::text)  -- heartbeat window in seconds; one flow, or null for all
),
live_support as (
  select w.worker_id, coalesce(ws.queue_name, w.queue_name) as queue_name, ws.flow_slug, ws.step_slug
    from pgflow.workers as w
    join pgflow.worker_support as ws on ws.worker_id = w.worker_id
   cross join params as p
   where """
    + LIVE_WORKER.format(live_seconds="p.live_seconds").strip().replace("\n", "\n     ")
    + """
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
       (select wp.reason from pgflow.subscription_pause(n.flow_slug, n.step_slug) as wp) as paused
  from needed as n
  join pgflow.flows as f on f.flow_slug = n.flow_slug
  join pgflow.steps as s on s.flow_slug = n.flow_slug and s.step_slug = n.step_slug
 order by n.flow_slug, s.step_index, n.in_route desc, n.queue_name;
"""
)
COVERAGE: Final = Query("coverage", COVERAGE_SQL, RouteCoverage)
"""The coverage query, with ``{live_seconds}`` and ``{flow}`` placeholders for SQL literals (see
``coverage.coverage_sql``: an operator can paste exactly what ``pgflow_coverage`` ran)."""


class StepServiceRow(NamedTuple):
    """One step of a flow (its persisted route) and the live workers that run it there."""

    flow_slug: str
    queue_mode: str
    step_slug: str
    queue_name: str
    live_workers: int


_LIVE_STEP_WORKERS: Final = (
    """(select count(*) from pgflow.workers as w
             join pgflow.worker_support as ws on ws.worker_id = w.worker_id
            where coalesce(ws.queue_name, w.queue_name) = {queue}
              and ws.flow_slug = {flow} and ws.step_slug = {step}
              and """
    + LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip().replace("\n", "\n              ")
    + ")"
)
"""The live workers that poll a queue and registered a (flow, step): coverage's rule, per row."""

FLOW_SERVICE: Final = Query(
    "flow_service",
    f"""
    select s.flow_slug, f.queue_mode, s.step_slug, s.queue_name,
           {_LIVE_STEP_WORKERS.format(queue="s.queue_name", flow="s.flow_slug", step="s.step_slug")}
             as live_workers
      from pgflow.steps as s
      join pgflow.flows as f on f.flow_slug = s.flow_slug
     where s.flow_slug = any(%(flows)s)
     order by s.flow_slug, s.step_index
    """,
    StepServiceRow,
)
"""Each step of some flows with its live workers (on its persisted route), for the warnings that a
schedule's or a run's flow has no live worker."""

RUN_UNSERVED_STEPS: Final = Query(
    "run_unserved_steps",
    f"""
    select u.flow_slug, u.queue_mode, u.step_slug, u.queue_name, 0 as live_workers
      from (select distinct t.flow_slug, f.queue_mode, t.step_slug, t.queue_name, s.step_index
              from pgflow.step_tasks as t
              join pgflow.flows as f on f.flow_slug = t.flow_slug
              join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
             where t.run_id = %(run_id)s and t.status in ('queued', 'started')
               and {_LIVE_STEP_WORKERS.format(queue="t.queue_name", flow="t.flow_slug", step="t.step_slug")}
                   = 0) as u
     order by u.step_index, u.queue_name
    """,
    StepServiceRow,
)
"""The steps whose queued or started tasks of one run no live worker would claim (the run waits)."""

LIVE_WORKER_COUNT: Final = _value(
    "live_worker_count",
    "select count(*) as value from pgflow.workers as w where "
    + LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip(),
)
"""Live workers of any queue: with ``PGFLOW["SCHEDULER"] = "workers"``, none means nothing fires
schedules (unless ``pgflow_scheduler`` runs)."""


# -- schedules (pgflow_django.schedules) ------------------------------------------------------------


_SCHEDULE_COLUMNS: Final = """
select schedule_name as name, flow_slug, cron, timezone, input::text as input, input_callable, catch_up,
       max_catch_up, jitter_seconds as jitter, enabled, paused_reason, paused_detail, paused_at, origin,
       revision, upcoming, next_fire_at, last_tick, last_fired_at, last_run_id, missed_ticks, last_error,
       created_at, updated_at, plan_error, plan_failed_at
  from pgflow.schedules"""

GET_SCHEDULE: Final = Query(
    "get_schedule", f"{_SCHEDULE_COLUMNS} where schedule_name = %s", ScheduleView.from_columns
)
LOCK_SCHEDULE: Final = Query(
    "lock_schedule", f"{_SCHEDULE_COLUMNS} where schedule_name = %s for update", ScheduleView.from_columns
)
"""One schedule, locked until the caller's transaction ends: the API's changes wait on a firing pass
that holds it, and the other way round."""
ALL_SCHEDULES: Final = Query(
    "all_schedules", f"{_SCHEDULE_COLUMNS} order by schedule_name", ScheduleView.from_columns
)

CREATE_SCHEDULE: Final = _value(
    "create_schedule",
    """
    insert into pgflow.schedules (schedule_name, flow_slug, cron, timezone, input, input_callable,
                                  catch_up, max_catch_up, jitter_seconds, enabled, origin)
    values (%(name)s, %(flow_slug)s, %(cron)s, %(timezone)s, %(input)s::jsonb, %(input_callable)s,
            %(catch_up)s, %(max_catch_up)s, %(jitter)s, %(enabled)s, 'runtime')
    on conflict (schedule_name) do nothing
    returning schedule_name as value
    """,
)
"""Insert a runtime schedule (the parameters of ``ScheduleSpec.parameters``); no row when the name is
taken."""

_REPLAN: Final = """((s.cron, s.timezone, s.jitter_seconds)
                      is distinct from (%(cron)s, %(timezone)s, %(jitter)s)
                   or (%(enabled)s and not s.enabled))"""

EDIT_SCHEDULE: Final = _value(
    "edit_schedule",
    f"""
    update pgflow.schedules as s
       set flow_slug = %(flow_slug)s, cron = %(cron)s, timezone = %(timezone)s, input = %(input)s::jsonb,
           input_callable = %(input_callable)s, catch_up = %(catch_up)s, max_catch_up = %(max_catch_up)s,
           jitter_seconds = %(jitter)s, enabled = %(enabled)s,
           revision = s.revision + 1, updated_at = clock_timestamp(),
           upcoming = case when {_REPLAN} then '{{}}' else s.upcoming end,
           planned_until = case when {_REPLAN} then clock_timestamp() else s.planned_until end,
           next_fire_at = case when {_REPLAN} then null
                               else pgflow.schedule_next_fire_at(s.schedule_name, s.upcoming, %(jitter)s) end
     where s.schedule_name = %(name)s
    """,
)
"""Store a runtime schedule's new definition. When its ticks move (cron, timezone, jitter) or it is
enabled again, the planned ticks are dropped and planned again from now; else they stay."""

PAUSE_SCHEDULE: Final = _value(
    "pause_schedule",
    "update pgflow.schedules set paused_reason = 'operator', paused_detail = %s,"
    " paused_at = clock_timestamp(), updated_at = clock_timestamp() where schedule_name = %s",
)

RESUME_SCHEDULE: Final = _value(
    "resume_schedule",
    """
    update pgflow.schedules as s
       set paused_reason = null, paused_detail = null, paused_at = null, updated_at = clock_timestamp(),
           upcoming = r.upcoming,
           missed_ticks = s.missed_ticks + cardinality(s.upcoming) - cardinality(r.upcoming),
           planned_until = greatest(s.planned_until, %(now)s),
           next_fire_at = pgflow.schedule_next_fire_at(s.schedule_name, r.upcoming, s.jitter_seconds)
      from (select coalesce(array(select u.tick from unnest(x.upcoming) as u(tick)
                                   where pgflow.schedule_fire_at(x.schedule_name, u.tick, x.jitter_seconds)
                                         > %(now)s
                                   order by u.tick), '{}') as upcoming
              from pgflow.schedules as x where x.schedule_name = %(name)s) as r
     where s.schedule_name = %(name)s
    """,
)
"""Lift a pause: the planned ticks due by ``now`` are dropped and counted as missed."""

SCHEDULE_TICK_COUNT: Final = _value(
    "schedule_tick_count", "select count(*) as value from pgflow.schedule_ticks where schedule_name = %s"
)
DELETE_SCHEDULE: Final = _value("delete_schedule", "delete from pgflow.schedules where schedule_name = %s")
"""Delete a schedule; its ledger rows go with it (the runs stay)."""

TRIGGER_SCHEDULE: Final = _value(
    "trigger_schedule", "select pgflow.trigger_schedule(%s, %s, %s::jsonb) as value"
)
"""Start one ``manual`` run of a schedule (name, now, input json or null for the stored one); its id."""


RECENT_TICKS: Final = Query(
    "recent_ticks",
    "select schedule_name, tick, run_id, kind, fired_at from pgflow.schedule_ticks"
    " where schedule_name = %s order by tick desc limit %s",
    TickView.from_columns,
)
"""A schedule's latest fired ticks, newest first."""


class PlanCandidate(NamedTuple):
    """A schedule running low on planned ticks, or whose planned ticks are all in the past, with what
    planning after its last one needs."""

    schedule_name: str
    cron: str
    timezone: str
    catch_up: str
    max_catch_up: int
    revision: int
    planned: int
    last_planned: datetime | None
    planned_until: datetime | None
    last_tick: datetime | None


SCHEDULES_TO_PLAN: Final = Query(
    "schedules_to_plan",
    """
    select s.schedule_name, s.cron, s.timezone, s.catch_up, s.max_catch_up, s.revision,
           cardinality(s.upcoming) as planned, s.upcoming[cardinality(s.upcoming)] as last_planned,
           s.planned_until, s.last_tick
      from pgflow.schedules as s
     where s.schedule_name in (
             select l.schedule_name from pgflow.schedules as l
              where l.enabled and l.paused_reason is null and cardinality(l.upcoming) < %(low_water)s
             union all
             select d.schedule_name from pgflow.schedules as d
              where d.enabled and d.paused_reason is null and d.next_fire_at <= %(now)s
                and d.upcoming[cardinality(d.upcoming)] <= %(now)s)
       and s.planned_until is distinct from 'infinity'
       and (%(names)s::text[] is null or s.schedule_name = any(%(names)s::text[]))
       and (%(names)s::text[] is not null or s.plan_failed_at is null
            or s.plan_failed_at <= %(now)s - %(retry)s::interval)
     order by s.plan_error is not null, coalesce(s.upcoming[cardinality(s.upcoming)] > %(now)s, false),
              cardinality(s.upcoming), s.schedule_name
     limit %(limit)s
    """,
    PlanCandidate,
)
"""The active schedules holding fewer than ``low_water`` ticks or none after ``now`` while their first
is due (only ``names`` unless null): those that can fire nothing first, then the fewest ticks first,
and those whose planning failed last; a failed one only once ``retry`` has passed, unless named.
Two branches, so each uses its partial index (an ``or`` scans every schedule on every pass)."""

DATABASE_NOW: Final = _value("database_now", "select clock_timestamp() as value")
"""The database server's clock, which schedules plan and fire on."""


class ScheduleNameRow(NamedTuple):
    schedule_name: str


PLAN_SCHEDULES: Final = Query(
    "plan_schedules",
    "select p.schedule_name from pgflow.plan_schedules(%s::jsonb) as p(schedule_name)",
    ScheduleNameRow,
)
"""Store plans (a JSON array); the names planned (a plan of a definition edited meanwhile is refused)."""

TRY_FIRE_LOCK: Final = _value(
    "try_fire_lock", "select pg_try_advisory_xact_lock(hashtextextended(%s, 0)) as value"
)
"""The firing lock ``pgflow.fire_due_schedules`` takes, taken first so Python can evaluate inputs under it."""


class DueCallableTick(NamedTuple):
    schedule_name: str
    tick: datetime
    input_callable: str
    timezone: str
    input: str
    """The payload template (JSON text) the callable's result goes into."""


DUE_CALLABLE_TICKS: Final = Query(
    "due_callable_ticks",
    """
    select d.schedule_name, d.tick, d.input_callable, d.timezone, d.input::text as input
      from pgflow.schedule_due_ticks(pgflow.due_schedule_names(%s, %s, true), %s, %s) as d
     where d.fire and d.input_callable is not null
     order by d.schedule_name, d.tick
    """,
    DueCallableTick,
)
"""The due ticks of callable-input schedules that fire now (now, max schedules, now, grace)."""

RECORD_SCHEDULE_ERRORS: Final = _value(
    "record_schedule_errors",
    """
    update pgflow.schedules as s set last_error = left(f.error, 2000)
      from jsonb_each_text(%s::jsonb) as f(name, error) where s.schedule_name = f.name
    """,
)
"""Record each held-back schedule's error (a JSON object of name: error)."""


class FiredTickRow(NamedTuple):
    schedule_name: str
    tick: datetime
    run_id: uuid.UUID


FIRE_DUE_SCHEDULES: Final = Query(
    "fire_due_schedules",
    "select schedule_name, tick, run_id from pgflow.fire_due_schedules(%s, %s, %s::jsonb, %s)",
    FiredTickRow,
)
"""Fire the due ticks (now, max schedules, callable inputs json, grace): each fired tick and its run."""

SYNC_SCHEDULES_LOCK: Final = _value(
    "sync_schedules_lock", "select pg_advisory_xact_lock(hashtextextended(%s, 0)) is null as value"
)
"""Concurrent syncs of the declared schedules queue here, so each sees the previous one's result."""


class StoredTiming(NamedTuple):
    """What a sync compares to decide whether a declared schedule's ticks are planned again."""

    origin: str
    cron: str
    timezone: str
    jitter_seconds: int
    enabled: bool
    paused_reason: str | None


LOCK_STORED_TIMING: Final = Query(
    "lock_stored_timing",
    "select origin, cron, timezone, jitter_seconds, enabled, paused_reason"
    " from pgflow.schedules where schedule_name = %s for update",
    StoredTiming,
)


class Upserted(NamedTuple):
    inserted: bool


SYNC_DECLARED_SCHEDULE: Final = Query(
    "sync_declared_schedule",
    """
    insert into pgflow.schedules as s (schedule_name, flow_slug, cron, timezone, input, input_callable,
                                       catch_up, max_catch_up, jitter_seconds, enabled, origin)
    values (%(name)s, %(flow_slug)s, %(cron)s, %(timezone)s, %(input)s::jsonb, %(input_callable)s,
            %(catch_up)s, %(max_catch_up)s, %(jitter)s, %(enabled)s, 'code')
    on conflict (schedule_name) do update
       set flow_slug = excluded.flow_slug, cron = excluded.cron, timezone = excluded.timezone,
           input = excluded.input, input_callable = excluded.input_callable, catch_up = excluded.catch_up,
           max_catch_up = excluded.max_catch_up, jitter_seconds = excluded.jitter_seconds,
           enabled = excluded.enabled, revision = s.revision + 1, updated_at = clock_timestamp(),
           paused_reason = case when s.paused_reason = 'removed_from_code' then null else s.paused_reason end,
           paused_detail = case when s.paused_reason = 'removed_from_code' then null else s.paused_detail end,
           paused_at = case when s.paused_reason = 'removed_from_code' then null else s.paused_at end,
           upcoming = case when %(replan)s then '{}' else s.upcoming end,
           planned_until = case when %(replan)s then clock_timestamp() else s.planned_until end,
           next_fire_at = case when %(replan)s then null else s.next_fire_at end
     where s.origin = 'code'
       and ((s.flow_slug, s.cron, s.timezone, s.input, s.input_callable, s.catch_up, s.max_catch_up,
             s.jitter_seconds, s.enabled)
            is distinct from (excluded.flow_slug, excluded.cron, excluded.timezone, excluded.input,
                              excluded.input_callable, excluded.catch_up, excluded.max_catch_up,
                              excluded.jitter_seconds, excluded.enabled)
            or s.paused_reason = 'removed_from_code')
    returning (xmax = 0) as inserted
    """,
    Upserted,
)
"""Create a declared schedule or bring its stored definition in line (``replan``: drop its planned
ticks); no row when it was already in line or is a runtime schedule."""

MARK_REMOVED_FROM_CODE: Final = Query(
    "mark_removed_from_code",
    """
    update pgflow.schedules
       set paused_reason = 'removed_from_code', paused_detail = null, paused_at = clock_timestamp(),
           updated_at = clock_timestamp()
     where origin = 'code' and not (schedule_name = any(%s::text[]))
       and paused_reason is distinct from 'removed_from_code'
    returning schedule_name
    """,
    ScheduleNameRow,
)
"""Pause the declared schedules missing from the code now (a list of the declared names)."""

SCHEDULE_NAMES: Final = Query(
    "schedule_names", "select schedule_name from pgflow.schedules order by schedule_name", ScheduleNameRow
)


class FireTime(NamedTuple):
    fire_at: datetime


SCHEDULE_FIRE_TIMES: Final = Query(
    "schedule_fire_times",
    "select pgflow.schedule_fire_at(%s, u.tick, %s) as fire_at from unnest(%s::timestamptz[]) as u(tick)"
    " order by 1 limit %s",
    FireTime,
)
"""When some planned ticks of a schedule fire, jitter included (name, jitter, ticks, limit), earliest
first."""

HAS_SCHEDULES_TABLE: Final = _value(
    "has_schedules_table", "select to_regclass('pgflow.schedules') is not null as value"
)


class StoredScheduleCheck(NamedTuple):
    """What the database checks of schedules read of each stored schedule."""

    name: str
    cron: str
    timezone: str
    origin: str
    flow_slug: str
    active: bool
    compiled: bool
    task_path: str | None
    """The task of a ``@task`` schedule (its input's ``task``), else None."""
    plan_error: str | None
    plan_failed_at: datetime | None


STORED_SCHEDULE_CHECKS: Final = Query(
    "stored_schedule_checks",
    """
    select s.schedule_name as name, s.cron, s.timezone, s.origin, s.flow_slug,
           s.enabled and s.paused_reason is null as active,
           exists (select 1 from pgflow.flows as f where f.flow_slug = s.flow_slug) as compiled,
           case when jsonb_typeof(s.input) = 'object' then s.input ->> 'task' end as task_path,
           s.plan_error, s.plan_failed_at
      from pgflow.schedules as s order by s.schedule_name
    """,
    StoredScheduleCheck,
)

PG_CRON_JOB_LOCK: Final = _value(
    "pg_cron_job_lock", "select pg_advisory_xact_lock(hashtextextended(%s, 0)) is null as value"
)
"""Concurrent syncs of the pg_cron job (deploys running ``migrate`` at once) queue here."""


class PgCronState(NamedTuple):
    extversion: str | None
    """The installed pg_cron's version; None without the extension."""
    migrated: bool
    """Whether pgflow's firing function exists (the job has something to call)."""


PG_CRON_STATE: Final = Query(
    "pg_cron_state",
    """
    select (select extversion from pg_extension where extname = 'pg_cron') as extversion,
           exists (select 1 from pg_proc as p join pg_namespace as n on n.oid = p.pronamespace
                    where n.nspname = 'pgflow' and p.proname = 'fire_due_schedules') as migrated
    """,
    PgCronState,
)
PG_CRON_USABLE: Final = _value(
    "pg_cron_usable",
    "select has_schema_privilege('cron', 'USAGE') and has_table_privilege('cron.job', 'SELECT') as value",
)
"""Whether the current user may see its pg_cron jobs."""


class PgCronJob(NamedTuple):
    jobid: int
    schedule: str
    command: str
    active: bool


PG_CRON_JOBS: Final = Query(
    "pg_cron_jobs",
    "select jobid, schedule, command, active from cron.job"
    " where jobname = %s and username = current_user order by jobid",
    PgCronJob,
)
"""The current user's pg_cron jobs of a name, oldest first."""

PG_CRON_UNSCHEDULE: Final = _value("pg_cron_unschedule", "select cron.unschedule(%s::bigint) as value")
PG_CRON_ALTER_JOB: Final = _value(
    "pg_cron_alter_job",
    "select cron.alter_job(%s::bigint, schedule => %s, command => %s, active => true) is null as value",
)
"""Set a job's schedule and command and make it active (job id, schedule, command)."""
PG_CRON_SCHEDULE: Final = _value("pg_cron_schedule", "select cron.schedule(%s, %s, %s) as value")
"""Register a pg_cron job (name, schedule, command); its job id."""


# -- the testing toolkit (pgflow_django.testing) ---------------------------------------------------------

SAVEPOINT: Final = _value("savepoint", 'savepoint "pgflow_testing"')
RELEASE_SAVEPOINT: Final = _value("release_savepoint", 'release savepoint "pgflow_testing"')
ROLLBACK_TO_SAVEPOINT: Final = _value("rollback_to_savepoint", 'rollback to savepoint "pgflow_testing"')
"""In-process statements each run in this savepoint of the test's transaction, as a worker's each
stand alone: an error undoes only that statement."""


FLOWS_WITH_STARTED_RUNS: Final = Query(
    "flows_with_started_runs",
    "select distinct flow_slug from pgflow.runs where status = 'started' order by 1",
    FlowSlugRow,
)


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


class RunStatusRow(NamedTuple):
    run_id: uuid.UUID
    status: str


RUN_STATUSES: Final = Query(
    "run_statuses", "select run_id, status from pgflow.runs where run_id = any(%s)", RunStatusRow
)


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


OPEN_TASKS: Final = Query(
    "open_tasks",
    """
    select r.run_id, r.flow_slug, t.step_slug, t.task_index, t.status, t.attempts_count as attempts,
           t.last_worker_id, t.message_id
      from pgflow.runs as r
      left join pgflow.step_tasks as t on t.run_id = r.run_id and t.status in ('queued', 'started')
     where r.status = 'started' and (%(flows)s::text[] is null or r.flow_slug = any(%(flows)s::text[]))
     order by r.started_at, r.run_id, t.step_slug, t.task_index
     limit 200
    """,
    OpenTask,
)
"""What a drain left unfinished: started runs and their open tasks, oldest first."""


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


# -- observability --------------------------------------------------------------------------------------


class Transition(NamedTuple):
    """What recording one task's result changed, each flag true only when this task's transaction
    made it. ``complete_tasks``, ``fail_task`` and ``reject_task`` lock the run before anything else,
    so a run's transactions are serialised: a step (or run) finished by a task completion was finished
    by the transaction of its latest-completed task, and a failed one by that of its first failed
    task. Tasks of one transaction may tie: the caller sends one signal per step and run."""

    flow_slug: str
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    step_completed: bool
    step_failed: bool
    run_completed: bool
    run_failed: bool
    error_message: str | None


TRANSITIONS: Final = Query(
    "transitions",
    """
    select t.flow_slug, t.run_id, t.step_slug, t.task_index,
           coalesce(ss.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.step_slug = t.step_slug and o.completed_at > t.completed_at
           ), false) as step_completed,
           coalesce(ss.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.step_slug = t.step_slug and o.failed_at < t.failed_at
           ), false) as step_failed,
           coalesce(r.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.completed_at > t.completed_at
           ), false) as run_completed,
           coalesce(r.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.failed_at < t.failed_at
           ), false) as run_failed,
           t.error_message
      from unnest(%s::uuid[], %s::text[], %s::int[]) as k(run_id, step_slug, task_index)
      join pgflow.step_tasks as t
        on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
      join pgflow.runs as r on r.run_id = t.run_id
    """,
    Transition,
)
"""The step and run transitions some just-recorded task results made (for ``pgflow_django.signals``)."""


SET_LOCAL_STATEMENT_TIMEOUT: Final = _value(
    "set_local_statement_timeout", "select set_config('statement_timeout', %s, true) as value"
)


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
    stalled tasks by flow and step; live workers and pauses by flow and step. Its parameter is
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
        support as (
          select s.flow_slug, s.step_slug, s.queue_name,
                 (select count(*) from pgflow.worker_support as ws join pgflow.workers as w
                      on w.worker_id = ws.worker_id
                   where ws.flow_slug = s.flow_slug and ws.step_slug = s.step_slug
                     and coalesce(ws.queue_name, w.queue_name) = s.queue_name and {live}) as live,
                 p.reason
            from pgflow.steps as s
            left join lateral pgflow.subscription_pause(s.flow_slug, s.step_slug) as p on true
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
        union all select 'live_workers', queue_name, flow_slug, step_slug, '', live::float8 from support
        union all select 'paused', '', flow_slug, step_slug, coalesce(reason, ''),
                         (reason is not null)::int::float8 from support
        """
    ).format(
        queues=queues,
        live=sql.SQL(LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip()),
    )
    return Query("database_metrics", statement, MetricSample)


# -- the admin dashboard (one bounded statement per panel) ----------------------------------------------


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
     where t.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
     order by t.started_at
     limit 50
    """,
    StalledTaskRow,
)
"""Started tasks whose claim is older than their step's timeout + 30 s: what
``pgflow.requeue_stalled_tasks`` will recover on its next pass (the same condition)."""
