-- The step and run transitions that just-recorded task results made, for the worker's signals
-- (pgflow_django.signals): for each given task, whether its step or run is now completed or failed
-- by it (the step's last completed task, the run's last completed task; the step's or run's first
-- failed task), with its error message. Tasks of one transaction may tie; the caller sends one
-- signal per step and run. A PL/pgSQL function, so it is planned under the hot path's settings
-- (0990_settings_hot_path.sql): sent from the client, this statement was planned under the session's,
-- priced over every partition of a partitioned history, and JIT-compiled on each execution.
create or replace function pgflow.task_transitions(run_ids uuid[], step_slugs text[], task_indexes integer[])
returns table (flow_slug text, run_id uuid, step_slug text, task_index integer, step_completed boolean,
               step_failed boolean, run_completed boolean, run_failed boolean, error_message text)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_lo uuid;
  v_hi uuid;
begin
  -- the tasks' lowest and highest run ids bound each probe (see pgflow.complete_hop)
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(task_transitions.run_ids) as b;
  return query
    select t.flow_slug, t.run_id, t.step_slug, t.task_index,
           coalesce(ss.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.run_id between v_lo and v_hi and o.step_slug = t.step_slug
                and o.completed_at > t.completed_at
           ), false),
           coalesce(ss.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.run_id between v_lo and v_hi and o.step_slug = t.step_slug
                and o.failed_at < t.failed_at
           ), false),
           coalesce(r.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.run_id between v_lo and v_hi and o.completed_at > t.completed_at
           ), false),
           coalesce(r.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.run_id between v_lo and v_hi and o.failed_at < t.failed_at
           ), false),
           t.error_message
      from unnest(task_transitions.run_ids, task_transitions.step_slugs, task_transitions.task_indexes)
           as k(run_id, step_slug, task_index)
     cross join lateral (
       select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status, t.completed_at, t.failed_at,
              t.error_message
         from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.run_id between v_lo and v_hi and t.step_slug = k.step_slug
          and t.task_index = k.task_index
       offset 0
     ) as t
     cross join lateral (
       select ss.status from pgflow.step_states as ss
        where ss.run_id = k.run_id and ss.run_id between v_lo and v_hi and ss.step_slug = k.step_slug offset 0
     ) as ss
     cross join lateral (
       select r.status from pgflow.runs as r
        where r.run_id = k.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r;
end;
$$;
