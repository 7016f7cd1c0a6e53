-- Frozen migration delta 0046_pgflow_fidelity (loaded by pgflow_django/migrations/0046_pgflow_fidelity.py):
-- closer to pgflow where its own tests hold it to a behaviour.
-- * step_states gets pgflow's invariants as named CHECK constraints (status and remaining_tasks,
--   initial_tasks, output only on a completed step, skip_reason exactly on a skipped step, one end
--   time); step_tasks gets output only on a completed or failed task and one end time. They are
--   added NOT VALID under a short lock of the three history tables (taken in the engine's order,
--   runs first), so no stored row is read meanwhile; migration 0047 validates them in a transaction
--   of its own, which does not block writers.
-- * First, without that lock: the output a failed task kept (the non-array that broke a map) is
--   cleared from the tasks the previous retry_run queued again with it (their attempt made it; a
--   queued task has none), the one kind of row the engine wrote that a new constraint refuses.
-- * pgflow's texts and codes where its tests hold it to them: a failed condition stores 'Condition not
--   met', a map's type violation '[TYPE_VIOLATION] ...' on the task and the step (cascade,
--   complete_tasks); start_flow/start_flows refuse a root map's non-array or NULL input, and add_step
--   a map with more than one dependency, with pgflow's P0001 texts.
-- * add_step and create_flow name the argument they refuse and its value; add_step refuses a step
--   that depends on itself as such (it said the step did not exist).
-- * prune_data_older_than archives the live messages of a pruned run's unfinished tasks.
-- * retry_run clears a failed task's output (the non-array that broke a map) as it queues it again.
-- * A type violation records its attempt's error in attempt_errors, as fail_task does.
-- * partition_history refuses, with the statement to run, while a constraint of the history is not
--   validated (a default partition cannot join parents whose constraints are).

update pgflow.step_tasks as t
   set output = null
 where t.output is not null and t.status not in ('completed', 'failed');

lock table pgflow.runs, pgflow.step_states, pgflow.step_tasks in access exclusive mode;

alter table pgflow.step_states drop constraint if exists step_states_check1;
alter table pgflow.step_states
  add constraint status_and_remaining_tasks_match check (status <> 'completed' or remaining_tasks = 0) not valid,
  add constraint remaining_tasks_state_consistency
    check (remaining_tasks is null or status not in ('created', 'skipped')) not valid,
  add constraint initial_tasks_known_when_started check (status <> 'started' or initial_tasks is not null) not valid,
  add constraint output_only_for_completed_or_null check (output is null or status = 'completed') not valid,
  add constraint skip_reason_matches_status check ((status = 'skipped') = (skip_reason is not null)) not valid,
  add constraint completed_at_or_failed_at_or_skipped_at
    check (num_nonnulls(completed_at, failed_at, skipped_at) <= 1) not valid;
alter table pgflow.step_tasks
  add constraint output_valid_only_for_completed check (output is null or status in ('completed', 'failed')) not valid,
  add constraint completed_at_or_failed_at check (completed_at is null or failed_at is null) not valid;

-- 0210_function_create_flow.sql
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them). Options not given take pgflow's defaults: 3 attempts, a base delay of 5 s
-- (retries after 10 s, 20 s, ...) and a 60 s timeout. No queue DDL here: add_step and the compiler provision the flow's queues
-- through pgflow.provision_generated_queue. queue_mode 'flow' routes every step to the default queue
-- lower(flow_slug), 'step' gives each step a private generated queue, 'routed' sends each step to
-- the declared shared queue its route names; it is fixed for a concrete slug. A new flow whose default queue name already exists in PGMQ (the name stays reserved in both
-- modes), or that differs only in case from an existing flow, is refused; so is a slug longer than a queue
-- name (47 characters) unless the flow is routed (its steps use shared queues, never its default queue).
create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  queue_mode text default 'flow'
)
returns pgflow.flows
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_flow pgflow.flows;
  v_refusal text;
begin
  if not pgflow.is_valid_flow_slug(flow_slug) then
    raise exception 'invalid flow slug %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if length(flow_slug) > 47 and queue_mode is distinct from 'routed' then
    raise exception 'flow slug % is % characters long; its queue name must fit PGMQ''s 47-character limit: choose a shorter slug', quote_literal(flow_slug), length(flow_slug)
      using errcode = '22023';
  end if;
  select format('flow %s: %s must be >= %s, got %s', flow_slug, o.name, o.least_value, o.value)
    into v_refusal
    from (values (1, 'max_attempts', max_attempts, 1), (2, 'base_delay', base_delay, 0), (3, 'timeout', timeout, 1))
           as o(n, name, value, least_value)
   where o.value < o.least_value
   order by o.n limit 1;
  if v_refusal is not null then
    raise exception '%', v_refusal using errcode = '22023';
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

