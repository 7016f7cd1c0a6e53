"""The statements only the schedules send: declaring, planning and firing schedules, their runtime
API and the pg_cron job."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, NamedTuple

from pgflow_django.db.query import Query, value_query
from pgflow_django.schedules.views import ScheduleView, TickView

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


CREATE_SCHEDULE: Final = value_query(
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


EDIT_SCHEDULE: Final = value_query(
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


PAUSE_SCHEDULE: Final = value_query(
    "pause_schedule",
    "update pgflow.schedules set paused_reason = 'operator', paused_detail = %s,"
    " paused_at = clock_timestamp(), updated_at = clock_timestamp() where schedule_name = %s",
)


RESUME_SCHEDULE: Final = value_query(
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


SCHEDULE_TICK_COUNT: Final = value_query(
    "schedule_tick_count", "select count(*) as value from pgflow.schedule_ticks where schedule_name = %s"
)


DELETE_SCHEDULE: Final = value_query(
    "delete_schedule", "delete from pgflow.schedules where schedule_name = %s"
)
"""Delete a schedule; its ledger rows go with it (the runs stay)."""


TRIGGER_SCHEDULE: Final = value_query(
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


DATABASE_NOW: Final = value_query("database_now", "select clock_timestamp() as value")
"""The database server's clock, which schedules plan and fire on."""


class ScheduleNameRow(NamedTuple):
    schedule_name: str


PLAN_SCHEDULES: Final = Query(
    "plan_schedules",
    "select p.schedule_name from pgflow.plan_schedules(%s::jsonb) as p(schedule_name) order by 1",
    ScheduleNameRow,
)
"""Store plans (a JSON array); the names planned, in name order (a plan of a definition edited
meanwhile is refused)."""


TRY_FIRE_LOCK: Final = value_query(
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


RECORD_SCHEDULE_ERRORS: Final = value_query(
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


SYNC_SCHEDULES_LOCK: Final = value_query(
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


HAS_SCHEDULES_TABLE: Final = value_query(
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
           pgflow.flow_version(s.flow_slug) is not null as compiled,
           case when jsonb_typeof(s.input) = 'object' then s.input ->> 'task' end as task_path,
           s.plan_error, s.plan_failed_at
      from pgflow.schedules as s order by s.schedule_name
    """,
    StoredScheduleCheck,
)


PG_CRON_JOB_LOCK: Final = value_query(
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


PG_CRON_USABLE: Final = value_query(
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


PG_CRON_UNSCHEDULE: Final = value_query("pg_cron_unschedule", "select cron.unschedule(%s::bigint) as value")


PG_CRON_ALTER_JOB: Final = value_query(
    "pg_cron_alter_job",
    "select cron.alter_job(%s::bigint, schedule => %s, command => %s, active => true) is null as value",
)
"""Set a job's schedule and command and make it active (job id, schedule, command)."""


PG_CRON_SCHEDULE: Final = value_query("pg_cron_schedule", "select cron.schedule(%s, %s, %s) as value")
"""Register a pg_cron job (name, schedule, command); its job id."""
