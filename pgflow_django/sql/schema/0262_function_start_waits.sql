-- Starts the waits of the given runs' event, sleep and subflow tasks that are started and have none yet
-- (pgflow.start_ready_steps created them, or pgflow.retry_run started them again): one
-- pgflow.step_waits row each, with its key, its timeout or its time. The caller holds the runs' row
-- locks. An event wait then takes the locks of its run's and its key's events (pgflow.event_lock_key,
-- shared, in lock order) and the earliest kept event that reaches it: the event is pinned to it and it
-- is due at once, so the next pgflow.wake_waits completes it (a start never completes a step inside
-- the completion that started it). A sleep whose time is not a timestamp is due at once with
-- the reason and fails there. A subflow task's wait is its child run (pgflow.start_child_runs).
-- Returns the number of waits started.
create or replace function pgflow.start_waits(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_started integer;
  v_events jsonb;
begin
  with pending as (
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, s.step_kind, s.wait_event,
           s.wait_key, s.wait_seconds, s.sleep_until, s.deps_count, r.input
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     cross join lateral (select r.input, r.status from pgflow.runs as r where r.run_id = t.run_id offset 0) as r
     where t.run_id = any(run_ids) and t.status = 'started' and s.step_kind in ('event', 'sleep')
       and r.status = 'started'
       -- a probe by key (offset 0 keeps it one): as an anti-join planned on an empty table, it read
       -- every wait for each task
       and not exists (select 1 from pgflow.step_waits as w
                        where w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
                        offset 0)
  ), timed as (
    select p.*,
           case when p.sleep_until is not null then
             pgflow.timestamp_or_null(jsonb_path_query_first(
               case when p.deps_count = 0 then p.input
                    else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                     from pgflow.deps as d
                                     join pgflow.step_states as dst
                                       on dst.run_id = p.run_id and dst.step_slug = d.dep_slug
                                    where d.flow_slug = p.flow_slug and d.step_slug = p.step_slug
                                      and dst.status = 'completed'), '{}'::jsonb) end,
               p.sleep_until::jsonpath)) end as until_at
      from pending as p
  ), inserted as (
    insert into pgflow.step_waits (run_id, step_slug, task_index, flow_slug, attempt, kind, event_name, event_key,
                                   due_at, error_message)
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, t.step_kind, t.wait_event,
           case when t.wait_key is not null then jsonb_path_query_first(t.input, t.wait_key::jsonpath) #>> '{}' end,
           case when t.step_kind = 'event' then clock_timestamp() + make_interval(secs => t.wait_seconds)
                when t.wait_seconds is not null then clock_timestamp() + make_interval(secs => t.wait_seconds)
                else coalesce(t.until_at, clock_timestamp()) end,
           case when t.step_kind = 'sleep' and t.sleep_until is not null and t.until_at is null
                then format('sleep time %s is not an ISO-8601 timestamp in the step''s input', t.sleep_until) end
      from timed as t
    returning step_waits.run_id, step_waits.step_slug, step_waits.task_index, step_waits.kind,
              step_waits.event_name, step_waits.event_key
  )
  select count(*), jsonb_agg(jsonb_build_object('run_id', i.run_id, 'step_slug', i.step_slug,
                                                'task_index', i.task_index, 'event_name', i.event_name,
                                                'event_key', i.event_key)) filter (where i.kind = 'event')
    into v_started, v_events
    from inserted as i;
  v_started := v_started + pgflow.start_child_runs(run_ids);
  if v_events is null then
    return v_started;
  end if;

  -- the new event waits only, from what the insert returned: a read of step_waits by run could be
  -- planned on a partial index and walk every wait. Shared: starts never wait for each other, only
  -- for a send of one of their events (which waits for nothing once it holds its lock)
  perform pg_advisory_xact_lock_shared(k.lock_key)
     from (select distinct pgflow.event_lock_key(n.event_name, c.channel) as lock_key
             from jsonb_to_recordset(v_events) as n(run_id uuid, event_name text, event_key text)
            cross join lateral (values ('run:' || n.run_id::text), (n.event_key)) as c(channel)
            where c.channel is not null
            order by 1) as k;

  update pgflow.step_waits as w
     set event_seq = e.event_seq, due_at = clock_timestamp()
    from (
      select n.run_id, n.step_slug, n.task_index,
             least((select min(e.event_seq) from pgflow.events as e
                     where e.event_name = n.event_name and e.run_id = n.run_id
                       and e.expires_at > clock_timestamp()),
                   (select min(e.event_seq) from pgflow.events as e
                     where n.event_key is not null and e.event_name = n.event_name
                       and e.event_key = n.event_key and e.expires_at > clock_timestamp())) as event_seq
        from jsonb_to_recordset(v_events) as n(run_id uuid, step_slug text, task_index integer, event_name text,
                                               event_key text)
    ) as e
   where e.event_seq is not null
     and w.run_id = e.run_id and w.step_slug = e.step_slug and w.task_index = e.task_index;
  return v_started;
end;
$$;
