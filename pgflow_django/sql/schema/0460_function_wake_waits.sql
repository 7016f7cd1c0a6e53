-- Ends the waits that are due, at most max_waits of them, oldest due first: a sleep past its time
-- completes with {"slept_until": its time}; a wait with a pinned event completes with the event's
-- payload; an event wait past its timeout fails as a task out of attempts ('timed out waiting for
-- event ...'), so its step's when_exhausted (the DSL's when_timeout) decides what follows; a sleep
-- whose time could not be read fails the same way with the reason; a subflow task whose child run
-- ended completes with the child's output, or fails when the child failed. Runs another writer holds are
-- left for the next call; a subflow task's child that its run's failure or its step's skip could
-- not fail then (another writer held it) fails here when free. Also deletes up to max_waits expired
-- events (pgflow.delete_expired_events), after delivering those pinned to waits. Every worker calls it on a
-- timer (the same pass as the scheduler's); pg_cron or any session may call it too. Returns the
-- number of waits completed and failed.
create or replace function pgflow.wake_waits(max_waits integer default 1000)
returns table (outcome text, wait_count integer)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_locked uuid[];
  v_items jsonb;
  v_failures jsonb;
  v_failure record;
  v_orphan record;
  v_ended jsonb;
  v_completed integer := 0;
  v_failed integer := 0;
  -- a variable, not clock_timestamp() in the conditions: a volatile call is no index condition, and the
  -- reads below would walk every wait and event in time order
  v_now timestamptz := clock_timestamp();
begin
  select array_agg(distinct d.run_id) into v_candidates
    from (select w.run_id from pgflow.step_waits as w
           where w.due_at <= v_now order by w.due_at limit max_waits) as d;
  if v_candidates is null then
    perform pgflow.delete_expired_events(v_now, max_waits);
    return query select 'completed'::text, 0 union all select 'failed', 0;
    return;
  end if;

  -- one lock order for every writer of a run: the run row first
  select array_agg(l.run_id) into v_locked
    from (select r.run_id from pgflow.runs as r
           where r.run_id = any(v_candidates) order by r.run_id offset 0
             for update skip locked) as l;
  v_locked := coalesce(v_locked, '{}');

  -- a wait whose run is gone (deleted by hand) would be due for ever, ahead of every other
  delete from pgflow.step_waits as w
   where w.run_id = any(v_candidates) and not (w.run_id = any(v_locked))
     and not exists (select 1 from pgflow.runs as r where r.run_id = w.run_id offset 0);

  -- children whose parent failed, or whose step was skipped, while another writer held them
  for v_orphan in
    select w.run_id, w.step_slug, w.task_index, w.child_run_id, w.error_message
      from pgflow.step_waits as w
     where w.run_id = any(v_locked) and w.due_at <= v_now and w.kind = 'subflow'
       and w.child_run_id is not null and w.error_message is not null
  loop
    if pgflow.fail_child_run(v_orphan.child_run_id, v_orphan.error_message) then
      delete from pgflow.step_waits as w
       where w.run_id = v_orphan.run_id and w.step_slug = v_orphan.step_slug and w.task_index = v_orphan.task_index;
    end if;
  end loop;

  with ended as (
    delete from pgflow.step_waits as w
     where w.run_id = any(v_locked) and w.due_at <= v_now
       and not (w.kind = 'subflow' and w.child_run_id is not null and w.error_message is not null)
    returning w.*
  )
  select jsonb_agg(to_jsonb(en)) into v_ended from ended as en;
  if v_ended is null then
    perform pgflow.delete_expired_events(v_now, max_waits);
    return query select 'completed'::text, 0 union all select 'failed', 0;
    return;
  end if;

  -- a statement of its own: a delete that waited for a send's delivery to commit sees the wait as
  -- the send left it, but not the event the send kept, which only a later snapshot holds
  with ended as (
    select * from jsonb_populate_recordset(null::pgflow.step_waits, v_ended)
  ), resolved as (
    select en.*, coalesce(ev.payload, ch.output) as payload,
           case when en.error_message is not null then en.error_message
                when en.kind = 'event' and ev.event_seq is null
                  then format('timed out waiting for event %s', en.event_name)
                when en.kind = 'subflow' and ch.status is distinct from 'completed'
                  then format('child run %s failed: %s', en.child_run_id,
                              coalesce(ch.error_message, 'it no longer exists')) end as failure
      from ended as en
      left join pgflow.events as ev on ev.event_seq = en.event_seq
      left join lateral (select c.status, c.output, c.error_message from pgflow.runs as c
                          where c.run_id = en.child_run_id offset 0) as ch on true
  )
  select jsonb_agg(jsonb_build_object('run_id', r.run_id, 'step_slug', r.step_slug, 'task_index', r.task_index,
                                      'attempt', r.attempt,
                                      'output', case when r.kind = 'sleep'
                                                     then jsonb_build_object('slept_until', r.due_at)
                                                     else coalesce(r.payload, 'null'::jsonb) end)
                   order by r.run_id, r.step_slug, r.task_index) filter (where r.failure is null),
         jsonb_agg(jsonb_build_object('run_id', r.run_id, 'step_slug', r.step_slug, 'task_index', r.task_index,
                                      'attempt', r.attempt, 'error', r.failure)
                   order by r.run_id, r.step_slug, r.task_index) filter (where r.failure is not null)
    into v_items, v_failures
    from resolved as r;

  if v_items is not null then
    select count(*) filter (where c.outcome = 'completed') into v_completed from pgflow.complete_tasks(v_items) as c;
  end if;

  for v_failure in
    select f.run_id, f.step_slug, f.task_index, f.attempt, f.error
      from jsonb_to_recordset(v_failures) as f(run_id uuid, step_slug text, task_index integer, attempt integer, error text)
  loop
    -- a completion above may have failed the run meanwhile (a condition with when_unmet = fail)
    if exists (select 1 from pgflow.step_tasks as t
                 join pgflow.runs as r on r.run_id = t.run_id
                where t.run_id = v_failure.run_id and t.step_slug = v_failure.step_slug
                  and t.task_index = v_failure.task_index and t.status = 'started'
                  and t.attempts_count = v_failure.attempt and r.status = 'started') then
      update pgflow.step_tasks as t
         set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
               'attempt', t.attempts_count, 'worker_id', null, 'error', v_failure.error, 'failed_at', clock_timestamp()))
       where t.run_id = v_failure.run_id and t.step_slug = v_failure.step_slug and t.task_index = v_failure.task_index;
      perform pgflow.exhaust_task(v_failure.run_id, v_failure.step_slug, v_failure.task_index, v_failure.error);
      v_failed := v_failed + 1;
    end if;
  end loop;

  perform pgflow.delete_expired_events(v_now, max_waits);
  return query select 'completed'::text, v_completed union all select 'failed', v_failed;
end;
$$;
