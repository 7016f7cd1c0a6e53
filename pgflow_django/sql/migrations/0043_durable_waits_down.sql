-- Frozen migration delta 0043_durable_waits_down: restores the schema of 0042_history_reads.
drop function pgflow.send_event(text,jsonb,uuid,text,text,integer);
drop function pgflow.delete_expired_events(timestamptz,integer);
drop function pgflow.end_waits(uuid,text,text[]);
drop function pgflow.fail_child_run(uuid,text);
drop function pgflow.wake_waits(integer);
drop function pgflow.start_child_runs(uuid[]);
drop function pgflow.start_waits(uuid[]);
drop function pgflow.event_lock_key(text,text);
drop function pgflow.timestamp_or_null(jsonb);
drop table pgflow.events;
drop table pgflow.step_waits;
drop index pgflow.runs_parent_run_id_idx;
alter table pgflow.runs drop column parent_task_index, drop column parent_step_slug, drop column parent_run_id;
alter table pgflow.steps drop constraint steps_wait_check, drop column subflow_slug, drop column sleep_until,
  drop column wait_seconds, drop column wait_key, drop column wait_event, drop column step_kind;
-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path. Its
-- concurrency slots are freed here, or, inside pgflow.complete_tasks, by that completion's release.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = clock_timestamp(), error_message = fail_run.error_message,
         remaining_steps = (select count(*) from pgflow.step_states as ss
                             where ss.run_id = r.run_id and ss.status not in ('completed', 'skipped'))
   where r.run_id = fail_run.run_id and r.status = 'started';
  if not found then
    return;
  end if;

  update pgflow.step_states as ss
     set status = 'cancelled'
   where ss.run_id = fail_run.run_id and ss.status = 'started';

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
  -- inside pgflow.complete_tasks the completion's own release, its last statement, frees them
  if current_setting('pgflow.slots_released_at_end', true) is distinct from 'on' then
    perform pgflow.release_limit_slots(array[fail_run.run_id]);
  end if;