-- 0220_function_add_step.sql
-- Appends a step in definition order. Idempotent for an identical definition; any other change to an
-- existing step is refused (a concrete flow's shape is fixed: compile a new slug instead). The
-- step's queue is generated, never chosen: the default queue lower(flow_slug) in a plain flow, the
-- step's private pgflow.step_queue_name in a step-queued flow. A queue_name argument must equal it;
-- it is checked and provisioned through pgflow.provision_generated_queue. A routed flow's step takes
-- the declared shared queue named by queue_name (declared first by pgflow.provision_shared_queue).
create or replace function pgflow.add_step(
  flow_slug text,
  step_slug text,
  deps_slugs text[] default '{}',
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  start_delay integer default null,
  step_type text default 'single',
  required_input_pattern jsonb default null,
  forbidden_input_pattern jsonb default null,
  when_unmet text default 'skip',
  when_exhausted text default 'fail',
  queue_name text default null
)
returns pgflow.steps
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_deps text[] := coalesce((select array_agg(distinct d order by d) from unnest(deps_slugs) as d), '{}');
  v_existing pgflow.steps;
  v_missing text[];
  v_step pgflow.steps;
  v_mode text;
  v_index integer;
  v_queue text;
  v_refusal text;
begin
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = add_step.flow_slug;
  if not found then
    raise exception 'flow % does not exist: create it with pgflow.create_flow first', quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if not pgflow.is_valid_slug(step_slug) then
    raise exception 'invalid step slug % in flow %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word',
      quote_literal(coalesce(step_slug, 'NULL')), flow_slug
      using errcode = '22023';
  end if;
  if step_type is null or step_type not in ('single', 'map') then
    raise exception 'step %.%: step_type must be single or map, got %', flow_slug, step_slug, quote_literal(coalesce(step_type, 'NULL'))
      using errcode = '22023';
  end if;
  -- pgflow's text and code, which its tests hold it to
  if step_type = 'map' and cardinality(deps_slugs) > 1 then
    raise exception 'Map step "%" can have at most one dependency, but % were provided: %',
      step_slug, cardinality(deps_slugs), array_to_string(deps_slugs, ', ');
  end if;
  select format('step %s.%s: %s must be fail, skip or skip-cascade, got %s', flow_slug, step_slug, o.name,
                quote_nullable(o.value))
    into v_refusal
    from (values (1, 'when_unmet', when_unmet), (2, 'when_exhausted', when_exhausted)) as o(n, name, value)
   where o.value is null or o.value not in ('fail', 'skip', 'skip-cascade')
   order by o.n limit 1;
  if v_refusal is null then
    select format('step %s.%s: %s must be >= %s, got %s', flow_slug, step_slug, o.name, o.least_value, o.value)
      into v_refusal
      from (values (1, 'max_attempts', max_attempts, 1), (2, 'base_delay', base_delay, 0), (3, 'timeout', timeout, 1),
                   (4, 'start_delay', start_delay, 0)) as o(n, name, value, least_value)
     where o.value < o.least_value
     order by o.n limit 1;
  end if;
  if v_refusal is null then
    select format('step %s.%s: %s must be a JSON object, got %s', flow_slug, step_slug, o.name, jsonb_typeof(o.value))
      into v_refusal
      from (values (1, 'required_input_pattern', required_input_pattern),
                   (2, 'forbidden_input_pattern', forbidden_input_pattern)) as o(n, name, value)
     where jsonb_typeof(o.value) <> 'object'
     order by o.n limit 1;
  end if;
  if v_refusal is not null then
    raise exception '%', v_refusal using errcode = '22023';
  end if;
  if step_slug = any(v_deps) then
    raise exception 'step %.% depends on itself: remove % from its dependencies', flow_slug, step_slug, step_slug
      using errcode = '22023';
  end if;

  select s.step_index into v_index from pgflow.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if not found then
    v_index := coalesce((select max(s.step_index) + 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug), 0);
  end if;
  if v_mode = 'routed' then
    if queue_name is null or not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = add_step.queue_name) then
      raise exception 'step %.%: a routed flow''s step needs a declared shared queue (pgflow.provision_shared_queue), got %',
        flow_slug, step_slug, quote_literal(coalesce(queue_name, 'NULL'))
        using errcode = '22023';
    end if;
    v_queue := queue_name;
  else
    v_queue := case v_mode when 'step' then pgflow.step_queue_name(flow_slug, step_slug, v_index) else lower(flow_slug) end;
  end if;
  if queue_name is not null and queue_name <> v_queue then
    raise exception 'step %.%: queue % is not its route; % routes it to its generated queue %',
      flow_slug, step_slug, quote_literal(queue_name),
      case v_mode when 'step' then 'a step-queued flow' else 'a plain flow' end, quote_literal(v_queue)
      using errcode = '22023';
  end if;
  if exists (select 1 from pgflow.steps as s
              where s.flow_slug = add_step.flow_slug and lower(s.step_slug) = lower(add_step.step_slug)
                and s.step_slug <> add_step.step_slug) then
    raise exception 'step slug % of flow % differs only in case from an existing step: choose another slug',
      quote_literal(step_slug), quote_literal(flow_slug)
      using errcode = '23505';
  end if;

  if v_mode <> 'routed' then
    perform pgflow.provision_generated_queue(flow_slug, v_queue);
  end if;

  select * into v_existing from pgflow.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if found then
    if v_existing.step_type = add_step.step_type
       and v_existing.when_unmet = add_step.when_unmet
       and v_existing.when_exhausted = add_step.when_exhausted
       and v_existing.required_input_pattern is not distinct from add_step.required_input_pattern
       and v_existing.forbidden_input_pattern is not distinct from add_step.forbidden_input_pattern
       and v_existing.queue_name = v_queue
       and v_deps = coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps as d
                               where d.flow_slug = add_step.flow_slug and d.step_slug = add_step.step_slug), '{}') then
      return v_existing;
    end if;
    raise exception 'step %.% already exists with a different definition: compile the changed flow under a new slug',
      flow_slug, step_slug
      using errcode = '23505';
  end if;

  select array_agg(d order by d) into v_missing
    from unnest(v_deps) as d
   where not exists (select 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug and s.step_slug = d);
  if v_missing is not null then
    raise exception 'step %.% depends on %, which does not exist in flow %: add dependencies before the steps that use them',
      flow_slug, step_slug, array_to_string(v_missing, ', '), flow_slug
      using errcode = '22023';
  end if;

  insert into pgflow.steps (
    flow_slug, step_slug, step_type, step_index, deps_count,
    opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, queue_name
  )
  values (
    flow_slug, step_slug, step_type, v_index, cardinality(v_deps),
    max_attempts, base_delay, timeout, start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, v_queue
  )
  returning * into v_step;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d, add_step.step_slug from unnest(v_deps) as d;

  return v_step;
