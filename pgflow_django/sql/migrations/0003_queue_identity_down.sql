-- Frozen migration delta 0003_queue_identity, backward: restores the previous release's schema
-- (queue snapshots and the objects added for them are dropped; functions get back their 0002 text).

drop function pgflow.start_tasks(text, text, bigint[], uuid);
drop function pgflow.provision_generated_queue(text, text);
drop function pgflow.check_flow_queues(text);
drop function pgflow.queue_objects_problem(text);
drop function pgflow.resolve_queue_spelling(text);
drop function pgflow.is_pgflow_message(jsonb);
drop function pgflow.pause_subscription(text, text, text, text);
drop function pgflow.resume_subscription(text, text);
drop function pgflow.subscription_pause(text, text);
drop type pgflow.claim_record;
drop table pgflow.worker_pauses;
drop function pgflow.archive_task_messages(text[], bigint[]);
drop function pgflow.add_step(text, text, text[], integer, integer, integer, integer, text, jsonb, jsonb, text, text, text);
alter type pgflow.completion_item drop attribute queue_name;
drop index pgflow.flows_slug_lower_key;
drop index pgflow.steps_slug_lower_key;
drop index pgflow.step_tasks_queue_message_key;
create index step_tasks_message_idx on pgflow.step_tasks (flow_slug, message_id);
alter table pgflow.steps drop column queue_name;
alter table pgflow.step_tasks drop column queue_name;
drop function pgflow.is_valid_queue_name(text);
alter table pgflow.step_tasks reset (fillfactor);
alter table pgflow.step_states reset (fillfactor);
create index step_states_ready_idx on pgflow.step_states (run_id)
  where status = 'created' and remaining_deps = 0;
create index step_states_flow_idx on pgflow.step_states (flow_slug);
create index step_tasks_started_idx on pgflow.step_tasks (started_at) where status = 'started';
create index step_tasks_flow_idx on pgflow.step_tasks (flow_slug);

-- 0010_function_is_valid_slug.sql
-- Slug rules of this release: letters, digits and underscores, no leading digit, at most 128
-- characters, reserved words refused. The Python DSL mirrors this function (a parity test checks it).
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language sql
immutable
as $$
  select slug is not null
     and length(slug) between 1 and 128
     and slug ~ '^[A-Za-z_][A-Za-z0-9_]*$'
     and lower(slug) <> all (array['run'])
$$;

-- 0015_function_protocol_version.sql
-- The worker/database protocol this schema speaks. Workers refuse to start unless it equals theirs:
-- an older worker on a newer database is told to deploy the new worker, a newer worker on an older
-- database is told to migrate (upgrades are coordinated, never rolling).
create or replace function pgflow.protocol_version()
returns integer
language sql
immutable
as $$
  select 1
$$;

-- 0205_function_archive_messages.sql
-- Archive the messages of the given tasks, one PGMQ call per queue. Idempotent: messages already
-- archived or deleted are skipped by PGMQ. In this release a task's queue is its flow slug.
create or replace function pgflow.archive_task_messages(flow_slugs text[], msg_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.ids)
     from (
       select m.queue_name, array_agg(m.msg_id) as ids
         from unnest(flow_slugs, msg_ids) as m(queue_name, msg_id)
        where m.msg_id is not null
        group by m.queue_name
     ) as g
    where exists (select 1 from pgmq.meta where meta.queue_name = g.queue_name);
end;
$$;

-- 0210_function_create_flow.sql
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them), and the flow's queue is created with a statement-level insert notification.
create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null
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

  if exists (select 1 from pgmq.meta as m
              where lower(m.queue_name) = lower(create_flow.flow_slug) and m.queue_name <> create_flow.flow_slug) then
    raise exception 'flow slug % differs only in case from the existing PGMQ queue %, whose tables it would share: choose another slug',
      quote_literal(flow_slug),
      quote_literal((select m.queue_name from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug) limit 1))
      using errcode = '23505';
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout)
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 1), coalesce(timeout, 60))
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  if not exists (select 1 from pgmq.meta as m where m.queue_name = create_flow.flow_slug) then
    perform pgmq.create(flow_slug);
    execute format(
      'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
      pgmq.format_table_name(flow_slug, 'q'));
  end if;
  return v_flow;
end;
$$;

