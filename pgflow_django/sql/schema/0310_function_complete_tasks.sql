-- Completes many claims in one call. Each item names the claim it finishes (its attempt); an item
-- that is no longer the current claim changes nothing and reports 'stale' (its message is archived
-- when the task is already terminal), so one stale item never undoes the others. A non-array
-- output feeding a map fails its task, step and run without retry ('failed').
create or replace function pgflow.complete_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_items pgflow.completion_item[];
  v_run_ids uuid[];
  v_bad record;
  v_queues text[];
  v_msgs bigint[];
  v_finished uuid[];
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'complete_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt, output}'
      using errcode = '22023';
  end if;

  -- parse into an array first: joins then run over unnest() of a variable, which the planner sizes
  -- as a handful of rows (index lookups), not jsonb_array_elements' default of 100 (hash joins that
  -- scan every run)
  select array_agg(row(x.run_id, x.step_slug, x.task_index, x.attempt, coalesce(x.output, 'null'::jsonb),
                       null, null, null, null, null)::pgflow.completion_item
                   order by x.run_id, x.step_slug, x.task_index)
    into v_items
    from jsonb_to_recordset(items) as x(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb);
  if v_items is null then
    return;
  end if;
  select array_agg(distinct c.run_id order by c.run_id) into v_run_ids from unnest(v_items) as c;

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  select array_agg(row(y.*)::pgflow.completion_item) into v_items
  from (
  select distinct on (x.run_id, x.step_slug, x.task_index)
         x.run_id, x.step_slug, x.task_index, x.attempt, x.output,
         case when t.status = 'started' and t.attempts_count = x.attempt
                   and r.status = 'started' and ss.status = 'started'
              then 'completed' else 'stale' end as outcome,
         t.flow_slug, t.message_id, s.step_type, t.queue_name
    from unnest(v_items) as x
    left join pgflow.step_tasks as t
      on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
    left join pgflow.runs as r on r.run_id = x.run_id
    left join pgflow.step_states as ss on ss.run_id = x.run_id and ss.step_slug = x.step_slug
    left join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = x.step_slug
   order by x.run_id, x.step_slug, x.task_index,
            coalesce(t.status = 'started' and t.attempts_count = x.attempt, false) desc
  ) as y;

  -- a non-array output feeding a dependent map fails the run; no retry can change the output type
  for v_bad in
    select c.run_id, c.step_slug, c.task_index, min(d.step_slug) as map_slug
      from unnest(v_items) as c
      join pgflow.deps as d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      join pgflow.steps as child on child.flow_slug = d.flow_slug and child.step_slug = d.step_slug
     where c.outcome = 'completed' and c.step_type = 'single' and child.step_type = 'map'
       and jsonb_typeof(c.output) <> 'array'
     group by c.run_id, c.step_slug, c.task_index
  loop
    update pgflow.step_tasks as t
       set status = 'failed', failed_at = now(),
           error_message = format('output of %s is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug)
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    update pgflow.step_states as ss
       set status = 'failed', failed_at = now(),
           error_message = format('output is not an array, but map step %s needs one', v_bad.map_slug)
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id,
      format('step %s: output is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug));
    v_items := array(
      select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                 case when c.run_id <> v_bad.run_id then c.outcome
                      when c.step_slug = v_bad.step_slug and c.task_index = v_bad.task_index then 'failed'
                      when c.outcome = 'completed' then 'stale'
                      else c.outcome end,
                 c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
        from unnest(v_items) as c);
  end loop;

  update pgflow.step_tasks as t
     set status = 'completed', output = c.output, completed_at = now()
    from unnest(v_items) as c
   where c.outcome = 'completed'
     and t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index;

  -- completed tasks, late callbacks on terminal tasks and the failed ones all leave the queue
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs
    from unnest(v_items) as c
    left join pgflow.step_tasks as t
      on t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index
   where c.outcome in ('completed', 'failed')
      or t.status in ('completed', 'failed', 'skipped', 'cancelled');
  perform pgflow.archive_task_messages(v_queues, v_msgs);

  -- a single step's output is its one task's, already in hand; only runs where a step finished can
  -- move on, so only they cascade (the other tasks of a map complete without one)
  with done as (
    select c.run_id, c.step_slug, count(*) as n, (array_agg(c.output))[1] as first_output
      from unnest(v_items) as c
     where c.outcome = 'completed'
     group by c.run_id, c.step_slug
  ), finished as (
    update pgflow.step_states as ss
       set remaining_tasks = ss.remaining_tasks - done.n,
           status = case when ss.remaining_tasks = done.n then 'completed' else ss.status end,
           completed_at = case when ss.remaining_tasks = done.n then now() end,
           output = case
             when ss.remaining_tasks <> done.n then null
             when s.step_type = 'single' then done.first_output
             else (
               select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                 from pgflow.step_tasks as t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
           end
      from done, pgflow.steps as s
     where ss.run_id = done.run_id and ss.step_slug = done.step_slug
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.status
  )
  select array_agg(distinct f.run_id order by f.run_id) into v_finished
    from finished as f where f.status = 'completed';

  if v_finished is not null then
    perform pgflow.cascade(v_finished);
  end if;

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;