end;
$$;

-- 0270_function_cascade.sql
-- Moves the given started runs forward until nothing changes: recounts open dependencies (of
-- created and skipped steps) and map sizes of created steps, resolves conditions of ready steps (fail, skip or skip-cascade when
-- unmet), completes ready steps that have no tasks (empty maps), then starts the ready steps that
-- have tasks and completes runs with nothing left. Callers hold the runs' row locks. Each
-- statement reads one table by the batch (`= any(run_ids)` in its index condition) and every other
-- history table by a correlated probe the planner cannot flatten (`offset 0`, or a scalar
-- subquery): on fresh tables a join of runs could otherwise drive the plan, walking every started
-- run and matching the whole batch once per run. A probe's subquery holds only the key it probes
-- by; filters on other columns (a run's status) stay outside it: planned on a small partition (a
-- new day's), `status = 'started'` beside the key made the (flow_slug, status) index look as cheap
-- as the primary key, and each probe then read every started run of that partition.
create or replace function pgflow.cascade(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        left join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
        left join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.dep_slug
        left join lateral (
          select dst.status, dst.skip_reason, dst.output
            from pgflow.step_states as dst
           where dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
          offset 0
        ) as dst on true
       where ss.run_id = any(run_ids) and ss.status in ('created', 'skipped') and s.deps_count > 0
         and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started'
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
       cross join lateral (
         select r.input, r.status from pgflow.runs as r where r.run_id = ss.run_id offset 0
       ) as r
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
         and r.status = 'started'
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
         and not (coalesce(i.step_input @> s.required_input_pattern, true)
                  and not coalesce(i.step_input @> s.forbidden_input_pattern, false))
       order by ss.run_id, s.step_index
    loop
      if (select r.status from pgflow.runs as r where r.run_id = v_unmet.run_id) is distinct from 'started' then
        continue;
      end if;
      if v_unmet.when_unmet = 'fail' then
        update pgflow.step_states as ss
           set status = 'failed', failed_at = clock_timestamp(), error_message = 'Condition not met'
         where ss.run_id = v_unmet.run_id and ss.step_slug = v_unmet.step_slug and ss.status = 'created';
        perform pgflow.fail_run(v_unmet.run_id, format('step %s: Condition not met', v_unmet.step_slug));
      else
        perform pgflow.skip_step(v_unmet.run_id, v_unmet.step_slug, 'condition_unmet', v_unmet.when_unmet = 'skip-cascade');
      end if;
      v_changed := true;
    end loop;

    -- ready steps without tasks (maps over empty arrays) complete at once with an empty output
    update pgflow.step_states as ss
       set status = 'completed', output = '[]'::jsonb, remaining_tasks = 0,
           started_at = clock_timestamp(), completed_at = clock_timestamp()
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks = 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started';
    get diagnostics v_rows = row_count;
    v_changed := v_changed or v_rows > 0;

    exit when not v_changed;
  end loop;

  perform pgflow.start_ready_steps(run_ids);
  perform pgflow.maybe_complete_runs(run_ids);
end;
$$;

-- 0280_function_start_flows.sql
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
-- priority (-100..100, NULL: the steps' and the flow's defaults) is every run's claim priority.
-- Holds the flow's start lock in shared mode until the caller's transaction ends: starts run side by
-- side, while a deletion (pgflow.delete_flow_and_data takes it exclusively) waits for them, and a
-- start that comes during a deletion waits for it, then finds the flow gone.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_bad_type text;
  v_ids uuid[];
  v_lo uuid;
  v_hi uuid;
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
      using errcode = '22023';
  end if;
  if priority is not null and priority not between -100 and 100 then
    raise exception 'start_flows(%): priority must be a whole number from -100 to 100, got %', flow_slug, priority
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select e.n, jsonb_typeof(e.input) into v_bad, v_bad_type
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array'
     order by e.n limit 1;
    if v_bad is not null then
      -- pgflow's text and code (P0001); a batch also says which of its inputs
      raise exception 'Flow % has root map steps but input is not an array (got %)%', flow_slug, v_bad_type,
        case when jsonb_array_length(inputs) > 1 then format(' (input %s of %s)', v_bad, jsonb_array_length(inputs)) else '' end
        using hint = format('root map step %s maps over the run''s input: pass a JSON array', v_root_map);
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before, priority)
    select coalesce(run_ids[e.n], pgflow.uuid_v7()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end,
           start_flows.priority
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;
  -- the bounds by a statement of their own: an ordered aggregate beside the one above lets
  -- PostgreSQL 16 and later sort the input for it, and v_ids would lose the inputs' order
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(v_ids) as b;

  -- a new run's only moves are its root steps': when none of them has a condition and no root map
  -- gets an empty array, starting them is all pgflow.cascade would do (every count is already
  -- right, no step completes, so no run does), and its recounts are skipped (pgflow.fast_hop =
  -- 'off' turns this off, as it does the completion's fast path)
  if current_setting('pgflow.fast_hop', true) is distinct from 'off'
     and exists (select 1 from pgflow.steps as s where s.flow_slug = start_flows.flow_slug)
     and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_flows.flow_slug and s.deps_count = 0
          and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null
               or s.step_type = 'map' and exists (select 1 from jsonb_array_elements(inputs) as e(input)
                                                   where e.input = '[]'::jsonb))) then
    perform pgflow.start_ready_steps(v_ids);
  else
    perform pgflow.cascade(v_ids);
  end if;

  -- each new run by its own probe: joined to the array, a plan could walk every run and match the
  -- whole batch against each; between the batch's lowest and highest ids, so that on a partitioned
  -- history only the partitions holding them are set up (see pgflow.complete_hop)
  return query
    select r.*
      from unnest(v_ids) with ordinality as i(run_id, n)
     cross join lateral (
       select * from pgflow.runs as x where x.run_id = i.run_id and x.run_id between v_lo and v_hi offset 0
     ) as r
     order by i.n;
end;
$$;

-- 0290_function_start_flow.sql
-- One run of start_flows: the same checks, an optional run id, start delay (seconds) and priority.
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if input is null and exists (select 1 from pgflow.steps as s
                                where s.flow_slug = start_flow.flow_slug and s.step_type = 'map' and s.deps_count = 0) then
    raise exception 'Flow % has root map steps but input is NULL', flow_slug;  -- pgflow's text and code
  elsif input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end,
                                                start_delay, priority);