end;
$$;
-- 0240_function_skip_step.sql
-- Skips one step of a started run, and with cascade every step downstream of it. Tasks of skipped
-- steps are terminalized as skipped and their messages archived. The caller holds the run's lock
-- and runs pgflow.cascade afterwards so dependents see the skip.
create or replace function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  with recursive targets as (
    select skip_step.step_slug as step_slug, skip_step.skip_reason as reason
    union
    select d.step_slug, 'dependency_skipped'
      from targets as tg
      join pgflow.step_states as ss on ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
      join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.dep_slug = tg.step_slug
     where skip_step.cascade
  ), skipped as (
    update pgflow.step_states as ss
       set status = 'skipped', skip_reason = tg.reason, skipped_at = clock_timestamp(), remaining_tasks = null
      from (select distinct on (t.step_slug) t.step_slug, t.reason
              from targets as t
             order by t.step_slug, (t.reason = 'dependency_skipped')) as tg
     where ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
       and ss.status in ('created', 'started')
    returning ss.step_slug
  ), tasks as (
    update pgflow.step_tasks as t
       set status = 'skipped'
      from skipped as s
     where t.run_id = skip_step.run_id and t.step_slug = s.step_slug and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(t.queue_name), array_agg(t.message_id) into v_queues, v_msgs from tasks as t;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
end;
$$;
-- 0250_function_maybe_complete_runs.sql
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent, and a run with no completed leaf (no steps, or every leaf skipped) has no output
-- (NULL), as in pgflow. Each distinct run id of the batch is probed on its own, then its step
-- states (see cascade).
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from (select distinct u.run_id from unnest(run_ids) as u(run_id)) as b
     cross join lateral (
       select r.run_id, r.status from pgflow.runs as r where r.run_id = b.run_id offset 0
     ) as r
      left join lateral (
        select ss.step_slug, ss.status from pgflow.step_states as ss where ss.run_id = r.run_id offset 0
      ) as ss on true
     where r.status = 'started'
     group by r.run_id
  )
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then clock_timestamp() end,
         output = case when c.open_steps = 0 then (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id and ss.status = 'completed'
              and not exists (select 1 from pgflow.deps as d
                               where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
         ) end
    from counts as c
   where r.run_id = c.run_id
     and (r.remaining_steps <> c.open_steps or c.open_steps = 0);
end;
$$;
-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one send per
-- queue and start delay (pgflow.queue_access) (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
-- A task's priority (the run's, else its step's default, else its flow's) travels in its message's
-- headers, {"priority": N}; a priority of 0 sends no headers (pgflow.message_priority reads 0).
-- The n-th id returned by the send belongs to the n-th message sent. The step states are read by
-- the batch and each run by its own probe (see cascade), both also between the batch's lowest and
-- highest run ids, so that a generic plan on a partitioned history sets up only the partitions
-- that hold them (see pgflow.complete_hop).
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_batches jsonb;
  v_batch record;
  v_lo uuid;
  v_hi uuid;
begin
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(run_ids) as b;
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = clock_timestamp(), remaining_tasks = ss.initial_tasks
      from pgflow.steps as s, pgflow.flows as f
     where ss.run_id = any(run_ids) and ss.run_id between v_lo and v_hi and ss.status = 'created'
       and ss.remaining_deps = 0 and ss.initial_tasks > 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id and r.run_id between v_lo and v_hi) = 'started'
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       and f.flow_slug = ss.flow_slug
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, s.opt_start_delay,
              s.queue_name, s.opt_priority as step_priority, f.opt_priority as flow_priority
  ), timed as (
    select st.flow_slug, st.run_id, st.step_slug, st.initial_tasks, st.queue_name,
           greatest(coalesce(st.opt_start_delay, 0),
                    coalesce(ceil(extract(epoch from r.not_before - clock_timestamp()))::integer, 0)) as start_delay,
           coalesce(r.priority, st.step_priority, st.flow_priority) as priority
      from started as st
     cross join lateral (
       select r.not_before, r.priority from pgflow.runs as r
        where r.run_id = st.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message,
           case when st.priority <> 0 then jsonb_build_object('priority', st.priority) end as headers
      from timed as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages,
                                       'headers', m.headers))
    into v_batches
    from (select queue_name, start_delay, jsonb_agg(message) as messages,
                 case when bool_or(headers is not null) then jsonb_agg(headers) end as headers
            from messages group by queue_name, start_delay) as m;

  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages,
           nullif(b->'headers', 'null'::jsonb) as headers
      from jsonb_array_elements(v_batches) as b
  loop
    -- rows from pairs the n-th message with the n-th id by position: no join to plan, so a large map
    -- step's batch costs its length, whatever the planner settings
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, m.msg_id, v_batch.queue_name
      from rows from (
             jsonb_array_elements(v_batch.messages),
             pgflow.queue_access(
               'send', v_batch.queue_name, null, array[v_batch.start_delay],
               array(select e from jsonb_array_elements(v_batch.messages) as e),
               case when v_batch.headers is not null
                    then array(select nullif(h, 'null'::jsonb) from jsonb_array_elements(v_batch.headers) as h) end)
           ) as m(message, msg_id, read_ct, enqueued_at, last_read_at, vt, body, headers);
  end loop;
