-- Frozen down delta of 0041_complete_hop: back to 0040_rate_refill (every completion takes the
-- general path; pgflow.complete_hop is dropped; pgflow.message_priority is pinned again; a start
-- runs pgflow.cascade again; the claim names its rows by tuple id alone).

-- 0018_function_message_priority.sql
-- The priority of a PGMQ message: its headers' "priority" number (rounded, clamped to -100..100),
-- 0 when it has none (no headers, a missing or non-numeric "priority"). Every queue pgflow
-- provisions is indexed on it (pgflow.index_queue_priority) and the claim reads visible messages in
-- that index's order: higher priority first, message id order (FIFO) within a priority. It never
-- raises, so a foreign message with odd headers is still sent and read.
create or replace function pgflow.message_priority(headers jsonb)
returns smallint
language sql set search_path = pg_catalog, pgflow, pgmq
immutable parallel safe
as $$
  select case when jsonb_typeof(headers -> 'priority') = 'number'
              then least(greatest(round((headers ->> 'priority')::numeric), -100), 100)::smallint
              else 0::smallint end
$$;
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

  -- each new run by its own probe: joined to the array, a plan could walk every run and match the
  -- whole batch against each
  return query
    select r.*
      from unnest(v_ids) with ordinality as i(run_id, n)
     cross join lateral (select * from pgflow.runs as x where x.run_id = i.run_id offset 0) as r
     order by i.n;