end;
$$;

-- 0310_function_complete_tasks.sql
-- Completes many claims in one call. Each item names the claim it finishes (its attempt); an item
-- that is no longer the current claim changes nothing and reports 'stale' (its message is archived
-- when the task is already terminal), so one stale item never undoes the others. A non-array
-- output feeding a map fails its task (which keeps that output and records the attempt's error in
-- attempt_errors), step and run without retry ('failed'). Items are applied in the order they are listed, as the same calls one by one would
-- be: a run's items listed before its failing item complete, those listed after it report 'stale'
-- (their run has failed), and other runs' items are not affected. A batch of the common case is
-- completed by pgflow.complete_hop's fast path, with the same result.
create or replace function pgflow.complete_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
#variable_conflict use_column
declare
  v_items pgflow.completion_item[];
  v_run_ids uuid[];
  v_bad record;
  v_first jsonb;
  v_violation text;
  v_queues text[];
  v_msgs bigint[];
  v_finished uuid[];
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'complete_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt, output}'
      using errcode = '22023';
  end if;

  -- the common case in one pass (pgflow.complete_hop); it declines, writing nothing, otherwise
  return query
    select h.run_id, h.step_slug, h.task_index, h.outcome
      from pgflow.complete_hop(items, null, null, null, null, null, 0) as h;
  if found then
    return;
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
  -- a run that fails below (a map's bad output, a condition with when_unmet = fail) leaves its
  -- concurrency slots to the release at the end, which waits for the claims deciding their keys
  perform set_config('pgflow.slots_released_at_end', 'on', true);

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
     set status = 'completed', output = c.output, completed_at = clock_timestamp()
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
           completed_at = case when ss.remaining_tasks = done.n then clock_timestamp() end,
           output = case
             when ss.remaining_tasks <> done.n then null
             when (select s.step_type from pgflow.steps as s
                    where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug) = 'single'
               then done.first_output
             else (
               select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                 from pgflow.step_tasks as t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
           end
      from done
     where ss.run_id = done.run_id and ss.step_slug = done.step_slug
    returning ss.run_id, ss.status
  )
  select array_agg(distinct f.run_id order by f.run_id) into v_finished
    from finished as f where f.status = 'completed';

  if v_finished is not null then
    perform pgflow.cascade(v_finished);
  end if;

  -- the failing items, once the items listed before them have completed; a run that failed
  -- meanwhile (a condition with when_unmet = fail) makes its failing item stale. Each item probes
  -- its run, step and task in a lateral subquery (offset 0 keeps it one): joined directly, the
  -- order by run_id is planned on a partitioned history as a walk of every runs partition's key
  for v_bad in
    select f.run_id, f.step_slug, f.task_index, f.map_slug, p.current,
           (select coalesce(jsonb_typeof(c.output), 'null') from unnest(v_items) as c
             where c.run_id = f.run_id and c.step_slug = f.step_slug and c.task_index = f.task_index) as produced
      from jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, map_slug text)
      cross join lateral (
        select coalesce(r.status = 'started' and ss.status = 'started' and t.status = 'started', false) as current
          from pgflow.runs as r
          left join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = f.step_slug
          left join pgflow.step_tasks as t
            on t.run_id = r.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
         where r.run_id = f.run_id
        offset 0
      ) as p
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
       set status = 'failed', failed_at = clock_timestamp(),
           output = (select c.output from unnest(v_items) as c
                      where c.run_id = v_bad.run_id and c.step_slug = v_bad.step_slug
                        and c.task_index = v_bad.task_index),
           error_message = format('[TYPE_VIOLATION] Produced %s instead of array', v_bad.produced),
           attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
             'attempt', t.attempts_count, 'worker_id', t.last_worker_id,
             'error', format('[TYPE_VIOLATION] Produced %s instead of array', v_bad.produced),
             'failed_at', clock_timestamp()))
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    v_violation := format('[TYPE_VIOLATION] Map step %s expects array input but dependency %s produced %s',
                          v_bad.map_slug, v_bad.step_slug, v_bad.produced);
    update pgflow.step_states as ss
       set status = 'failed', failed_at = clock_timestamp(), error_message = v_violation
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id, format('step %s: %s', v_bad.step_slug, v_violation));
  end loop;

  -- last, once nothing is left that could wait for a message a claim holds (a run failed above
  -- archives its other tasks' messages): this release waits for the claims deciding its keys
  perform set_config('pgflow.slots_released_at_end', 'off', true);
  perform pgflow.release_limit_slots(v_run_ids, wait_for_claims => true);

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;

-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. The live messages of a pruned run's tasks that never
-- finished (rows changed by hand: the engine ends a finished run's tasks) are archived in the same
-- transaction, read from the deleted rows (or the dropped partition's count), so no worker reads a
-- message whose task is gone. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
-- A partitioned history (pgflow.partition_history) drops whole partitions instead: every interval
-- that ended before the cutoff and whose runs all finished before it goes with one DROP TABLE of
-- its three partitions (reruns naming its runs get rerun_of = NULL); the rest (the default
-- partitions, which hold the ids that are not time-ordered, and an old interval that still has a run
-- in progress or finished later) is deleted row by row as before, reading only the partitions that
-- can hold such runs. 'partitions' counts the intervals dropped. A partitioned archive drops its
-- old partitions too (pgflow.prune_queue_archive). The rows go by a join with the
-- pruned ids (a hash join or index probes), not by `= any(array)`, which tests every row against
-- every id.
create or replace function pgflow.prune_data_older_than(retention interval)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_cutoff timestamptz := now() - retention;
  v_runs uuid[];
  v_tasks integer;
  v_states integer;
  v_workers integer;
  v_archived bigint := 0;
  v_queue text;
  v_count bigint;
  v_dropped integer := 0;
  v_partitioned boolean;
  v_part record;
  v_unfinished bigint;
  v_dropped_runs bigint := 0;
  v_dropped_states bigint := 0;
  v_dropped_tasks bigint := 0;
  v_upper uuid;
  v_live constant text := 't.status in (''queued'', ''started'') and t.message_id is not null';
  v_live_queues text[];
  v_live_ids bigint[];
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  v_partitioned := exists (select 1 from pgflow.history_partitioning);
  if v_partitioned then
    for v_part in
      select substr(c.relname, 6) as suffix, pgflow.uuid_v7_bound(lo) as lo, pgflow.uuid_v7_bound(lo + hp.partition_interval) as hi
        from pg_inherits as inh
        join pg_class as c on c.oid = inh.inhrelid
        cross join pgflow.history_partitioning as hp
        cross join lateral (select to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC' as lo) as b
       where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$'
         and b.lo + hp.partition_interval <= v_cutoff
       order by c.relname
    loop
      execute format('select count(*), count(*) filter (where status not in (''completed'', ''failed'')'
                     ' or coalesce(completed_at, failed_at) >= $1) from pgflow.%I', 'runs_' || v_part.suffix)
        into v_count, v_unfinished using v_cutoff;
      continue when v_unfinished > 0;
      v_dropped_runs := v_dropped_runs + v_count;
      execute format('select count(*) from pgflow.%I', 'step_states_' || v_part.suffix) into v_count;
      v_dropped_states := v_dropped_states + v_count;
      execute format('select count(*), array_agg(t.queue_name) filter (where %s), array_agg(t.message_id) filter (where %s)'
                     ' from pgflow.%I as t', v_live, v_live, 'step_tasks_' || v_part.suffix)
        into v_count, v_live_queues, v_live_ids;
      v_dropped_tasks := v_dropped_tasks + v_count;
      if v_live_ids is not null then
        perform pgflow.archive_task_messages(v_live_queues, v_live_ids);
      end if;
      update pgflow.runs as r set rerun_of = null where r.rerun_of >= v_part.lo and r.rerun_of < v_part.hi;
      execute format('drop table pgflow.%I, pgflow.%I, pgflow.%I',
                     'step_tasks_' || v_part.suffix, 'step_states_' || v_part.suffix, 'runs_' || v_part.suffix);
      v_dropped := v_dropped + 1;
    end loop;
    -- time-ordered ids of runs finished before the cutoff sort below its bound; the others are in the
    -- default partitions, which no range excludes
    select pgflow.uuid_v7_bound(coalesce(max(to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC'
                                             + hp.partition_interval), v_cutoff))
      into v_upper
      from pg_inherits as inh join pg_class as c on c.oid = inh.inhrelid cross join pgflow.history_partitioning as hp
     where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$';
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where (r.run_id < pgflow.uuid_v7_bound(v_cutoff) or r.run_id >= v_upper)
       and r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
    update pgflow.runs as r set rerun_of = null from unnest(v_runs) as p(run_id) where r.rerun_of = p.run_id;
  else
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
  end if;

  delete from pgflow.step_waits as w using unnest(v_runs) as p(run_id) where w.run_id = p.run_id;
  with gone as (
    delete from pgflow.step_tasks as t using unnest(v_runs) as p(run_id) where t.run_id = p.run_id
    returning t.status, t.queue_name, t.message_id
  )
  select count(*), array_agg(t.queue_name) filter (where t.status in ('queued', 'started') and t.message_id is not null),
         array_agg(t.message_id) filter (where t.status in ('queued', 'started') and t.message_id is not null)
    into v_tasks, v_live_queues, v_live_ids
    from gone as t;
  if v_live_ids is not null then
    perform pgflow.archive_task_messages(v_live_queues, v_live_ids);
  end if;
  delete from pgflow.step_states as ss using unnest(v_runs) as p(run_id) where ss.run_id = p.run_id;
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r using unnest(v_runs) as p(run_id) where r.run_id = p.run_id;

  delete from pgflow.workers as w
   where coalesce(w.stopped_at, w.last_heartbeat_at) < v_cutoff
     and (w.stopped_at is not null or w.last_heartbeat_at < now() - interval '10 minutes');
  get diagnostics v_workers = row_count;

  for v_queue in
    select distinct s.queue_name from pgflow.steps as s
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(s.queue_name, 'a'))) is not null
       and not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = s.queue_name)
     order by s.queue_name
  loop
    v_archived := v_archived + pgflow.prune_queue_archive(v_queue, v_cutoff);
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs) + v_dropped_runs, 'step_states', v_states + v_dropped_states,
                            'step_tasks', v_tasks + v_dropped_tasks, 'workers', v_workers,
                            'archived_messages', v_archived, 'partitions', v_dropped);
