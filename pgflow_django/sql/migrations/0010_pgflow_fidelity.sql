-- Frozen migration delta 0010_pgflow_fidelity (loaded by pgflow_django/migrations/0010_pgflow_fidelity.py):
-- closer to pgflow where no departure is meant. create_flow's default base delay is 5 s; the output
-- that breaks a map stays on its task; a run with no completed leaf has no output (NULL); a failed
-- run's counters stay current and its started steps read 'cancelled' (a new step status);
-- complete_tasks applies a batch in the order listed. Existing flows keep their stored options.

-- 0150_table_step_states.sql: the step status 'cancelled'
alter table pgflow.step_states
  drop constraint step_states_status_check,
  add constraint step_states_status_check
    check (status in ('created', 'started', 'completed', 'failed', 'skipped', 'cancelled'));

-- failed runs already recorded: their started steps were cancelled with their tasks, and their
-- remaining_steps counts the steps that neither completed nor were skipped
update pgflow.step_states as ss
   set status = 'cancelled'
  from pgflow.runs as r
 where r.run_id = ss.run_id and r.status = 'failed' and ss.status = 'started';

update pgflow.runs as r
   set remaining_steps = c.open_steps
  from (select ss.run_id, count(*) filter (where ss.status not in ('completed', 'skipped')) as open_steps
          from pgflow.step_states as ss
          join pgflow.runs as fr on fr.run_id = ss.run_id and fr.status = 'failed'
         group by ss.run_id) as c
 where r.run_id = c.run_id and r.remaining_steps <> c.open_steps;

-- 0210_function_create_flow.sql
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them). Options not given take pgflow's defaults: 3 attempts, a base delay of 5 s
-- (retries after 10 s, 20 s, ...) and a 60 s timeout. No queue DDL here: add_step and the compiler provision the flow's queues
-- through pgflow.provision_generated_queue. queue_mode 'flow' routes every step to the default queue
-- lower(flow_slug), 'step' gives each step a private generated queue, 'routed' sends each step to
-- the declared shared queue its route names; it is fixed for a concrete slug. A new flow whose default queue name already exists in PGMQ (the name stays reserved in both
-- modes), or that differs only in case from an existing flow, is refused.
create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  queue_mode text default 'flow'
)
returns pgflow.flows
language plpgsql
as $$
declare
  v_flow pgflow.flows;
begin
  if not pgflow.is_valid_slug(flow_slug) then
    raise exception 'invalid flow slug %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if length(flow_slug) > 47 then
    raise exception 'flow slug % is % characters long; its queue name must fit PGMQ''s 47-character limit: choose a shorter slug', quote_literal(flow_slug), length(flow_slug)
      using errcode = '22023';
  end if;
  if max_attempts is not null and max_attempts < 1
     or base_delay is not null and base_delay < 0
     or timeout is not null and timeout < 1 then
    raise exception 'flow %: max_attempts must be >= 1, base_delay >= 0 and timeout >= 1', flow_slug
      using errcode = '22023';
  end if;

  if queue_mode is null or queue_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', flow_slug, quote_literal(coalesce(queue_mode, 'NULL'))
      using errcode = '22023';
  end if;
  if exists (select 1 from pgflow.flows as f
              where f.flow_slug = create_flow.flow_slug and f.queue_mode <> create_flow.queue_mode) then
    raise exception 'flow % exists with queue mode %, not %: a concrete flow''s queue mode is fixed; compile the changed flow under a new slug',
      quote_literal(flow_slug), (select f.queue_mode from pgflow.flows as f where f.flow_slug = create_flow.flow_slug),
      queue_mode
      using errcode = '23505';
  end if;

  if not exists (select 1 from pgflow.flows as f where f.flow_slug = create_flow.flow_slug) then
    if exists (select 1 from pgflow.flows as f where lower(f.flow_slug) = lower(create_flow.flow_slug)) then
      raise exception 'flow slug % differs only in case from the existing flow %, whose queue it would share: choose another slug',
        quote_literal(flow_slug),
        quote_literal((select f.flow_slug from pgflow.flows as f where lower(f.flow_slug) = lower(create_flow.flow_slug) limit 1))
        using errcode = '23505';
    end if;
    if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = lower(create_flow.flow_slug)) then
      raise exception 'flow slug % names the declared shared queue %, whose tasks would mix with the flow''s own: choose another slug',
        quote_literal(flow_slug), quote_literal(lower(flow_slug))
        using errcode = '23505';
    end if;
    if exists (select 1 from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug)) then
      raise exception 'PGMQ queue % already exists, so new flow % would silently adopt it: drop the queue if it is unused (pgmq.drop_queue), or choose another slug',
        quote_literal((select m.queue_name from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug) limit 1)),
        quote_literal(flow_slug)
        using errcode = '23505';
    end if;
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode)
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 5), coalesce(timeout, 60), queue_mode)
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  return v_flow;
end;
$$;

