-- Sends the event event_name with payload to one run (run_id) or to every run whose wait key has the
-- value key (its text: 42 and '42' are the same key). Every event wait for it that waits now ends:
-- its step completes with the payload (one whose run another writer holds at that moment is pinned
-- the event and completed by the next pgflow.wake_waits). The event is also kept for
-- retention_seconds, and every wait for it that starts meanwhile takes it (pgflow.start_waits).
-- A wait takes at most one event. With event_id, a second send of the same event name and id while
-- the first is kept changes nothing and returns 0. Runs in the caller's transaction: nothing is
-- delivered until it commits. Returns the number of waits it ended.
-- Lock order: the runs of the waits it can see (in run order), then the key's lock
-- (pgflow.event_lock_key), then, without waiting, the runs of waits that started meanwhile.
create or replace function pgflow.send_event(
  event_name text, payload jsonb default null, run_id uuid default null, key text default null,
  event_id text default null, retention_seconds integer default 86400
)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_seq bigint;
  v_locked uuid[];
  v_items jsonb;
  v_pinned integer;
  v_completed integer := 0;
begin
  if coalesce(event_name, '') = '' then
    raise exception 'send_event: the event name must be a non-empty text' using errcode = '22023';
  end if;
  if (send_event.run_id is null) = (send_event.key is null) then
    raise exception 'send_event(%): pass run_id (one run) or key (the runs whose wait key has that value), not % ',
      quote_literal(event_name), case when send_event.run_id is null then 'neither' else 'both' end
      using errcode = '22023';
  end if;
  if retention_seconds is null or retention_seconds < 0 then
    raise exception 'send_event(%): retention_seconds must be >= 0, got %', quote_literal(event_name),
      coalesce(retention_seconds::text, 'NULL') using errcode = '22023';
  end if;
  if send_event.event_id is not null and exists (
       select 1 from pgflow.events as e
        where e.event_name = send_event.event_name and e.event_id = send_event.event_id) then
    return 0;
  end if;

  if send_event.run_id is not null then
    perform 1 from pgflow.runs as r where r.run_id = send_event.run_id for update;
  else
    perform 1 from pgflow.runs as r
     where r.run_id in (select w.run_id from pgflow.step_waits as w
                         where w.event_name = send_event.event_name and w.event_key = send_event.key)
     order by r.run_id
       for update;
    perform pg_advisory_xact_lock(pgflow.event_lock_key(send_event.event_name, send_event.key));
  end if;

  insert into pgflow.events (event_name, run_id, event_key, payload, event_id, expires_at)
  values (send_event.event_name, send_event.run_id, send_event.key, coalesce(send_event.payload, 'null'::jsonb),
          send_event.event_id, clock_timestamp() + make_interval(secs => retention_seconds))
  on conflict (event_name, event_id) where event_id is not null do nothing
  returning event_seq into v_seq;
  if v_seq is null then
    return 0;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id from pgflow.runs as r
           where r.run_id in (select w.run_id from pgflow.step_waits as w
                               where w.event_name = send_event.event_name and w.event_seq is null
                                 and (w.run_id = send_event.run_id or w.event_key = send_event.key))
           order by r.run_id offset 0
             for update skip locked) as l;

  with ended as (
    delete from pgflow.step_waits as w
     where w.event_name = send_event.event_name and w.event_seq is null
       and (w.run_id = send_event.run_id or w.event_key = send_event.key)
       and w.run_id = any(coalesce(v_locked, '{}'))
    returning w.run_id, w.step_slug, w.task_index, w.attempt
  )
  select jsonb_agg(jsonb_build_object('run_id', en.run_id, 'step_slug', en.step_slug, 'task_index', en.task_index,
                                      'attempt', en.attempt, 'output', coalesce(send_event.payload, 'null'::jsonb))
                   order by en.run_id, en.step_slug, en.task_index)
    into v_items
    from ended as en;

  -- a wait whose run another writer holds, or that another call is ending: pinned, or left to it
  update pgflow.step_waits as w
     set event_seq = v_seq, due_at = clock_timestamp()
   where (w.run_id, w.step_slug, w.task_index) in (
           select x.run_id, x.step_slug, x.task_index from pgflow.step_waits as x
            where x.event_name = send_event.event_name and x.event_seq is null
              and (x.run_id = send_event.run_id or x.event_key = send_event.key)
              for update skip locked);
  get diagnostics v_pinned = row_count;

  if v_items is not null then
    select count(*) filter (where c.outcome = 'completed') into v_completed from pgflow.complete_tasks(v_items) as c;
  end if;
  return v_completed + v_pinned;
end;
$$;