end;
$$;

-- 0445_function_retry_run.sql
-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message (with the
-- task's priority in its headers, as pgflow.start_ready_steps sends it), its step is
-- started again, and the run is started again so its dependents follow. Returns the number of tasks
-- queued again. The run's and steps' errors are cleared (the admin's Retry action logs the run's
-- error first), and so is a failed task's output (the non-array that broke a map: a queued task has
-- none); each task keeps its attempt_errors.
-- Attempt numbers continue: a retried task's next claim is one more attempt than every claim before
-- it, so a worker still running an old claim (a task cancelled mid-claim) reports a stale attempt
-- that is refused, whenever it arrives. The attempt a cancel cut short is recorded in attempt_errors
-- (with the run's error), so every attempt has its outcome.
-- Each retried task gets its full max_attempts again (attempts_base marks where they start).
-- Lock order: run, then its tasks, then the new messages.
-- Refused, changing nothing, for a run that is not failed, and for one whose failed step has no
-- failed or cancelled task to run again (it failed outside its tasks, so a retry would fail again).
create or replace function pgflow.retry_run(run_id uuid)
returns integer
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_status text;
  v_error text;
  v_stuck text;
  v_count integer := 0;
  v_batch record;
  v_waits integer;
begin
  select r.status, r.error_message into v_status, v_error
    from pgflow.runs as r where r.run_id = retry_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', retry_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'failed' then
    raise exception 'run % is %: only a failed or cancelled run can be retried', retry_run.run_id, v_status
      using errcode = '55000';
  end if;

  perform 1 from pgflow.step_tasks as t
   where t.run_id = retry_run.run_id
   order by t.step_slug, t.task_index
     for no key update;

  select string_agg(ss.step_slug, ', ' order by ss.step_slug) into v_stuck
    from pgflow.step_states as ss
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled')
     and not exists (select 1 from pgflow.step_tasks as t
                      where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                        and t.status in ('failed', 'cancelled'));
  if v_stuck is not null then
    raise exception 'run % failed in step % outside its tasks: a retry would fail the same way; re-run it instead',
      retry_run.run_id, v_stuck using errcode = '55000';
  end if;

  update pgflow.runs as r
     set status = 'started', failed_at = null, error_message = null, output = null
   where r.run_id = retry_run.run_id;

  update pgflow.step_states as ss
     set status = 'started', error_message = null, failed_at = null,
         remaining_tasks = (select count(*) from pgflow.step_tasks as t
                             where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                               and t.status <> 'completed')
   where ss.run_id = retry_run.run_id and ss.status in ('failed', 'cancelled');

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', t.attempts_count, 'worker_id', t.last_worker_id,
           'error', coalesce(v_error, 'cancelled'), 'failed_at', clock_timestamp()))
   where t.run_id = retry_run.run_id and t.status = 'cancelled' and t.attempts_count > 0
     and not t.attempt_errors @> jsonb_build_array(jsonb_build_object('attempt', t.attempts_count));

  -- an event or sleep task waits again, in its next attempt, with no message (pgflow.start_waits)
  update pgflow.step_tasks as t
     set status = 'started', attempts_base = t.attempts_count, attempts_count = t.attempts_count + 1,
         started_at = clock_timestamp(), error_message = null, output = null, failed_at = null, queued_at = clock_timestamp(),
         requeued_count = 0, last_requeued_at = null, permanently_stalled_at = null
    from pgflow.steps as s
   where t.run_id = retry_run.run_id and t.status in ('failed', 'cancelled')
     and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug and s.step_kind <> 'handler';
  get diagnostics v_waits = row_count;
  if v_waits > 0 then
    perform pgflow.start_waits(array[retry_run.run_id]);
    v_count := v_waits;
  end if;

  for v_batch in
    select t.queue_name, array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as indexes,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as messages,
           array_agg(case when coalesce(r.priority, s.opt_priority, f.opt_priority) <> 0
                          then jsonb_build_object('priority', coalesce(r.priority, s.opt_priority, f.opt_priority)) end
                     order by t.step_slug, t.task_index) as headers
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = retry_run.run_id and t.status in ('failed', 'cancelled')
     group by t.queue_name
     order by t.queue_name
  loop
    update pgflow.step_tasks as t
       set status = 'queued', message_id = sent.msg_id, error_message = null, output = null, failed_at = null,
           attempts_base = t.attempts_count,
           queued_at = clock_timestamp(), requeued_count = 0, last_requeued_at = null,
           permanently_stalled_at = null
      from unnest(v_batch.steps, v_batch.indexes) with ordinality as k(step_slug, task_index, n)
      join pgmq.send_batch(v_batch.queue_name, array(select unnest(v_batch.messages)), v_batch.headers, 0)
           with ordinality as sent(msg_id, n) on sent.n = k.n
     where t.run_id = retry_run.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index;
    v_count := v_count + cardinality(v_batch.steps);
  end loop;

  perform pgflow.start_ready_steps(array[retry_run.run_id]);
  return v_count;
