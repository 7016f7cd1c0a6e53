-- Frozen migration delta 0006_shared_queues (loaded by pgflow_django/migrations/0006_shared_queues.py):
-- explicit shared queues. Routed flows (queue mode 'routed'), the declaration of shared queues, the
-- claim on a shared queue with an exact support set, per-flow cleanup on shared queues and their
-- queue-wide archive retention.

alter table pgflow.flows
  drop constraint flows_queue_mode_check,
  add constraint flows_queue_mode_check check (queue_mode in ('flow', 'step', 'routed'));

-- 0175_table_shared_queues.sql
-- Queues declared shared by pgflow: explicit names that routed flows select (route_flow), which
-- several steps, flows and versions may use. Only this declaration distinguishes them from queues
-- created outside pgflow; they are never generated names (no '__') and are never dropped with a flow.
create table pgflow.shared_queues (
  queue_name text primary key
    constraint shared_queues_queue_name_check
    check (pgflow.is_valid_queue_name(queue_name) and position('__' in queue_name) = 0),
  declared_at timestamptz not null default now()
);

-- 0015_function_protocol_version.sql
-- The worker/database protocol this schema speaks. Workers refuse to start unless it equals theirs:
-- an older worker on a newer database is told to deploy the new worker, a newer worker on an older
-- database is told to migrate (upgrades are coordinated, never rolling).
create or replace function pgflow.protocol_version()
returns integer
language sql
immutable
as $$
  select 4
$$;

-- 0209_function_flow_queues.sql
-- Every private queue of a persisted flow's route: the default queue lower(flow_slug) of a plain
-- flow, and each step's queue of a plain or step-queued flow. A routed flow owns no queue: its
-- steps' shared queues (pgflow.shared_queues) outlive it.
create or replace function pgflow.flow_queues(flow_slug text)
returns setof text
language sql
stable
as $$
  select lower(f.flow_slug) from pgflow.flows as f
   where f.flow_slug = flow_queues.flow_slug and f.queue_mode = 'flow'
  union
  select s.queue_name from pgflow.steps as s
    join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = flow_queues.flow_slug and f.queue_mode <> 'routed'
$$;

-- 0210_function_create_flow.sql
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them). No queue DDL here: add_step and the compiler provision the flow's queues
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
    if exists (select 1 from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug)) then
      raise exception 'PGMQ queue % already exists, so new flow % would silently adopt it: drop the queue if it is unused (pgmq.drop_queue), or choose another slug',
        quote_literal((select m.queue_name from pgmq.meta as m where lower(m.queue_name) = lower(create_flow.flow_slug) limit 1)),
        quote_literal(flow_slug)
        using errcode = '23505';
    end if;
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode)
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 1), coalesce(timeout, 60), queue_mode)
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  return v_flow;
end;
$$;

-- 0211_function_provision_shared_queue.sql
-- The one path that declares, and creates when absent, a shared queue (the compiler calls it for each
-- queue of a routed flow). A queue already declared shared is reused (created again through PGMQ if
-- it went missing). Refused: an invalid name, a name containing '__' (reserved for generated
-- queues), the default queue name of a flow, a queue some plain or step-queued flow routes to, and
-- an existing PGMQ queue (pgmq.list_queues, compared case-insensitively) that pgflow never declared:
-- pgflow never adopts or converts a queue.
create or replace function pgflow.provision_shared_queue(queue_name text)
returns void
language plpgsql
as $$
declare
  v_queue text := queue_name;
  v_listed text[];
  v_owner text;
