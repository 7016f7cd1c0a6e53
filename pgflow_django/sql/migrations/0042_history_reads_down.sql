-- Frozen down delta of 0042_history_reads: back to 0041_complete_hop (workers of that release read the
-- priority, trace contexts and transitions in their own statements; the start, claim and completion
-- read the history without the batch's bounds).

drop function pgflow.task_transitions(uuid[], text[], integer[]);
drop function pgflow.task_details(uuid[], text[], boolean);
drop function pgflow.run_id_bounds(uuid[]);
-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one send per
-- queue and start delay (pgflow.queue_access) (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
-- A task's priority (the run's, else its step's default, else its flow's) travels in its message's
-- headers, {"priority": N}; a priority of 0 sends no headers (pgflow.message_priority reads 0).
-- The n-th id returned by the send belongs to the n-th message sent. The step states are read by
-- the batch and each run by its own probe (see cascade).
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_batches jsonb;
  v_batch record;
begin
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = clock_timestamp(), remaining_tasks = ss.initial_tasks
      from pgflow.steps as s, pgflow.flows as f
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks > 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started'
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
       select r.not_before, r.priority from pgflow.runs as r where r.run_id = st.run_id offset 0
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

  -- a new run's only moves are its root steps': when none of them has a condition and no root map
  -- gets an empty array, starting them is all pgflow.cascade would do (every count is already
  -- right, no step completes, so no run does), and its recounts are skipped (pgflow.fast_hop =
  -- 'off' turns this off, as it does the completion's fast path)
  if current_setting('pgflow.fast_hop', true) is distinct from 'off'
     and exists (select 1 from pgflow.steps as s where s.flow_slug = start_flows.flow_slug)
     and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_flows.flow_slug and s.deps_count = 0
          and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null
               or s.step_type = 'map' and exists (select 1 from jsonb_array_elements(inputs) as e(input)
                                                   where e.input = '[]'::jsonb))) then
    perform pgflow.start_ready_steps(v_ids);
  else
    perform pgflow.cascade(v_ids);
  end if;

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
  -- the plan stays an index probe per claimed message even if it was made while the table was empty.
  -- A row version is named by its table and tuple id: on a partitioned history two partitions hold
  -- rows at the same tuple id, and the tuple id alone matched a queued task of another partition
  with lockable as (
    select t.part, t.row_id
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     cross join lateral (
       select t.tableoid as part, t.ctid as row_id
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
     where t.ctid = l.row_id and t.tableoid = l.part and t.status = 'queued'
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

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_runs) order by r.run_id for update;

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
               left join pgflow.step_states as dss on dss.run_id = i.run_id and dss.step_slug = d.step_slug
              where d.flow_slug = r.flow_slug and d.dep_slug = i.step_slug
                and not coalesce(ds.step_type = 'single' and ds.required_input_pattern is null
                                 and ds.forbidden_input_pattern is null and coalesce(ds.opt_start_delay, 0) = 0
                                 and dss.status = 'created' and dss.initial_tasks = 1, false)),
           false))
    into v_eligible
    from unnest(v_runs, v_steps, v_indexes, v_attempts) as i(run_id, step_slug, task_index, attempt)
    left join lateral (
      select r.flow_slug, r.status, r.not_before from pgflow.runs as r where r.run_id = i.run_id offset 0
    ) as r on true
    left join lateral (
      select ss.status, ss.remaining_tasks from pgflow.step_states as ss
       where ss.run_id = i.run_id and ss.step_slug = i.step_slug offset 0
    ) as ss on true
    left join lateral (
      select t.status, t.attempts_count, t.message_id from pgflow.step_tasks as t
       where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index offset 0
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
     cross join lateral (select r.flow_slug from pgflow.runs as r where r.run_id = i.run_id offset 0) as r
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
              join pgflow.step_states as ost on ost.run_id = i.run_id and ost.step_slug = od.dep_slug
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
    select i.run_id,
           (select count(*) from pgflow.step_states as ss
             where ss.run_id = i.run_id and ss.step_slug <> i.step_slug
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
                      where ss.run_id = i.run_id and ss.status = 'completed' and ss.step_slug <> i.step_slug
                     union all
                     select i.step_slug, i.output) as l
              where not exists (select 1 from pgflow.deps as d
                                 where d.flow_slug = i.flow_slug and d.dep_slug = l.step_slug)
           ) end
      from run_counts as c
      join items as i on i.run_id = c.run_id
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
         select r.flow_slug, r.priority from pgflow.runs as r where r.run_id = n.run_id offset 0
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
                       join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                      where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
                    '{}'::jsonb)
      from unnest(coalesce(v_claimed, '{}')) as c
     order by 1 desc, 2, 4;  -- the items in task key order, then the tasks handed off in message order
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
-- was handed off. A batch of the common case takes pgflow.complete_hop's fast path, which does the
-- completion and the hand-off in one pass; any other batch the general path, in the same
-- transaction (complete_tasks, told by pgflow.fast_hop that the fast path already declined).
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
  v_fast_hop text;
begin
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'on', true);
  end if;
  v_done := array(select h from pgflow.complete_hop(items, complete_and_hand_off.queue_name,
                                                    complete_and_hand_off.worker_id, complete_and_hand_off.support_flows,
                                                    complete_and_hand_off.support_steps,
                                                    complete_and_hand_off.support_generations,
                                                    complete_and_hand_off.free_slots) as h);
  if cardinality(v_done) > 0 then
    return query select d.* from unnest(v_done) as d;
    v_runs := array(select distinct d.run_id from unnest(v_done) as d);
  else
    v_fast_hop := current_setting('pgflow.fast_hop', true);
    perform set_config('pgflow.fast_hop', 'off', true);
    select array_agg(row(c.outcome, null, null, c.run_id, c.step_slug, c.task_index, null, null)::pgflow.claim_record)
      into v_done
      from pgflow.complete_tasks(items) as c;
    perform set_config('pgflow.fast_hop', coalesce(v_fast_hop, ''), true);
    return query select d.* from unnest(v_done) as d;
    v_runs := array(select distinct d.run_id from unnest(v_done) as d where d.outcome = 'completed');
    return query
      select h.* from pgflow.hand_off_tasks(
        lower(complete_and_hand_off.queue_name), complete_and_hand_off.worker_id, v_runs,
        complete_and_hand_off.support_flows, complete_and_hand_off.support_steps,
        complete_and_hand_off.support_generations, complete_and_hand_off.free_slots) as h;
  end if;
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
alter function pgflow.start_ready_steps(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
