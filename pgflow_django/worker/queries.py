"""The statements only the worker sends: the claim, registration and heartbeats, pauses and
cancellations it brings back, and recording results with the hand-off."""

from __future__ import annotations

import uuid
from typing import Any, Final, NamedTuple

from pgflow_django.db.queries import Pause
from pgflow_django.db.query import Query, value_query

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
    trace_context: Any


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
           where vt <= clock_timestamp() and cardinality((select flows from stale)) = 0{versions}
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
           where q.msg_id <> all(ids.arr){versions_next}
           order by q.vt
           limit 1) as seconds
    from ids
), claimed as materialized (
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

Each task row carries its message's priority, so the worker runs what it holds in the claim's order,
and, when ``traced`` (the worker records spans), its run's trace context: no second statement reads it.
The trace contexts come from ``pgflow.task_details``, so the statement reads no history table itself:
planned under the session's settings, its own probe of a partitioned ``runs`` was priced over every
partition and, past ``jit_above_cost``, JIT-compiled on each execution.

``stale`` lists the worker's flows whose generation in ``pgflow.flows`` is no longer the one it compiled
against (replaced or recompiled since): then nothing is read. The check and the read share the
statement's snapshot, and a replaced flow's new messages are written by transactions that commit after
the replacement, so a read that could see one would also see the new generation: an old-shape worker is
never handed a task of the new shape.

On a shared queue the read passes over the messages of other versions of the worker's flows (the same
flow's slug, another stored slug: ``pgflow.version_of``), so an old-code worker never hides a new
version's task from the workers that run it, nor reads it again and again; other flows' messages are
read and left as before (a worker names them once, ``UnsupportedWork``).

The statement ends where the two claims differ: which function turns the read messages into tasks
(:func:`_claim` completes it).
"""


_CLAIM_UNTRACED: Final = """
)
select c.*, null::jsonb as trace_context
  from claimed as c
"""

_CLAIM_TRACED: Final = """
), traced as materialized (
  select distinct on (d.run_id) d.run_id, d.trace_context
    from pgflow.task_details(array(select c.run_id from claimed as c where c.outcome = 'claimed'),
                             array(select c.step_slug from claimed as c where c.outcome = 'claimed'),
                             true) as d
   where exists (select 1 from claimed as c where c.outcome = 'claimed')
   order by d.run_id
)
select c.*, d.trace_context
  from claimed as c
  left join traced as d on c.outcome = 'claimed' and d.run_id = c.run_id
 order by c.message_id
"""


_OTHER_VERSIONS_LEFT: Final = """
             and ({alias}message->>'flow_slug' is null
                  or pgflow.version_of({alias}message->>'flow_slug') <> all(%(families)s::text[])
                  or {alias}message->>'flow_slug' = any(%(flows)s::text[]))"""
"""The shared claim's filter: a message of another version of one of the worker's flows is neither read
nor counted as due (``next_visible``), so a worker never spins on another version's backlog."""


def _read(shared: bool) -> str:
    """The claim's read, with the shared claim's filter of other versions' messages in both places."""
    if not shared:
        return _CLAIM_READ.replace("{versions}", "").replace("{versions_next}", "")
    return _CLAIM_READ.replace("{versions}", _OTHER_VERSIONS_LEFT.replace("{alias}", "")).replace(
        "{versions_next}",
        _OTHER_VERSIONS_LEFT.replace("{alias}", "q.").replace("\n             ", "\n           "),
    )


def _claim(name: str, start_tasks: str, *, traced: bool, shared: bool = False) -> Query[ClaimRow]:
    """The claim with ``start_tasks`` turning the read messages into tasks (one row per message, in
    message id order); ``traced`` adds each task's run's trace context, read only when a task was
    claimed; ``shared`` (a shared queue's claim) leaves other versions' messages unread. Two
    statements rather than one with a switch: a session that prepares nothing (a
    transaction pooler, the testing toolkit) plans the claim on every call, and the untraced one is
    the cheaper to plan."""
    return Query(
        name,
        f"{_read(shared)}"
        f"{start_tasks} as t\n         on cardinality(ids.arr) > 0\n"
        f"  left join msgs as read on read.msg_id = t.message_id"
        f"{_CLAIM_TRACED if traced else _CLAIM_UNTRACED}",
        ClaimRow,
    )


_START_TASKS: Final = "pgflow.start_tasks(%(queue)s, %(flow)s, ids.arr, %(worker)s, %(step)s)"
_START_SHARED_TASKS: Final = (
    "pgflow.start_shared_tasks(%(queue)s, ids.arr, %(worker)s, %(flows)s::text[], %(steps)s::text[])"
)

CLAIM: Final = _claim("claim", _START_TASKS, traced=False)
"""The claim on a flow's queue (or one step's private queue); ``{table}`` is the queue's PGMQ table."""

CLAIM_TRACED: Final = _claim("claim_traced", _START_TASKS, traced=True)
"""``CLAIM`` with each task's run's trace context (``pgflow.task_details``), for a worker recording
spans."""

CLAIM_SHARED: Final = _claim("claim_shared", _START_SHARED_TASKS, traced=False, shared=True)
"""The claim on a declared shared queue: it carries the worker's exact support set."""

CLAIM_SHARED_TRACED: Final = _claim("claim_shared_traced", _START_SHARED_TASKS, traced=True, shared=True)
"""``CLAIM_SHARED`` with each task's run's trace context."""