-- 0220_function_add_step.sql
-- Appends a step in definition order. Idempotent for an identical definition; any other change to an
-- existing step is refused (a concrete flow's shape is fixed: compile a new slug instead).
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
  when_exhausted text default 'fail'
)
returns pgflow.steps
language plpgsql
as $$
declare
  v_deps text[] := coalesce((select array_agg(distinct d order by d) from unnest(deps_slugs) as d), '{}');
  v_existing pgflow.steps;
  v_missing text[];
  v_step pgflow.steps;
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = add_step.flow_slug) then
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
  if step_type = 'map' and cardinality(v_deps) > 1 then
    raise exception 'map step %.% has % dependencies; a map step takes at most one (the array it maps over)',
      flow_slug, step_slug, cardinality(v_deps)
      using errcode = '22023';
  end if;
  if when_unmet is null or when_unmet not in ('fail', 'skip', 'skip-cascade')
     or when_exhausted is null or when_exhausted not in ('fail', 'skip', 'skip-cascade') then
    raise exception 'step %.%: when_unmet and when_exhausted must be fail, skip or skip-cascade', flow_slug, step_slug
      using errcode = '22023';
  end if;
  if max_attempts is not null and max_attempts < 1
     or base_delay is not null and base_delay < 0
     or timeout is not null and timeout < 1
     or start_delay is not null and start_delay < 0 then
    raise exception 'step %.%: max_attempts must be >= 1, base_delay >= 0, timeout >= 1 and start_delay >= 0', flow_slug, step_slug
      using errcode = '22023';
  end if;
  if required_input_pattern is not null and jsonb_typeof(required_input_pattern) <> 'object'
     or forbidden_input_pattern is not null and jsonb_typeof(forbidden_input_pattern) <> 'object' then
    raise exception 'step %.%: condition patterns must be JSON objects', flow_slug, step_slug
      using errcode = '22023';
  end if;

  select * into v_existing from pgflow.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if found then
    if v_existing.step_type = add_step.step_type
       and v_existing.when_unmet = add_step.when_unmet
       and v_existing.when_exhausted = add_step.when_exhausted
       and v_existing.required_input_pattern is not distinct from add_step.required_input_pattern
       and v_existing.forbidden_input_pattern is not distinct from add_step.forbidden_input_pattern
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
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted
  )
  values (
    flow_slug, step_slug, step_type,
    coalesce((select max(s.step_index) + 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug), 0),
    cardinality(v_deps),
    max_attempts, base_delay, timeout, start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted
  )
  returning * into v_step;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d, add_step.step_slug from unnest(v_deps) as d;

  return v_step;
end;
$$;

-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql
as $$
declare
  v_flows text[];
  v_msgs bigint[];
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = now(), error_message = fail_run.error_message
   where r.run_id = fail_run.run_id and r.status = 'started';
  if not found then
    return;
  end if;

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.flow_slug, t.message_id
  )
  select array_agg(c.flow_slug), array_agg(c.message_id) into v_flows, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_flows, v_msgs);
end;
$$;

-- 0240_function_skip_step.sql
-- Skips one step of a started run, and with cascade every step downstream of it. Tasks of skipped
-- steps are terminalized as skipped and their messages archived. The caller holds the run's lock
-- and runs pgflow.cascade afterwards so dependents see the skip.
create or replace function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean)
returns void
language plpgsql
as $$
declare
  v_flows text[];
  v_msgs bigint[];
begin
  with recursive targets as (
    select skip_step.step_slug as step_slug, skip_step.skip_reason as reason
    union
    select d.step_slug, 'dependency_skipped'
      from targets as tg
      join pgflow.step_states as ss on ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
      join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.dep_slug = tg.step_slug
     where skip_step.cascade
  ), skipped as (
    update pgflow.step_states as ss
       set status = 'skipped', skip_reason = tg.reason, skipped_at = now(), remaining_tasks = null
      from (select distinct on (t.step_slug) t.step_slug, t.reason
              from targets as t
             order by t.step_slug, (t.reason = 'dependency_skipped')) as tg
     where ss.run_id = skip_step.run_id and ss.step_slug = tg.step_slug
       and ss.status in ('created', 'started')
    returning ss.step_slug
  ), tasks as (
    update pgflow.step_tasks as t
       set status = 'skipped'
      from skipped as s
     where t.run_id = skip_step.run_id and t.step_slug = s.step_slug and t.status in ('queued', 'started')
    returning t.flow_slug, t.message_id
  )
  select array_agg(t.flow_slug), array_agg(t.message_id) into v_flows, v_msgs from tasks as t;

  perform pgflow.archive_task_messages(v_flows, v_msgs);
