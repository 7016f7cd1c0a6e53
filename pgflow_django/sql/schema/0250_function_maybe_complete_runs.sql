-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent, and a run with no completed leaf (no steps, or every leaf skipped) has no output
-- (NULL), as in pgflow. Each distinct run id of the batch is probed on its own, then its step
-- states (see cascade). A completed child run makes its parent's wait due and notifies the channel
-- pgflow_waits, on which workers run their wait pass at once.
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_children uuid[];
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from (select distinct u.run_id from unnest(run_ids) as u(run_id)) as b
     cross join lateral (
       select r.run_id, r.status from pgflow.runs as r where r.run_id = b.run_id offset 0
     ) as r
      left join lateral (
        select ss.step_slug, ss.status from pgflow.step_states as ss where ss.run_id = r.run_id offset 0
      ) as ss on true
     where r.status = 'started'
     group by r.run_id
  )
  , finished as (
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then clock_timestamp() end,
         output = case when c.open_steps = 0 then (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id and ss.status = 'completed'
              and not exists (select 1 from pgflow.deps as d
                               where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
         ) end
    from counts as c
   where r.run_id = c.run_id
     and (r.remaining_steps <> c.open_steps or c.open_steps = 0)
  returning r.run_id, r.status, r.parent_run_id
  )
  select array_agg(f.run_id) into v_children
    from finished as f where f.status = 'completed' and f.parent_run_id is not null;

  -- a completed child run: its parent's subflow task is due, for pgflow.wake_waits (which locks the
  -- parent: a child never waits for its parent's lock)
  if v_children is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = any(v_children) and w.due_at is null;
    perform pg_notify('pgflow_waits', '');
  end if;
end;
$$;
