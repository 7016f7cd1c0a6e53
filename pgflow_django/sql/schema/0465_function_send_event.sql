-- Sends the event event_name with payload to one run (run_id) or to every run whose wait key has the
-- value key (its text: 42 and '42' are the same key). Every event wait for it that waits now takes it
-- (the event is pinned to the wait, which is due at once), and the next pgflow.wake_waits completes
-- the wait's step with the payload; workers run that pass as soon as this transaction commits
-- (NOTIFY pgflow_waits). The event is also kept for retention_seconds, and every wait for it that
-- starts meanwhile takes it (pgflow.start_waits). A wait takes at most one event. With event_id, a
-- second send of the same event name and id while the first is kept changes nothing and returns 0.
-- Runs in the caller's transaction: nothing is delivered unless it commits. Returns the number of
-- waits the event was delivered to.
-- Locks: the event's lock (pgflow.event_lock_key, exclusive), then no lock is waited for: a wait row
-- another transaction holds (ending it, or delivering it another event) is left to it. So a send
-- never waits for a run, and a start (which holds runs) never waits for a send that waits for it.
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
  v_delivered integer;
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

  perform pg_advisory_xact_lock(pgflow.event_lock_key(send_event.event_name,
                                                      coalesce('run:' || send_event.run_id::text, send_event.key)));

  insert into pgflow.events (event_name, run_id, event_key, payload, event_id, expires_at)
  values (send_event.event_name, send_event.run_id, send_event.key, coalesce(send_event.payload, 'null'::jsonb),
          send_event.event_id, clock_timestamp() + make_interval(secs => retention_seconds))
  on conflict (event_name, event_id) where event_id is not null do nothing
  returning event_seq into v_seq;
  if v_seq is null then
    return 0;
  end if;

  -- one branch per target, each by its own index: an OR of both could walk every wait
  if send_event.run_id is not null then
    update pgflow.step_waits as w
       set event_seq = v_seq, due_at = clock_timestamp()
     where (w.run_id, w.step_slug, w.task_index) in (
             select x.run_id, x.step_slug, x.task_index from pgflow.step_waits as x
              where x.run_id = send_event.run_id and x.event_name = send_event.event_name
                and x.event_seq is null
                for update skip locked);
  else
    update pgflow.step_waits as w
       set event_seq = v_seq, due_at = clock_timestamp()
     where (w.run_id, w.step_slug, w.task_index) in (
             select x.run_id, x.step_slug, x.task_index from pgflow.step_waits as x
              where x.event_name = send_event.event_name and x.event_key = send_event.key
                and x.event_seq is null
                for update skip locked);
  end if;
  get diagnostics v_delivered = row_count;
  if v_delivered > 0 then
    perform pg_notify('pgflow_waits', '');
  end if;
  return v_delivered;
end;
$$;