begin
  if not pgflow.is_valid_queue_name(v_queue) or position('__' in v_queue) > 0 then
    raise exception 'shared queue name % is invalid: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
      quote_literal(coalesce(v_queue, 'NULL'))
      using errcode = '22023';
  end if;
  perform pgmq.validate_queue_name(v_queue);
  perform pg_advisory_xact_lock(hashtextextended('pgflow:shared_queue:' || v_queue, 0));

  select f.flow_slug into v_owner from pgflow.flows as f
   where lower(f.flow_slug) = v_queue limit 1;
  if v_owner is null then
    select s.flow_slug into v_owner from pgflow.steps as s
      join pgflow.flows as f on f.flow_slug = s.flow_slug
     where s.queue_name = v_queue and f.queue_mode <> 'routed' limit 1;
  end if;
  if v_owner is not null then
    raise exception 'queue % is the generated private queue of flow %: choose another shared queue name',
      quote_literal(v_queue), quote_literal(v_owner)
      using errcode = '23505';
  end if;

  select array_agg(l.queue_name::text order by l.queue_name) into v_listed
    from pgmq.list_queues() as l where lower(l.queue_name) = v_queue;
  if cardinality(v_listed) > 1 then
    raise exception 'shared queue % is ambiguous: PGMQ lists % for the same tables; remove the aliases you do not use',
      quote_literal(v_queue), array_to_string(v_listed, ', ')
      using errcode = '21000';
  end if;

  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue) then
    if v_listed is null then
      perform pgmq.create(v_queue);
      execute format(
        'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
        pgmq.format_table_name(v_queue, 'q'));
    end if;
    return;
  end if;
  if v_listed is not null then
    raise exception 'PGMQ queue % exists but was not declared shared by pgflow: pgflow never adopts an existing queue; choose another name, or drop the queue (pgmq.drop_queue) if it is unused',
      quote_literal(v_listed[1])
      using errcode = '23505';
  end if;

  perform pgmq.create(v_queue);
  insert into pgflow.shared_queues (queue_name) values (v_queue);
  execute format(
    'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
    pgmq.format_table_name(v_queue, 'q'));
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
language plpgsql
as $$
declare
  v_deps text[] := coalesce((select array_agg(distinct d order by d) from unnest(deps_slugs) as d), '{}');
  v_existing pgflow.steps;
  v_missing text[];
  v_step pgflow.steps;
  v_mode text;
  v_index integer;
  v_queue text;
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

-- 0298_function_claim_classified.sql
-- The second half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks once they
-- have classified a batch: the arrays hold each message id with its task key and outcome, in task
-- key order (the order every writer locks a run's tasks). Claims the 'claimed' tasks still queued
-- (one more attempt, visibility = effective timeout + 2 s before they are returned), defers the
-- visibility of 'started' ones to their stalled-recovery deadline, archives the messages whose
-- outcome is in `archived`, and returns one claim_record per message.
create or replace function pgflow.claim_classified(
  queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[],
  outcomes text[], archived text[]
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  -- the callers checked each task's run and step; a run that fails or a step that is skipped
  -- meanwhile terminalizes its queued tasks, which the status recheck on the locked row sees
  with claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
           last_worker_id = claim_classified.worker_id
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     where k.outcome = 'claimed'
       and t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2))
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer))
     from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     join pgflow.step_tasks as t
       on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started' and t.status = 'started'
   having count(*) > 0;

  perform pgflow.archive_task_messages(array_agg(claim_classified.queue_name), array_agg(e.id))
     from unnest(ids, outcomes) as e(id, outcome)
    where e.outcome = any(claim_classified.archived)
   having count(*) > 0;

  return query
    select 'claimed'::text, c.message_id, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.attempts_count,
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
      from unnest(coalesce(v_claimed, '{}')) as c
      join pgflow.runs as r on r.run_id = c.run_id
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    union all
    select case when e.outcome = 'claimed' then 'started' else e.outcome end,
           e.id, null, null, null, null, null, null
      from unnest(ids, outcomes) as e(id, outcome)
     where e.outcome <> 'claimed'
        or not exists (select 1 from unnest(coalesce(v_claimed, '{}')) as c where c.message_id = e.id)
     order by 2;
end;
$$;

