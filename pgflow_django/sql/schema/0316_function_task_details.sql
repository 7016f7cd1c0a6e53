-- What a worker needs of each task it was handed besides the claim record: the priority its
-- handler threads take it in (the run's, else the step's, else the flow's, as its message was sent
-- with) and, when traced, its run's trace context. One row per distinct (run_id, step_slug) pair.
-- The claim and the completion statements the worker sends join this function instead of reading
-- pgflow.runs themselves: a statement sent from the client is planned under the session's settings,
-- and on a partitioned history its probe of runs was priced over every partition, above
-- jit_above_cost, so each execution was JIT-compiled (about 50 ms a completion with 15 daily
-- partitions). Here it is planned under the hot path's settings (0990_settings_hot_path.sql), and
-- its probe of runs is bounded by the lowest and highest run id, so that on a partitioned history
-- only the partitions holding them are set up (see pgflow.complete_hop).
create or replace function pgflow.task_details(run_ids uuid[], step_slugs text[], traced boolean)
returns table (run_id uuid, step_slug text, priority integer, trace_context jsonb)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_lo uuid;
  v_hi uuid;
begin
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(task_details.run_ids) as b;
  return query
    select k.run_id, k.step_slug, coalesce(r.priority, s.opt_priority, f.opt_priority, 0),
           case when task_details.traced then r.trace_context end
      from (select distinct p.run_id, p.step_slug
              from unnest(task_details.run_ids, task_details.step_slugs) as p(run_id, step_slug)) as k
     cross join lateral (
       select r.flow_slug, r.priority, r.trace_context from pgflow.runs as r
        where r.run_id = k.run_id and r.run_id between v_lo and v_hi offset 0
     ) as r
      join pgflow.flows as f on f.flow_slug = r.flow_slug
      left join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = k.step_slug;
end;
$$;