end;
$$;
-- 0308_function_complete_hop.sql
-- The fast path of a completion: one call that completes a batch of single-step tasks when each is
-- the common case, in a handful of static statements instead of the general path's (complete_tasks,
-- cascade, start_ready_steps, maybe_complete_runs, hand_off_tasks, claim_classified: about 40
-- statements and 15 nested calls per hop). It applies to a batch only when every item
-- - names a distinct run, task 0 of a single step, and is the current claim (the task started in
--   that attempt, its step and run started);
-- - belongs to a flow without flow control (no pgflow.flow_limits rows, no limit_holds or
--   limit_waits of the run);
-- - feeds only single steps still created, with no condition and no start delay, in a run not
--   delayed (not_before passed).
-- Otherwise it returns no row and writes nothing (it has locked the batch's runs, in the order
-- every writer locks them), and the caller takes the general path in the same transaction: a stale
-- item, a failure, a map, a condition, a skip, a limit or a delay never goes through here.
-- What it writes is what the general path writes for such a batch: each task completed with its
-- output and its message archived; its step completed with that output; each dependent's open
-- dependencies recounted (completed and skipped ones are closed), and a dependent left with none
-- started with its task and that task's message (the priority in its headers, as
-- start_ready_steps sends it); the run's open steps recounted, and the run completed with its
-- leaves' outputs when none is left. With free_slots, the new tasks of this queue that the
-- worker supports at the generation it compiled against are claimed for it in the same
-- statement as hand_off_tasks would (at most free_slots in task key order, none below the
-- priority of the queue's head): started in attempt 1, their messages sent hidden for the step's
-- timeout + 2 s, so a worker that dies holding one loses it to stalled recovery as any claim.
-- Returns one row per item ('completed', message columns NULL), then one 'claimed' row per task
-- handed off, as pgflow.complete_and_hand_off returns them. pgflow.fast_hop = 'off' (a setting)
-- turns this path off: the equivalence tests drive both paths with it. It states no planner settings
-- of its own: it runs inside complete_tasks and complete_and_hand_off, whose settings
-- (0990_settings_hot_path.sql) it plans under, and switching them again would cost each call.
create or replace function pgflow.complete_hop(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_attempts integer[];
  v_outputs jsonb[];
  v_eligible boolean;
  v_queues text[];
  v_msgs bigint[];
  v_new_runs uuid[];
  v_new_steps text[];
  v_claimed pgflow.claim_record[];
  v_lo uuid;
  v_hi uuid;
begin
  if current_setting('pgflow.fast_hop', true) = 'off' or items is null or jsonb_typeof(items) <> 'array' then
    return;
  end if;

  select array_agg(x.run_id order by x.run_id), array_agg(x.step_slug order by x.run_id),
         array_agg(x.task_index order by x.run_id), array_agg(x.attempt order by x.run_id),
         array_agg(coalesce(x.output, 'null'::jsonb) order by x.run_id)
    into v_runs, v_steps, v_indexes, v_attempts, v_outputs
    from jsonb_to_recordset(items) as x(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb)
  having count(*) = count(distinct x.run_id)
     and bool_and(x.run_id is not null and x.step_slug is not null and x.task_index = 0 and x.attempt is not null);
  if v_runs is null then
    return;
  end if;
  -- the batch's lowest and highest run ids bound the history probes below, redundant with their
  -- keys, so that on a partitioned history a generic plan prunes, when it starts, the partitions
  -- outside them (a key from an array prunes only as each row is read, after every partition's
  -- scan has been set up: a quarter of a hop's time with 15 daily partitions). Only reads whose
  -- run id is a parameter (a lateral probe, a correlated subquery) or an array (= any) take them:
  -- an UPDATE joined to the batch keeps its keys alone, because there the bounds could become the
  -- index condition that drives it and read every run in the range
  v_lo := v_runs[1];
  v_hi := v_runs[cardinality(v_runs)];

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_runs) and r.run_id between v_lo and v_hi order by r.run_id for update;

  -- each item's run, step and task by its own probe (see cascade)
  select bool_and(coalesce(
           r.status = 'started' and (r.not_before is null or r.not_before <= clock_timestamp())
           and ss.status = 'started' and ss.remaining_tasks = 1
           and t.status = 'started' and t.attempts_count = i.attempt and t.message_id is not null
           and s.step_type = 'single'
           and not exists (select 1 from pgflow.flow_limits as l where l.flow_slug = r.flow_slug)
           and not exists (select 1 from pgflow.limit_holds as h where h.run_id = i.run_id)
           and not exists (select 1 from pgflow.limit_waits as w where w.run_id = i.run_id)
           and not exists (
             select 1
               from pgflow.deps as d
               join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.step_slug
               left join pgflow.step_states as dss
                      on dss.run_id = i.run_id and dss.run_id between v_lo and v_hi and dss.step_slug = d.step_slug
              where d.flow_slug = r.flow_slug and d.dep_slug = i.step_slug
                and not coalesce(ds.step_type = 'single' and ds.required_input_pattern is null
                                 and ds.forbidden_input_pattern is null and coalesce(ds.opt_start_delay, 0) = 0
                                 and dss.status = 'created' and dss.initial_tasks = 1, false)),
           false))
    into v_eligible
    from unnest(v_runs, v_steps, v_indexes, v_attempts) as i(run_id, step_slug, task_index, attempt)
    left join lateral (
      select r.flow_slug, r.status, r.not_before from pgflow.runs as r
       where r.run_id = i.run_id and r.run_id between v_lo and v_hi offset 0
    ) as r on true
    left join lateral (
      select ss.status, ss.remaining_tasks from pgflow.step_states as ss
       where ss.run_id = i.run_id and ss.run_id between v_lo and v_hi and ss.step_slug = i.step_slug offset 0
    ) as ss on true
    left join lateral (
      select t.status, t.attempts_count, t.message_id from pgflow.step_tasks as t
       where t.run_id = i.run_id and t.run_id between v_lo and v_hi and t.step_slug = i.step_slug and t.task_index = i.task_index
      offset 0
    ) as t on true
    left join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = i.step_slug;
  if not coalesce(v_eligible, false) then
    return;
  end if;

  -- the tasks, their steps, the dependents and the runs in one statement, each read as it was
  -- before the statement: the completing step still counts as open there, so it is left out of
  -- every count. The task key comes from the batch, never a constant: on empty partitions a
  -- constant task_index made an index scan on it alone look cheapest.
  with items as (
    select i.run_id, i.step_slug, i.task_index, i.output, r.flow_slug
      from unnest(v_runs, v_steps, v_indexes, v_outputs) as i(run_id, step_slug, task_index, output)
     cross join lateral (
       select r.flow_slug from pgflow.runs as r where r.run_id = i.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
  ), done as (
    update pgflow.step_tasks as t
       set status = 'completed', output = i.output, completed_at = clock_timestamp()
      from items as i
     where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
    returning t.queue_name, t.message_id
  ), completed_steps as (
    update pgflow.step_states as ss
       set remaining_tasks = 0, status = 'completed', completed_at = clock_timestamp(), output = i.output
      from items as i
     where ss.run_id = i.run_id and ss.step_slug = i.step_slug
  ), counts as (
    select i.run_id, d.step_slug,
           (select count(*)
              from pgflow.deps as od
              join pgflow.step_states as ost
                on ost.run_id = i.run_id and ost.run_id between v_lo and v_hi and ost.step_slug = od.dep_slug
             where od.flow_slug = i.flow_slug and od.step_slug = d.step_slug and od.dep_slug <> i.step_slug
               and ost.status not in ('completed', 'skipped')) as open_deps
      from items as i
      join pgflow.deps as d on d.flow_slug = i.flow_slug and d.dep_slug = i.step_slug
  ), dependents as (
    update pgflow.step_states as ss
       set remaining_deps = c.open_deps,
           status = case when c.open_deps = 0 then 'started' else ss.status end,
           started_at = case when c.open_deps = 0 then clock_timestamp() else ss.started_at end,
           remaining_tasks = case when c.open_deps = 0 then ss.initial_tasks else ss.remaining_tasks end
      from counts as c
     where ss.run_id = c.run_id and ss.step_slug = c.step_slug
       and (ss.remaining_deps <> c.open_deps or c.open_deps = 0)
    returning ss.run_id, ss.step_slug, ss.status
  ), run_counts as (
    -- each item with its run's open steps, so that the run's update reads one row per item (joined
    -- to the items again, the batch was matched against itself: 10,000 comparisons for 100 items)
    select i.run_id, i.step_slug, i.output, i.flow_slug,
           (select count(*) from pgflow.step_states as ss
             where ss.run_id = i.run_id and ss.run_id between v_lo and v_hi and ss.step_slug <> i.step_slug
               and ss.status not in ('completed', 'skipped')) as open_steps
      from items as i
  ), finished_runs as (
    update pgflow.runs as r
       set remaining_steps = c.open_steps,
           status = case when c.open_steps = 0 then 'completed' else r.status end,
           completed_at = case when c.open_steps = 0 then clock_timestamp() end,
           output = case when c.open_steps = 0 then (
             select jsonb_object_agg(l.step_slug, l.output)
               from (select ss.step_slug, ss.output
                       from pgflow.step_states as ss
                      where ss.run_id = c.run_id and ss.run_id between v_lo and v_hi and ss.status = 'completed'
                        and ss.step_slug <> c.step_slug
                     union all
                     select c.step_slug, c.output) as l
              where not exists (select 1 from pgflow.deps as d
                                 where d.flow_slug = c.flow_slug and d.dep_slug = l.step_slug)
           ) end
      from run_counts as c
     where r.run_id = c.run_id and (r.remaining_steps <> c.open_steps or c.open_steps = 0)
  )
  select (select array_agg(d.queue_name) from done as d), (select array_agg(d.message_id) from done as d),
         (select array_agg(d.run_id order by d.run_id, d.step_slug) from dependents as d where d.status = 'started'),
         (select array_agg(d.step_slug order by d.run_id, d.step_slug) from dependents as d where d.status = 'started')
    into v_queues, v_msgs, v_new_runs, v_new_steps;
  perform pgflow.archive_task_messages(v_queues, v_msgs);

  if v_new_runs is not null then
    -- each new task with its message, one send per queue and visibility: a task handed to this
    -- worker is sent hidden for its step's timeout + 2 s (what a claim sets); the n-th id a send
    -- returns is its n-th message's
    with tasks as (
      select n.run_id, n.step_slug, n.k, r.flow_slug, s.queue_name,
             coalesce(r.priority, s.opt_priority, f.opt_priority) as priority,
             coalesce(s.opt_timeout, f.opt_timeout) + 2 as claim_seconds,
             exists (select 1
                       from unnest(complete_hop.support_flows, complete_hop.support_steps,
                                   complete_hop.support_generations) as p(flow_slug, step_slug, generation)
                      where p.flow_slug = r.flow_slug and p.step_slug = n.step_slug
                        and p.generation = f.generation) and s.queue_name = lower(complete_hop.queue_name)
             -- read again here: a flow that got its first limits since the check above has its tasks
             -- left to a claim, which takes their slots (as pgflow.limit_claim does in a hand-off)
             and not exists (select 1 from pgflow.flow_limits as l where l.flow_slug = r.flow_slug)
               as supported
        from unnest(v_new_runs, v_new_steps) with ordinality as n(run_id, step_slug, k)
       cross join lateral (
         select r.flow_slug, r.priority from pgflow.runs as r
          where r.run_id = n.run_id and r.run_id between v_lo and v_hi offset 0
       ) as r
        join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = n.step_slug
        join pgflow.flows as f on f.flow_slug = r.flow_slug
    ), ranked as (
      select t.*, row_number() over (partition by t.supported order by t.k) as place
        from tasks as t
    ), decided as (
      -- the queue's head is read only for a task that could be handed off: a CASE branch, and a
      -- subquery correlated to the task (an uncorrelated one is an init plan, run regardless)
      select r.*,
             case when r.supported and r.place <= coalesce(complete_hop.free_slots, 0)
                  then coalesce(r.priority, 0) >= coalesce((
                         select pgflow.message_priority(q.headers)
                           from pgflow.queue_access('head', lower(complete_hop.queue_name), null, null, null, null)
                                as q
                          where r.supported), -32768)
                  else false end as handed
        from ranked as r
    ), sends as (
      select d.queue_name, d.handed, case when d.handed then d.claim_seconds else 0 end as delay,
             array_agg(d.flow_slug order by d.k) as flows, array_agg(d.run_id order by d.k) as runs,
             array_agg(d.step_slug order by d.k) as steps,
             array_agg(jsonb_build_object('flow_slug', d.flow_slug, 'run_id', d.run_id,
                                          'step_slug', d.step_slug, 'task_index', 0) order by d.k) as messages,
             case when bool_or(d.priority <> 0)
                  then array_agg(case when d.priority <> 0 then jsonb_build_object('priority', d.priority) end
                                 order by d.k) end as headers
        from decided as d
       group by d.queue_name, d.handed, case when d.handed then d.claim_seconds else 0 end
    ), sent as (
      select g.queue_name, g.handed, m.flow_slug, m.run_id, m.step_slug, m.msg_id
        from sends as g
       cross join lateral rows from (
               unnest(g.flows), unnest(g.runs), unnest(g.steps),
               pgflow.queue_access('send', g.queue_name, null, array[g.delay], g.messages, g.headers)
             ) as m(flow_slug, run_id, step_slug, msg_id, read_ct, enqueued_at, last_read_at, vt, body, headers)
    ), inserted as (
      -- a handed task is queued and started at one instant, never started before it was queued
      insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name,
                                     status, attempts_count, queued_at, started_at, last_worker_id)
      select m.flow_slug, m.run_id, m.step_slug, 0, m.msg_id, m.queue_name,
             case when m.handed then 'started' else 'queued' end,
             case when m.handed then 1 else 0 end,
             c.now, case when m.handed then c.now end,
             case when m.handed then complete_hop.worker_id end
        from sent as m
       cross join lateral (select clock_timestamp() as now) as c
      returning step_tasks.message_id, step_tasks.flow_slug, step_tasks.run_id, step_tasks.step_slug,
                step_tasks.status
    )
    select array_agg(row('claimed', n.message_id, n.flow_slug, n.run_id, n.step_slug, 0, 1, null)::pgflow.claim_record)
      into v_claimed
      from inserted as n
     where n.status = 'started';
  end if;

  return query
    select 'completed'::text, null::bigint, null::text, i.run_id, i.step_slug, 0, null::integer, null::jsonb
      from unnest(v_runs, v_steps) as i(run_id, step_slug)
    union all
    select 'claimed'::text, c.message_id, c.flow_slug, c.run_id, c.step_slug, 0, 1,
           coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                       from pgflow.deps as d
                       join pgflow.step_states as dst
                         on dst.run_id = c.run_id and dst.run_id between v_lo and v_hi and dst.step_slug = d.dep_slug
                      where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
                    '{}'::jsonb)
      from unnest(coalesce(v_claimed, '{}')) as c
     order by 1 desc, 2, 4;  -- the items in task key order, then the tasks handed off in message order
end;
$$;
-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass. The started runs are read flow by flow from the (flow_slug, status)
-- index and their tasks by probe, so a pass reads the runs in flight, not the history, with the
-- hot functions' planner settings. The flows are read in key order: a plain read of every flow is
-- a sequential scan, which those settings price so high (1e10) that the statement was compiled by
-- JIT on every call, 0.2-0.4 s.
create or replace function pgflow.requeue_stalled_tasks()
returns table (outcome text, task_count integer)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_locked uuid[];
  v_requeued integer := 0;
  v_stalled record;
  v_exhausted integer := 0;
  v_visible integer;
  v_marked integer;
begin
  select array_agg(distinct t.run_id) into v_candidates
    from (select f.flow_slug, f.opt_timeout from pgflow.flows as f order by f.flow_slug offset 0) as f
   cross join lateral (
     select r.run_id from pgflow.runs as r where r.flow_slug = f.flow_slug and r.status = 'started' offset 0
   ) as r
   cross join lateral (
     select t.run_id, t.step_slug, t.status, t.started_at from pgflow.step_tasks as t where t.run_id = r.run_id offset 0
   ) as t
    join pgflow.steps as s on s.flow_slug = f.flow_slug and s.step_slug = t.step_slug
   where t.status = 'started'
     and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30);
  if v_candidates is null then
    if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
      perform pgflow.release_limit_slots(null);
    end if;
    return query select 'requeued'::text, 0 union all select 'permanently_stalled', 0;
    return;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id, r.status from pgflow.runs as r
           where r.run_id = any(v_candidates)
           order by r.run_id offset 0
             for update skip locked) as l
   where l.status = 'started';
  v_locked := coalesce(v_locked, '{}');

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
           t.requeued_count < 3 and t.attempts_count - t.attempts_base < coalesce(s.opt_max_attempts, f.opt_max_attempts) as can_requeue
      from pgflow.step_tasks as t
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = any(v_locked) and t.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
  ), requeued as (
    update pgflow.step_tasks as t
       set status = 'queued', requeued_count = t.requeued_count + 1, last_requeued_at = clock_timestamp(), queued_at = clock_timestamp()
      from stalled as st
     where st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.queue_name, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]), 'set')
      from (select rq.queue_name, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.queue_name) as g
  ), marked as (
    update pgflow.step_tasks as t
       set permanently_stalled_at = clock_timestamp()
      from stalled as st
     where not st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.run_id, t.step_slug, t.task_index
  )
  select (select count(*) from requeued)::integer, (select count(*) from visible)::integer,
         (select count(*) from marked)::integer
    into v_requeued, v_visible, v_marked;

  for v_stalled in
    select t.run_id, t.step_slug, t.task_index
      from pgflow.step_tasks as t
     where t.run_id = any(v_locked) and t.status = 'started' and t.permanently_stalled_at is not null
     order by t.run_id, t.step_slug, t.task_index
  loop
    -- an earlier exhaustion in this loop may have skipped the step or failed the run meanwhile
    if (select r.status from pgflow.runs as r where r.run_id = v_stalled.run_id) = 'started'
       and exists (select 1 from pgflow.step_tasks as t
                    where t.run_id = v_stalled.run_id and t.step_slug = v_stalled.step_slug
                      and t.task_index = v_stalled.task_index and t.status = 'started') then
      perform pgflow.exhaust_task(v_stalled.run_id, v_stalled.step_slug, v_stalled.task_index,
                                  'permanently stalled: the task was requeued 3 times or ran out of attempts');
      v_exhausted := v_exhausted + 1;
    end if;
  end loop;
  -- last: the sweep's wake-ups lock waits (skip locked) that a claim holding the messages the
  -- exhaustions above wait for may update next; taken before those waits, they closed a cycle
  if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
    perform pgflow.release_limit_slots(null);
  end if;

  return query select 'requeued'::text, v_requeued union all select 'permanently_stalled', v_exhausted;
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
-- can hold such runs. 'partitions' counts the intervals dropped. A partitioned archive drops its
-- old partitions too (pgflow.prune_queue_archive). The rows go by a join with the
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
    v_archived := v_archived + pgflow.prune_queue_archive(v_queue, v_cutoff);
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs) + v_dropped_runs, 'step_states', v_states + v_dropped_states,
                            'step_tasks', v_tasks + v_dropped_tasks, 'workers', v_workers,
                            'archived_messages', v_archived, 'partitions', v_dropped);
