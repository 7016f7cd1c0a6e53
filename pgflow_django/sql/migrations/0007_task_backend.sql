-- Frozen migration delta 0007_task_backend (loaded by pgflow_django/migrations/0007_task_backend.py):
-- what Django's tasks framework needs from the engine: runs started with a delay (run_after) and the
-- error of every failed attempt; and a flow can no longer take the name of a declared shared queue.

alter table pgflow.runs add column not_before timestamptz;
alter table pgflow.step_tasks add column attempt_errors jsonb not null default '[]'::jsonb;

-- the functions whose signature changes are replaced, not overloaded
drop function pgflow.start_flow(text, jsonb, uuid);
drop function pgflow.start_flows(text, jsonb, uuid[]);

-- 0208_function_provision_generated_queue.sql
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
  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = provision_generated_queue.queue_name) then
    raise exception 'queue % is a declared shared queue, never a generated one of flow %: choose another flow slug',
      quote_literal(queue_name), quote_literal(flow_slug)
      using errcode = '23505';
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
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 1), coalesce(timeout, 60), queue_mode)
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  return v_flow;
end;
$$;

-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one PGMQ batch per
-- queue and start delay (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
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
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks,
              greatest(coalesce(s.opt_start_delay, 0),
                       coalesce(ceil(extract(epoch from r.not_before - clock_timestamp()))::integer, 0)) as start_delay,
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

-- 0280_function_start_flows.sql
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null
)
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
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
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
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before)
    select coalesce(run_ids[e.n], gen_random_uuid()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0 then now() + make_interval(secs => start_flows.start_delay) end
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

-- 0290_function_start_flow.sql
-- One run of start_flows: the same checks, an optional run id and start delay (seconds).
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, start_delay integer default null
)
returns setof pgflow.runs
language plpgsql
as $$
begin
  if input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end,
                                                start_delay);
end;
$$;

-- 0340_function_fail_task.sql
-- Records a failed attempt of the claim `attempt`. While attempts remain the task is queued again
-- and its message becomes visible after floor(base_delay * 2^attempts) seconds, or after the
-- handler-chosen retry_delay (attempt accounting is the same either way). Returns 'retrying',
-- 'failed', 'skipped' (exhausted, per when_exhausted) or 'stale' (not the current claim: nothing
-- changes; the message is archived when the task is already terminal). Each recorded failure is also
-- appended to the task's attempt_errors.
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
  v_error jsonb;
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

  v_error := jsonb_build_object('attempt', v_task.attempts_count, 'worker_id', v_task.last_worker_id,
                                'error', fail_task.error_message, 'failed_at', now());
  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(fail_task.retry_delay,
                  least(floor(coalesce(s.opt_base_delay, f.opt_base_delay) * power(2, v_task.attempts_count)), 2147483647)::integer)
    into v_max_attempts, v_delay
    from pgflow.steps as s join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update pgflow.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = now(),
           attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
    perform pgflow.set_vt_batch(v_task.queue_name, array[v_task.message_id], array[v_delay]);
    return 'retrying';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
  return pgflow.exhaust_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index, fail_task.error_message);
end;
$$;
