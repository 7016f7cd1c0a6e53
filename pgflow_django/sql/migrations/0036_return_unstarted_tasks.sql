-- Frozen migration delta 0036_return_unstarted_tasks (loaded by
-- pgflow_django/migrations/0036_return_unstarted_tasks.py):
-- * pgflow.return_unstarted_tasks: a worker gives back the claims no handler thread took in time,
--   with their attempts returned, so another worker runs them at once and no attempt is spent.

-- 0346_function_return_unstarted_tasks.sql
-- Gives back claims whose handler never started (a worker's task that waited too long for a handler
-- thread): each item still holding its claim (`attempt`) is queued again, its attempt returned and
-- its message made visible now ('returned'), whatever attempts are left, so another worker takes it
-- at once and no attempt is spent on it. Returning the attempt keeps the fence: the next claim
-- carries the same attempt number, and no handler ran under this one to complete it late. Its
-- concurrency slot is freed. Other items ('stale': completed, taken over, or its run or step ended)
-- change nothing.
create or replace function pgflow.return_unstarted_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_run_ids uuid[];
  v_returned jsonb;
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'return_unstarted_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt}'
      using errcode = '22023';
  end if;
  select array_agg(distinct (i->>'run_id')::uuid order by (i->>'run_id')::uuid) into v_run_ids
    from jsonb_array_elements(items) as i;
  if v_run_ids is null then
    return;
  end if;
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  with returned as (
    update pgflow.step_tasks as t
       set status = 'queued', queued_at = clock_timestamp(), started_at = null,
           attempts_count = t.attempts_count - 1
      from jsonb_array_elements(items) as i, pgflow.runs as r, pgflow.step_states as ss
     where t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer
       and t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
       and t.attempts_count > t.attempts_base
       and r.run_id = t.run_id and r.status = 'started'
       and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
    returning t.queue_name, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('queue_name', rt.queue_name, 'message_id', rt.message_id,
                                               'run_id', rt.run_id, 'step_slug', rt.step_slug,
                                               'task_index', rt.task_index)), '[]'::jsonb)
    into v_returned
    from returned as rt;
  perform pgflow.release_limit_slots(v_run_ids);

  perform pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]), 'set')
     from (select rt->>'queue_name' as queue_name, array_agg((rt->>'message_id')::bigint) as ids
             from jsonb_array_elements(v_returned) as rt
            where rt->>'message_id' is not null
            group by rt->>'queue_name') as g;

  return query
    select (i->>'run_id')::uuid, i->>'step_slug', (i->>'task_index')::integer,
           case when v_returned @> jsonb_build_array(jsonb_build_object(
                       'run_id', i->>'run_id', 'step_slug', i->>'step_slug',
                       'task_index', (i->>'task_index')::integer))
                  then 'returned'
                else 'stale' end
      from jsonb_array_elements(items) as i;
end;
$$;
