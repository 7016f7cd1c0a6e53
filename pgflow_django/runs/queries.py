"""The statements only the runs API sends: starting, reading, cancelling and retrying runs,
maintenance operations, and coverage (which steps have no live worker)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NamedTuple

from pgflow_django.db.queries import LIVE_WORKER, FlowSlugRow, Pause
from pgflow_django.db.query import Query, Value, value_query

# -- operator pauses ------------------------------------------------------------------------------------

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


RESUME_SUBSCRIPTION: Final = value_query(
    "resume_subscription", "select pgflow.resume_subscription(%s, %s) as value"
)


# -- starting, reading and cancelling runs -----------------------------------------------------------


START_FLOW: Final = value_query(
    "start_flow",
    "select run_id as value"
    " from pgflow.start_flow(coalesce(pgflow.flow_version(%(flow)s, %(version)s), %(flow)s),"
    " %(input)s::jsonb, %(run_id)s::uuid, %(delay)s::integer, %(priority)s::integer)",
)


class ExistingRun(NamedTuple):
    flow_slug: str
    same_input: bool


EXISTING_RUN: Final = Query(
    "existing_run",
    "select pgflow.version_of(flow_slug) as flow_slug, input = %s::jsonb as same_input"
    " from pgflow.runs where run_id = %s",
    ExistingRun,
)
"""The run a chosen run id (or an idempotency key's) already names, and whether its input is this one."""


class TakenRunId(NamedTuple):
    run_id: uuid.UUID
    flow_slug: str


TAKEN_RUN_IDS: Final = Query(
    "taken_run_ids",
    "select run_id, pgflow.version_of(flow_slug) as flow_slug"
    " from pgflow.runs where run_id = any(%s::uuid[])",
    TakenRunId,
)
"""Which of a keyed ``start_flows``' run ids already name a run (they are not started again)."""
"""Start one run of the flow's version the code defines (``pgflow.flow_version``; the newest for a
version of None): its input json, run id or null, delay seconds or null, priority; its id."""


START_FLOWS: Final = value_query(
    "start_flows",
    "select count(*) as value from pgflow.start_flows(coalesce(pgflow.flow_version(%(flow)s, %(version)s),"
    " %(flow)s), %(inputs)s::jsonb, %(run_ids)s::uuid[], null, %(priority)s::integer)",
)
"""Start one run per element of a JSON array of inputs, with the given run ids and priority, on the
version ``START_FLOW`` chooses."""


RECORD_RUN_KEYS: Final = value_query(
    "record_run_keys",
    "with stored as (insert into pgflow.run_limit_keys (run_id, step_slug, kind, key)"
    " select * from unnest(%s::uuid[], %s::text[], %s::text[], %s::text[])"
    " on conflict do nothing returning 1) select count(*) as value from stored",
)
"""Store the callable limit keys of runs just started (in the starting transaction)."""


class CancelOutcome(NamedTuple):
    outcome: str
    flow_slug: str


CANCEL_RUN: Final = Query(
    "cancel_run",
    "select pgflow.cancel_run(%(run_id)s, %(reason)s) as outcome,"
    " (select pgflow.version_of(r.flow_slug) from pgflow.runs as r where r.run_id = %(run_id)s) as flow_slug",
    CancelOutcome,
)
"""Cancel a started run (run id, reason or null): ``cancelled``, or the status it had finished with;
and the run's flow (the ``run_cancelled`` signal's sender)."""


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
    step_kind: str | None
    wait_event: str | None
    wait_key: str | None
    waiting_since: datetime | None
    waiting_until: datetime | None
    waiting_child_run_id: uuid.UUID | None
    parent_run_id: uuid.UUID | None
    child_run_ids: list[uuid.UUID] | None
    not_before: datetime | None


GET_RUN: Final = Query(
    "get_run",
    """
    select r.run_id, r.flow_slug, r.status, r.input::text as input, r.output::text as output,
           r.error_message, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
           s.step_slug, st.step_type, st.step_index, s.status as step_status,
           s.output::text as step_output, s.error_message as step_error_message, s.skip_reason,
           s.remaining_tasks, s.initial_tasks, s.created_at as step_created_at,
           s.started_at as step_started_at, s.completed_at as step_completed_at,
           s.failed_at as step_failed_at, s.skipped_at as step_skipped_at,
           st.step_kind, w.event_name as wait_event, w.event_key as wait_key,
           w.since as waiting_since, w.due_at as waiting_until, w.child_run_id as waiting_child_run_id,
           r.parent_run_id,
           array(select c.run_id from pgflow.runs as c where c.parent_run_id = r.run_id
                  order by c.parent_step_slug, c.parent_task_index, c.run_id) as child_run_ids,
           r.not_before
      from pgflow.runs r
      left join pgflow.step_states s on s.run_id = r.run_id
      left join pgflow.steps st on st.flow_slug = s.flow_slug and st.step_slug = s.step_slug
      left join lateral (
        select w.* from pgflow.step_waits as w
         where w.run_id = s.run_id and w.step_slug = s.step_slug
         order by w.task_index limit 1
      ) as w on true
     where r.run_id = %s
     order by st.step_index
    """,
    RunStepRow,
)
"""A run and its step states in one statement (one consistent snapshot), in step order."""


WAITS_CHANNEL: Final = "pgflow_waits"
"""The engine's notification when a child run ends (``pgflow.maybe_complete_runs``,
``pgflow.fail_run``) or an event is delivered (``pgflow.send_event``): a worker runs its wait pass at
once, and ``await_run`` looks at its run again."""
LISTEN_RUN_ENDS: Final = value_query("listen_run_ends", f"listen {WAITS_CHANNEL}")
"""``await_run``'s wake-up: the channel the engine notifies when a child run ends
(``pgflow.maybe_complete_runs``, ``pgflow.fail_run``) or an event is delivered (``pgflow.send_event``);
the worker's wait pass listens on it too."""


# -- maintenance operations -------------------------------------------------------------------------------


PRUNE: Final = value_query(
    "prune", "select pgflow.prune_data_older_than(make_interval(secs => %s))::text as value"
)


PRUNE_SHARED_ARCHIVE: Final = value_query(
    "prune_shared_archive", "select pgflow.prune_shared_archive(%s, make_interval(secs => %s)) as value"
)


DELETE_FLOW: Final = value_query("delete_flow", "select pgflow.delete_flow_and_data(%s) as value")


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


DEFAULT_PARTITION_RUNS: Final = value_query(
    "default_partition_runs", "select count(*) as value from pgflow.runs_default"
)
"""The runs a partitioned history's default partition holds (ids that are not time-ordered)."""


COMPILED_FLOWS: Final = Query(
    "compiled_flows", "select flow_slug from pgflow.flows order by flow_slug", FlowSlugRow
)


COMPILED_FLOW_COUNT: Final = value_query("compiled_flow_count", "select count(*) as value from pgflow.flows")


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


class VersionRow(NamedTuple):
    flow_slug: str
    version_of: str
    version_number: int
    version: str | None
    created_at: datetime
    newest: bool
    started: int
    completed: int
    failed: int
    first_started_at: datetime | None
    last_started_at: datetime | None
    live_workers: int


FLOW_VERSIONS: Final = Query(
    "flow_versions",
    """
    select f.flow_slug, f.version_of, f.version_number, f.version, f.created_at,
           not exists (select 1 from pgflow.flows as n
                        where n.version_of = f.version_of and n.version_number > f.version_number) as newest,
           r.started, r.completed, r.failed, r.first_started_at, r.last_started_at,
           (select count(*) from pgflow.workers as w
             where """
    + LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip()
    + """
               and exists (select 1 from pgflow.worker_support as s
                            where s.worker_id = w.worker_id and s.flow_slug = f.flow_slug)) as live_workers
      from pgflow.flows as f
     cross join lateral (
       select count(*) filter (where r.status = 'started') as started,
              count(*) filter (where r.status = 'completed') as completed,
              count(*) filter (where r.status = 'failed') as failed,
              min(r.started_at) as first_started_at, max(r.started_at) as last_started_at
         from pgflow.runs as r where r.flow_slug = f.flow_slug
     ) as r
     where f.version_of = pgflow.version_of(%(slug)s)
     order by f.version_number
    """,
    VersionRow,
)
"""Every version of a flow: its identity, its runs by status, first and last start, live workers."""


LOCK_VERSION_RUNS: Final = value_query(
    "lock_version_runs",
    "select count(*) filter (where r.status = 'started') as value"
    " from (select status from pgflow.runs where flow_slug = %s for update) as r",
)
"""Lock every run of one version and count the unfinished ones: a retry or cancel of one of them waits
for the deletion that follows (and then finds the run gone), one that committed first is counted."""


HOLD_FLOW_STARTS: Final = value_query(
    "hold_flow_starts",
    "select pg_advisory_xact_lock(hashtextextended('pgflow:start:' || %s, 0))::text as value",
)
"""Wait for the flow's starts in progress and hold new ones until the transaction ends (the lock
``pgflow.start_flows`` shares and ``pgflow.delete_flow_and_data`` takes)."""


RETRY_RUN: Final = value_query("retry_run", "select pgflow.retry_run(%s) as value")
"""Continue a failed run from where it failed (``retry_run``, its command and the admin's action); how
many tasks it queued."""


RUN_NOW: Final = value_query("run_now", "select pgflow.run_now(%s) as value")
"""Make a started run's hidden messages visible now (``run_now``, its command and the admin's action):
how many became visible."""


SEND_EVENT: Final = value_query(
    "send_event", "select pgflow.send_event(%s, %s::jsonb, %s, %s, %s, %s) as value"
)
"""Send an event (name, payload, run id or null, key or null, event id or null, retention seconds):
how many waits it ended (docs/durable.md)."""


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
routes as (  -- the newest version's routes, and an earlier version's while it has an unfinished run
  select s.queue_name, s.flow_slug, s.step_slug
    from pgflow.steps as s
   cross join params as p
   where (p.flow_slug is null or pgflow.version_of(s.flow_slug) = pgflow.version_of(p.flow_slug)
          and (p.flow_slug = pgflow.version_of(p.flow_slug) or s.flow_slug = p.flow_slug))
     and pgflow.version_in_service(s.flow_slug)
),
pending as (
  select t.queue_name, t.flow_slug, t.step_slug, count(*) as pending_tasks
    from pgflow.step_tasks as t
   cross join params as p
   where t.status in ('queued', 'started')
     and (p.flow_slug is null or pgflow.version_of(t.flow_slug) = pgflow.version_of(p.flow_slug)
          and (p.flow_slug = pgflow.version_of(p.flow_slug) or t.flow_slug = p.flow_slug))
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
 where s.step_kind = 'handler'  -- an event, sleep or subflow step waits without a worker
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
     where s.flow_slug in (select coalesce(pgflow.flow_version(f.slug), f.slug)
                             from unnest(%(flows)s::text[]) as f(slug))
       and s.step_kind = 'handler'
     order by s.flow_slug, s.step_index
    """,
    StepServiceRow,
)
"""Each step of some flows (of each one's newest version, where new runs start) with its live workers
(on its persisted route), for the warnings that a schedule's or a run's flow has no live worker."""


RUN_UNSERVED_STEPS: Final = Query(
    "run_unserved_steps",
    f"""
    select u.flow_slug, u.queue_mode, u.step_slug, u.queue_name, 0 as live_workers
      from (select distinct t.flow_slug, f.queue_mode, t.step_slug, t.queue_name, s.step_index
              from pgflow.step_tasks as t
              join pgflow.flows as f on f.flow_slug = t.flow_slug
              join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
             where t.run_id = %(run_id)s and t.status in ('queued', 'started') and s.step_kind = 'handler'
               and {_LIVE_STEP_WORKERS.format(queue="t.queue_name", flow="t.flow_slug", step="t.step_slug")}
                   = 0) as u
     order by u.step_index, u.queue_name
    """,
    StepServiceRow,
)
"""The steps whose queued or started tasks of one run no live worker would claim (the run waits)."""


LIVE_WORKER_COUNT: Final = value_query(
    "live_worker_count",
    "select count(*) as value from pgflow.workers as w where "
    + LIVE_WORKER.format(live_seconds="%(live_seconds)s").strip(),
)
"""Live workers of any queue: with ``PGFLOW["SCHEDULER"] = "workers"``, none means nothing fires
schedules (unless ``pgflow_scheduler`` runs)."""
