-- Starts the child runs of the given runs' subflow tasks that are started and have no wait yet: one
-- run of the newest version of the step's flow (subflow_slug) per task, with the step's input (a map's: the task's
-- element), through pgflow.start_flows, one call per child flow. Each task gets a pgflow.step_waits
-- row naming its child run, written before the child starts so that a child that ends inside its
-- own start makes the wait due at once; the child's parent_run_id, parent_step_slug and
-- parent_task_index name the task. A child flow that is not compiled, or an input its root map
-- cannot take, gives the task a wait that is due at once with the reason and fails there, alone.
-- Starting a child is part of the transaction that starts the step: a start that does not commit
-- leaves no child, and a step never has two children for one attempt. Returns the number of waits.
create or replace function pgflow.start_child_runs(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_pending jsonb;
  v_child record;
  v_count integer;
  v_finished uuid[];
begin
  with pending as (
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.attempts_count, s.subflow_slug, s.step_type,
           case when s.deps_count = 0 then r.input
                else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                 from pgflow.deps as d
                                 join pgflow.step_states as dst
                                   on dst.run_id = t.run_id and dst.step_slug = d.dep_slug
                                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                                  and dst.status = 'completed'), '{}'::jsonb) end as step_input
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     cross join lateral (select r.input, r.status from pgflow.runs as r where r.run_id = t.run_id offset 0) as r
     where t.run_id = any(run_ids) and t.status = 'started' and s.step_kind = 'subflow' and r.status = 'started'
       -- a probe by key (offset 0 keeps it one): as an anti-join planned on an empty table, it read
       -- every wait for each task
       and not exists (select 1 from pgflow.step_waits as w
                        where w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
                        offset 0)
  ), inputs as (
    select p.*,
           case when p.step_type = 'map' and p.step_input is not null
                then case when jsonb_typeof(p.step_input) = 'array' then p.step_input -> p.task_index
                          else (select e.value from jsonb_each(p.step_input) as e limit 1) -> p.task_index end
                else p.step_input end as child_input
      from pending as p
  ), checked as (
    select i.*, pgflow.uuid_v7() as child_run_id,
           case when pgflow.flow_version(i.subflow_slug) is null
                  then format('child flow %s is not compiled: compile it (manage.py pgflow_compile %s)',
                              i.subflow_slug, i.subflow_slug)
                when jsonb_typeof(coalesce(i.child_input, 'null'::jsonb)) <> 'array'
                     and exists (select 1 from pgflow.steps as cs
                                  where cs.flow_slug = coalesce(pgflow.flow_version(i.subflow_slug), i.subflow_slug) and cs.step_type = 'map' and cs.deps_count = 0)
                  then format('child flow %s starts with a map, which needs an array input, got %s',
                              i.subflow_slug, jsonb_typeof(coalesce(i.child_input, 'null'::jsonb)))
           end as problem
      from inputs as i
  ), waits as (
    insert into pgflow.step_waits (run_id, step_slug, task_index, flow_slug, attempt, kind, child_run_id, due_at,
                                   error_message)
    select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.attempts_count, 'subflow',
           case when c.problem is null then c.child_run_id end,
           case when c.problem is not null then clock_timestamp() end, c.problem
      from checked as c
    returning 1
  )
  select (select count(*) from waits),
         jsonb_agg(jsonb_build_object('flow', c.subflow_slug, 'run_id', c.child_run_id,
                                      'input', coalesce(c.child_input, 'null'::jsonb), 'parent', c.run_id,
                                      'step', c.step_slug, 'task', c.task_index)
                   order by c.run_id, c.step_slug, c.task_index) filter (where c.problem is null)
    into v_count, v_pending
    from checked as c;

  if v_pending is null then
    return coalesce(v_count, 0);
  end if;

  for v_child in
    select p->>'flow' as flow_slug, jsonb_agg(p->'input' order by n) as inputs,
           array_agg((p->>'run_id')::uuid order by n) as ids
      from jsonb_array_elements(v_pending) with ordinality as x(p, n)
     group by p->>'flow'
     order by 1
  loop
    perform 1 from pgflow.start_flows(coalesce(pgflow.flow_version(v_child.flow_slug), v_child.flow_slug), v_child.inputs,
                                      v_child.ids);
  end loop;

  update pgflow.runs as r
     set parent_run_id = (p->>'parent')::uuid, parent_step_slug = p->>'step', parent_task_index = (p->>'task')::integer
    from jsonb_array_elements(v_pending) as x(p)
   where r.run_id = (p->>'run_id')::uuid;

  -- a child that ended inside its own start (every step skipped, an empty map) ends its wait now
  select array_agg(r.run_id) into v_finished
    from jsonb_array_elements(v_pending) as x(p)
    join pgflow.runs as r on r.run_id = (p->>'run_id')::uuid
   where r.status <> 'started';
  if v_finished is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = any(v_finished) and w.due_at is null;
  end if;
  return v_count;
end;
$$;