end;
$$;

-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages, one PGMQ batch per queue and start delay. The
-- n-th id returned by send_batch belongs to the n-th message sent.
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_batches jsonb;
  v_batch record;
begin
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = now(), remaining_tasks = ss.initial_tasks
      from pgflow.runs as r, pgflow.steps as s
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks > 0
       and r.run_id = ss.run_id and r.status = 'started'
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, coalesce(s.opt_start_delay, 0) as start_delay
  ), messages as (
    select st.flow_slug, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message
      from started as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.flow_slug, 'start_delay', m.start_delay, 'messages', m.messages))
    into v_batches
    from (select flow_slug, start_delay, jsonb_agg(message) as messages
            from messages group by flow_slug, start_delay) as m;

  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages
      from jsonb_array_elements(v_batches) as b
  loop
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, sent.msg_id
      from jsonb_array_elements(v_batch.messages) with ordinality as m(message, n)
      join pgmq.send_batch(
             v_batch.queue_name,
             array(select e from jsonb_array_elements(v_batch.messages) as e),
             v_batch.start_delay
           ) with ordinality as sent(msg_id, n) on sent.n = m.n;
  end loop;
end;
$$;

-- 0300_function_start_tasks.sql
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

-- 0310_function_complete_tasks.sql
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
  v_flows text[];
  v_msgs bigint[];
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'complete_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt, output}'
      using errcode = '22023';
  end if;

  select array_agg(distinct (i->>'run_id')::uuid order by (i->>'run_id')::uuid) into v_run_ids
    from jsonb_array_elements(items) as i;
  if v_run_ids is null then
    return;
  end if;

  -- one lock order for every writer of a run: the run row first
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  select array_agg(row(y.*)::pgflow.completion_item) into v_items
  from (
  select distinct on (x.run_id, x.step_slug, x.task_index)
         x.run_id, x.step_slug, x.task_index, x.attempt, x.output,
         case when t.status = 'started' and t.attempts_count = x.attempt
                   and r.status = 'started' and ss.status = 'started'
              then 'completed' else 'stale' end as outcome,
         t.flow_slug, t.message_id, s.step_type
    from (select (i->>'run_id')::uuid as run_id, i->>'step_slug' as step_slug,
                 (i->>'task_index')::integer as task_index, (i->>'attempt')::integer as attempt,
                 coalesce(i->'output', 'null'::jsonb) as output
            from jsonb_array_elements(items) as i) as x
    left join pgflow.step_tasks as t
      on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
    left join pgflow.runs as r on r.run_id = x.run_id
    left join pgflow.step_states as ss on ss.run_id = x.run_id and ss.step_slug = x.step_slug
    left join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = x.step_slug
   order by x.run_id, x.step_slug, x.task_index
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
                 c.flow_slug, c.message_id, c.step_type)::pgflow.completion_item
        from unnest(v_items) as c);
  end loop;

  update pgflow.step_tasks as t
     set status = 'completed', output = c.output, completed_at = now()
    from unnest(v_items) as c
   where c.outcome = 'completed'
     and t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index;

  -- completed tasks, late callbacks on terminal tasks and the failed ones all leave the queue
  select array_agg(c.flow_slug), array_agg(c.message_id) into v_flows, v_msgs
    from unnest(v_items) as c
    left join pgflow.step_tasks as t
      on t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index
   where c.outcome in ('completed', 'failed')
      or t.status in ('completed', 'failed', 'skipped', 'cancelled');
  perform pgflow.archive_task_messages(v_flows, v_msgs);

  with done as (
    select c.run_id, c.step_slug, count(*) as n
      from unnest(v_items) as c
     where c.outcome = 'completed'
     group by c.run_id, c.step_slug
  )
  update pgflow.step_states as ss
     set remaining_tasks = ss.remaining_tasks - done.n,
         status = case when ss.remaining_tasks = done.n then 'completed' else ss.status end,
         completed_at = case when ss.remaining_tasks = done.n then now() end,
         output = case
           when ss.remaining_tasks <> done.n then null
           when s.step_type = 'single' then (
             select t.output from pgflow.step_tasks as t
              where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.task_index = 0)
           else (
             select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
               from pgflow.step_tasks as t
              where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
         end
    from done, pgflow.steps as s
   where ss.run_id = done.run_id and ss.step_slug = done.step_slug
     and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug;

  perform pgflow.cascade(array(select distinct c.run_id from unnest(v_items) as c where c.outcome = 'completed'));

  return query
    select c.run_id, c.step_slug, c.task_index, c.outcome from unnest(v_items) as c
     order by c.run_id, c.step_slug, c.task_index;
end;
$$;

-- 0330_function_exhaust_task.sql
-- A task that has no attempt left: it fails, and its step's when_exhausted decides what follows
-- (fail: the step and the run fail; skip: the step is skipped and dependents go on without it;
-- skip-cascade: the step and everything downstream are skipped). The caller holds the run's lock.
-- Returns 'failed' or 'skipped'.
create or replace function pgflow.exhaust_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns text
language plpgsql
as $$
declare
  v_task pgflow.step_tasks;
  v_when text;
begin
  update pgflow.step_tasks as t
     set status = 'failed', failed_at = now(), error_message = exhaust_task.error_message
   where t.run_id = exhaust_task.run_id and t.step_slug = exhaust_task.step_slug
     and t.task_index = exhaust_task.task_index
  returning t.* into v_task;

  perform pgflow.archive_task_messages(array[v_task.flow_slug], array[v_task.message_id]);

  select s.when_exhausted into v_when
    from pgflow.steps as s where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_when = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed', failed_at = now(), error_message = exhaust_task.error_message
     where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
    perform pgflow.fail_run(exhaust_task.run_id, format('step %s failed: %s', exhaust_task.step_slug, exhaust_task.error_message));
    return 'failed';
  end if;

  update pgflow.step_states as ss
     set error_message = exhaust_task.error_message
   where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
  perform pgflow.skip_step(exhaust_task.run_id, exhaust_task.step_slug, 'handler_failed', v_when = 'skip-cascade');
  perform pgflow.cascade(array[exhaust_task.run_id]);
  return 'skipped';
end;
$$;

-- 0340_function_fail_task.sql
-- Records a failed attempt of the claim `attempt`. While attempts remain the task is queued again
-- and its message becomes visible after floor(base_delay * 2^attempts) seconds, or after the
-- handler-chosen retry_delay (attempt accounting is the same either way). Returns 'retrying',
-- 'failed', 'skipped' (exhausted, per when_exhausted) or 'stale' (not the current claim: nothing
-- changes; the message is archived when the task is already terminal).
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text,
  retry_delay integer default null
)
returns text
language plpgsql
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
  v_max_attempts integer;
  v_delay integer;
