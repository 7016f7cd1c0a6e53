-- Frozen migration delta 0014_schedules (loaded by pgflow_django/migrations/0014_schedules.py):
-- schedules (cron flows and periodic tasks) as data: their definitions and planned ticks, the ledger
-- of fired ticks, and pgflow.fire_due_schedules, which fires each due tick exactly once.

-- 0180_table_schedules.sql
-- One row per schedule: a flow started on the ticks of a cron expression. The definition is written
-- by Python (declared in code, origin 'code', or created at run time, origin 'runtime'); Python also
-- plans the coming ticks into `upcoming` (cron arithmetic and time zones stay in Python), so
-- pgflow.fire_due_schedules needs nothing but this row to fire, from a worker or from pg_cron.
-- A schedule fires while `enabled` and `paused_reason` is null: 'operator' is a pause set through the
-- API, 'removed_from_code' marks a declared schedule whose declaration is gone (its history stays).
-- `revision` grows with every definition change, so a plan computed for an older definition is refused.
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
  updated_at timestamptz not null default clock_timestamp()
);

create index schedules_due_idx on pgflow.schedules (next_fire_at)
  where enabled and paused_reason is null;

create index schedules_plan_idx on pgflow.schedules ((cardinality(upcoming)))
  where enabled and paused_reason is null;

-- 0185_table_schedule_ticks.sql
-- The ledger of fired ticks: one row per (schedule, tick), written in the transaction that starts the
-- tick's run, so a tick is fired once or (when that transaction is lost) not at all. `kind` is 'cron'
-- for a planned tick and 'manual' for pgflow.trigger_schedule. The run id is kept even after the run
-- is pruned. Deleting a schedule deletes its ledger; a declared schedule is never deleted by a sync.
create table pgflow.schedule_ticks (
  schedule_name text not null references pgflow.schedules (schedule_name) on delete cascade,
  tick timestamptz not null,
  run_id uuid not null,
  kind text not null default 'cron' check (kind in ('cron', 'manual')),
  fired_at timestamptz not null default clock_timestamp(),
  primary key (schedule_name, tick)
);

create index schedule_ticks_run_idx on pgflow.schedule_ticks (run_id);

-- 0450_function_schedule_fire_at.sql
-- When a planned tick fires: the tick plus its jitter, a deterministic offset in
-- [0, jitter_seconds] seconds (millisecond steps) derived from the schedule name and the tick, so
-- every caller, and every later call, computes the same fire time without storing it.
-- PL/pgSQL keeps the expression's plan across calls (a SQL function with a pinned search path is
-- planned again on every call).
create or replace function pgflow.schedule_fire_at(schedule_name text, tick timestamptz, jitter_seconds integer)
returns timestamptz
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jitter_seconds is null or jitter_seconds <= 0 then
    return tick;
  end if;
  return tick + make_interval(secs => (abs(hashtextextended(schedule_name || '@' || extract(epoch from tick)::text, 0))
                                       % (jitter_seconds::bigint * 1000 + 1)) / 1000.0);
end;
$$;

-- 0451_function_schedule_next_fire_at.sql
-- The earliest fire time among a schedule's planned ticks (NULL when none is planned). PL/pgSQL,
-- not SQL: its query plan is cached across calls (a SQL function with a pinned search path is
-- planned again on every call, which made firing 100 schedules 13 ms slower).
create or replace function pgflow.schedule_next_fire_at(schedule_name text, upcoming timestamptz[], jitter_seconds integer)
returns timestamptz
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jitter_seconds = 0 then
    return upcoming[1];
  end if;
  return (select min(pgflow.schedule_fire_at(schedule_next_fire_at.schedule_name, u.tick, jitter_seconds))
            from unnest(upcoming) as u(tick));
end;
$$;

