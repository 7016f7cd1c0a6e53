-- One row per schedule: a flow started on the ticks of a cron expression. The definition is written
-- by Python (declared in code, origin 'code', or created at run time, origin 'runtime'); Python also
-- plans the coming ticks into `upcoming` (cron arithmetic and time zones stay in Python), so
-- pgflow.fire_due_schedules needs nothing but this row to fire, from a worker or from pg_cron.
-- A schedule fires while `enabled` and `paused_reason` is null: 'operator' is a pause set through the
-- API, 'removed_from_code' marks a declared schedule whose declaration is gone (its history stays).
-- `revision` grows with every definition change, so a plan computed for an older definition is refused.
-- `plan_error` says why the latest try to plan the schedule failed (a stored cron that no longer
-- parses, a time zone the planning host does not know), `plan_failed_at` when; both are cleared by the
-- next plan that works. `last_error` is firing's (an input callable that raised, a flow not compiled).
create table pgflow.schedules (
  schedule_name text primary key check (schedule_name <> '' and length(schedule_name) <= 200),
  flow_slug text not null,
  cron text not null,
  timezone text not null default 'UTC',
  input jsonb not null default '{}',
  input_callable text,
  catch_up text not null default 'latest' check (catch_up in ('all', 'latest', 'none')),
  max_catch_up integer not null default 10 check (max_catch_up between 1 and 1000),
  jitter_seconds integer not null default 0 check (jitter_seconds >= 0),
  enabled boolean not null default true,
  paused_reason text check (paused_reason in ('operator', 'removed_from_code')),
  paused_detail text,
  paused_at timestamptz,
  origin text not null check (origin in ('code', 'runtime')),
  revision bigint not null default 1,
  upcoming timestamptz[] not null default '{}',
  planned_until timestamptz,
  next_fire_at timestamptz,
  last_tick timestamptz,
  last_fired_at timestamptz,
  last_run_id uuid,
  missed_ticks bigint not null default 0,
  last_error text,
  created_at timestamptz not null default clock_timestamp(),
  updated_at timestamptz not null default clock_timestamp(),
  plan_error text,
  plan_failed_at timestamptz
);

create index schedules_due_idx on pgflow.schedules (next_fire_at)
  where enabled and paused_reason is null;

create index schedules_plan_idx on pgflow.schedules ((cardinality(upcoming)))
  where enabled and paused_reason is null;