begin
  if retry_delay is not null and retry_delay < 0 then
    raise exception 'fail_task: retry_delay must be >= 0 seconds, got %', retry_delay using errcode = '22023';
  end if;

  perform 1 from pgflow.runs as r where r.run_id = fail_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
   for update;
  if not found then
    return 'stale';
  end if;

  select v_task.status = 'started' and v_task.attempts_count = fail_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = fail_task.step_slug
   where r.run_id = fail_task.run_id;

  if not coalesce(v_current, false) then
    if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
      perform pgflow.archive_task_messages(array[v_task.flow_slug], array[v_task.message_id]);
    end if;
    return 'stale';
  end if;

  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(fail_task.retry_delay,
                  least(floor(coalesce(s.opt_base_delay, f.opt_base_delay) * power(2, v_task.attempts_count)), 2147483647)::integer)
    into v_max_attempts, v_delay
    from pgflow.steps as s join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update pgflow.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = now()
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
    perform pgflow.set_vt_batch(v_task.flow_slug, array[v_task.message_id], array[v_delay]);
    return 'retrying';
  end if;

  return pgflow.exhaust_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index, fail_task.error_message);
end;
$$;

-- 0345_function_release_tasks.sql
-- Gives claims back (a worker shutting down with tasks it could not finish): each item still holding
-- its claim (`attempt`) whose step has attempts left is queued again and its message made visible
-- now ('released'). The attempt stays counted (the handler may have run part of it, and the next
-- claim must carry a new attempt number so this one stays fenced off). A task with no attempt left
-- stays started for stalled-task recovery to exhaust ('kept'). Other items are 'stale'.
create or replace function pgflow.release_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_run_ids uuid[];
  v_released jsonb;