-- 0300_function_start_tasks.sql
-- The claim. The whole batch is classified before anything changes, by persisted identity first
-- ((queue_name, message_id) -> task), by body only for messages that match no task:
--   claimed     queued task of this flow in a started run and step: started, one more attempt,
--               visibility = effective timeout + 2 s applied before the rows are returned
--   started     already running elsewhere: untouched, no attempt consumed, visibility deferred to
--               the task's stalled-recovery deadline
--   terminal    the task is finished: message archived (idempotent)
--   ineligible  a queued task whose run or step is not started: untouched
--   missing     the message is no longer in the queue: nothing to do
--   foreign     no task and the body is not pgflow-shaped: archived (the worker warns)
--   fatal       no task but a pgflow-shaped body, or the task belongs to another flow's route or,
--               for a step worker, to another step
-- step_slug is the exact step selector of a step worker (the step's private queue); a plain worker
-- passes NULL and supports every step of its flow. A step-queued flow requires the selector, and the
-- selected step must be routed to queue_name: either mistake raises before anything is read.
-- If any message is fatal, nothing is claimed or archived: every message of the batch is made
-- visible now (outcome 'released' for the others), the subscription (flow_slug, step_slug or '') is
-- paused with reason 'fatal', and the rows are returned rather than an error raised, so the reset
-- and the pause commit. The worker then stops with one error naming the queue and message ids.
create or replace function pgflow.start_tasks(
  queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text default null
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_queue text := lower(queue_name);
  v_mode text;
  v_ids bigint[];
  v_outcomes text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_unmatched bigint[];
  v_bodies jsonb := '{}'::jsonb;
  v_fatal bigint[];
begin
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = start_tasks.flow_slug;
  if not found then
    raise exception 'flow % does not exist: compile it before claiming its tasks', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode = 'routed' then
    raise exception 'flow % is routed to shared queues: claim with pgflow.start_shared_tasks', quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is null and v_mode = 'step' then
    raise exception 'flow % is step-queued: claim with the exact step selector (start_tasks(..., step_slug))',
      quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if step_slug is not null and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_tasks.flow_slug and s.step_slug = start_tasks.step_slug
          and s.queue_name = v_queue) then
    raise exception 'step % of flow % is not routed to queue %: a step worker polls its step''s own queue',
      quote_literal(step_slug), quote_literal(flow_slug), quote_literal(v_queue)
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  -- each message's task, looked up by its unique (queue_name, message_id) one at a time (a lateral
  -- LIMIT 1 keeps the plan an index probe per message whatever the table statistics say); the
  -- arrays are in task key order, the order in which every other writer locks a run's tasks
  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then null
                     when t.flow_slug <> start_tasks.flow_slug then 'fatal'
                     when t.step_slug <> coalesce(start_tasks.step_slug, t.step_slug) then 'fatal'
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select distinct unnest(msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = v_queue and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug;

  -- only messages without a task are judged by their body
  select array_agg(e.id) into v_unmatched
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome is null;
  if v_unmatched is not null then
    execute format('select coalesce(jsonb_object_agg(m.msg_id::text, coalesce(m.message, ''null''::jsonb)), ''{}'') from pgmq.%I as m where m.msg_id = any($1)',
                   pgmq.format_table_name(v_queue, 'q'))
      into v_bodies using v_unmatched;
    v_outcomes := array(
      select case
               when e.outcome is not null then e.outcome
               when not (v_bodies ? e.id::text) then 'missing'
               when pgflow.is_pgflow_message(v_bodies->(e.id::text)) then 'fatal'
               else 'foreign'
             end
        from unnest(v_ids, v_outcomes) with ordinality as e(id, outcome, n)
       order by e.n);
  end if;

  select array_agg(e.id) into v_fatal
    from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome = 'fatal';

  if v_fatal is not null then
    perform pgflow.set_vt_batch(v_queue, array_agg(e.id), array_agg(0))
       from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome <> 'missing';
    insert into pgflow.worker_pauses (flow_slug, step_slug, queue_name, reason, detail)
    values (start_tasks.flow_slug, coalesce(start_tasks.step_slug, ''), v_queue, 'fatal',
            format('unsupported work on queue %s: message ids %s', v_queue,
                   (select string_agg(f::text, ',' order by f) from unnest(v_fatal) as f)))
    on conflict on constraint worker_pauses_pkey do update
      set reason = excluded.reason, detail = excluded.detail, queue_name = excluded.queue_name, paused_at = now();
    return query
      select case when e.outcome in ('fatal', 'missing') then e.outcome else 'released' end,
             e.id, null::text, null::uuid, null::text, null::integer, null::integer, null::jsonb
        from unnest(v_ids, v_outcomes) as e(id, outcome)
       order by e.id;
    return;
  end if;

  return query
    select * from pgflow.claim_classified(v_queue, start_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal', 'foreign']);
end;
$$;

-- 0302_function_start_shared_tasks.sql
-- The claim on a shared queue, for a worker that supports the exact (flow_slug, step_slug) pairs
-- given as two parallel arrays. Classified by persisted identity only ((queue_name, message_id) ->
-- task); bodies are never read:
--   claimed      a queued task of a supported pair in a started run and step: started, one more
--                attempt, visibility = effective timeout + 2 s before the rows are returned
--   started      already running elsewhere: untouched, no attempt consumed, visibility deferred to
--                the task's stalled-recovery deadline
--   terminal     a supported task that is finished: message archived (idempotent)
--   ineligible   a supported queued task whose run or step is not started: untouched
--   unmatched    no task has this message: preserved as read (it recurs after its visibility
--                timeout); the worker warns with queue and message ids
--   unsupported  the task is outside the support set: not claimed, mutated or archived; the worker
--                warns
-- Nothing stops the worker: valid work in the batch is claimed whatever else it holds.
create or replace function pgflow.start_shared_tasks(
  queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]
)
returns setof pgflow.claim_record
language plpgsql
as $$
declare
  v_queue text := lower(queue_name);
  v_ids bigint[];
  v_outcomes text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  if not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue) then
    raise exception 'queue % is not a shared queue declared by pgflow: claim a private queue with pgflow.start_tasks',
      quote_literal(coalesce(queue_name, 'NULL'))
      using errcode = '22023';
  end if;
  if cardinality(support_flows) is distinct from cardinality(support_steps) then
    raise exception 'start_shared_tasks: support_flows and support_steps must be parallel arrays of the same length'
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then 'unmatched'
                     when not exists (select 1 from unnest(support_flows, support_steps) as p(flow_slug, step_slug)
                                       where p.flow_slug = t.flow_slug and p.step_slug = t.step_slug) then 'unsupported'
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select distinct unnest(msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = v_queue and t.message_id = i.id
       limit 1
    ) as t on true
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug;

  return query
    select * from pgflow.claim_classified(v_queue, start_shared_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal']);
end;
$$;

-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
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
    select distinct s.queue_name from pgflow.steps as s
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(s.queue_name, 'a'))) is not null
       and not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = s.queue_name)
     order by s.queue_name
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

