-- Frozen migration delta 0042_worker_reads (loaded by pgflow_django/migrations/0042_worker_reads.py):
-- pgflow.task_details (the priority and trace context of the tasks a worker claims or is handed) and
-- pgflow.task_transitions (the step and run transitions of recorded results, for the worker's
-- signals), so that the statements the worker sends read no history table themselves. Planned under
-- the session's settings, their own reads of a partitioned history were priced over every partition
-- and JIT-compiled on each execution (about 50 ms a completion with 15 daily partitions).

-- 0316_function_task_details.sql
-- What a worker needs of each task it was handed besides the claim record: the priority its
-- handler threads take it in (the run's, else the step's, else the flow's, as its message was sent
-- with) and, when traced, its run's trace context. One row per distinct (run_id, step_slug) pair.
-- The claim and the completion statements the worker sends join this function instead of reading
-- pgflow.runs themselves: a statement sent from the client is planned under the session's settings,
-- and on a partitioned history its probe of runs was priced over every partition, above
-- jit_above_cost, so each execution was JIT-compiled (about 50 ms a completion with 15 daily
-- partitions). Here it is planned under the hot path's settings (0990_settings_hot_path.sql).
create or replace function pgflow.task_details(run_ids uuid[], step_slugs text[], traced boolean)
returns table (run_id uuid, step_slug text, priority integer, trace_context jsonb)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  return query
    select k.run_id, k.step_slug, coalesce(r.priority, s.opt_priority, f.opt_priority, 0),
           case when task_details.traced then r.trace_context end
      from (select distinct p.run_id, p.step_slug
              from unnest(task_details.run_ids, task_details.step_slugs) as p(run_id, step_slug)) as k
     cross join lateral (
       select r.flow_slug, r.priority, r.trace_context from pgflow.runs as r where r.run_id = k.run_id offset 0
     ) as r
      join pgflow.flows as f on f.flow_slug = r.flow_slug
      left join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = k.step_slug;
end;
$$;
-- 0317_function_task_transitions.sql
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
begin
  return query
    select t.flow_slug, t.run_id, t.step_slug, t.task_index,
           coalesce(ss.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.step_slug = t.step_slug and o.completed_at > t.completed_at
           ), false),
           coalesce(ss.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.step_slug = t.step_slug and o.failed_at < t.failed_at
           ), false),
           coalesce(r.status = 'completed' and t.status = 'completed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.completed_at > t.completed_at
           ), false),
           coalesce(r.status = 'failed' and t.status = 'failed' and not exists (
             select 1 from pgflow.step_tasks as o
              where o.run_id = t.run_id and o.failed_at < t.failed_at
           ), false),
           t.error_message
      from unnest(task_transitions.run_ids, task_transitions.step_slugs, task_transitions.task_indexes)
           as k(run_id, step_slug, task_index)
     cross join lateral (
       select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status, t.completed_at, t.failed_at,
              t.error_message
         from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index offset 0
     ) as t
     cross join lateral (
       select ss.status from pgflow.step_states as ss
        where ss.run_id = k.run_id and ss.step_slug = k.step_slug offset 0
     ) as ss
     cross join lateral (
       select r.status from pgflow.runs as r where r.run_id = k.run_id offset 0
     ) as r;
end;
$$;
-- 0990_settings_hot_path.sql (for the functions created above)
alter function pgflow.task_details(uuid[],text[],boolean)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.task_transitions(uuid[],text[],integer[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