-- 0452_function_schedule_due_ticks.sql
-- The due ticks of the named schedules at `now` (a tick is due once its fire time has come) and
-- whether each one fires under its schedule's catch-up policy; every due tick is consumed either way:
--   all     the latest max_catch_up due ticks fire, older ones are missed;
--   latest  only the latest due tick fires;
--   none    the latest due tick fires only while it is at most `grace` late (ticks missed while
--           nothing was firing are skipped).
-- With each tick come the schedule's flow, stored input, input callable and time zone.
-- Read-only: pgflow.fire_due_schedules calls it on rows it has locked, and the Python scheduler calls
-- it to learn which ticks of callable-input schedules need an input before it fires them.
create or replace function pgflow.schedule_due_ticks(names text[], now timestamptz, grace interval)
returns table (schedule_name text, tick timestamptz, fire boolean, flow_slug text, input jsonb,
               input_callable text, timezone text)
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  with due as (
    select s.schedule_name, u.tick, pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds) as fire_at,
           s.catch_up, s.max_catch_up, s.flow_slug, s.input, s.input_callable, s.timezone
      from pgflow.schedules as s
      cross join unnest(s.upcoming) as u(tick)
     where s.schedule_name = any(names)
  ), ranked as (
    select d.*, row_number() over (partition by d.schedule_name order by d.tick desc) as back
      from due as d
     where d.fire_at <= schedule_due_ticks.now
  )
  select r.schedule_name, r.tick,
         case r.catch_up
           when 'all' then r.back <= r.max_catch_up
           when 'latest' then r.back = 1
           else r.back = 1 and schedule_due_ticks.now - r.fire_at <= grace
         end,
         r.flow_slug, r.input, r.input_callable, r.timezone
    from ranked as r
   order by r.schedule_name, r.tick
$$;

-- 0453_function_due_schedule_names.sql
-- The schedules due at `now`, earliest first, at most max_schedules: enabled, not paused, with a
-- planned tick whose fire time has come. Schedules whose input is a Python callable are included
-- only when `with_callables` (the Python scheduler, which evaluates them; pg_cron cannot).
create or replace function pgflow.due_schedule_names(now timestamptz, max_schedules integer, with_callables boolean)
returns text[]
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  select coalesce(array_agg(d.schedule_name order by d.next_fire_at, d.schedule_name), '{}')
    from (select s.schedule_name, s.next_fire_at
            from pgflow.schedules as s
           where s.enabled and s.paused_reason is null and s.next_fire_at <= due_schedule_names.now
             and (with_callables or s.input_callable is null)
           order by s.next_fire_at, s.schedule_name
           limit max_schedules) as d
$$;

-- 0454_function_fire_due_schedules.sql
-- Fires every due tick of at most max_schedules schedules: starts each tick's run through
-- pgflow.start_flows and records the tick in pgflow.schedule_ticks in this same transaction, so a
-- tick fires once, or (when the transaction is lost) not at all and is fired by the next call.
-- Concurrent callers do not wait: a transaction-level advisory try-lock lets one caller fire while
-- the others return no rows at once; schedule rows being edited are skipped (SKIP LOCKED) and the
-- ledger's primary key refuses a tick recorded before, whatever the isolation level.
-- Every due tick is consumed, fired or missed, as pgflow.schedule_due_ticks decides per catch-up
-- policy. `inputs` carries the inputs of callable-input schedules, evaluated by the Python scheduler:
-- a JSON array of {"schedule": name, "tick": timestamp, "input": value}; a callable schedule with a
-- firing tick it has no input for is left due. When starting a flow's runs fails (e.g. the flow was
-- deleted), its schedules keep their ticks and record the error in last_error; the others still fire.
-- Returns the ticks fired by this call.
create or replace function pgflow.fire_due_schedules(
  now timestamptz default clock_timestamp(),
  max_schedules integer default 500,
  inputs jsonb default null,
  grace interval default interval '60 seconds'
)
returns table (schedule_name text, tick timestamptz, run_id uuid)
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_names text[];
  v_plan record;
  v_flow record;
  v_held text[] := '{}';
  v_fired_names text[] := '{}';
  v_fired_ticks timestamptz[] := '{}';
  v_fired_ids uuid[] := '{}';
  v_new_names text[];
  v_new_ticks timestamptz[];
  v_new_ids uuid[];
  v_new_inputs jsonb;