-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = now(), error_message = fail_run.error_message,
         remaining_steps = (select count(*) from pgflow.step_states as ss
                             where ss.run_id = r.run_id and ss.status not in ('completed', 'skipped'))
   where r.run_id = fail_run.run_id and r.status = 'started';
  if not found then
    return;
  end if;

  update pgflow.step_states as ss
     set status = 'cancelled'
   where ss.run_id = fail_run.run_id and ss.status = 'started';

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
end;
$$;

-- 0250_function_maybe_complete_runs.sql
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent, and a run with no completed leaf (no steps, or every leaf skipped) has no output
-- (NULL), as in pgflow.
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql
as $$
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from pgflow.runs as r
      left join pgflow.step_states as ss on ss.run_id = r.run_id
     where r.run_id = any(run_ids) and r.status = 'started'
     group by r.run_id
  )
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then now() end,
         output = case when c.open_steps = 0 then (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id and ss.status = 'completed'
              and not exists (select 1 from pgflow.deps as d
                               where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
         ) end
    from counts as c
   where r.run_id = c.run_id
     and (r.remaining_steps <> c.open_steps or c.open_steps = 0);
end;
$$;

-- 0270_function_cascade.sql
-- Moves the given started runs forward until nothing changes: recounts open dependencies (of
-- created and skipped steps) and map sizes of created steps, resolves conditions of ready steps (fail, skip or skip-cascade when
-- unmet), completes ready steps that have no tasks (empty maps), then starts the ready steps that
-- have tasks and completes runs with nothing left. Callers hold the runs' row locks.
create or replace function pgflow.cascade(run_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_unmet record;
  v_changed boolean;
  v_rows integer;
begin
  loop
    v_changed := false;

    -- open dependencies, and the size of a dependent map once its dependency is finished. A
    -- skipped step's count stays current too, as in pgflow: a dependency that completes, or is
    -- skipped on its own (skip), is no longer open; one skipped with its downstream (skip-cascade,
    -- dependency_skipped) still is, since that skip reached this step instead of freeing it
    with counts as (
      select ss.run_id, ss.step_slug,
             count(d.dep_slug) filter (
               where not (dst.status = 'completed'
                          or dst.status = 'skipped'
                             and (ss.status = 'created'
                                  or dst.skip_reason = 'condition_unmet' and ds.when_unmet = 'skip'
                                  or dst.skip_reason = 'handler_failed' and ds.when_exhausted = 'skip'))
             ) as open_deps,
             case when ss.status = 'created' and s.step_type = 'map' and s.deps_count = 1
                       and bool_and(dst.status in ('completed', 'skipped'))
                  then max(case when dst.status = 'completed' and jsonb_typeof(dst.output) = 'array'
                                then jsonb_array_length(dst.output) else 0 end)
             end as map_size
        from pgflow.step_states as ss
        join pgflow.runs as r on r.run_id = ss.run_id and r.status = 'started'
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        left join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
        left join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.dep_slug
        left join pgflow.step_states as dst on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
       where ss.run_id = any(run_ids) and ss.status in ('created', 'skipped') and s.deps_count > 0
       group by ss.run_id, ss.step_slug, ss.status, s.step_type, s.deps_count
    )
    update pgflow.step_states as ss
       set remaining_deps = c.open_deps,
           initial_tasks = coalesce(ss.initial_tasks, c.map_size)
      from counts as c
     where ss.run_id = c.run_id and ss.step_slug = c.step_slug
       and (ss.remaining_deps <> c.open_deps or (ss.initial_tasks is null and c.map_size is not null));

    -- conditions of ready steps, matched against the step's input
    for v_unmet in
      select ss.run_id, ss.step_slug, s.when_unmet
        from pgflow.step_states as ss
        join pgflow.runs as r on r.run_id = ss.run_id and r.status = 'started'
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       cross join lateral (
         select case when s.deps_count = 0 then r.input
                     else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                      from pgflow.deps as d
                                      join pgflow.step_states as dst
                                        on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
                                     where d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
                                       and dst.status = 'completed'), '{}'::jsonb)
                end as step_input
       ) as i
       where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
         and not (coalesce(i.step_input @> s.required_input_pattern, true)
                  and not coalesce(i.step_input @> s.forbidden_input_pattern, false))
       order by ss.run_id, s.step_index
    loop
      if not exists (select 1 from pgflow.runs as r where r.run_id = v_unmet.run_id and r.status = 'started') then
        continue;
      end if;
      if v_unmet.when_unmet = 'fail' then
        update pgflow.step_states as ss
           set status = 'failed', failed_at = now(), error_message = 'condition unmet'
         where ss.run_id = v_unmet.run_id and ss.step_slug = v_unmet.step_slug;
        perform pgflow.fail_run(v_unmet.run_id, format('step %s: condition unmet', v_unmet.step_slug));
      else
        perform pgflow.skip_step(v_unmet.run_id, v_unmet.step_slug, 'condition_unmet', v_unmet.when_unmet = 'skip-cascade');
      end if;
      v_changed := true;
    end loop;

    -- ready steps without tasks (maps over empty arrays) complete at once with an empty output
    update pgflow.step_states as ss
       set status = 'completed', output = '[]'::jsonb, remaining_tasks = 0,
           started_at = now(), completed_at = now()
      from pgflow.runs as r
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks = 0
       and r.run_id = ss.run_id and r.status = 'started';
    get diagnostics v_rows = row_count;
    v_changed := v_changed or v_rows > 0;

    exit when not v_changed;
  end loop;

  perform pgflow.start_ready_steps(run_ids);
  perform pgflow.maybe_complete_runs(run_ids);