end;
$$;

-- 0470_function_partition_history.sql
-- Partitions runs, step_states and step_tasks by run id (range partitions of time-ordered UUIDv7
-- ids, one per `partition_interval`, `ahead` of them kept ready), opt-in for an existing install.
-- No row is copied: each current table becomes its new parent's DEFAULT partition (renamed
-- <table>_default, its indexes <table>_default_*), so the conversion is catalog work under a short
-- ACCESS EXCLUSIVE lock, and run ids that are not time-ordered (idempotency keys' UUIDv5, chosen
-- ids, ids made before UUIDv7) keep living there. The parents get the primary keys, any foreign keys
-- to other tables and the plain indexes; unique indexes without run_id stay per partition.
-- Foreign keys between the three tables are per partition (siblings share their range), so a
-- partition is dropped without checking the others; runs.rerun_of keeps no foreign key (a rerun is
-- younger than its original), and pruning clears it as ON DELETE SET NULL did. Functions returning
-- rows of the tables are redefined on the new parents, and the others naming them are touched so that
-- open sessions compile them again (a compiled function keeps the row types it saw). The PGMQ
-- archives of pgflow's queues are partitioned on the same intervals (pgflow.partition_queue_archive),
-- after the history tables' locks: every writer takes a history table before an archive. Returns the
-- statements in order; runs them only when `apply` (otherwise it changes nothing: the plan
-- pgflow_partition prints).
create or replace function pgflow.partition_history(partition_interval interval, ahead integer, apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['lock table pgflow.runs, pgflow.step_states, pgflow.step_tasks in access exclusive mode'];
  v_later text[] := '{}';
  v_table text;
  v_row record;
  v_step text;
begin
  if exists (select 1 from pgflow.history_partitioning) or
     exists (select 1 from pg_class as c where c.oid = 'pgflow.runs'::regclass and c.relkind = 'p') then
    raise exception 'the pgflow history is already partitioned (pgflow.history_partitioning has its settings)'
      using errcode = '55000';
  end if;
  if partition_interval is null or partition_interval < interval '1 day' or partition_interval > interval '31 days'
     or date_trunc('day', partition_interval) <> partition_interval or extract(month from partition_interval) <> 0 then
    raise exception 'partition interval must be whole days from 1 to 31, got %', coalesce(partition_interval::text, 'NULL')
      using errcode = '22023';
  end if;
  if ahead is null or ahead not between 1 and 60 then
    raise exception 'ahead must be from 1 to 60 partitions, got %', coalesce(ahead::text, 'NULL') using errcode = '22023';
  end if;
  -- the new parents take the tables' constraints as valid, and a default partition cannot join them
  -- with a constraint that is not: the rows it holds must pass first
  for v_row in
    select format('pgflow.%I', cl.relname) as tbl, c.conname
      from pg_constraint as c join pg_class as cl on cl.oid = c.conrelid
     where c.conrelid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass)
       and not c.convalidated
     order by 1, 2
  loop
    raise exception 'constraint % of % is not validated (rows of the history break it): fix or delete those rows, then run: alter table % validate constraint %',
      v_row.conname, v_row.tbl, v_row.tbl, quote_ident(v_row.conname)
      using errcode = '55000', hint = 'the warning of migration 0047 showed the query that finds the rows';
  end loop;

  -- functions returning rows of a history table: dropped before the swap, defined again after it
  for v_row in
    select p.oid::regprocedure::text as signature, pg_get_functiondef(p.oid) as def
      from pg_proc as p
     where p.pronamespace = 'pgflow'::regnamespace and p.prorettype in (select c.reltype from pg_class as c
                             where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass))
     order by p.oid
  loop
    v_steps := v_steps || format('drop function pgflow.%s', v_row.signature);
    v_later := v_later || v_row.def;
  end loop;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I rename to %I', v_table, v_table || '_default');
    for v_row in
      select c.relname from pg_index as i join pg_class as c on c.oid = i.indexrelid
       where i.indrelid = format('pgflow.%I', v_table)::regclass order by c.relname
    loop
      v_steps := v_steps || format('alter index pgflow.%I rename to %I', v_row.relname,
        case when left(v_row.relname, length(v_table) + 1) = v_table || '_'
             then v_table || '_default_' || substr(v_row.relname, length(v_table) + 2)
             else v_row.relname || '_default' end);
    end loop;
  end loop;
  v_steps := v_steps || 'alter table pgflow.runs_default drop constraint runs_rerun_of_fkey'::text;

  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format(
      'create table pgflow.%I (like pgflow.%I including defaults including constraints including comments) partition by range (run_id)',
      v_table, v_table || '_default');
    for v_row in
      select con.conname, pg_get_constraintdef(con.oid) as def from pg_constraint as con
       where con.conrelid = format('pgflow.%I', v_table)::regclass
         and (con.contype = 'p'
              or (con.contype = 'f' and con.confrelid not in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                              'pgflow.step_tasks'::regclass)))
       order by con.contype desc, con.conname
    loop
      v_steps := v_steps || format('alter table pgflow.%I add constraint %I %s', v_table, v_row.conname, v_row.def);
    end loop;
    for v_row in
      select pg_get_indexdef(i.indexrelid) as def from pg_index as i
       where i.indrelid = format('pgflow.%I', v_table)::regclass and not i.indisprimary
         and (not i.indisunique or exists (select 1 from pg_attribute as a
                                            where a.attrelid = i.indrelid and a.attname = 'run_id'
                                              and a.attnum = any(i.indkey)))
       order by i.indexrelid
    loop
      v_steps := v_steps || v_row.def;
    end loop;
  end loop;
  foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
    v_steps := v_steps || format('alter table pgflow.%I attach partition pgflow.%I default', v_table, v_table || '_default');
  end loop;
  v_steps := v_steps || v_later;
  -- a session keeps a PL/pgSQL function compiled with the row types it saw: touching each function
  -- that names a history table makes every session compile it again against the new parents
  for v_row in
    select p.oid::regprocedure::text as signature from pg_proc as p join pg_language as l on l.oid = p.prolang
     where p.pronamespace = 'pgflow'::regnamespace and l.lanname = 'plpgsql'
       and p.prorettype not in (select c.reltype from pg_class as c
                                 where c.oid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                                                 'pgflow.step_tasks'::regclass))
       and p.prosrc ~ 'pgflow\.(runs|step_states|step_tasks)\M'
     order by p.oid
  loop
    v_steps := v_steps || format('alter function pgflow.%s set search_path = pg_catalog, pgflow, pgmq', v_row.signature);
  end loop;
  v_steps := v_steps || format('insert into pgflow.history_partitioning (partition_interval, ahead, archives) values (%L, %s, true)',
                               partition_interval, ahead);
  for v_row in
    select e.queue_name from pgflow.engine_queues() as e(queue_name)
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
     order by e.queue_name
  loop
    v_steps := v_steps || format('select pgflow.partition_queue_archive(%L)', v_row.queue_name);
  end loop;
  v_steps := v_steps || 'select pgflow.create_history_partitions()'::text;

  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;