begin
  if fire_due_schedules.now is null or max_schedules is null or max_schedules < 1 then
    raise exception 'fire_due_schedules: now must be a timestamp and max_schedules >= 1, got % and %',
      coalesce(fire_due_schedules.now::text, 'NULL'), coalesce(max_schedules::text, 'NULL')
      using errcode = '22023';
  end if;
  if inputs is not null and jsonb_typeof(inputs) <> 'array' then
    raise exception 'fire_due_schedules: inputs must be a JSON array of {"schedule", "tick", "input"}'
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(hashtextextended('pgflow:fire_due_schedules', 0)) then
    return;
  end if;

  select array_agg(l.schedule_name) into v_names
    from (select s.schedule_name
            from pgflow.schedules as s
           where s.schedule_name = any(pgflow.due_schedule_names(fire_due_schedules.now, max_schedules,
                                                                 inputs is not null))
             for update skip locked) as l;
  if v_names is null then
    return;
  end if;

  select array_agg(d.schedule_name order by d.schedule_name, d.tick) as names,
         array_agg(d.tick order by d.schedule_name, d.tick) as ticks,
         array_agg(d.fire order by d.schedule_name, d.tick) as fires,
         array_agg(d.flow_slug order by d.schedule_name, d.tick) as flows,
         jsonb_agg(case when d.input_callable is null then d.input else i.input end
                   order by d.schedule_name, d.tick) as inputs,
         coalesce(array_agg(distinct d.schedule_name)
                    filter (where d.fire and d.input_callable is not null and i.input is null), '{}') as lacking
    into v_plan
    from pgflow.schedule_due_ticks(v_names, fire_due_schedules.now, grace) as d
    left join lateral (
      select e.value -> 'input' as input
        from jsonb_array_elements(coalesce(inputs, '[]'::jsonb)) as e(value)
       where e.value ->> 'schedule' = d.schedule_name and (e.value ->> 'tick')::timestamptz = d.tick
         and e.value ? 'input'
       limit 1
    ) as i on d.input_callable is not null;
  if v_plan.names is null then
    return;
  end if;
  v_held := v_plan.lacking;

  for v_flow in
    select p.flow, array_agg(p.name order by p.n) as names, array_agg(p.tick order by p.n) as ticks,
           jsonb_agg(p.input order by p.n) as inputs
      from rows from (unnest(v_plan.names), unnest(v_plan.ticks), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) with ordinality as p(name, tick, fire, flow, input, n)
     where p.fire and not (p.name = any(v_held))
     group by p.flow
     order by p.flow
  loop
    begin
      with fresh as (
        insert into pgflow.schedule_ticks as st (schedule_name, tick, run_id)
        select u.name, u.tick, gen_random_uuid()
          from unnest(v_flow.names, v_flow.ticks) as u(name, tick)
        on conflict do nothing
        returning st.schedule_name, st.tick, st.run_id
      )
      select array_agg(f.schedule_name order by f.schedule_name, f.tick),
             array_agg(f.tick order by f.schedule_name, f.tick),
             array_agg(f.run_id order by f.schedule_name, f.tick),
             jsonb_agg(u.input order by f.schedule_name, f.tick)
        into v_new_names, v_new_ticks, v_new_ids, v_new_inputs
        from fresh as f
        join rows from (unnest(v_flow.names), unnest(v_flow.ticks), jsonb_array_elements(v_flow.inputs))
             as u(name, tick, input) on u.name = f.schedule_name and u.tick = f.tick;
      if v_new_ids is not null then
        perform pgflow.start_flows(v_flow.flow, v_new_inputs, v_new_ids);
        v_fired_names := v_fired_names || v_new_names;
        v_fired_ticks := v_fired_ticks || v_new_ticks;
        v_fired_ids := v_fired_ids || v_new_ids;
      end if;
    exception when others then
      v_held := v_held || v_flow.names;
      update pgflow.schedules as s
         set last_error = left('starting flow ' || v_flow.flow || ': ' || sqlerrm, 2000)
       where s.schedule_name = any(v_flow.names);
    end;
  end loop;

  with consumed as (
    select p.name, count(*) filter (where not p.fire) as missed
      from rows from (unnest(v_plan.names), unnest(v_plan.fires)) as p(name, fire)
     where not (p.name = any(v_held))
     group by p.name
  ), latest as (
    select distinct on (f.name) f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick desc
  ), remaining as (
    select s.schedule_name, r.upcoming,
           pgflow.schedule_next_fire_at(s.schedule_name, r.upcoming, s.jitter_seconds) as next_fire_at
      from pgflow.schedules as s
     cross join lateral (
       select coalesce(array(select u.tick from unnest(s.upcoming) as u(tick)
                              where pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds)
                                    > fire_due_schedules.now
                              order by u.tick), '{}') as upcoming
     ) as r
     where s.schedule_name = any(array(select c.name from consumed as c))
  )
  update pgflow.schedules as s
     set upcoming = r.upcoming,
         next_fire_at = r.next_fire_at,
         last_tick = greatest(s.last_tick, l.tick),
         last_run_id = coalesce(l.run_id, s.last_run_id),
         last_fired_at = case when l.tick is null then s.last_fired_at else clock_timestamp() end,
         missed_ticks = s.missed_ticks + c.missed,
         last_error = null
    from consumed as c
    join remaining as r on r.schedule_name = c.name
    left join latest as l on l.name = c.name
   where s.schedule_name = c.name;

  return query
    select f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick;