end;
$$;
-- 0370_function_delete_flow_and_data.sql
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- and tasks are locked before the queues' messages (run, task, message: the order every writer
-- uses). Messages are not archived one by one: dropping a queue drops its table and archive
-- together. Serialised with compilation by the per-flow advisory lock, and with starts by the
-- flow's start lock (taken exclusively: runs being started commit first, later starts find the flow
-- gone). Shared queues (pgflow.shared_queues) are never dropped: only this flow's live messages on
-- them are deleted, found through its task snapshots. The workers' support rows for the flow go too.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
  v_shared_queues text[];
  v_shared_msgs bigint[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  perform 1 from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug order by r.run_id for update;

  select coalesce(array_agg(distinct q order by q), '{}') into v_queues
    from pgflow.flow_queues(delete_flow_and_data.flow_slug) as q;

  foreach v_queue in array v_queues loop
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = v_queue and s.flow_slug <> delete_flow_and_data.flow_slug limit 1;
    if v_other is not null then
      raise exception 'cannot delete flow %: its queue % is also used by flow %; nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), quote_literal(v_other) using errcode = '55000';
    end if;
    if not exists (select 1 from pgmq.meta as m where lower(m.queue_name) = v_queue)
       and not exists (select 1 from pgflow.steps as s
                        where s.flow_slug = delete_flow_and_data.flow_slug and s.queue_name = v_queue) then
      continue;
    end if;
    begin
      v_spellings := v_spellings || pgflow.resolve_queue_spelling(v_queue);
    exception when others then
      raise exception 'cannot delete flow %: %; nothing was deleted', quote_literal(flow_slug), sqlerrm
        using errcode = '55000';
    end;
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'cannot delete flow %: queue % is malformed (%); repair or drop it by hand, nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), v_problem using errcode = '55000';
    end if;
  end loop;

  with gone as (
    delete from pgflow.step_tasks as t
     where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug)
    returning t.queue_name, t.message_id, t.status
  )
  select coalesce(array_agg(g.queue_name), '{}'), coalesce(array_agg(g.message_id), '{}')
    into v_shared_queues, v_shared_msgs
    from gone as g
    join pgflow.shared_queues as sq on sq.queue_name = g.queue_name
   where g.message_id is not null and g.status in ('queued', 'started');

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(m.queue_name, array_agg(m.msg_id order by m.msg_id))
     from unnest(v_shared_queues, v_shared_msgs) as m(queue_name, msg_id)
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
    group by m.queue_name;

  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p where p.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_support as ws where ws.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
  perform pgflow.write_queue_access(wait => false);
