-- Frozen migration delta 0022_partitioned_history (loaded by
-- pgflow_django/migrations/0022_partitioned_history.py): time-ordered run ids and an opt-in
-- partitioned history.
--   * run ids pgflow makes are UUIDv7 (pgflow.uuid_v7): the runs table's default, start_flows,
--     rerun and the schedules; ids already made and ids chosen by callers are kept as they are.
--   * pgflow.partition_history (the pgflow_partition command) partitions runs, step_states and
--     step_tasks by run id, without copying rows; pgflow.create_history_partitions keeps future
--     partitions ready (the worker calls it); pgflow.prune_data_older_than drops whole partitions
--     on a partitioned install. Nothing is partitioned by this migration.
--   * runs.rerun_of is indexed (partial): pruning N runs probed it N times with a scan of runs each.
--   * pgflow.prune_data_older_than deletes by a join with the pruned ids instead of `= any(array)`.

-- 0016_function_uuid_v7.sql
-- A new time-ordered id (UUIDv7: 48 bits of Unix milliseconds, the version, then random bits), the
-- run ids pgflow makes: they sort by start time, so a run's history partition follows from its id
-- and the primary-key index grows at its right edge. PostgreSQL 18's uuidv7() makes the same layout;
-- this one also runs on 15.
create or replace function pgflow.uuid_v7()
returns uuid
language sql
volatile parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(
           set_byte(
             overlay(uuid_send(gen_random_uuid())
                     placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                     from 1 for 6),
             6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112),
           'hex')::uuid
$$;