end;
$$;

-- 0455_function_plan_schedules.sql
-- Stores planned ticks computed by Python (cron arithmetic, time zones and DST stay in one place):
-- `plans` is a JSON array of {"schedule": name, "revision": n, "ticks": [timestamps], "planned_until": t}.
-- Ticks are merged into `upcoming` (sorted, without duplicates, none at or before the last fired
-- tick) and next_fire_at is recomputed. A plan made for another revision of the definition (the
-- schedule was edited meanwhile) is ignored. Returns the names of the schedules updated.
create or replace function pgflow.plan_schedules(plans jsonb)
returns setof text
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if plans is null or jsonb_typeof(plans) <> 'array' then
    raise exception 'plan_schedules: plans must be a JSON array of {"schedule", "revision", "ticks", "planned_until"}'
      using errcode = '22023';
  end if;
  return query
    with p as (
      select e.value ->> 'schedule' as name, (e.value ->> 'revision')::bigint as revision,
             array(select t::timestamptz from jsonb_array_elements_text(e.value -> 'ticks') as t) as ticks,
             (e.value ->> 'planned_until')::timestamptz as planned_until
        from jsonb_array_elements(plans) as e(value)
    ), merged as (
      select s.schedule_name, p.planned_until,
             coalesce(array(select distinct u.tick from unnest(s.upcoming || p.ticks) as u(tick)
                             where s.last_tick is null or u.tick > s.last_tick
                             order by u.tick), '{}') as upcoming
        from pgflow.schedules as s
        join p on p.name = s.schedule_name and p.revision = s.revision
    )
    update pgflow.schedules as s
       set upcoming = m.upcoming,
           planned_until = greatest(s.planned_until, m.planned_until),
           next_fire_at = pgflow.schedule_next_fire_at(s.schedule_name, m.upcoming, s.jitter_seconds)
      from merged as m
     where s.schedule_name = m.schedule_name
    returning s.schedule_name;
end;
$$;

-- 0456_function_trigger_schedule.sql
-- Fires a schedule now, outside its cron ticks: starts one run through pgflow.start_flows and
-- records it in the ledger as a 'manual' tick at `now`, in one transaction. Works on a paused
-- schedule too (an operator asked for it). `input` replaces the stored input; a callable-input
-- schedule needs it (Python evaluates the callable). Returns the run id.
create or replace function pgflow.trigger_schedule(schedule_name text, now timestamptz default clock_timestamp(), input jsonb default null)
returns uuid
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_schedule pgflow.schedules;
  v_run_id uuid := gen_random_uuid();
begin
  select * into v_schedule from pgflow.schedules as s where s.schedule_name = trigger_schedule.schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', quote_literal(coalesce(trigger_schedule.schedule_name, 'NULL'))
      using errcode = '22023';
  end if;
  if v_schedule.input_callable is not null and trigger_schedule.input is null then
    raise exception 'schedule % takes its input from %: pass the input (the Python API evaluates it)',
      quote_literal(v_schedule.schedule_name), v_schedule.input_callable
      using errcode = '22023';
  end if;
  insert into pgflow.schedule_ticks (schedule_name, tick, run_id, kind)
  values (v_schedule.schedule_name, trigger_schedule.now, v_run_id, 'manual');
  perform pgflow.start_flows(v_schedule.flow_slug, jsonb_build_array(coalesce(trigger_schedule.input, v_schedule.input)),
                             array[v_run_id]);
  update pgflow.schedules as s
     set last_run_id = v_run_id, last_fired_at = clock_timestamp()
   where s.schedule_name = v_schedule.schedule_name;
  return v_run_id;
end;
$$;