end;
$$;
-- 0380_function_flow_shape.sql
-- The persisted shape of a flow, in the compiler's JSON form: ordered steps with slug, type, sorted
-- dependencies, when_unmet, when_exhausted and condition patterns. Runtime options are not shape.
create or replace function pgflow.flow_shape(flow_slug text)
returns jsonb
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
           'slug', s.step_slug,
           'step_type', s.step_type,
           'deps', coalesce((select jsonb_agg(d.dep_slug order by d.dep_slug) from pgflow.deps as d
                              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '[]'::jsonb),
           'when_unmet', s.when_unmet,
           'when_exhausted', s.when_exhausted,
           'required_input_pattern', s.required_input_pattern,
           'forbidden_input_pattern', s.forbidden_input_pattern
         ) order by s.step_index), '[]'::jsonb))
    from pgflow.steps as s
   where s.flow_slug = flow_shape.flow_slug
$$;
-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement takes the flow's start lock exclusively (every start
-- holds it shared until its transaction ends, before it touches a row): no run can start between the
-- count and the deletion, and no row lock is held while waiting for starts. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
    else
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts hold this lock shared until they commit: holding it, the count below stays true
        perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || ensure_flow_compiled.flow_slug, 0));
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout), ('priority', f.opt_priority::integer)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout),
             opt_priority = coalesce((v_options->>'priority')::integer, f.opt_priority)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay),
                                  ('priority', s.opt_priority::integer)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer,
             opt_priority = (x.e->'options'->>'priority')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  -- priority defaults are runtime options kept beside create_flow's and add_step's
  update pgflow.flows as f set opt_priority = (v_options->>'priority')::integer
   where f.flow_slug = ensure_flow_compiled.flow_slug and v_options->>'priority' is not null;
  update pgflow.steps as s set opt_priority = (x.e->'options'->>'priority')::integer
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and x.e->'options'->>'priority' is not null;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;
-- 0445_function_retry_run.sql
-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message (with the
-- task's priority in its headers, as pgflow.start_ready_steps sends it), its step is
-- started again, and the run is started again so its dependents follow. Returns the number of tasks
-- queued again. The run's and steps' errors are cleared (the admin's Retry action logs the run's
-- error first); each task keeps its attempt_errors.
-- Attempt numbers continue: a retried task's next claim is one more attempt than every claim before
-- it, so a worker still running an old claim (a task cancelled mid-claim) reports a stale attempt
-- that is refused, whenever it arrives. The attempt a cancel cut short is recorded in attempt_errors
-- (with the run's error), so every attempt has its outcome.
-- Each retried task gets its full max_attempts again (attempts_base marks where they start).
-- Lock order: run, then its tasks, then the new messages.
-- Refused, changing nothing, for a run that is not failed, and for one whose failed step has no
-- failed or cancelled task to run again (it failed outside its tasks, so a retry would fail again).
create or replace function pgflow.retry_run(run_id uuid)
returns integer
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_status text;
  v_error text;
  v_stuck text;
  v_count integer := 0;
  v_batch record;
begin
  select r.status, r.error_message into v_status, v_error
    from pgflow.runs as r where r.run_id = retry_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', retry_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'failed' then
    raise exception 'run % is %: only a failed or cancelled run can be retried', retry_run.run_id, v_status
      using errcode = '55000';
  end if;

  perform 1 from pgflow.step_tasks as t
   where t.run_id = retry_run.run_id
   order by t.step_slug, t.task_index
     for no key update;

  select string_agg(ss.step_slug, ', ' order by ss.step_slug) into v_stuck
    from pgflow.step_states as ss
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled')
     and not exists (select 1 from pgflow.step_tasks as t
                      where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                        and t.status in ('failed', 'cancelled'));
  if v_stuck is not null then
    raise exception 'run % failed in step % outside its tasks: a retry would fail the same way; re-run it instead',
      retry_run.run_id, v_stuck using errcode = '55000';
  end if;

  update pgflow.runs as r
     set status = 'started', failed_at = null, error_message = null, output = null
   where r.run_id = retry_run.run_id;

  update pgflow.step_states as ss
     set status = 'started', error_message = null, failed_at = null,
         remaining_tasks = (select count(*) from pgflow.step_tasks as t
                             where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                               and t.status <> 'completed')
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled');

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', t.attempts_count, 'worker_id', t.last_worker_id,
           'error', coalesce(v_error, 'cancelled'), 'failed_at', clock_timestamp()))
   where t.run_id = retry_run.run_id and t.status = 'cancelled' and t.attempts_count > 0
     and not t.attempt_errors @> jsonb_build_array(jsonb_build_object('attempt', t.attempts_count));

  for v_batch in
    select t.queue_name, array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as indexes,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as messages,
           array_agg(case when coalesce(r.priority, s.opt_priority, f.opt_priority) <> 0
                          then jsonb_build_object('priority', coalesce(r.priority, s.opt_priority, f.opt_priority)) end
                     order by t.step_slug, t.task_index) as headers
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = retry_run.run_id and t.status in ('failed', 'cancelled')
     group by t.queue_name
     order by t.queue_name
  loop
    update pgflow.step_tasks as t
       set status = 'queued', message_id = sent.msg_id, error_message = null, failed_at = null,
           attempts_base = t.attempts_count,
           queued_at = clock_timestamp(), requeued_count = 0, last_requeued_at = null,
           permanently_stalled_at = null
      from unnest(v_batch.steps, v_batch.indexes) with ordinality as k(step_slug, task_index, n)
      join pgmq.send_batch(v_batch.queue_name, array(select unnest(v_batch.messages)), v_batch.headers, 0)
           with ordinality as sent(msg_id, n) on sent.n = k.n
     where t.run_id = retry_run.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index;
    v_count := v_count + cardinality(v_batch.steps);
  end loop;

  perform pgflow.start_ready_steps(array[retry_run.run_id]);
  return v_count;
end;
$$;

-- 0990_settings_hot_path.sql (for the functions replaced above)
alter function pgflow.maybe_complete_runs(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.start_ready_steps(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.requeue_stalled_tasks()
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
