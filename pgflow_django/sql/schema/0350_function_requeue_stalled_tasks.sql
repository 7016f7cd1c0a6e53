-- Recovers tasks whose worker vanished: started tasks of started runs and steps (of handler steps:
-- an event or sleep task waits without a worker) whose claim is older
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
   where t.status = 'started' and s.step_kind = 'handler'
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
     where t.run_id = any(v_locked) and t.status = 'started' and s.step_kind = 'handler'
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