-- 0365_function_prune_shared_archive.sql
-- Queue-wide retention of one declared shared queue's archive: deletes its archived messages older
-- than now - retention, whichever flow they belonged to. Returns how many were deleted.
create or replace function pgflow.prune_shared_archive(queue_name text, retention interval)
returns bigint
language plpgsql
as $$
declare
  v_count bigint;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_shared_archive: retention must be a non-negative interval' using errcode = '22023';
  end if;
  if not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = prune_shared_archive.queue_name) then
    raise exception 'queue % is not a shared queue declared by pgflow (shared queues: %)',
      quote_literal(coalesce(queue_name, 'NULL')),
      coalesce((select string_agg(sq.queue_name, ', ' order by sq.queue_name) from pgflow.shared_queues as sq), 'none')
      using errcode = '22023';
  end if;
  execute format('delete from pgmq.%I where archived_at < $1', pgmq.format_table_name(queue_name, 'a'))
    using now() - retention;
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

-- 0370_function_delete_flow_and_data.sql
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- are locked before the queues (the order every writer uses). Messages are not archived one by one:
-- dropping a queue drops its table and archive together. Serialised with compilation by the
-- per-flow advisory lock. Shared queues (pgflow.shared_queues) are never dropped: only this flow's
-- live messages on them are deleted, found through its task snapshots.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  perform 1 from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug order by r.run_id for update;

  select coalesce(array_agg(distinct q order by q), '{}') into v_queues
    from pgflow.flow_queues(delete_flow_and_data.flow_slug) as q;

  foreach v_queue in array v_queues loop
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = v_queue and s.flow_slug <> delete_flow_and_data.flow_slug limit 1;
    if v_other is not null then
      raise exception 'cannot delete flow %: its queue % is also used by flow %; nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), quote_literal(v_other) using errcode = '55000';
    end if;
    if not exists (select 1 from pgmq.meta as m where lower(m.queue_name) = v_queue)
       and not exists (select 1 from pgflow.steps as s
                        where s.flow_slug = delete_flow_and_data.flow_slug and s.queue_name = v_queue) then
      continue;
    end if;
    begin
      v_spellings := v_spellings || pgflow.resolve_queue_spelling(v_queue);
    exception when others then
      raise exception 'cannot delete flow %: %; nothing was deleted', quote_literal(flow_slug), sqlerrm
        using errcode = '55000';
    end;
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'cannot delete flow %: queue % is malformed (%); repair or drop it by hand, nothing was deleted',
        quote_literal(flow_slug), quote_literal(v_queue), v_problem using errcode = '55000';
    end if;
  end loop;

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(t.queue_name, array_agg(t.message_id order by t.message_id))
     from pgflow.step_tasks as t
     join pgflow.shared_queues as sq on sq.queue_name = t.queue_name
    where t.flow_slug = delete_flow_and_data.flow_slug and t.message_id is not null
      and t.status in ('queued', 'started')
    group by t.queue_name;

  delete from pgflow.step_tasks as t
   where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p where p.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
end;
$$;

-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed, and
-- "mismatch" says whether the shape, the routing or both differ) or recompiled (a mismatch replaced
-- because allow_recompile is set: the flow's data is deleted first). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean default false)
returns jsonb
language plpgsql
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
begin
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

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

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
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
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if not allow_recompile then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb);
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
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
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
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb);
end;
$$;