begin
  if items is null or jsonb_typeof(items) <> 'array' then
    raise exception 'release_tasks: items must be a JSON array of {run_id, step_slug, task_index, attempt}'
      using errcode = '22023';
  end if;
  select array_agg(distinct (i->>'run_id')::uuid order by (i->>'run_id')::uuid) into v_run_ids
    from jsonb_array_elements(items) as i;
  if v_run_ids is null then
    return;
  end if;
  perform 1 from pgflow.runs as r where r.run_id = any(v_run_ids) order by r.run_id for update;

  with released as (
    update pgflow.step_tasks as t
       set status = 'queued', queued_at = now()
      from jsonb_array_elements(items) as i, pgflow.runs as r, pgflow.step_states as ss,
           pgflow.steps as s, pgflow.flows as f
     where t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer
       and t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
       and r.run_id = t.run_id and r.status = 'started'
       and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug and f.flow_slug = t.flow_slug
       and t.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts)
    returning t.flow_slug, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('flow_slug', rl.flow_slug, 'message_id', rl.message_id,
                                               'run_id', rl.run_id, 'step_slug', rl.step_slug,
                                               'task_index', rl.task_index)), '[]'::jsonb)
    into v_released
    from released as rl;

  perform pgflow.set_vt_batch(g.flow_slug, g.ids, array_fill(0, array[cardinality(g.ids)]))
     from (select rl->>'flow_slug' as flow_slug, array_agg((rl->>'message_id')::bigint) as ids
             from jsonb_array_elements(v_released) as rl
            where rl->>'message_id' is not null
            group by rl->>'flow_slug') as g;

  return query
    select (i->>'run_id')::uuid, i->>'step_slug', (i->>'task_index')::integer,
           case when v_released @> jsonb_build_array(jsonb_build_object(
                       'run_id', i->>'run_id', 'step_slug', i->>'step_slug',
                       'task_index', (i->>'task_index')::integer))
                  then 'released'
                when t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
                  then 'kept'
                else 'stale' end
      from jsonb_array_elements(items) as i
      left join pgflow.step_tasks as t
        on t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer;
end;
$$;

-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass.
create or replace function pgflow.requeue_stalled_tasks()
returns table (outcome text, task_count integer)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_candidates uuid[];
  v_locked uuid[];
  v_requeued integer := 0;
  v_stalled record;
  v_exhausted integer := 0;
  v_visible integer;
  v_marked integer;
begin
  select array_agg(distinct t.run_id) into v_candidates
    from pgflow.step_tasks as t
    join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows as f on f.flow_slug = t.flow_slug
   where t.status = 'started'
     and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30);
  if v_candidates is null then
    return query select 'requeued'::text, 0 union all select 'permanently_stalled', 0;
    return;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id from pgflow.runs as r
           where r.run_id = any(v_candidates) and r.status = 'started'
           order by r.run_id
             for update skip locked) as l;
  v_locked := coalesce(v_locked, '{}');

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id,
           t.requeued_count < 3 and t.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts) as can_requeue
      from pgflow.step_tasks as t
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = any(v_locked) and t.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
  ), requeued as (
    update pgflow.step_tasks as t
       set status = 'queued', requeued_count = t.requeued_count + 1, last_requeued_at = now(), queued_at = now()
      from stalled as st
     where st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.flow_slug, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.flow_slug, g.ids, array_fill(0, array[cardinality(g.ids)]))
      from (select rq.flow_slug, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.flow_slug) as g
  ), marked as (
    update pgflow.step_tasks as t
       set permanently_stalled_at = now()
      from stalled as st
     where not st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.run_id, t.step_slug, t.task_index
  )
  select (select count(*) from requeued)::integer, (select count(*) from visible)::integer,
         (select count(*) from marked)::integer
    into v_requeued, v_visible, v_marked;

  for v_stalled in
    select t.run_id, t.step_slug, t.task_index
      from pgflow.step_tasks as t
     where t.run_id = any(v_locked) and t.status = 'started' and t.permanently_stalled_at is not null
     order by t.run_id, t.step_slug, t.task_index
  loop
    if exists (select 1 from pgflow.runs as r where r.run_id = v_stalled.run_id and r.status = 'started') then
      perform pgflow.exhaust_task(v_stalled.run_id, v_stalled.step_slug, v_stalled.task_index,
                                  'permanently stalled: the task was requeued 3 times or ran out of attempts');
      v_exhausted := v_exhausted + 1;
    end if;
  end loop;

  return query select 'requeued'::text, v_requeued union all select 'permanently_stalled', v_exhausted;
end;
$$;