-- 0017_function_uuid_v7_bound.sql
-- The smallest UUIDv7 of a moment's millisecond: the bound of a history partition that starts then
-- (every run id made from that millisecond on sorts at or above it).
create or replace function pgflow.uuid_v7_bound(at timestamptz)
returns uuid
language sql
immutable strict parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(substring(int8send(floor(extract(epoch from at) * 1000)::bigint) from 3)
                || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;

-- 0187_table_history_partitioning.sql
-- Present (one row) once pgflow.partition_history has partitioned runs, step_states and step_tasks
-- by run id: each partition holds the runs started in one interval of `partition_interval` (UTC
-- days, aligned on Monday 2000-01-03), with `ahead` future partitions kept ready by
-- pgflow.create_history_partitions. Absent: the history tables are plain tables.
create table pgflow.history_partitioning (
  singleton boolean primary key default true check (singleton),
  partition_interval interval not null
    check (partition_interval >= interval '1 day' and partition_interval <= interval '31 days'
           and date_trunc('day', partition_interval) = partition_interval
           and extract(month from partition_interval) = 0),
  ahead integer not null check (ahead between 1 and 60),
  partitioned_at timestamptz not null default clock_timestamp()
);

alter table pgflow.runs alter column run_id set default pgflow.uuid_v7();
-- the reruns of a run: deleting a run sets their rerun_of to NULL, a probe here instead of a scan of
-- runs per deleted run (which made pruning quadratic in the history's size)
create index runs_rerun_of_idx on pgflow.runs (rerun_of) where rerun_of is not null;

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
    select coalesce(run_ids[e.n], pgflow.uuid_v7()), start_flows.flow_slug, e.input,
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
-- A partitioned history (pgflow.partition_history) drops whole partitions instead: every interval
-- that ended before the cutoff and whose runs all finished before it goes with one DROP TABLE of
-- its three partitions (reruns naming its runs get rerun_of = NULL); the rest (the default
-- partitions, which hold the ids that are not time-ordered, and an old interval that still has a run
-- in progress or finished later) is deleted row by row as before, reading only the partitions that
-- can hold such runs. 'partitions' counts the intervals dropped. The rows go by a join with the
-- pruned ids (a hash join or index probes), not by `= any(array)`, which tests every row against
-- every id.
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
  v_dropped integer := 0;
  v_partitioned boolean;
  v_part record;
  v_unfinished bigint;
  v_dropped_runs bigint := 0;
  v_dropped_states bigint := 0;
  v_dropped_tasks bigint := 0;
  v_upper uuid;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  v_partitioned := exists (select 1 from pgflow.history_partitioning);
  if v_partitioned then
    for v_part in
      select substr(c.relname, 6) as suffix, pgflow.uuid_v7_bound(lo) as lo, pgflow.uuid_v7_bound(lo + hp.partition_interval) as hi
        from pg_inherits as inh
        join pg_class as c on c.oid = inh.inhrelid
        cross join pgflow.history_partitioning as hp
        cross join lateral (select to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC' as lo) as b
       where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$'
         and b.lo + hp.partition_interval <= v_cutoff
       order by c.relname
    loop
      execute format('select count(*), count(*) filter (where status not in (''completed'', ''failed'')'
                     ' or coalesce(completed_at, failed_at) >= $1) from pgflow.%I', 'runs_' || v_part.suffix)
        into v_count, v_unfinished using v_cutoff;
      continue when v_unfinished > 0;
      v_dropped_runs := v_dropped_runs + v_count;
      execute format('select count(*) from pgflow.%I', 'step_states_' || v_part.suffix) into v_count;
      v_dropped_states := v_dropped_states + v_count;
      execute format('select count(*) from pgflow.%I', 'step_tasks_' || v_part.suffix) into v_count;
      v_dropped_tasks := v_dropped_tasks + v_count;
      update pgflow.runs as r set rerun_of = null where r.rerun_of >= v_part.lo and r.rerun_of < v_part.hi;
      execute format('drop table pgflow.%I, pgflow.%I, pgflow.%I',
                     'step_tasks_' || v_part.suffix, 'step_states_' || v_part.suffix, 'runs_' || v_part.suffix);
      v_dropped := v_dropped + 1;
    end loop;
    -- time-ordered ids of runs finished before the cutoff sort below its bound; the others are in the
    -- default partitions, which no range excludes
    select pgflow.uuid_v7_bound(coalesce(max(to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC'
                                             + hp.partition_interval), v_cutoff))
      into v_upper
      from pg_inherits as inh join pg_class as c on c.oid = inh.inhrelid cross join pgflow.history_partitioning as hp
     where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$';
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where (r.run_id < pgflow.uuid_v7_bound(v_cutoff) or r.run_id >= v_upper)
       and r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
    update pgflow.runs as r set rerun_of = null from unnest(v_runs) as p(run_id) where r.rerun_of = p.run_id;
  else
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
  end if;

  delete from pgflow.step_tasks as t using unnest(v_runs) as p(run_id) where t.run_id = p.run_id;
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states as ss using unnest(v_runs) as p(run_id) where ss.run_id = p.run_id;
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r using unnest(v_runs) as p(run_id) where r.run_id = p.run_id;

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

  return jsonb_build_object('runs', cardinality(v_runs) + v_dropped_runs, 'step_states', v_states + v_dropped_states,
                            'step_tasks', v_tasks + v_dropped_tasks, 'workers', v_workers,
                            'archived_messages', v_archived, 'partitions', v_dropped);
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
  v_new uuid := pgflow.uuid_v7();
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
        select u.name, u.tick, pgflow.uuid_v7()
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
  v_run_id uuid := pgflow.uuid_v7();
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

-- 0470_function_partition_history.sql
-- Partitions runs, step_states and step_tasks by run id (range partitions of time-ordered UUIDv7
-- ids, one per `partition_interval`, `ahead` of them kept ready), opt-in for an existing install.
-- No row is copied: each current table becomes its new parent's DEFAULT partition (renamed
-- <table>_default, its indexes <table>_default_*), so the conversion is catalog work under a short
-- ACCESS EXCLUSIVE lock, and run ids that are not time-ordered (idempotency keys' UUIDv5, chosen
-- ids, ids made before UUIDv7) keep living there. The parents get the primary keys, the foreign keys
-- to the definition tables and the plain indexes; unique indexes without run_id stay per partition.
-- Foreign keys between the three tables are per partition (siblings share their range), so a
-- partition is dropped without checking the others; runs.rerun_of keeps no foreign key (a rerun is
-- younger than its original), and pruning clears it as ON DELETE SET NULL did. Functions returning
-- rows of the tables are redefined on the new parents, and the others naming them are touched so that
-- open sessions compile them again (a compiled function keeps the row types it saw). Returns the statements in order; runs them
-- only when `apply` (otherwise it changes nothing: the plan pgflow_partition prints).
create or replace function pgflow.partition_history(partition_interval interval, ahead integer, apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['lock table pgflow.runs, pgflow.step_states, pgflow.step_tasks in access exclusive mode'];
  v_later text[] := '{}';
  v_table text;
  v_row record;
  v_step text;
begin
  if exists (select 1 from pgflow.history_partitioning) or
     exists (select 1 from pg_class as c where c.oid = 'pgflow.runs'::regclass and c.relkind = 'p') then
    raise exception 'the pgflow history is already partitioned (pgflow.history_partitioning has its settings)'
      using errcode = '55000';
  end if;
  if partition_interval is null or partition_interval < interval '1 day' or partition_interval > interval '31 days'
     or date_trunc('day', partition_interval) <> partition_interval or extract(month from partition_interval) <> 0 then
    raise exception 'partition interval must be whole days from 1 to 31, got %', coalesce(partition_interval::text, 'NULL')
      using errcode = '22023';
  end if;
  if ahead is null or ahead not between 1 and 60 then
    raise exception 'ahead must be from 1 to 60 partitions, got %', coalesce(ahead::text, 'NULL') using errcode = '22023';
  end if;

  -- functions returning rows of a history table: dropped before the swap, defined again after it
  for v_row in
    select p.oid::regprocedure::text as signature, pg_get_functiondef(p.oid) as def
      from pg_proc as p
     where p.pronamespace = 'pgflow'::regnamespace and p.prorettype in (select c.reltype from pg_class as c
                             where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass))
     order by p.oid
  loop
    v_steps := v_steps || format('drop function pgflow.%s', v_row.signature);
    v_later := v_later || v_row.def;
  end loop;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I rename to %I', v_table, v_table || '_default');
    for v_row in
      select c.relname from pg_index as i join pg_class as c on c.oid = i.indexrelid
       where i.indrelid = format('pgflow.%I', v_table)::regclass order by c.relname
    loop
      v_steps := v_steps || format('alter index pgflow.%I rename to %I', v_row.relname,
        case when left(v_row.relname, length(v_table) + 1) = v_table || '_'
             then v_table || '_default_' || substr(v_row.relname, length(v_table) + 2)
             else v_row.relname || '_default' end);
    end loop;
  end loop;
  v_steps := v_steps || 'alter table pgflow.runs_default drop constraint runs_rerun_of_fkey'::text;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format(
      'create table pgflow.%I (like pgflow.%I including defaults including constraints including comments) partition by range (run_id)',
      v_table, v_table || '_default');
    for v_row in
      select con.conname, pg_get_constraintdef(con.oid) as def from pg_constraint as con
       where con.conrelid = format('pgflow.%I', v_table)::regclass
         and (con.contype = 'p'
              or (con.contype = 'f' and con.confrelid not in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                              'pgflow.step_tasks'::regclass)))
       order by con.contype desc, con.conname
    loop
      v_steps := v_steps || format('alter table pgflow.%I add constraint %I %s', v_table, v_row.conname, v_row.def);
    end loop;
    for v_row in
      select pg_get_indexdef(i.indexrelid) as def from pg_index as i
       where i.indrelid = format('pgflow.%I', v_table)::regclass and not i.indisprimary
         and (not i.indisunique or exists (select 1 from pg_attribute as a
                                            where a.attrelid = i.indrelid and a.attname = 'run_id'
                                              and a.attnum = any(i.indkey)))
       order by i.indexrelid
    loop
      v_steps := v_steps || v_row.def;
    end loop;
  end loop;
  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I attach partition pgflow.%I default', v_table, v_table || '_default');
  end loop;
  v_steps := v_steps || v_later;
  -- a session keeps a PL/pgSQL function compiled with the row types it saw: touching each function
  -- that names a history table makes every session compile it again against the new parents
  for v_row in
    select p.oid::regprocedure::text as signature from pg_proc as p join pg_language as l on l.oid = p.prolang
     where p.pronamespace = 'pgflow'::regnamespace and l.lanname = 'plpgsql'
       and p.prorettype not in (select c.reltype from pg_class as c
                                 where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                 'pgflow.step_tasks'::regclass))
       and p.prosrc ~ 'pgflow\.(runs|step_states|step_tasks)\M'
     order by p.oid
  loop
    v_steps := v_steps || format('alter function pgflow.%s set search_path = pg_catalog, pgflow, pgmq', v_row.signature);
  end loop;
  v_steps := v_steps || format('insert into pgflow.history_partitioning (partition_interval, ahead) values (%L, %s)',
                               partition_interval, ahead);
  v_steps := v_steps || 'select pgflow.create_history_partitions()'::text;

  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;

