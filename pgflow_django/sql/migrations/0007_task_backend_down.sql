-- Frozen migration delta 0007_task_backend, backward.
drop function pgflow.start_flow(text, jsonb, uuid, integer);
drop function pgflow.start_flows(text, jsonb, uuid[], integer);

-- 0208_function_provision_generated_queue.sql (as of 0006)
-- The one path that checks, and creates when absent, a queue generated for a flow (the compiler and
-- add_step both use it). A generated queue is private to one concrete flow: ownership is derived
-- from that flow's persisted definition (its default queue lower(flow_slug) once the flow row
-- exists, or a queue its steps already reference). An existing queue that no definition of this
-- flow owns is never adopted; a name derived or referenced by another flow, a case alias in
-- pgmq.meta, or a queue with missing objects is refused. Nothing is changed before every check
-- passed, and a queue that appears while it is being created is refused too.
create or replace function pgflow.provision_generated_queue(flow_slug text, queue_name text)
returns void
language plpgsql
as $$
declare
  v_other text;
  v_matches text[];
  v_owned boolean;
  v_problem text;
begin
  if not pgflow.is_valid_queue_name(queue_name) then
    raise exception 'generated queue name % of flow % is invalid: queue names are lowercase letters, digits and underscores, at most 47 characters',
      quote_literal(coalesce(queue_name, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  perform pgmq.validate_queue_name(queue_name);
  perform pgmq.acquire_queue_lock(queue_name);

  select f.flow_slug into v_other from pgflow.flows as f
   where lower(f.flow_slug) = provision_generated_queue.queue_name
     and f.flow_slug <> provision_generated_queue.flow_slug
   limit 1;
  if v_other is null then
    select s.flow_slug into v_other from pgflow.steps as s
     where s.queue_name = provision_generated_queue.queue_name
       and s.flow_slug <> provision_generated_queue.flow_slug
     limit 1;
  end if;
  if v_other is not null then
    raise exception 'queue % belongs to flow %, not to flow %: choose another flow slug',
      quote_literal(queue_name), quote_literal(v_other), quote_literal(flow_slug)
      using errcode = '23505';
  end if;

  v_owned := exists (select 1 from pgflow.steps as s
                      where s.flow_slug = provision_generated_queue.flow_slug
                        and s.queue_name = provision_generated_queue.queue_name)
          or exists (select 1 from pgflow.flows as f
                      where f.flow_slug = provision_generated_queue.flow_slug
                        and lower(f.flow_slug) = provision_generated_queue.queue_name);

  select array_agg(m.queue_name::text order by m.queue_name) into v_matches
    from pgmq.meta as m where lower(m.queue_name) = provision_generated_queue.queue_name;

  if cardinality(v_matches) > 1 then
    raise exception 'queue % of flow % is ambiguous: pgmq.meta rows % address the same tables; remove the pgmq.meta row of each alias you do not use (delete from pgmq.meta where queue_name = ...; dropping an alias queue would drop the shared tables)',
      quote_literal(queue_name), quote_literal(flow_slug), array_to_string(v_matches, ', ')
      using errcode = '21000';
  end if;

  if v_matches is not null then
    if not v_owned or exists (select 1 from pgflow.step_tasks as t
                                where t.queue_name = provision_generated_queue.queue_name
                                  and t.flow_slug <> provision_generated_queue.flow_slug) then
      raise exception 'PGMQ queue % already exists but no definition of flow % owns it: pgflow never adopts an existing queue; drop it (pgmq.drop_queue) if it is unused, or choose another flow slug',
        quote_literal(v_matches[1]), quote_literal(flow_slug)
        using errcode = '23505';
    end if;
    v_problem := pgflow.queue_objects_problem(queue_name);
    if v_problem is not null then
      raise exception 'queue % of flow % is malformed: %', quote_literal(queue_name), quote_literal(flow_slug), v_problem
        using errcode = '55000';
    end if;
    return;
  end if;

  if exists (select 1 from pgflow.step_tasks as t where t.queue_name = provision_generated_queue.queue_name) then
    raise exception 'queue % of flow % is missing although tasks reference it; restore it before compiling',
      quote_literal(queue_name), quote_literal(flow_slug)
      using errcode = '55000';
  end if;

  perform pgmq.create(queue_name);
  -- PGMQ's queue lock (held since the checks) keeps this spelling from being created meanwhile; a
  -- case variant created meanwhile would share the tables and shows up as a second metadata row.
  if (select count(*) from pgmq.meta as m where lower(m.queue_name) = provision_generated_queue.queue_name) <> 1
     or pgflow.queue_objects_problem(queue_name) is not null then
    raise exception 'queue % appeared while flow % was being compiled: pgflow never adopts an existing queue; compile again once you know who owns it',
      quote_literal(queue_name), quote_literal(flow_slug)
      using errcode = '40001';
  end if;
  execute format(
    'create trigger pgflow_notify_insert after insert on pgmq.%I for each statement execute function pgflow.notify_queue_insert()',
    pgmq.format_table_name(queue_name, 'q'));
end;
$$;

-- 0210_function_create_flow.sql (as of 0006)
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

-- 0211_function_provision_shared_queue.sql (as of 0006)
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

-- 0260_function_start_ready_steps.sql (as of 0006)
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one PGMQ batch per
-- queue and start delay; each task stores that queue as its immutable snapshot. No queue DDL here.
-- The n-th id returned by send_batch belongs to the n-th message sent.
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
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, coalesce(s.opt_start_delay, 0) as start_delay,
              s.queue_name
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message
      from started as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages))
    into v_batches
    from (select queue_name, start_delay, jsonb_agg(message) as messages
            from messages group by queue_name, start_delay) as m;

  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages
      from jsonb_array_elements(v_batches) as b
  loop
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, sent.msg_id, v_batch.queue_name
      from jsonb_array_elements(v_batch.messages) with ordinality as m(message, n)
      join pgmq.send_batch(
             v_batch.queue_name,
             array(select e from jsonb_array_elements(v_batch.messages) as e),
             v_batch.start_delay
           ) with ordinality as sent(msg_id, n) on sent.n = m.n;
  end loop;
end;
$$;

-- 0280_function_start_flows.sql (as of 0006)
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs.
create or replace function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[] default null)
returns setof pgflow.runs
language plpgsql
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
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
    select min(e.n) - 1 into v_bad
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array';
    if v_bad is not null then
      raise exception 'flow %: root map step % needs an array input, but input % is not an array',
        flow_slug, v_root_map, v_bad
        using errcode = '22023';
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug)
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

  perform pgflow.cascade(v_ids);

  return query
    select r.* from pgflow.runs as r
      join unnest(v_ids) with ordinality as i(run_id, n) on i.run_id = r.run_id
     order by i.n;
end;
$$;

-- 0290_function_start_flow.sql (as of 0006)
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
as $$
begin
  if input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end);
end;
$$;

-- 0300_function_start_tasks.sql (as of 0006)
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

-- 0302_function_start_shared_tasks.sql (as of 0006)
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

-- 0340_function_fail_task.sql (as of 0006)
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
      perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
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
    perform pgflow.set_vt_batch(v_task.queue_name, array[v_task.message_id], array[v_delay]);
    return 'retrying';
  end if;

  return pgflow.exhaust_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index, fail_task.error_message);
end;
$$;

-- 0370_function_delete_flow_and_data.sql (as of 0006)
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

alter table pgflow.step_tasks drop column attempt_errors;
alter table pgflow.runs drop column not_before;