-- 0990_settings_hot_path.sql
-- The planner settings of the start, claim and completion path and of stalled recovery, stated once
-- for every PL/pgSQL function that runs it (the SQL-language claim wrapper of the previous release
-- keeps the defaults: a SQL function plans its statement on every call anyway). Each statement of
-- these functions reaches its rows by key from its batch, so:
-- * plan_cache_mode = force_generic_plan: a statement is planned once per session, not on each of
--   the first five calls and then whenever a custom plan looks cheaper;
-- * enable_seqscan, enable_mergejoin, enable_hashjoin = off: the plan made on empty tables is the
--   nested loop of index probes a million rows want, so a long-lived worker keeps a good plan;
-- * jit = off: a generic plan prices every partition of a partitioned history, and statements that
--   read no row came to cost more than jit_above_cost and were compiled on every execution.
-- The statements they call (PGMQ's among them) inherit the settings. `create or replace function`
-- resets a function's settings, so this file runs after every function's own.
do $$
declare
  v_function regprocedure;
begin
  for v_function in
    select p.oid::regprocedure
      from pg_proc as p
      join pg_language as l on l.oid = p.prolang
     where p.pronamespace = 'pgflow'::regnamespace
       and l.lanname = 'plpgsql'
       and p.proname = any (array[
             'archive_task_messages', 'cascade', 'claim_classified', 'classify_claim',
             'complete_and_hand_off', 'complete_tasks', 'fail_task', 'hand_off_tasks', 'limit_claim',
             'lock_claimed_task', 'maybe_complete_runs', 'release_limit_slots', 'requeue_stalled_tasks',
             'send_event', 'start_flows', 'start_ready_steps', 'start_shared_tasks', 'start_tasks',
             'start_waits', 'task_details', 'task_transitions', 'wake_waits', 'start_child_runs',
             'delete_expired_events', 'end_waits', 'fail_child_run'])
     order by 1
  loop
    execute format(
      'alter function %s set plan_cache_mode = force_generic_plan set enable_seqscan = off'
      ' set enable_mergejoin = off set enable_hashjoin = off set jit = off',
      v_function);
  end loop;
end
$$;
