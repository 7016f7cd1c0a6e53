-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one send per
-- queue and start delay (pgflow.queue_access) (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here. An event or sleep
-- step's task (a subflow step's tasks) is created started, with no message, and waits
-- (pgflow.start_waits).
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
  v_waits integer;
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
              s.queue_name, s.opt_priority as step_priority, f.opt_priority as flow_priority, s.step_kind
  ), waiting as (
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, queue_name, status, attempts_count,
                                   started_at)
    select st.flow_slug, st.run_id, st.step_slug, i, st.queue_name, 'started', 1, clock_timestamp()
      from started as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
     where st.step_kind <> 'handler'
    returning 1
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
     where st.step_kind = 'handler'
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message,
           case when st.priority <> 0 then jsonb_build_object('priority', st.priority) end as headers
      from timed as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages,
                                       'headers', m.headers)),
         (select count(*) from waiting)
    into v_batches, v_waits
    from (select queue_name, start_delay, jsonb_agg(message) as messages,
                 case when bool_or(headers is not null) then jsonb_agg(headers) end as headers
            from messages group by queue_name, start_delay) as m;

  if v_waits > 0 then
    perform pgflow.start_waits(run_ids);
  end if;
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