-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention, and workers stopped or silent for that long
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
create or replace function pgflow.prune_data_older_than(retention interval)
returns jsonb
language plpgsql
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
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  select array_agg(r.run_id) into v_runs
    from pgflow.runs as r
   where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
  v_runs := coalesce(v_runs, '{}');

  delete from pgflow.step_tasks as t where t.run_id = any(v_runs);
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states as ss where ss.run_id = any(v_runs);
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r where r.run_id = any(v_runs);

  delete from pgflow.workers as w
   where coalesce(w.stopped_at, w.last_heartbeat_at) < v_cutoff
     and (w.stopped_at is not null or w.last_heartbeat_at < now() - interval '10 minutes');
  get diagnostics v_workers = row_count;

  for v_queue in
    select f.flow_slug from pgflow.flows as f
     where exists (select 1 from pgmq.meta as m where m.queue_name = f.flow_slug)
     order by f.flow_slug
  loop
    execute format('delete from pgmq.%I where archived_at < $1', pgmq.format_table_name(v_queue, 'a'))
      using v_cutoff;
    get diagnostics v_count = row_count;
    v_archived := v_archived + v_count;
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs), 'step_states', v_states, 'step_tasks', v_tasks,
                            'workers', v_workers, 'archived_messages', v_archived);
end;
$$;

-- 0370_function_delete_flow_and_data.sql
-- Deletes one flow with all its runs, states, tasks, steps and dependencies, then drops its queue
-- (live messages go with it). Serialised with compilation by the same per-flow advisory lock.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
as $$
begin
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  perform 1 from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug order by r.run_id for update;

  delete from pgflow.step_tasks as t where t.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;

  if exists (select 1 from pgmq.meta as m where m.queue_name = delete_flow_and_data.flow_slug) then
    perform pgmq.drop_queue(flow_slug);
  end if;
end;
$$;

-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape; runtime options
-- updated in place and listed), mismatch (nothing changed; differences listed) or recompiled (a
-- mismatch replaced because allow_recompile is set: the flow's data is deleted first).
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean default false)
returns jsonb
language plpgsql
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
begin
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected = v_found then
      v_status := 'verified';
    else
      select array_agg(diff order by ord) into v_differences
        from (
          select 0 as ord, format('step count: definition has %s, database has %s',
                                  jsonb_array_length(v_expected->'steps'), jsonb_array_length(v_found->'steps')) as diff
           where jsonb_array_length(v_expected->'steps') <> jsonb_array_length(v_found->'steps')
          union all
          select i * 100 + k.n, format('step %s (%s): %s is %s in the definition, %s in the database',
                                       i, coalesce(ex->>'slug', fo->>'slug'), k.key,
                                       coalesce(ex->k.key, 'null'::jsonb)::text, coalesce(fo->k.key, 'null'::jsonb)::text)
            from generate_series(0, greatest(jsonb_array_length(v_expected->'steps'), jsonb_array_length(v_found->'steps')) - 1) as i
           cross join lateral (select v_expected->'steps'->i as ex, v_found->'steps'->i as fo) as pair
           cross join lateral unnest(array['slug', 'step_type', 'deps', 'when_unmet', 'when_exhausted',
                                           'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where ex->k.key is distinct from fo->k.key
        ) as d;
      if not allow_recompile then
        return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer);
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail')
    );
  end loop;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb);
end;
$$;

-- 0250_function_maybe_complete_runs.sql
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent.
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
           select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
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
-- Moves the given started runs forward until nothing changes: recounts open dependencies and map
-- sizes of created steps, resolves conditions of ready steps (fail, skip or skip-cascade when
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

    -- open dependencies, and the size of a dependent map once its dependency is finished
    with counts as (
      select ss.run_id, ss.step_slug,
             count(d.dep_slug) filter (where dst.status not in ('completed', 'skipped')) as open_deps,
             case when s.step_type = 'map' and s.deps_count = 1
                       and bool_and(dst.status in ('completed', 'skipped'))
                  then max(case when dst.status = 'completed' and jsonb_typeof(dst.output) = 'array'
                                then jsonb_array_length(dst.output) else 0 end)
             end as map_size
        from pgflow.step_states as ss
        join pgflow.runs as r on r.run_id = ss.run_id and r.status = 'started'
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        left join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
        left join pgflow.step_states as dst on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
       where ss.run_id = any(run_ids) and ss.status = 'created' and s.deps_count > 0
       group by ss.run_id, ss.step_slug, s.step_type, s.deps_count
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