CLAIM_VISIBILITY: Final = value_query(
    "claim_visibility",
    """
    select max(coalesce(s.opt_timeout, f.opt_timeout)) + 2 as value
      from unnest(%s::text[], %s::text[]) as p(flow_slug, step_slug)
      join pgflow.steps as s on s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
      join pgflow.flows as f on f.flow_slug = s.flow_slug
    """,
)
"""The longest effective timeout + 2 s among (flow, step) pairs: the visibility the claim sets."""


NEXT_DEFERRED: Final = value_query(
    "next_deferred",
    "select extract(epoch from min(w.visible_at) - clock_timestamp())::float8 as value"
    " from pgflow.limit_waits as w where w.queue_name = %s and w.visible_at > clock_timestamp()",
)
"""Seconds until the first task a limit deferred on this queue is due (None: none is waiting)."""


QUEUE_TABLE: Final = value_query("queue_table", "select pgmq.format_table_name(%s, 'q') as value")


WRITE_QUEUE_ACCESS: Final = value_query("write_queue_access", "select pgflow.write_queue_access() as value")
"""Check every pgflow queue's tables against PGMQ's layout and rewrite ``pgflow.queue_access`` if its
static branches changed; the queues that have a branch."""


# -- queue set-up, notifications and heartbeats ---------------------------------------------------------


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


LISTEN: Final = value_query("listen", "listen {channel}")
"""Subscribe the listener's connection to a queue's insert channel."""


HEARTBEAT: Final = value_query(
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


MARK_STOPPED: Final = value_query(
    "mark_stopped",
    "update pgflow.workers set stopped_at = now(), last_heartbeat_at = now() where worker_id = %s",
)


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


# -- recording results -------------------------------------------------------------------------------------


class TaskOutcome(NamedTuple):
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    outcome: str


RELEASE_TASKS: Final = value_query(
    "release_tasks",
    "select count(*) as value from pgflow.release_tasks(%s::jsonb) where outcome = 'released'",
)
"""Give claims back (attempt returned, message visible now); how many were still held."""


RETURN_UNSTARTED_TASKS: Final = value_query(
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
    trace_context: Any


COMPLETE_AND_HAND_OFF: Final = Query(
    "complete_and_hand_off",
    """
with done as materialized (
  select c.*
    from pgflow.complete_and_hand_off(%(items)s::jsonb, %(queue)s, %(worker)s, %(flows)s::text[],
                                      %(steps)s::text[], %(gens)s::bigint[], %(slots)s)
         with ordinality
         as c(outcome, message_id, flow_slug, run_id, step_slug, task_index, attempt, input, n)
), details as materialized (
  select d.*
    from pgflow.task_details(array(select h.run_id from done as h where h.outcome = 'claimed'),
                             array(select h.step_slug from done as h where h.outcome = 'claimed'),
                             %(traced)s::boolean) as d
   where exists (select 1 from done as h where h.outcome = 'claimed')
)
select h.outcome, h.message_id, h.flow_slug, h.run_id, h.step_slug, h.task_index, h.attempt,
       h.input::text as input, d.priority, d.trace_context
  from done as h
  left join details as d on h.outcome = 'claimed' and d.run_id = h.run_id and d.step_slug = h.step_slug
 order by h.n
""",
    HandOffRow,
)
"""Complete a batch and take, for this worker, the tasks it made ready on its queue (direct hand-off):
the next step of a chain starts without a notification, a read and a claim. A handed task's priority
is its message's (the run's, else the step's, else the flow's), for the order the worker runs them in;
when ``traced``, a handed task also carries its run's trace context, as a claimed one does. Both come
from ``pgflow.task_details``, called only when a task was handed off, so the statement reads no history
table itself (see the claim)."""


COMPLETE_TASK: Final = value_query(
    "complete_task", "select pgflow.complete_task(%s, %s, %s, %s, %s::jsonb) as value"
)
"""One task's completion (run_id, step_slug, task_index, attempt, output json): its outcome."""


FAIL_TASK: Final = value_query(
    "fail_task", "select pgflow.fail_task(%s, %s, %s, %s, %s, %s::integer) as value"
)


REJECT_TASK: Final = value_query("reject_task", "select pgflow.reject_task(%s, %s, %s, %s, %s) as value")


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


# -- start-up checks ----------------------------------------------------------------------------------


class Signature(NamedTuple):
    signature: str


MISSING_FUNCTIONS: Final = Query(
    "missing_functions",
    "select sig as signature from unnest(%s::text[]) as sig where to_regprocedure(sig) is null",
    Signature,
)
"""Which of some function signatures the database does not define."""


PROTOCOL_VERSION: Final = value_query("protocol_version", "select pgflow.protocol_version() as value")


HAS_WORKERS_TABLE: Final = value_query(
    "has_workers_table", "select to_regclass('pgflow.workers') is not null as value"
)


# -- history partitions ---------------------------------------------------------------------------------


CREATE_HISTORY_PARTITIONS: Final = value_query(
    "create_history_partitions", "select pgflow.create_history_partitions() as value"
)
"""Create the missing future history partitions (0 on a plain install or when another caller is)."""


HISTORY_PARTITIONS_LOCK_TIMEOUT: Final = "2s"
"""How long the worker's partition upkeep waits for a lock before trying again at its next pass."""


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
    "select t.* from pgflow.task_transitions(%s::uuid[], %s::text[], %s::int[]) as t",
    Transition,
)
"""The step and run transitions some just-recorded task results made (for ``pgflow_django.signals``),
read by ``pgflow.task_transitions`` under the hot path's planner settings: sent as it was, the statement
was planned under the session's, and on a partitioned history JIT-compiled on each batch."""