end;
$$;
-- 0298_function_claim_classified.sql
-- The second half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks once they
-- have classified a batch: the arrays hold each message id with its task key and outcome, in task
-- key order (the order every writer locks a run's tasks). Claims the 'claimed' tasks still queued
-- (one more attempt, hidden for at least the effective timeout + 2 s before they are returned: a
-- message the read already hid that long is not written again), defers the
-- visibility of 'started' ones to their stalled-recovery deadline, archives the messages whose
-- outcome is in `archived`, and returns one claim_record per message.
-- Lock order: every other writer locks run, then task, then message; the claim already holds its
-- messages (the read locked them), so it never waits for a task: a task another transaction holds
-- (a cancel, a failing run, a skipped step, a deletion, each about to end it) is skipped, reported
-- 'started' and its message left hidden as the read set it. Waiting would close a cycle with that
-- writer, which waits for the message next.
create or replace function pgflow.claim_classified(
  queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[],
  outcomes text[], archived text[]
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  outcomes := pgflow.limit_claim(claim_classified.queue_name, ids, runs, steps, indexes, outcomes);
  -- the callers checked each task's run and step; a run that fails or a step that is skipped
  -- meanwhile terminalizes its queued tasks, which the status recheck on the locked row sees; a
  -- row locked by another transaction is skipped, never waited for (see above)
  -- each task is locked by its own probe (a lateral subquery) and updated by the row version locked:
  -- the plan stays an index probe per claimed message even if it was made while the table was empty
  with lockable as (
    select t.row_id
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     cross join lateral (
       select t.ctid as row_id
         from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
          and t.status = 'queued'
          for no key update skip locked
     ) as t
     where k.outcome = 'claimed'
  ), claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = clock_timestamp(),
           last_worker_id = claim_classified.worker_id
      from lockable as l
     where t.ctid = l.row_id and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2),
                              'extend')
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer), 'set')
     from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
    cross join lateral (
      select t.flow_slug, t.step_slug, t.message_id, t.started_at
        from pgflow.step_tasks as t
       where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
         and t.status = 'started'
      offset 0
    ) as t
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started'
   having count(*) > 0;

  perform pgflow.archive_task_messages(array_agg(claim_classified.queue_name), array_agg(e.id))
     from unnest(ids, outcomes) as e(id, outcome)
    where e.outcome = any(claim_classified.archived)
   having count(*) > 0;

  return query
    select 'claimed'::text, c.message_id, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.attempts_count,
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> c.task_index
             when s.step_type = 'map' then (
               select dst.output -> c.task_index
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
             when s.deps_count = 0 then r.input
             else coalesce((
               select jsonb_object_agg(d.dep_slug, dst.output)
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
               '{}'::jsonb)
           end
      from unnest(coalesce(v_claimed, '{}')) as c
      join pgflow.runs as r on r.run_id = c.run_id
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    union all
    select case when e.outcome = 'claimed' then 'started' else e.outcome end,
           e.id, null, null, null, null, null, null
      from unnest(ids, outcomes) as e(id, outcome)
     where e.outcome <> 'claimed'
        or not exists (select 1 from unnest(coalesce(v_claimed, '{}')) as c where c.message_id = e.id)
     order by 2;
end;
$$;
-- 0310_function_complete_tasks.sql
-- Completes many claims in one call. Each item names the claim it finishes (its attempt); an item
-- that is no longer the current claim changes nothing and reports 'stale' (its message is archived
-- when the task is already terminal), so one stale item never undoes the others. A non-array
-- output feeding a map fails its task (which keeps that output), step and run without retry
-- ('failed'). Items are applied in the order they are listed, as the same calls one by one would
-- be: a run's items listed before its failing item complete, those listed after it report 'stale'
-- (their run has failed), and other runs' items are not affected.
create or replace function pgflow.complete_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_items pgflow.completion_item[];
  v_run_ids uuid[];
  v_bad record;
  v_first jsonb;
  v_queues text[];
  v_msgs bigint[];
  v_finished uuid[];
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'complete_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt, output}'
      using errcode = '22023';
  end if;

  -- parse into an array first: joins then run over unnest() of a variable, which the planner sizes
  -- as a handful of rows (index lookups), not jsonb_array_elements' default of 100 (hash joins that
  -- scan every run)
  select array_agg(row(x.run_id, x.step_slug, x.task_index, x.attempt, coalesce(x.output, 'null'::jsonb),
                       null, null, null, null, null)::pgflow.completion_item
                   order by x.run_id, x.step_slug, x.task_index)
    into v_items
    from jsonb_to_recordset(items) as x(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb);
  if v_items is null then
    return;
  end if;
  select array_agg(distinct c.run_id order by c.run_id) into v_run_ids from unnest(v_items) as c;

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;
  -- a run that fails below (a map's bad output, a condition with when_unmet = fail) leaves its
  -- concurrency slots to the release at the end, which waits for the claims deciding their keys
  perform set_config('pgflow.slots_released_at_end', 'on', true);

  select array_agg(row(y.*)::pgflow.completion_item) into v_items
  from (
  select distinct on (x.run_id, x.step_slug, x.task_index)
         x.run_id, x.step_slug, x.task_index, x.attempt, x.output,
         case when t.status = 'started' and t.attempts_count = x.attempt
                   and r.status = 'started' and ss.status = 'started'
              then 'completed' else 'stale' end as outcome,
         t.flow_slug, t.message_id, s.step_type, t.queue_name
    from unnest(v_items) as x
    left join pgflow.step_tasks as t
      on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
    left join pgflow.runs as r on r.run_id = x.run_id
    left join pgflow.step_states as ss on ss.run_id = x.run_id and ss.step_slug = x.step_slug
    left join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = x.step_slug
   order by x.run_id, x.step_slug, x.task_index,
            coalesce(t.status = 'started' and t.attempts_count = x.attempt, false) desc
  ) as y;

  -- a non-array output feeding a dependent map fails the run; no retry can change the output type.
  -- Per run, the first such item in the listed order fails it; the run's later items are stale.
  with bad as (
    select c.run_id, c.step_slug, c.task_index, min(d.step_slug) as map_slug
      from unnest(v_items) as c
      join pgflow.deps as d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      join pgflow.steps as child on child.flow_slug = d.flow_slug and child.step_slug = d.step_slug
     where c.outcome = 'completed' and c.step_type = 'single' and child.step_type = 'map'
       and jsonb_typeof(c.output) <> 'array'
     group by c.run_id, c.step_slug, c.task_index
  ), first_bad as (
    select distinct on (b.run_id) b.run_id, b.step_slug, b.task_index, b.map_slug, l.n
      from bad as b
      join lateral (
        select min(e.n) as n
          from jsonb_array_elements(items) with ordinality as e(item, n)
         where (e.item->>'run_id')::uuid = b.run_id and e.item->>'step_slug' = b.step_slug
           and (e.item->>'task_index')::integer = b.task_index
      ) as l on true
     order by b.run_id, l.n
  )
  select jsonb_agg(to_jsonb(f) order by f.run_id) into v_first from first_bad as f;

  if v_first is not null then
    v_items := array(
      select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                 case when f.run_id is null then c.outcome
                      when c.step_slug = f.step_slug and c.task_index = f.task_index then 'failed'
                      when c.outcome = 'completed' and (
                        select min(e.n)
                          from jsonb_array_elements(items) with ordinality as e(item, n)
                         where (e.item->>'run_id')::uuid = c.run_id and e.item->>'step_slug' = c.step_slug
                           and (e.item->>'task_index')::integer = c.task_index) > f.n then 'stale'
                      else c.outcome end,
                 c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
        from unnest(v_items) as c
        left join jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, n bigint)
          on f.run_id = c.run_id);
  end if;

  update pgflow.step_tasks as t
     set status = 'completed', output = c.output, completed_at = clock_timestamp()
    from unnest(v_items) as c
   where c.outcome = 'completed'
     and t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index;

  -- completed tasks, late callbacks on terminal tasks and the failed ones all leave the queue
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs
    from unnest(v_items) as c
    left join pgflow.step_tasks as t
      on t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index
   where c.outcome in ('completed', 'failed')
      or t.status in ('completed', 'failed', 'skipped', 'cancelled');
  perform pgflow.archive_task_messages(v_queues, v_msgs);

  -- a single step's output is its one task's, already in hand; only runs where a step finished can
  -- move on, so only they cascade (the other tasks of a map complete without one)
  with done as (
    select c.run_id, c.step_slug, count(*) as n, (array_agg(c.output))[1] as first_output
      from unnest(v_items) as c
     where c.outcome = 'completed'
     group by c.run_id, c.step_slug
  ), finished as (
    update pgflow.step_states as ss
       set remaining_tasks = ss.remaining_tasks - done.n,
           status = case when ss.remaining_tasks = done.n then 'completed' else ss.status end,
           completed_at = case when ss.remaining_tasks = done.n then clock_timestamp() end,
           output = case
             when ss.remaining_tasks <> done.n then null
             when (select s.step_type from pgflow.steps as s
                    where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug) = 'single'
               then done.first_output
             else (
               select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                 from pgflow.step_tasks as t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
           end
      from done
     where ss.run_id = done.run_id and ss.step_slug = done.step_slug
    returning ss.run_id, ss.status
  )
  select array_agg(distinct f.run_id order by f.run_id) into v_finished
    from finished as f where f.status = 'completed';

  if v_finished is not null then
    perform pgflow.cascade(v_finished);
  end if;

  -- the failing items, once the items listed before them have completed; a run that failed
  -- meanwhile (a condition with when_unmet = fail) makes its failing item stale. Each item probes
  -- its run, step and task in a lateral subquery (offset 0 keeps it one): joined directly, the
  -- order by run_id is planned on a partitioned history as a walk of every runs partition's key
  for v_bad in
    select f.run_id, f.step_slug, f.task_index, f.map_slug, p.current
      from jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, map_slug text)
      cross join lateral (
        select coalesce(r.status = 'started' and ss.status = 'started' and t.status = 'started', false) as current
          from pgflow.runs as r
          left join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = f.step_slug
          left join pgflow.step_tasks as t
            on t.run_id = r.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
         where r.run_id = f.run_id
        offset 0
      ) as p
     order by f.run_id
  loop
    if not v_bad.current then
      v_items := array(
        select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                   case when c.run_id = v_bad.run_id and c.step_slug = v_bad.step_slug
                             and c.task_index = v_bad.task_index then 'stale' else c.outcome end,
                   c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
          from unnest(v_items) as c);
      continue;
    end if;
    update pgflow.step_tasks as t
       set status = 'failed', failed_at = clock_timestamp(),
           output = (select c.output from unnest(v_items) as c
                      where c.run_id = v_bad.run_id and c.step_slug = v_bad.step_slug
                        and c.task_index = v_bad.task_index),
           error_message = format('output of %s is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug)
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    update pgflow.step_states as ss
       set status = 'failed', failed_at = clock_timestamp(),
           error_message = format('output is not an array, but map step %s needs one', v_bad.map_slug)
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id,
      format('step %s: output is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug));
  end loop;

  -- last, once nothing is left that could wait for a message a claim holds (a run failed above
  -- archives its other tasks' messages): this release waits for the claims deciding its keys
  perform set_config('pgflow.slots_released_at_end', 'off', true);
  perform pgflow.release_limit_slots(v_run_ids, wait_for_claims => true);

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;
-- 0315_function_complete_and_hand_off.sql
-- pgflow.complete_tasks for a worker that can run more: completes the items as complete_tasks does
-- (one row per item: outcome 'completed', 'stale' or 'failed' with its task key, other columns
-- NULL), then hands that worker, in the same transaction, the tasks the completion made ready on
-- its queue (pgflow.hand_off_tasks: at most free_slots, of the (flow_slug, step_slug) pairs it
-- supports at the flow generations it compiled against): one 'claimed' row each, as a claim
-- returns them. The insert notifications of the new messages wait until the hand-off is done and
-- go only to the queues still holding new messages, so no worker is woken to read a message that
-- was handed off.
create or replace function pgflow.complete_and_hand_off(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_done pgflow.claim_record[];
  v_runs uuid[];
begin
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'on', true);
  end if;
  select array_agg(row(c.outcome, null, null, c.run_id, c.step_slug, c.task_index, null, null)::pgflow.claim_record)
    into v_done
    from pgflow.complete_tasks(items) as c;
  return query select d.* from unnest(v_done) as d;
  v_runs := array(select distinct d.run_id from unnest(v_done) as d where d.outcome = 'completed');
  return query
    select h.* from pgflow.hand_off_tasks(
      lower(complete_and_hand_off.queue_name), complete_and_hand_off.worker_id, v_runs,
      complete_and_hand_off.support_flows, complete_and_hand_off.support_steps,
      complete_and_hand_off.support_generations, complete_and_hand_off.free_slots) as h;
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'off', true);
    perform pg_notify('pgmq.' || pgmq.format_table_name(n.queue_name, 'q') || '.INSERT', null)
       from (select distinct t.queue_name
               from unnest(v_runs) as k(run_id)
               join pgflow.step_tasks as t on t.run_id = k.run_id
              where t.status = 'queued' and t.queued_at >= statement_timestamp()) as n;
  end if;
end;
$$;
-- 0990_settings_hot_path.sql (for the functions replaced above)
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.complete_tasks(jsonb)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
drop function pgflow.complete_hop(jsonb, text, uuid, text[], text[], bigint[], integer);