-- 0472_function_create_history_partitions.sql
-- Keeps the history partitions ready: creates every missing one from the interval holding now
-- (or `since`, when earlier: history loaded from elsewhere) through `ahead` intervals after it (and
-- through `through`, when later), for runs, step_states and
-- step_tasks alike. Partition k of each table holds the run ids from uuid_v7_bound(start_k) to
-- uuid_v7_bound(start_k + interval), has foreign keys to its sibling partitions and copies of the
-- default partitions' own unique indexes (a unique index without run_id cannot span partitions).
-- Run ids of a new partition's range that reached a default partition meanwhile (a partition made
-- late, or an id that is not time-ordered) move into it first. One caller at a time creates (the
-- others return 0); returns how many intervals it created, 0 on a plain install. Cheap when nothing
-- is missing: the worker calls it with its stalled recovery.
create or replace function pgflow.create_history_partitions(since timestamptz default null, through timestamptz default null)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_interval interval;
  v_ahead integer;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_lo uuid;
  v_hi uuid;
  v_suffix text;
  v_table text;
  v_options text[];
  v_def text;
  v_created integer := 0;
begin
  select hp.partition_interval, hp.ahead into v_interval, v_ahead from pgflow.history_partitioning as hp;
  if v_interval is null then
    return 0;
  end if;
  v_start := date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00');
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgflow.%I', 'runs_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    return 0;
  end if;

  foreach v_start in array v_missing loop
    v_suffix := 'p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgflow.%I', 'runs_' || v_suffix)) is not null;
    v_created := v_created + 1;
    v_lo := pgflow.uuid_v7_bound(v_start);
    v_hi := pgflow.uuid_v7_bound(v_start + v_interval);
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('create table pgflow.%I (like pgflow.%I including defaults including constraints including storage)',
                     v_table || '_' || v_suffix, v_table);
      select c.reloptions into v_options from pg_class as c where c.oid = format('pgflow.%I', v_table || '_default')::regclass;
      if v_options is not null then
        execute format('alter table pgflow.%I set (%s)', v_table || '_' || v_suffix, array_to_string(v_options, ', '));
      end if;
      execute format('insert into pgflow.%I select * from pgflow.%I where run_id >= $1 and run_id < $2',
                     v_table || '_' || v_suffix, v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['step_tasks', 'step_states', 'runs'] loop
      execute format('delete from pgflow.%I where run_id >= $1 and run_id < $2', v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('alter table pgflow.%I attach partition pgflow.%I for values from (%L) to (%L)',
                     v_table, v_table || '_' || v_suffix, v_lo, v_hi);
      for v_def in
        select pg_get_indexdef(i.indexrelid) from pg_index as i
         where i.indrelid = format('pgflow.%I', v_table || '_default')::regclass
           and not exists (select 1 from pg_inherits as inh where inh.inhrelid = i.indexrelid)
         order by i.indexrelid
      loop
        execute replace(v_def, v_table || '_default', v_table || '_' || v_suffix);
      end loop;
    end loop;
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_states_' || v_suffix, 'step_states_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id, step_slug) references pgflow.%I (run_id, step_slug)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_step_slug_fkey', 'step_states_' || v_suffix);
  end loop;
  return v_created;
end;
$$;

