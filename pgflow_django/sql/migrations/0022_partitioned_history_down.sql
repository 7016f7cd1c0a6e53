-- Frozen migration delta 0022_partitioned_history, down: back to random (UUIDv4) run ids and an
-- unpartitioned history. A partitioned install cannot go down (its tables would have to be copied
-- back into plain ones): the down migration refuses and changes nothing.

do $$
begin
  if exists (select 1 from pgflow.history_partitioning) then
    raise exception 'the pgflow history is partitioned (pgflow_partition): migration 0022 cannot be reversed on it'
      using errcode = '55000';
  end if;
end;
$$;

drop function pgflow.create_history_partitions(timestamptz, timestamptz);
drop function pgflow.partition_history(interval, integer, boolean);

-- 0280_function_start_flows.sql
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
-- priority (-100..100, NULL: the steps' and the flow's defaults) is every run's claim priority.
-- Holds the flow's start lock in shared mode until the caller's transaction ends: starts run side by
-- side, while a deletion (pgflow.delete_flow_and_data takes it exclusively) waits for them, and a
-- start that comes during a deletion waits for it, then finds the flow gone.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
      using errcode = '22023';
  end if;
  if priority is not null and priority not between -100 and 100 then
    raise exception 'start_flows(%): priority must be a whole number from -100 to 100, got %', flow_slug, priority
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select min(e.n) - 1 into v_bad
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array';
    if v_bad is not null then
      raise exception 'flow %: root map step % needs an array input, but input % is not an array',
        flow_slug, v_root_map, v_bad
        using errcode = '22023';
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before, priority)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end,
           start_flows.priority
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;

  perform pgflow.cascade(v_ids);

  return query
    select r.* from pgflow.runs as r
      join unnest(v_ids) with ordinality as i(run_id, n) on i.run_id = r.run_id
     order by i.n;
end;
$$;

-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
create or replace function pgflow.prune_data_older_than(retention interval)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_cutoff timestamptz := now() - retention;
  v_runs uuid[];
  v_tasks integer;
  v_states integer;
  v_workers integer;
  v_archived bigint := 0;
  v_queue text;
  v_count bigint;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  select array_agg(r.run_id) into v_runs
    from pgflow.runs as r
   where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
  v_runs := coalesce(v_runs, '{}');

  delete from pgflow.step_tasks as t where t.run_id = any(v_runs);
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states as ss where ss.run_id = any(v_runs);
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r where r.run_id = any(v_runs);

  delete from pgflow.workers as w
   where coalesce(w.stopped_at, w.last_heartbeat_at) < v_cutoff
     and (w.stopped_at is not null or w.last_heartbeat_at < now() - interval '10 minutes');
  get diagnostics v_workers = row_count;

  for v_queue in
    select distinct s.queue_name from pgflow.steps as s
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(s.queue_name, 'a'))) is not null
       and not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = s.queue_name)
     order by s.queue_name
  loop
    execute format('delete from pgmq.%I where archived_at < $1', pgmq.format_table_name(v_queue, 'a'))
      using v_cutoff;
    get diagnostics v_count = row_count;
    v_archived := v_archived + v_count;
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs), 'step_states', v_states, 'step_tasks', v_tasks,
                            'workers', v_workers, 'archived_messages', v_archived);
end;
$$;

-- 0440_function_rerun.sql
-- Starts a new run of a finished run's flow with the same input and priority, linked to it by rerun_of.
create or replace function pgflow.rerun(run_id uuid)
returns uuid
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_run pgflow.runs;
  v_new uuid := gen_random_uuid();
begin
  select * into v_run from pgflow.runs as r where r.run_id = rerun.run_id;
  if not found then
    raise exception 'run % does not exist', rerun.run_id using errcode = 'P0002';
  end if;
  if v_run.status = 'started' then
    raise exception 'run % is still started: cancel it or wait for it to finish before re-running it', rerun.run_id
      using errcode = '55000';
  end if;
  perform 1 from pgflow.start_flow(v_run.flow_slug, v_run.input, v_new, null, v_run.priority);
  update pgflow.runs as r set rerun_of = rerun.run_id where r.run_id = v_new;
  return v_new;
end;
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

alter table pgflow.runs alter column run_id set default gen_random_uuid();
drop index pgflow.runs_rerun_of_idx;
drop table pgflow.history_partitioning;
drop function pgflow.uuid_v7_bound(timestamptz);
drop function pgflow.uuid_v7();
