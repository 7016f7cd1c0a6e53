-- The fast path of a completion: one call that completes a batch of single-step tasks when each is
-- the common case, in a handful of static statements instead of the general path's (complete_tasks,
-- cascade, start_ready_steps, maybe_complete_runs, hand_off_tasks, claim_classified: about 40
-- statements and 15 nested calls per hop). It applies to a batch only when every item
-- - names a distinct run, task 0 of a single step, and is the current claim (the task started in
--   that attempt, its step and run started), of a run that is no flow's child;
-- - belongs to a flow without flow control (no pgflow.flow_limits rows, no limit_holds or
--   limit_waits of the run);
-- - feeds only single handler steps still created, with no condition and no start delay, in a run not
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
           and r.parent_run_id is null
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
                and not coalesce(ds.step_type = 'single' and ds.step_kind = 'handler' and ds.required_input_pattern is null
                                 and ds.forbidden_input_pattern is null and coalesce(ds.opt_start_delay, 0) = 0
                                 and dss.status = 'created' and dss.initial_tasks = 1, false)),
           false))
    into v_eligible
    from unnest(v_runs, v_steps, v_indexes, v_attempts) as i(run_id, step_slug, task_index, attempt)
    left join lateral (
      select r.flow_slug, r.status, r.not_before, r.parent_run_id from pgflow.runs as r
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
