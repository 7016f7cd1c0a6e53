-- Frozen migration delta 0045_run_now (loaded by pgflow_django/migrations/0045_run_now.py): run a
-- delayed run's waiting work now.
-- * New: pgflow.run_now(run_id) makes the hidden messages of a started run's queued tasks (a delayed
--   start, a step's start delay, a retry's back-off) visible now, clears the run's not_before and
--   wakes the queues' workers; tasks a worker holds, tasks a limit deferred and waits stay as they are.
--   No table changes; the Django migration adds the permission run_now to the Run model.

-- 0447_function_run_now.sql
-- Makes the waiting work of a started run visible now: each queued task of the run whose message is
-- hidden until later (a delayed start: start_flow's start_delay, a Django task's run_after; a step's
-- start_delay; a retry's back-off) has its message made visible now on the task's own queue, and the
-- run's not_before is cleared, so the steps it starts later are not delayed either. The queues'
-- listeners are told as an insert would tell them, so workers read at once. Returns how many
-- messages it made visible (0: nothing of the run was waiting).
-- Left as they are: a task a worker holds (started), a task a concurrency or rate limit deferred
-- (pgflow.limit_waits: its limit still decides when it runs), a message another transaction holds
-- (a claim that read it decides its visibility), and event, sleep and subflow steps (they wait with
-- no message; a sleep is part of what the flow does, not a delay of it).
-- Lock order: the run, then its tasks (in key order), then their messages (skipped when locked,
-- never waited for), the order of retry_run and cancel_run; a claim skips a task it finds locked, so
-- only the tasks whose messages are hidden are locked: a claim of a visible one is never held up.
-- Refused, changing nothing, for a run that is not started (SQLSTATE 55000); P0002 for an unknown run.
create or replace function pgflow.run_now(run_id uuid)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_status text;
  v_queues text[];
  v_hidden text;
  v_task_queues text[];
  v_task_msgs bigint[];
  v_updates text;
  v_made_visible text;
  v_woken text[];
  v_count integer;
begin
  select r.status into v_status from pgflow.runs as r where r.run_id = run_now.run_id for update;
  if not found then
    raise exception 'run % does not exist', run_now.run_id using errcode = 'P0002';
  end if;
  if v_status = 'failed' then
    raise exception 'run % is failed: nothing of it waits to run; retry it to run its failed tasks again',
      run_now.run_id using errcode = '55000';
  elsif v_status <> 'started' then
    raise exception 'run % is %: nothing of it waits to run; start its flow again (start_flow, manage.py pgflow_start, or the admin''s Re-run action)',
      run_now.run_id, v_status using errcode = '55000';
  end if;

  update pgflow.runs as r set not_before = null
   where r.run_id = run_now.run_id and r.not_before > clock_timestamp();

  -- the queues of its queued tasks (each task's queue snapshot) that still exist, in name order
  select array_agg(distinct t.queue_name order by t.queue_name) into v_queues
    from pgflow.step_tasks as t
   where t.run_id = run_now.run_id and t.status = 'queued' and t.message_id is not null
     and to_regclass(format('pgmq.%I', pgmq.format_table_name(t.queue_name, 'q'))) is not null;
  if v_queues is null then
    return 0;
  end if;

  -- its queued tasks whose messages are hidden until later (read without a lock), not deferred by a
  -- limit, locked in key order; a task claimed meanwhile is no longer queued when its lock is granted
  select string_agg(format(
           'select t.queue_name, t.message_id from pgflow.step_tasks as t join pgmq.%I as m on m.msg_id = t.message_id'
           ' where t.run_id = $1 and t.queue_name = %L and t.status = ''queued'' and m.vt > clock_timestamp()',
           pgmq.format_table_name(q.queue_name, 'q'), q.queue_name), ' union all ' order by q.queue_name)
    into v_hidden
    from unnest(v_queues) as q(queue_name);
  execute format(
    $q$
      select coalesce(array_agg(l.queue_name), '{}'), coalesce(array_agg(l.message_id), '{}')
        from (select t.queue_name, t.message_id from pgflow.step_tasks as t
               where t.run_id = $1 and t.status = 'queued'
                 and (t.queue_name, t.message_id) in (%s)
                 and not exists (select 1 from pgflow.limit_waits as w
                                  where w.run_id = t.run_id and w.task_step_slug = t.step_slug
                                    and w.task_index = t.task_index)
               order by t.step_slug, t.task_index
                 for no key update) as l
    $q$, v_hidden) into v_task_queues, v_task_msgs using run_now.run_id;
  if cardinality(v_task_msgs) = 0 then
    return 0;
  end if;

  -- their messages, visible now on each queue (one update per queue, in name order); a message
  -- another transaction holds is skipped
  select string_agg(format(
           '%I as (update pgmq.%I as q set vt = clock_timestamp()'
           ' from (select m.msg_id from unnest($1, $2) as o(queue_name, msg_id)'
           ' cross join lateral (select m.msg_id from pgmq.%I as m where m.msg_id = o.msg_id'
           ' and m.vt > clock_timestamp() for update skip locked) as m where o.queue_name = %L) as o'
           ' where q.msg_id = o.msg_id returning %L::text as queue_name)',
           'u' || q.n, pgmq.format_table_name(q.queue_name, 'q'), pgmq.format_table_name(q.queue_name, 'q'),
           q.queue_name, q.queue_name), ', ' order by q.n),
         string_agg(format('select w.queue_name from %I as w', 'u' || q.n), ' union all ' order by q.n)
    into v_updates, v_made_visible
    from (select d.queue_name, row_number() over (order by d.queue_name) as n
            from (select distinct u.queue_name from unnest(v_task_queues) as u(queue_name)) as d) as q;
  execute format(
    'with %s select coalesce(array_agg(distinct v.queue_name), ''{}''), count(*)::integer from (%s) as v',
    v_updates, v_made_visible) into v_woken, v_count using v_task_queues, v_task_msgs;

  perform pg_notify('pgmq.' || pgmq.format_table_name(w.queue_name, 'q') || '.INSERT', null)
     from unnest(v_woken) as w(queue_name);
  return v_count;
end;
$$;
