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
  v_lo uuid;
  v_hi uuid;
begin
  -- the batch's lowest and highest run ids bound the history probes below, so that on a
  -- partitioned history a generic plan sets up only the partitions that hold them (probes by a
  -- run id parameter, never a scan joined to the batch: see pgflow.complete_hop)
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(runs) as b;
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
        where t.run_id = k.run_id and t.run_id between v_lo and v_hi and t.step_slug = k.step_slug
          and t.task_index = k.task_index and t.status = 'queued'
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
       where t.run_id = k.run_id and t.run_id between v_lo and v_hi and t.step_slug = k.step_slug
         and t.task_index = k.task_index and t.status = 'started'
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
                 join pgflow.step_states as dst
                   on dst.run_id = c.run_id and dst.run_id between v_lo and v_hi and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
             when s.deps_count = 0 then r.input
             else coalesce((
               select jsonb_object_agg(d.dep_slug, dst.output)
                 from pgflow.deps as d
                 join pgflow.step_states as dst
                   on dst.run_id = c.run_id and dst.run_id between v_lo and v_hi and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
               '{}'::jsonb)
           end
      from unnest(coalesce(v_claimed, '{}')) as c
     cross join lateral (
       select r.input from pgflow.runs as r
        where r.run_id = c.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
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