end;
$$;

-- 0310_function_complete_tasks.sql
-- Completes many claims in one call. Each item names the claim it finishes (its attempt); an item
-- that is no longer the current claim changes nothing and reports 'stale' (its message is archived
-- when the task is already terminal), so one stale item never undoes the others. A non-array
-- output feeding a map fails its task (which keeps that output), step and run without retry
-- ('failed'). Items are applied in the order they are listed, as the same calls one by one would
-- be: a run's items listed before its failing item complete, those listed after it report 'stale'
-- (their run has failed), and other runs' items are not affected.
create or replace function pgflow.complete_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_items pgflow.completion_item[];
  v_run_ids uuid[];
  v_bad record;
  v_first jsonb;
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

  -- a non-array output feeding a dependent map fails the run; no retry can change the output type.
  -- Per run, the first such item in the listed order fails it; the run's later items are stale.
  with bad as (
    select c.run_id, c.step_slug, c.task_index, min(d.step_slug) as map_slug
      from unnest(v_items) as c
      join pgflow.deps as d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      join pgflow.steps as child on child.flow_slug = d.flow_slug and child.step_slug = d.step_slug
     where c.outcome = 'completed' and c.step_type = 'single' and child.step_type = 'map'
       and jsonb_typeof(c.output) <> 'array'
     group by c.run_id, c.step_slug, c.task_index
  ), first_bad as (
    select distinct on (b.run_id) b.run_id, b.step_slug, b.task_index, b.map_slug, l.n
      from bad as b
      join lateral (
        select min(e.n) as n
          from jsonb_array_elements(items) with ordinality as e(item, n)
         where (e.item->>'run_id')::uuid = b.run_id and e.item->>'step_slug' = b.step_slug
           and (e.item->>'task_index')::integer = b.task_index
      ) as l on true
     order by b.run_id, l.n
  )
  select jsonb_agg(to_jsonb(f) order by f.run_id) into v_first from first_bad as f;

  if v_first is not null then
    v_items := array(
      select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                 case when f.run_id is null then c.outcome
                      when c.step_slug = f.step_slug and c.task_index = f.task_index then 'failed'
                      when c.outcome = 'completed' and (
                        select min(e.n)
                          from jsonb_array_elements(items) with ordinality as e(item, n)
                         where (e.item->>'run_id')::uuid = c.run_id and e.item->>'step_slug' = c.step_slug
                           and (e.item->>'task_index')::integer = c.task_index) > f.n then 'stale'
                      else c.outcome end,
                 c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
        from unnest(v_items) as c
        left join jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, n bigint)
          on f.run_id = c.run_id);
  end if;

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

  -- the failing items, once the items listed before them have completed; a run that failed
  -- meanwhile (a condition with when_unmet = fail) makes its failing item stale
  for v_bad in
    select f.run_id, f.step_slug, f.task_index, f.map_slug,
           coalesce(r.status = 'started' and ss.status = 'started' and t.status = 'started', false) as current
      from jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, map_slug text)
      join pgflow.runs as r on r.run_id = f.run_id
      left join pgflow.step_states as ss on ss.run_id = f.run_id and ss.step_slug = f.step_slug
      left join pgflow.step_tasks as t
        on t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
     order by f.run_id
  loop
    if not v_bad.current then
      v_items := array(
        select row(c.run_id, c.step_slug, c.task_index, c.attempt, c.output,
                   case when c.run_id = v_bad.run_id and c.step_slug = v_bad.step_slug
                             and c.task_index = v_bad.task_index then 'stale' else c.outcome end,
                   c.flow_slug, c.message_id, c.step_type, c.queue_name)::pgflow.completion_item
          from unnest(v_items) as c);
      continue;
    end if;
    update pgflow.step_tasks as t
       set status = 'failed', failed_at = now(),
           output = (select c.output from unnest(v_items) as c
                      where c.run_id = v_bad.run_id and c.step_slug = v_bad.step_slug
                        and c.task_index = v_bad.task_index),
           error_message = format('output of %s is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug)
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    update pgflow.step_states as ss
       set status = 'failed', failed_at = now(),
           error_message = format('output is not an array, but map step %s needs one', v_bad.map_slug)
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id,
      format('step %s: output is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug));
  end loop;

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;
