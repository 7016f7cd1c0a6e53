-- The claim. Queued tasks of started runs and steps whose messages were read become started, with
-- one more attempt; their messages get the claim visibility (effective timeout + 2 s) before the
-- rows are returned, so no handler runs while its message could be read again. Messages whose
-- task is not claimable are left alone.
create or replace function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid)
returns setof pgflow.step_task_record
language plpgsql
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  with claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
           last_worker_id = start_tasks.worker_id
      from pgflow.runs as r, pgflow.step_states as ss
     where t.flow_slug = start_tasks.flow_slug and t.message_id = any(start_tasks.msg_ids)
       and t.status = 'queued'
       and r.run_id = t.run_id and r.status = 'started'
       and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  if v_claimed is null then
    return;
  end if;

  perform pgflow.set_vt_batch(start_tasks.flow_slug, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2))
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug;

  return query
    select c.flow_slug, c.run_id, c.step_slug, c.task_index, c.message_id, c.attempts_count,
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> c.task_index
             when s.step_type = 'map' then (
               select dst.output -> c.task_index
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
             when s.deps_count = 0 then r.input
             else coalesce((
               select jsonb_object_agg(d.dep_slug, dst.output)
                 from pgflow.deps as d
                 join pgflow.step_states as dst on dst.run_id = c.run_id and dst.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug and dst.status = 'completed'),
               '{}'::jsonb)
           end
      from unnest(v_claimed) as c
      join pgflow.runs as r on r.run_id = c.run_id
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     order by c.message_id;
end;
$$;
