-- 0007_squashed_0038: the deltas 0007_task_backend to 0038_worker_support_queue as one, written by
-- `python -m pgflow_django.sql.squash 0007 0038 0007_squashed_0038`: their statements in the order they ran,
-- without those a later definition of the same function made redundant. Never edit it once
-- released.
-- Squashed: 0007_task_backend, 0008_fast_paths, 0009_shape_safety, 0010_pgflow_fidelity,
-- 0011_lock_order, 0012_poison_paths, 0013_transition_times, 0014_schedules, 0015_consolidation,
-- 0016_observability, 0017_admin_console, 0018_hot_path, 0019_hand_off, 0020_priorities,
-- 0021_concurrency_limits, 0022_partitioned_history, 0023_one_home, 0024_batch_joins,
-- 0025_batch_probes, 0026_completion_probe, 0027_key_only_probes, 0028_wake_after_claims,
-- 0029_hot_path_without_jit, 0030_limit_wakeups, 0031_queue_access, 0032_archive_partitions,
-- 0033_limit_wake_locked_messages, 0034_queue_provisioning, 0035_schedule_catch_up,
-- 0036_return_unstarted_tasks, 0037_schedule_isolation, 0038_worker_support_queue.

-- ---------------------------------------------------------------- 0007_task_backend.sql
-- Frozen migration delta 0007_task_backend (loaded by pgflow_django/migrations/0007_task_backend.py):
-- what Django's tasks framework needs from the engine: runs started with a delay (run_after) and the
-- error of every failed attempt. Also: a flow can no longer take the name of a declared shared queue;
-- verifying a declared shared queue takes no lock; a plain flow's claim refuses a step selector;
-- deleting a flow skips a shared queue whose table is gone.

alter table pgflow.runs add column not_before timestamptz;
alter table pgflow.step_tasks add column attempt_errors jsonb not null default '[]'::jsonb;
-- the functions whose signature changes are replaced, not overloaded
drop function pgflow.start_flow(text, jsonb, uuid);
drop function pgflow.start_flows(text, jsonb, uuid[]);
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

-- ---------------------------------------------------------------- 0008_fast_paths.sql
-- Frozen migration delta 0008_fast_paths (loaded by pgflow_django/migrations/0008_fast_paths.py):
-- a claim no longer writes a message's visibility a second time when the read already hid it long
-- enough (pgflow.extend_vt_batch), and a completion takes a single step's output from the item in
-- hand and cascades only the runs where a step finished.

-- 0201_function_extend_vt_batch.sql
-- Makes each message hidden for at least its own offset (seconds) from now, in one statement. A
-- message already hidden that long (within a second) is not written: a worker that read its batch
-- with a long enough visibility pays no second update per message when the claim applies the
-- task's timeout.
create or replace function pgflow.extend_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns void
language plpgsql
as $$
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'extend_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
         and q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1)
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets;
end;
$$;

-- ---------------------------------------------------------------- 0009_shape_safety.sql
-- Frozen migration delta 0009_shape_safety (loaded by pgflow_django/migrations/0009_shape_safety.py):
-- a changed flow is never replaced unless asked (ensure_flow_compiled's on_change: refuse,
-- replace-if-idle, or an explicit replace checked against the confirmed run count), the old
-- allow_recompile = true is refused, and every compilation gets a fresh generation that workers'
-- claims compare, so a worker compiled against a replaced flow claims nothing.

-- 0100_table_flows.sql (the new column; existing flows get a generation each)
alter table pgflow.flows add column generation bigint not null generated always as identity;
-- 0391_function_ensure_flow_compiled_legacy.sql
-- The previous signature, kept for clients of earlier releases during a coordinated upgrade. Those
-- clients passed allow_recompile = true whenever settings.DEBUG was on, which deleted every run of
-- a changed flow without anyone asking: true is refused with the way forward, false compiles or
-- verifies and refuses a changed shape.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean default false)
returns jsonb
language plpgsql
as $$
begin
  if allow_recompile then
    raise exception 'flow %: allow_recompile is no longer honoured (it deleted every run of the flow without asking); replace the flow with manage.py pgflow_compile % --replace, or deploy the changed flow under a new slug',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(flow_slug, 'FLOW')
      using errcode = '0A000';
  end if;
  return pgflow.ensure_flow_compiled(flow_slug, shape, 'refuse'::text);
end;
$$;

-- ---------------------------------------------------------------- 0010_pgflow_fidelity.sql
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

-- ---------------------------------------------------------------- 0011_lock_order.sql
-- Frozen migration delta 0011_lock_order (loaded by pgflow_django/migrations/0011_lock_order.py):
-- one lock order for every writer (run, task, message): the claim skips a task another transaction
-- holds instead of waiting for it while it holds the message, so cancels, failing runs and deletions
-- never deadlock with workers; starts take the flow's start lock in shared mode and a deletion takes
-- it exclusively (and removes the workers' support rows of the flow); archiving tolerates a message
-- id already in the archive; pgflow.cancel_run takes an optional reason; a flow replacement takes
-- the start lock exclusively before counting runs (no row lock held while starts finish).

drop function pgflow.cancel_run(uuid);
-- 0280_function_start_flows.sql
-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
-- Holds the flow's start lock in shared mode until the caller's transaction ends: starts run side by
-- side, while a deletion (pgflow.delete_flow_and_data takes it exclusively) waits for them, and a
-- start that comes during a deletion waits for it, then finds the flow gone.
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
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end
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
-- 0430_function_cancel_run.sql
-- Cancels a started run: it ends as failed with reason 'cancelled' (or 'cancelled: <reason>'), its
-- unfinished tasks are cancelled and their messages archived, exactly as a failed run. Returns
-- 'cancelled', or the run's status when it was not started (nothing changes then). Locks the run,
-- then its tasks, then their messages, the order every writer uses; the claim, which holds messages
-- first, skips a task it finds locked, so a cancel never deadlocks with workers.
create or replace function pgflow.cancel_run(run_id uuid, reason text default null)
returns text
language plpgsql
as $$
declare
  v_status text;
begin
  select r.status into v_status from pgflow.runs as r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', cancel_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'started' then
    return v_status;
  end if;
  perform pgflow.fail_run(cancel_run.run_id,
                          'cancelled' || coalesce(': ' || nullif(btrim(cancel_run.reason), ''), ''));
  return 'cancelled';
end;
$$;
-- 0390_function_ensure_flow_compiled.sql (a replacement takes the start lock instead of the flow row)
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement takes the flow's start lock exclusively (every start
-- holds it shared until its transaction ends, before it touches a row): no run can start between the
-- count and the deletion, and no row lock is held while waiting for starts. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
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
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
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
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts hold this lock shared until they commit: holding it, the count below stays true
        perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || ensure_flow_compiled.flow_slug, 0));
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
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
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
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
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;

-- ---------------------------------------------------------------- 0013_transition_times.sql
-- Frozen migration delta 0013_transition_times (loaded by pgflow_django/migrations/0013_transition_times.py):
-- every state timestamp records when its transition happened (clock_timestamp()), not when its
-- transaction began: an atomic handler completes inside the transaction it opened before running,
-- and a run started inside a long transaction.atomic() shows when it was inserted. Age cut-offs
-- (stalled-task recovery, pruning) still compare against the transaction's start.

alter table pgflow.flows alter column created_at set default clock_timestamp();
alter table pgflow.steps alter column created_at set default clock_timestamp();
alter table pgflow.deps alter column created_at set default clock_timestamp();
alter table pgflow.workers alter column started_at set default clock_timestamp();
alter table pgflow.workers alter column last_heartbeat_at set default clock_timestamp();
alter table pgflow.runs alter column started_at set default clock_timestamp();
alter table pgflow.step_states alter column created_at set default clock_timestamp();
alter table pgflow.step_tasks alter column queued_at set default clock_timestamp();
alter table pgflow.worker_pauses alter column paused_at set default clock_timestamp();
alter table pgflow.shared_queues alter column declared_at set default clock_timestamp();
-- 0240_function_skip_step.sql
-- Skips one step of a started run, and with cascade every step downstream of it. Tasks of skipped
-- steps are terminalized as skipped and their messages archived. The caller holds the run's lock
-- and runs pgflow.cascade afterwards so dependents see the skip.
create or replace function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean)
returns void
language plpgsql
as $$
declare
  v_queues text[];
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
       set status = 'skipped', skip_reason = tg.reason, skipped_at = clock_timestamp(), remaining_tasks = null
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
    returning t.queue_name, t.message_id
  )
  select array_agg(t.queue_name), array_agg(t.message_id) into v_queues, v_msgs from tasks as t;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
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
       set status = 'started', started_at = clock_timestamp(), remaining_tasks = ss.initial_tasks
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
-- 0400_function_pause_subscription.sql
-- Pauses a worker subscription (a flow, or a flow and step): its workers stop polling at their next
-- heartbeat and new ones refuse to start until pgflow.resume_subscription. An operator pause never
-- replaces a fatal one (the fatal detail is what an operator must read before resuming).
create or replace function pgflow.pause_subscription(
  flow_slug text, step_slug text default '', reason text default 'operator', detail text default null
)
returns pgflow.worker_pauses
language plpgsql
as $$
declare
  v_pause pgflow.worker_pauses;
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = pause_subscription.flow_slug) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  if coalesce(step_slug, '') <> '' and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = pause_subscription.flow_slug and s.step_slug = pause_subscription.step_slug) then
    raise exception 'flow % has no step %', quote_literal(flow_slug), quote_literal(step_slug) using errcode = '22023';
  end if;
  insert into pgflow.worker_pauses as p (flow_slug, step_slug, queue_name, reason, detail)
  values (flow_slug, coalesce(step_slug, ''),
          coalesce((select s.queue_name from pgflow.steps as s
                     where s.flow_slug = pause_subscription.flow_slug
                       and s.step_slug = pause_subscription.step_slug), lower(flow_slug)),
          reason, detail)
  on conflict on constraint worker_pauses_pkey do update
    set reason = excluded.reason, detail = excluded.detail, paused_at = clock_timestamp()
    where p.reason <> 'fatal' or excluded.reason = 'fatal';
  select * into v_pause from pgflow.worker_pauses as p
   where p.flow_slug = pause_subscription.flow_slug and p.step_slug = coalesce(pause_subscription.step_slug, '');
  return v_pause;
end;
$$;

-- ---------------------------------------------------------------- 0014_schedules.sql
-- Frozen migration delta 0014_schedules (loaded by pgflow_django/migrations/0014_schedules.py):
-- schedules (cron flows and periodic tasks) as data: their definitions and planned ticks, the ledger
-- of fired ticks, and pgflow.fire_due_schedules, which fires each due tick exactly once.

-- 0180_table_schedules.sql
-- One row per schedule: a flow started on the ticks of a cron expression. The definition is written
-- by Python (declared in code, origin 'code', or created at run time, origin 'runtime'); Python also
-- plans the coming ticks into `upcoming` (cron arithmetic and time zones stay in Python), so
-- pgflow.fire_due_schedules needs nothing but this row to fire, from a worker or from pg_cron.
-- A schedule fires while `enabled` and `paused_reason` is null: 'operator' is a pause set through the
-- API, 'removed_from_code' marks a declared schedule whose declaration is gone (its history stays).
-- `revision` grows with every definition change, so a plan computed for an older definition is refused.
create table pgflow.schedules (
  schedule_name text primary key check (schedule_name <> '' and length(schedule_name) <= 200),
  flow_slug text not null,
  cron text not null,
  timezone text not null default 'UTC',
  input jsonb not null default '{}',
  input_callable text,
  catch_up text not null default 'latest' check (catch_up in ('all', 'latest', 'none')),
  max_catch_up integer not null default 10 check (max_catch_up between 1 and 1000),
  jitter_seconds integer not null default 0 check (jitter_seconds >= 0),
  enabled boolean not null default true,
  paused_reason text check (paused_reason in ('operator', 'removed_from_code')),
  paused_detail text,
  paused_at timestamptz,
  origin text not null check (origin in ('code', 'runtime')),
  revision bigint not null default 1,
  upcoming timestamptz[] not null default '{}',
  planned_until timestamptz,
  next_fire_at timestamptz,
  last_tick timestamptz,
  last_fired_at timestamptz,
  last_run_id uuid,
  missed_ticks bigint not null default 0,
  last_error text,
  created_at timestamptz not null default clock_timestamp(),
  updated_at timestamptz not null default clock_timestamp()
);
create index schedules_due_idx on pgflow.schedules (next_fire_at)
  where enabled and paused_reason is null;
create index schedules_plan_idx on pgflow.schedules ((cardinality(upcoming)))
  where enabled and paused_reason is null;
-- 0185_table_schedule_ticks.sql
-- The ledger of fired ticks: one row per (schedule, tick), written in the transaction that starts the
-- tick's run, so a tick is fired once or (when that transaction is lost) not at all. `kind` is 'cron'
-- for a planned tick and 'manual' for pgflow.trigger_schedule. The run id is kept even after the run
-- is pruned. Deleting a schedule deletes its ledger; a declared schedule is never deleted by a sync.
create table pgflow.schedule_ticks (
  schedule_name text not null references pgflow.schedules (schedule_name) on delete cascade,
  tick timestamptz not null,
  run_id uuid not null,
  kind text not null default 'cron' check (kind in ('cron', 'manual')),
  fired_at timestamptz not null default clock_timestamp(),
  primary key (schedule_name, tick)
);
create index schedule_ticks_run_idx on pgflow.schedule_ticks (run_id);
-- 0450_function_schedule_fire_at.sql
-- When a planned tick fires: the tick plus its jitter, a deterministic offset in
-- [0, jitter_seconds] seconds (millisecond steps) derived from the schedule name and the tick, so
-- every caller, and every later call, computes the same fire time without storing it.
-- PL/pgSQL keeps the expression's plan across calls (a SQL function with a pinned search path is
-- planned again on every call).
create or replace function pgflow.schedule_fire_at(schedule_name text, tick timestamptz, jitter_seconds integer)
returns timestamptz
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jitter_seconds is null or jitter_seconds <= 0 then
    return tick;
  end if;
  return tick + make_interval(secs => (abs(hashtextextended(schedule_name || '@' || extract(epoch from tick)::text, 0))
                                       % (jitter_seconds::bigint * 1000 + 1)) / 1000.0);
end;
$$;
-- 0451_function_schedule_next_fire_at.sql
-- The earliest fire time among a schedule's planned ticks (NULL when none is planned). PL/pgSQL,
-- not SQL: its query plan is cached across calls (a SQL function with a pinned search path is
-- planned again on every call, which made firing 100 schedules 13 ms slower).
create or replace function pgflow.schedule_next_fire_at(schedule_name text, upcoming timestamptz[], jitter_seconds integer)
returns timestamptz
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jitter_seconds = 0 then
    return upcoming[1];
  end if;
  return (select min(pgflow.schedule_fire_at(schedule_next_fire_at.schedule_name, u.tick, jitter_seconds))
            from unnest(upcoming) as u(tick));
end;
$$;
-- 0452_function_schedule_due_ticks.sql
-- The due ticks of the named schedules at `now` (a tick is due once its fire time has come) and
-- whether each one fires under its schedule's catch-up policy; every due tick is consumed either way:
--   all     the latest max_catch_up due ticks fire, older ones are missed;
--   latest  only the latest due tick fires;
--   none    the latest due tick fires only while it is at most `grace` late (ticks missed while
--           nothing was firing are skipped).
-- With each tick come the schedule's flow, stored input, input callable and time zone.
-- Read-only: pgflow.fire_due_schedules calls it on rows it has locked, and the Python scheduler calls
-- it to learn which ticks of callable-input schedules need an input before it fires them.
create or replace function pgflow.schedule_due_ticks(names text[], now timestamptz, grace interval)
returns table (schedule_name text, tick timestamptz, fire boolean, flow_slug text, input jsonb,
               input_callable text, timezone text)
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  with due as (
    select s.schedule_name, u.tick, pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds) as fire_at,
           s.catch_up, s.max_catch_up, s.flow_slug, s.input, s.input_callable, s.timezone
      from pgflow.schedules as s
      cross join unnest(s.upcoming) as u(tick)
     where s.schedule_name = any(names)
  ), ranked as (
    select d.*, row_number() over (partition by d.schedule_name order by d.tick desc) as back
      from due as d
     where d.fire_at <= schedule_due_ticks.now
  )
  select r.schedule_name, r.tick,
         case r.catch_up
           when 'all' then r.back <= r.max_catch_up
           when 'latest' then r.back = 1
           else r.back = 1 and schedule_due_ticks.now - r.fire_at <= grace
         end,
         r.flow_slug, r.input, r.input_callable, r.timezone
    from ranked as r
   order by r.schedule_name, r.tick
$$;

-- ---------------------------------------------------------------- 0015_consolidation.sql
-- Frozen migration delta 0015_consolidation (loaded by pgflow_django/migrations/0015_consolidation.py):
-- one home for each concept in the SQL.
--   * set_vt_batch and extend_vt_batch become one function with an explicit mode ('set' or 'extend').
--   * start_tasks and start_shared_tasks classify their batch through one function, classify_claim.
--   * maybe_complete_run(uuid) and start_ready_steps(uuid), which only tests called, are dropped
--     (maybe_complete_runs(uuid[]) and start_ready_steps(uuid[]) remain).
--   * every function pins its search_path (pg_catalog, pgflow, pgmq), so that no caller's path
--     changes what a name in its body resolves to.
-- Schedule objects are not touched.

drop function pgflow.maybe_complete_run(uuid);
drop function pgflow.start_ready_steps(uuid);
drop function pgflow.extend_vt_batch(text, bigint[], integer[]);
drop function pgflow.set_vt_batch(text, bigint[], integer[]);
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
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
  if step_slug is not null and v_mode = 'flow' then
    raise exception 'flow % is a plain flow: its one queue serves every step, so claim without a step selector (step-queued flows, from with_step_queues, take one)',
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

  -- a plain worker supports every step of its flow, a step worker its one step; a task of another
  -- flow or step on this queue is fatal, a message without a task is judged by its body below
  select c.* into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from (select array_agg(s.flow_slug) as flows, array_agg(s.step_slug) as steps
            from pgflow.steps as s
           where s.flow_slug = start_tasks.flow_slug and s.step_slug = coalesce(start_tasks.step_slug, s.step_slug)) as p
    cross join lateral pgflow.classify_claim(v_queue, msg_ids, p.flows, p.steps, null, 'fatal') as c;

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
    perform pgflow.set_vt_batch(v_queue, array_agg(e.id), array_agg(0), 'set')
       from unnest(v_ids, v_outcomes) as e(id, outcome) where e.outcome <> 'missing';
    insert into pgflow.worker_pauses (flow_slug, step_slug, queue_name, reason, detail)
    values (start_tasks.flow_slug, coalesce(start_tasks.step_slug, ''), v_queue, 'fatal',
            format('unsupported work on queue %s: message ids %s', v_queue,
                   (select string_agg(f::text, ',' order by f) from unnest(v_fatal) as f)))
    on conflict on constraint worker_pauses_pkey do update
      set reason = excluded.reason, detail = excluded.detail, queue_name = excluded.queue_name, paused_at = clock_timestamp();
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
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
    raise exception 'start_shared_tasks: support_flows (% elements) and support_steps (% elements) must be parallel arrays of the same length',
      coalesce(cardinality(support_flows), 0), coalesce(cardinality(support_steps), 0)
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;

  select c.* into v_ids, v_runs, v_steps, v_indexes, v_outcomes
    from pgflow.classify_claim(v_queue, msg_ids, support_flows, support_steps, 'unmatched', 'unsupported') as c;

  return query
    select * from pgflow.claim_classified(v_queue, start_shared_tasks.worker_id, v_ids, v_runs, v_steps, v_indexes,
                                          v_outcomes, array['terminal']);
end;
$$;
-- every other function keeps its definition and pins its search_path
alter function pgflow.add_step(flow_slug text, step_slug text, deps_slugs text[], max_attempts integer, base_delay integer, timeout integer, start_delay integer, step_type text, required_input_pattern jsonb, forbidden_input_pattern jsonb, when_unmet text, when_exhausted text, queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.cancel_run(run_id uuid, reason text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.check_flow_queues(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.create_flow(flow_slug text, max_attempts integer, base_delay integer, timeout integer, queue_mode text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.flow_queues(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.flow_shape(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_pgflow_message(message jsonb) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_valid_queue_name(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_valid_slug(slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.notify_queue_insert() set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.pause_subscription(flow_slug text, step_slug text, reason text, detail text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.protocol_version() set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.prune_data_older_than(retention interval) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.prune_shared_archive(queue_name text, retention interval) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.queue_objects_problem(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.rerun(run_id uuid) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.resolve_queue_spelling(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.resume_subscription(flow_slug text, step_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.skip_step(run_id uuid, step_slug text, skip_reason text, cascade boolean) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid, start_delay integer) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.start_ready_steps(run_ids uuid[]) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.step_queue_name(flow_slug text, step_slug text, step_index integer) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.subscription_pause(flow_slug text, step_slug text) set search_path = pg_catalog, pgflow, pgmq;

-- ---------------------------------------------------------------- 0016_observability.sql
-- Frozen migration delta 0016_observability (loaded by pgflow_django/migrations/0016_observability.py):
-- a run keeps the W3C trace context (traceparent, tracestate) of the code that started it, so the
-- worker's span of each task attempt joins the starter's trace. Written by start_flow/start_flows in
-- the starting transaction, only when the caller is inside a trace; null otherwise.

alter table pgflow.runs add column trace_context jsonb;

-- ---------------------------------------------------------------- 0017_admin_console.sql
-- Frozen migration delta 0017_admin_console (loaded by pgflow_django/migrations/0017_admin_console.py):
-- pgflow.retry_run, which retries a failed or cancelled run from where it failed (the admin's Retry
-- action), and step_tasks.attempts_base, from which max_attempts counts a retried task's attempts.

alter table pgflow.step_tasks
  add column attempts_base integer not null default 0 check (attempts_base >= 0);

-- ---------------------------------------------------------------- 0018_hot_path.sql
-- Frozen migration delta 0018_hot_path (loaded by pgflow_django/migrations/0018_hot_path.py):
-- plans that stay good on the claim/complete/start path.
--   * the hot PL/pgSQL functions plan their statements once per session (plan_cache_mode =
--     force_generic_plan): their generic plans are index probes by key at any table size, and the
--     default re-planned every call for its first five calls and then whenever a custom plan looked
--     cheaper, which was most of a completion's cost.
--   * they also plan without sequential scans, merge joins and hash joins (enable_seqscan,
--     enable_mergejoin, enable_hashjoin = off): every statement of theirs reaches rows by key from
--     its batch (nested loops of index probes), and a plan made while the tables were empty (where a
--     sequential scan or a walk of a whole index is cheapest) would otherwise be kept by a
--     long-lived worker as the tables grow.
--   * claim_classified locks each claimed task by its own lateral probe, so that plan too is a
--     probe per message whatever the table held when it was made.
--   * start_ready_steps pairs each message with its PGMQ id by position (rows from) instead of a
--     join on the ordinality, which without hash joins would be quadratic in a map step's size.
--   * is_valid_queue_name drops its search_path pin (its body names everything with pg_catalog) so
--     that the CHECK constraint of step_tasks.queue_name inlines it instead of calling it per row.
--   * classify_claim becomes PL/pgSQL for the same reason: a SQL function's statement is planned on
--     every call.

-- 0012_function_is_valid_queue_name.sql
-- Queue names pgflow stores: lowercase canonical physical identities that fit PGMQ's 47-character
-- limit (PGMQ lowercases table names, so 'Orders' and 'orders' would address the same tables).
-- The one function without a pinned search_path: the CHECK constraint of step_tasks.queue_name runs it
-- for every row the claim, the completion and a step's start write, and only a SQL function without
-- a SET clause is inlined there (a pinned one is a function call with its own executor, about 2 us a
-- row). Every name in the body is qualified with pg_catalog, operators included, so no caller's path
-- changes what it means (tests/sql/schema_rules checks it under a hostile path).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
as $$
  select queue_name is not null
     and pg_catalog.length(queue_name) operator(pg_catalog.>=) 1
     and pg_catalog.length(queue_name) operator(pg_catalog.<=) 47
     and queue_name operator(pg_catalog.~) '^[a-z0-9_]+$'
$$;
-- 0299_function_classify_claim.sql
-- The first half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks: each
-- distinct message id of the batch with its task, found by persisted identity ((queue_name,
-- message_id) -> task, then its run and step state; each a lateral LIMIT 1, which PostgreSQL does not
-- flatten into a join, so the plan stays an index probe per message whatever the table statistics
-- say: planned on empty tables, a plain join to runs was a full walk of runs_pkey), and its outcome:
--   <no_task>      no task has this message (start_tasks passes NULL and judges the body next)
--   <unsupported>  the task is not one of the (flow_slug, step_slug) pairs of the support set
--   terminal, started, claimed (a queued task in a started run and step), ineligible (otherwise)
-- The arrays are in task key order, the order in which every other writer locks a run's tasks.
-- PL/pgSQL with a generic plan: a SQL function's statement is planned again on every call, a
-- PL/pgSQL one once per session; the plan is index probes by (queue_name, message_id), run_id and
-- (run_id, step_slug), good for any table size.
create or replace function pgflow.classify_claim(
  queue_name text, msg_ids bigint[], support_flows text[], support_steps text[], no_task text, unsupported text,
  out ids bigint[], out runs uuid[], out steps text[], out indexes integer[], out outcomes text[]
)
language plpgsql
stable
set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
begin
  select array_agg(i.id order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index, i.id), array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index, i.id),
         array_agg(case
                     when t.run_id is null then classify_claim.no_task
                     when not exists (select 1 from unnest(classify_claim.support_flows, classify_claim.support_steps) as p(flow_slug, step_slug)
                                       where p.flow_slug = t.flow_slug and p.step_slug = t.step_slug) then classify_claim.unsupported
                     when t.status in ('completed', 'failed', 'skipped', 'cancelled') then 'terminal'
                     when t.status = 'started' then 'started'
                     when r.status = 'started' and ss.status = 'started' then 'claimed'
                     else 'ineligible'
                   end order by t.run_id, t.step_slug, t.task_index, i.id)
    from (select distinct unnest(classify_claim.msg_ids) as id) as i
    left join lateral (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.status
        from pgflow.step_tasks as t
       where t.queue_name = classify_claim.queue_name and t.message_id = i.id
       limit 1
    ) as t on true
    left join lateral (
      select r.status from pgflow.runs as r where r.run_id = t.run_id limit 1
    ) as r on true
    left join lateral (
      select ss.status from pgflow.step_states as ss
       where ss.run_id = t.run_id and ss.step_slug = t.step_slug
       limit 1
    ) as ss on true
    into classify_claim.ids, classify_claim.runs, classify_claim.steps, classify_claim.indexes,
         classify_claim.outcomes;
end;
$$;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_seqscan = off;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_mergejoin = off;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_hashjoin = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_seqscan = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_mergejoin = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_hashjoin = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_seqscan = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_mergejoin = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_hashjoin = off;

-- ---------------------------------------------------------------- 0019_hand_off.sql
-- Frozen migration delta 0019_hand_off (loaded by pgflow_django/migrations/0019_hand_off.py):
-- direct hand-off. A worker's completion also claims, in the same transaction, the tasks it made
-- ready on that worker's queue (pgflow.complete_and_hand_off, pgflow.hand_off_tasks), through the
-- claim's own pgflow.claim_classified, so the next step of a chain skips the notification, the read
-- and the claim; the insert notification waits for the hand-off and goes only to the queues still
-- holding new messages (pgflow.notify_queue_insert honours pgflow.defer_notify).

-- 0020_function_notify_queue_insert.sql
-- Statement-level wake-up for workers: one NOTIFY per inserting statement on a queue table, on the
-- channel PGMQ's own notify-on-insert uses ('pgmq.q_<queue>.INSERT'). PGMQ's row-level trigger
-- updates a throttle row for every message, which costs more than the send itself in batches.
-- A completion that hands the new tasks to its own worker (pgflow.complete_and_hand_off) defers
-- the wake-up for the rest of its transaction (pgflow.defer_notify = 'on') and notifies only the
-- queues it left new messages on: a worker woken for a task already handed off would read nothing.
create or replace function pgflow.notify_queue_insert()
returns trigger
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if current_setting('pgflow.defer_notify', true) = 'on' then
    return null;
  end if;
  perform pg_notify('pgmq.' || tg_table_name || '.INSERT', null);
  return null;
end;
$$;
-- 0315_function_complete_and_hand_off.sql
-- pgflow.complete_tasks for a worker that can run more: completes the items as complete_tasks does
-- (one row per item: outcome 'completed', 'stale' or 'failed' with its task key, other columns
-- NULL), then hands that worker, in the same transaction, the tasks the completion made ready on
-- its queue (pgflow.hand_off_tasks: at most free_slots, of the (flow_slug, step_slug) pairs it
-- supports at the flow generations it compiled against): one 'claimed' row each, as a claim
-- returns them. The insert notifications of the new messages wait until the hand-off is done and
-- go only to the queues still holding new messages, so no worker is woken to read a message that
-- was handed off.
create or replace function pgflow.complete_and_hand_off(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_done pgflow.claim_record[];
  v_runs uuid[];
begin
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'on', true);
  end if;
  select array_agg(row(c.outcome, null, null, c.run_id, c.step_slug, c.task_index, null, null)::pgflow.claim_record)
    into v_done
    from pgflow.complete_tasks(items) as c;
  return query select d.* from unnest(v_done) as d;
  v_runs := array(select distinct d.run_id from unnest(v_done) as d where d.outcome = 'completed');
  return query
    select h.* from pgflow.hand_off_tasks(
      lower(complete_and_hand_off.queue_name), complete_and_hand_off.worker_id, v_runs,
      complete_and_hand_off.support_flows, complete_and_hand_off.support_steps,
      complete_and_hand_off.support_generations, complete_and_hand_off.free_slots) as h;
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'off', true);
    perform pg_notify('pgmq.' || pgmq.format_table_name(n.queue_name, 'q') || '.INSERT', null)
       from (select distinct t.queue_name
               from unnest(v_runs) as k(run_id)
               join pgflow.step_tasks as t on t.run_id = k.run_id
              where t.status = 'queued' and t.queued_at >= statement_timestamp()) as n;
  end if;
end;
$$;

-- ---------------------------------------------------------------- 0020_priorities.sql
-- Frozen migration delta 0020_priorities (loaded by pgflow_django/migrations/0020_priorities.py):
-- claim priorities.
--   * runs.priority (the priority a run was started with, or NULL), flows.opt_priority and
--     steps.opt_priority (defaults); start_flows/start_flow take priority.
--   * start_ready_steps (and retry_run) send a task's priority, when not 0, in its message's headers
--     ({"priority": N}); retries and releases make the same message visible again, so they keep it.
--   * every queue pgflow provisions is indexed on (pgflow.message_priority(headers) desc, msg_id),
--     the order the claim reads in; the existing queues of flows and shared queues are indexed here
--     (the build holds a write lock on each queue table while it runs).
--   * rerun keeps the re-run run's priority; ensure_flow_compiled stores and updates the defaults.

alter table pgflow.runs add column priority smallint check (priority between -100 and 100);
alter table pgflow.flows add column opt_priority smallint not null default 0 check (opt_priority between -100 and 100);
alter table pgflow.steps add column opt_priority smallint check (opt_priority between -100 and 100);
drop function pgflow.start_flow(text, jsonb, uuid, integer);
drop function pgflow.start_flows(text, jsonb, uuid[], integer);
-- 0018_function_message_priority.sql
-- The priority of a PGMQ message: its headers' "priority" number (rounded, clamped to -100..100),
-- 0 when it has none (no headers, a missing or non-numeric "priority"). Every queue pgflow
-- provisions is indexed on it (pgflow.index_queue_priority) and the claim reads visible messages in
-- that index's order: higher priority first, message id order (FIFO) within a priority. It never
-- raises, so a foreign message with odd headers is still sent and read.
create or replace function pgflow.message_priority(headers jsonb)
returns smallint
language sql set search_path = pg_catalog, pgflow, pgmq
immutable parallel safe
as $$
  select case when jsonb_typeof(headers -> 'priority') = 'number'
              then least(greatest(round((headers ->> 'priority')::numeric), -100), 100)::smallint
              else 0::smallint end
$$;
-- 0201_function_index_queue_priority.sql
-- Indexes a PGMQ queue table on (message priority descending, message id): the claim's read walks
-- it to the first visible messages, so taking the highest priority first stays an index probe
-- however long the backlog. Called where pgflow creates a queue; idempotent. A queue whose tables
-- are missing is left alone (the provisioning functions report it).
create or replace function pgflow.index_queue_priority(queue_name text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_table text := pgmq.format_table_name(queue_name, 'q');
begin
  if to_regclass(format('pgmq.%I', v_table)) is null then
    return;
  end if;
  execute format('create index if not exists %I on pgmq.%I (pgflow.message_priority(headers) desc, msg_id)',
                 v_table || '_priority_idx', v_table);
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
  if input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end,
                                                start_delay, priority);
end;
$$;
-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement takes the flow's start lock exclusively (every start
-- holds it shared until its transaction ends, before it touches a row): no run can start between the
-- count and the deletion, and no row lock is held while waiting for starts. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
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
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts hold this lock shared until they commit: holding it, the count below stays true
        perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || ensure_flow_compiled.flow_slug, 0));
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
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
                                  ('timeout', f.opt_timeout), ('priority', f.opt_priority::integer)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout),
             opt_priority = coalesce((v_options->>'priority')::integer, f.opt_priority)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay),
                                  ('priority', s.opt_priority::integer)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer,
             opt_priority = (x.e->'options'->>'priority')::integer
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
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
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
  -- priority defaults are runtime options kept beside create_flow's and add_step's
  update pgflow.flows as f set opt_priority = (v_options->>'priority')::integer
   where f.flow_slug = ensure_flow_compiled.flow_slug and v_options->>'priority' is not null;
  update pgflow.steps as s set opt_priority = (x.e->'options'->>'priority')::integer
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and x.e->'options'->>'priority' is not null;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;
-- 0445_function_retry_run.sql
-- Retries a failed (or cancelled) run from where it failed, in place: its completed steps and tasks
-- keep their outputs; every failed or cancelled task is queued again with a new message (with the
-- task's priority in its headers, as pgflow.start_ready_steps sends it), its step is
-- started again, and the run is started again so its dependents follow. Returns the number of tasks
-- queued again. The run's and steps' errors are cleared (the admin's Retry action logs the run's
-- error first); each task keeps its attempt_errors.
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
       set status = 'queued', message_id = sent.msg_id, error_message = null, failed_at = null,
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
select pgflow.index_queue_priority(q.queue_name)
  from (select s.queue_name from pgflow.steps as s
        union select sq.queue_name from pgflow.shared_queues as sq) as q
 order by q.queue_name;

-- ---------------------------------------------------------------- 0021_concurrency_limits.sql
-- Frozen migration delta 0021_concurrency_limits (loaded by pgflow_django/migrations/0021_concurrency_limits.py):
-- flow control by key. Concurrency keys (at most N started tasks of one key across every worker) and
-- rate limits (a token bucket per key) checked inside the claim; over-limit tasks are deferred, keep
-- their attempts, and a freed slot wakes the oldest waiter of its key. The claim, the completion, the
-- failure, exhaustion, run failure, release and stalled-recovery paths each gain one call.

-- 0190_table_flow_limits.sql
-- Flow control settings of a flow (step_slug '') or of one step, one row per kind:
--   concurrency  at most `amount` tasks of one key started at once
--   rate         a token bucket per key: `amount` tokens every `period` seconds, holding at most `burst`
-- The key of a task is read from its run: key_source 'none' (one key for the whole scope), 'input'
-- (the text of the run input's field key_field) or 'stored' (computed where the run started and kept
-- in run_limit_keys). Not part of the compiled shape: pgflow.set_flow_limits replaces a flow's rows
-- on every compile, so a changed limit applies to the next claim without a new flow version.
create table pgflow.flow_limits (
  flow_slug text not null references pgflow.flows (flow_slug) on delete cascade,
  step_slug text not null default '',
  kind text not null check (kind in ('concurrency', 'rate')),
  key_source text not null default 'none' check (key_source in ('none', 'input', 'stored')),
  key_field text check ((key_source = 'input') = (key_field is not null)),
  amount integer not null check (amount >= 1),
  period double precision check ((kind = 'rate') = (period is not null and period > 0)),
  burst integer check ((kind = 'rate') = (burst is not null and burst >= 1)),
  primary key (flow_slug, step_slug, kind)
);
-- 0191_table_run_limit_keys.sql
-- The keys a run's tasks are limited by when the flow computes them in Python (a callable key):
-- written in the transaction that starts the run, read by the claim. step_slug '' is the flow's.
create table pgflow.run_limit_keys (
  run_id uuid not null references pgflow.runs (run_id) on delete cascade,
  step_slug text not null default '',
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  primary key (run_id, step_slug, kind)
);
-- 0192_table_limit_slots.sql
-- One row per (scope, kind, key) seen by a claim: the lock every claim of that key takes before it
-- counts the key's holds (concurrency) or spends its tokens (rate), so concurrent claims on any number
-- of workers decide one after the other. For a rate key, tokens as of refilled_at.
create table pgflow.limit_slots (
  flow_slug text not null references pgflow.flows (flow_slug) on delete cascade,
  step_slug text not null,
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  tokens double precision not null default 0,
  refilled_at timestamptz not null default clock_timestamp(),
  granted_at timestamptz,
  primary key (flow_slug, step_slug, kind, key)
);
-- 0193_table_limit_holds.sql
-- The concurrency slots held: one row per started task and limited scope, written by the claim that
-- starts it (attempt = the claimed attempt). A hold counts only while its task is still started in
-- that attempt, so a path that ends a task without releasing can never leak a slot;
-- pgflow.release_limit_slots deletes the holds that stopped counting and wakes a waiter per slot.
-- No foreign keys: the claim must never wait for a run's lock (see pgflow.claim_classified).
create table pgflow.limit_holds (
  run_id uuid not null,
  task_step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  step_slug text not null,
  key text not null,
  attempt integer not null,
  held_at timestamptz not null default clock_timestamp(),
  primary key (run_id, task_step_slug, task_index, step_slug)
);
create index limit_holds_key_idx on pgflow.limit_holds (flow_slug, step_slug, key);
-- 0194_table_limit_waits.sql
-- Tasks a claim deferred because of a limit, one row per task: kind and scope name the limit,
-- deferrals counts how often (the concurrency deferral doubles each time, up to 30 s, while a freed
-- slot wakes the oldest waiter of its key at once), deferred_at is the first deferral (wake order),
-- visible_at when the message comes back by itself, woken_at when a freed slot woke it (a woken task
-- that a claim still finds over the limit, because the completion that freed the slot had not
-- committed yet, is tried again 0.25 s later instead of waiting out a doubled deferral).
-- Deleted when the task is claimed, woken or no longer queued.
create table pgflow.limit_waits (
  run_id uuid not null,
  task_step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  step_slug text not null,
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  queue_name text not null,
  message_id bigint not null,
  deferrals integer not null default 1,
  deferred_at timestamptz not null default clock_timestamp(),
  visible_at timestamptz not null,
  woken_at timestamptz,
  primary key (run_id, task_step_slug, task_index)
);
create index limit_waits_key_idx on pgflow.limit_waits (flow_slug, step_slug, kind, key, deferred_at, message_id);
-- the worker's next poll after a claim that deferred tasks: the first one due on its queue
create index limit_waits_queue_due_idx on pgflow.limit_waits (queue_name, visible_at);
-- 0345_function_release_tasks.sql
-- Gives claims back (a worker shutting down with tasks it could not finish): each item still holding
-- its claim (`attempt`) whose step has attempts left is queued again and its message made visible
-- now ('released'). The attempt stays counted (the handler may have run part of it, and the next
-- claim must carry a new attempt number so this one stays fenced off). A task with no attempt left
-- stays started for stalled-task recovery to exhaust ('kept'). Other items are 'stale'.
create or replace function pgflow.release_tasks(items jsonb)
returns table (run_id uuid, step_slug text, task_index integer, outcome text)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
       set status = 'queued', queued_at = clock_timestamp()
      from jsonb_array_elements(items) as i, pgflow.runs as r, pgflow.step_states as ss,
           pgflow.steps as s, pgflow.flows as f
     where t.run_id = (i->>'run_id')::uuid and t.step_slug = i->>'step_slug'
       and t.task_index = (i->>'task_index')::integer
       and t.status = 'started' and t.attempts_count = (i->>'attempt')::integer
       and r.run_id = t.run_id and r.status = 'started'
       and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug and f.flow_slug = t.flow_slug
       and t.attempts_count - t.attempts_base < coalesce(s.opt_max_attempts, f.opt_max_attempts)
    returning t.queue_name, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('queue_name', rl.queue_name, 'message_id', rl.message_id,
                                               'run_id', rl.run_id, 'step_slug', rl.step_slug,
                                               'task_index', rl.task_index)), '[]'::jsonb)
    into v_released
    from released as rl;
  perform pgflow.release_limit_slots(v_run_ids);

  perform pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]), 'set')
     from (select rl->>'queue_name' as queue_name, array_agg((rl->>'message_id')::bigint) as ids
             from jsonb_array_elements(v_released) as rl
            where rl->>'message_id' is not null
            group by rl->>'queue_name') as g;

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
-- 0499_type_limit_candidate.sql
-- One (task, limit) pair a claim has to decide (see pgflow.limit_claim): n is the task's position in
-- the claim's arrays, attempt the attempt the claim would start, scope the limit's step_slug ('' for
-- the flow), and delay the seconds a task denied by a rate limit waits for its token.
create type pgflow.limit_candidate as (
  n integer,
  run_id uuid,
  step_slug text,
  task_index integer,
  message_id bigint,
  attempt integer,
  flow_slug text,
  scope text,
  kind text,
  key text,
  amount integer,
  period double precision,
  burst integer
);
-- 0501_function_set_limit_visibility.sql
-- Sets each message's visibility to its own timestamp (sub-second, unlike pgflow.set_vt_batch's whole
-- seconds: a rate-limited task waits exactly for its token). A message another transaction holds
-- is skipped: that transaction (a claim that read it) decides its visibility itself. When a message
-- becomes visible now, the queue's listeners are told as an insert would (workers poll at once).
create or replace function pgflow.set_limit_visibility(queue_name text, msg_ids bigint[], visible_at timestamptz[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_table text := pgmq.format_table_name(queue_name, 'q');
  v_set integer;
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return 0;
  end if;
  execute format(
    $q$
      update pgmq.%I as q
         set vt = o.visible_at
        from (select m.msg_id, o.visible_at
                from unnest($1, $2) as o(msg_id, visible_at)
                cross join lateral (select m.msg_id from pgmq.%I as m where m.msg_id = o.msg_id
                                       for update skip locked) as m) as o
       where q.msg_id = o.msg_id
    $q$, v_table, v_table) using msg_ids, visible_at;
  get diagnostics v_set = row_count;
  if v_set > 0 and exists (select 1 from unnest(visible_at) as v(at) where v.at <= clock_timestamp()) then
    perform pg_notify('pgmq.' || v_table || '.INSERT', null);
  end if;
  return v_set;
end;
$$;
-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); waits of tasks no longer queued are dropped.
-- Returns the number of slots freed. Takes no lock a claim holds: waiting messages are skipped when
-- a claim has them (that claim is deciding them already).
create or replace function pgflow.release_limit_slots(run_ids uuid[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_flows text[];
  v_scopes text[];
  v_keys text[];
  v_now timestamptz := clock_timestamp();
  v_queues integer;
begin
  if run_ids is not null then
    if not exists (select 1 from pgflow.limit_holds as h where h.run_id = any(run_ids))
       and not exists (select 1 from pgflow.limit_waits as w where w.run_id = any(run_ids)) then
      return 0;
    end if;
    with freed as (
      delete from pgflow.limit_holds as h
       where h.run_id = any(run_ids)
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where w.run_id = any(run_ids)
       and (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  else
    with freed as (
      delete from pgflow.limit_holds as h
       where (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  end if;
  if v_flows is null then
    return 0;
  end if;

  -- one waiter per freed slot, oldest first, still queued and not woken already (the waits of
  -- deleted runs, swept by stalled recovery, never take a wake-up); a waiter a claim holds is skipped
  with freed as (
    select f.flow_slug, f.step_slug, f.key, count(*) as n
      from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
     group by f.flow_slug, f.step_slug, f.key
  ), woken as (
    update pgflow.limit_waits as w
       set visible_at = v_now, woken_at = v_now
      from freed as f
      cross join lateral (
        select x.ctid as row_id
          from pgflow.limit_waits as x
         where x.flow_slug = f.flow_slug and x.step_slug = f.step_slug and x.kind = 'concurrency'
           and x.key = f.key and x.woken_at is null and x.visible_at > v_now
           and (select 1 from pgflow.step_tasks as t
                 where t.run_id = x.run_id and t.step_slug = x.task_step_slug
                   and t.task_index = x.task_index and t.status = 'queued'
                 limit 1) is not null
         order by x.deferred_at, x.message_id
         limit f.n
           for update skip locked
      ) as x
     where w.ctid = x.row_id
    returning w.queue_name, w.message_id
  )
  select count(pgflow.set_limit_visibility(g.queue_name, g.ids, array_fill(v_now, array[cardinality(g.ids)])))
    into v_queues
    from (select k.queue_name, array_agg(k.message_id) as ids from woken as k group by k.queue_name) as g;
  return cardinality(v_flows);
end;
$$;
-- 0503_function_set_flow_limits.sql
-- Replaces a flow's flow control settings (pgflow.flow_limits) with `limits`, a JSON array of
-- {step_slug ('' or absent for the flow), kind, key_source, key_field, amount, period, burst}; the
-- compiler calls it after every compile or verification, so the code deployed last decides. The
-- claims that follow apply the new settings; slots and tokens already spent stay counted. Workers
-- that start together compile the same flow at once: a transaction lock per flow makes their
-- replacements one after the other (each delete then sees the rows the previous one committed).
create or replace function pgflow.set_flow_limits(flow_slug text, limits jsonb)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_count integer;
  v_unknown text;
begin
  if limits is null or jsonb_typeof(limits) <> 'array' then
    raise exception 'set_flow_limits: limits must be a JSON array of {step_slug, kind, key_source, key_field, amount, period, burst}'
      using errcode = '22023';
  end if;
  select x.step_slug into v_unknown
    from jsonb_to_recordset(limits) as x(step_slug text)
   where coalesce(x.step_slug, '') <> ''
     and not exists (select 1 from pgflow.steps as s
                      where s.flow_slug = set_flow_limits.flow_slug and s.step_slug = x.step_slug)
   limit 1;
  if found then
    raise exception 'set_flow_limits: flow % has no step %', quote_literal(flow_slug), quote_literal(v_unknown)
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock(hashtext('pgflow.set_flow_limits'), hashtext(set_flow_limits.flow_slug));
  delete from pgflow.flow_limits as l where l.flow_slug = set_flow_limits.flow_slug;
  insert into pgflow.flow_limits (flow_slug, step_slug, kind, key_source, key_field, amount, period, burst)
  select set_flow_limits.flow_slug, coalesce(x.step_slug, ''), x.kind, coalesce(x.key_source, 'none'), x.key_field,
         x.amount, x.period, x.burst
    from jsonb_to_recordset(limits) as x(step_slug text, kind text, key_source text, key_field text, amount integer,
                                          period double precision, burst integer);
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

-- ---------------------------------------------------------------- 0022_partitioned_history.sql
-- Frozen migration delta 0022_partitioned_history (loaded by
-- pgflow_django/migrations/0022_partitioned_history.py): time-ordered run ids and an opt-in
-- partitioned history.
--   * run ids pgflow makes are UUIDv7 (pgflow.uuid_v7): the runs table's default, start_flows,
--     rerun and the schedules; ids already made and ids chosen by callers are kept as they are.
--   * pgflow.partition_history (the pgflow_partition command) partitions runs, step_states and
--     step_tasks by run id, without copying rows; pgflow.create_history_partitions keeps future
--     partitions ready (the worker calls it); pgflow.prune_data_older_than drops whole partitions
--     on a partitioned install. Nothing is partitioned by this migration.
--   * runs.rerun_of is indexed (partial): pruning N runs probed it N times with a scan of runs each.
--   * pgflow.prune_data_older_than deletes by a join with the pruned ids instead of `= any(array)`.

-- 0016_function_uuid_v7.sql
-- A new time-ordered id (UUIDv7: 48 bits of Unix milliseconds, the version, then random bits), the
-- run ids pgflow makes: they sort by start time, so a run's history partition follows from its id
-- and the primary-key index grows at its right edge. PostgreSQL 18's uuidv7() makes the same layout;
-- this one also runs on 15.
create or replace function pgflow.uuid_v7()
returns uuid
language sql
volatile parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(
           set_byte(
             overlay(uuid_send(gen_random_uuid())
                     placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                     from 1 for 6),
             6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112),
           'hex')::uuid
$$;
-- 0017_function_uuid_v7_bound.sql
-- The smallest UUIDv7 of a moment's millisecond: the bound of a history partition that starts then
-- (every run id made from that millisecond on sorts at or above it).
create or replace function pgflow.uuid_v7_bound(at timestamptz)
returns uuid
language sql
immutable strict parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(substring(int8send(floor(extract(epoch from at) * 1000)::bigint) from 3)
                || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;
-- 0187_table_history_partitioning.sql
-- Present (one row) once pgflow.partition_history has partitioned runs, step_states and step_tasks
-- by run id: each partition holds the runs started in one interval of `partition_interval` (UTC
-- days, aligned on Monday 2000-01-03), with `ahead` future partitions kept ready by
-- pgflow.create_history_partitions. Absent: the history tables are plain tables.
create table pgflow.history_partitioning (
  singleton boolean primary key default true check (singleton),
  partition_interval interval not null
    check (partition_interval >= interval '1 day' and partition_interval <= interval '31 days'
           and date_trunc('day', partition_interval) = partition_interval
           and extract(month from partition_interval) = 0),
  ahead integer not null check (ahead between 1 and 60),
  partitioned_at timestamptz not null default clock_timestamp()
);
alter table pgflow.runs alter column run_id set default pgflow.uuid_v7();
-- the reruns of a run: deleting a run sets their rerun_of to NULL, a probe here instead of a scan of
-- runs per deleted run (which made pruning quadratic in the history's size)
create index runs_rerun_of_idx on pgflow.runs (rerun_of) where rerun_of is not null;
-- 0440_function_rerun.sql
-- Starts a new run of a finished run's flow with the same input and priority, linked to it by rerun_of.
create or replace function pgflow.rerun(run_id uuid)
returns uuid
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_run pgflow.runs;
  v_new uuid := pgflow.uuid_v7();
begin
  select * into v_run from pgflow.runs as r where r.run_id = rerun.run_id;
  if not found then
    raise exception 'run % does not exist', rerun.run_id using errcode = 'P0002';
  end if;
  if v_run.status = 'started' then
    raise exception 'run % is still started: cancel it or wait for it to finish before re-running it', rerun.run_id
      using errcode = '55000';
  end if;
  perform 1 from pgflow.start_flow(v_run.flow_slug, v_run.input, v_new, null, v_run.priority);
  update pgflow.runs as r set rerun_of = rerun.run_id where r.run_id = v_new;
  return v_new;
end;
$$;
-- 0456_function_trigger_schedule.sql
-- Fires a schedule now, outside its cron ticks: starts one run through pgflow.start_flows and
-- records it in the ledger as a 'manual' tick at `now`, in one transaction. Works on a paused
-- schedule too (an operator asked for it). `input` replaces the stored input; a callable-input
-- schedule needs it (Python evaluates the callable). Returns the run id.
create or replace function pgflow.trigger_schedule(schedule_name text, now timestamptz default clock_timestamp(), input jsonb default null)
returns uuid
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_schedule pgflow.schedules;
  v_run_id uuid := pgflow.uuid_v7();
begin
  select * into v_schedule from pgflow.schedules as s where s.schedule_name = trigger_schedule.schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', quote_literal(coalesce(trigger_schedule.schedule_name, 'NULL'))
      using errcode = '22023';
  end if;
  if v_schedule.input_callable is not null and trigger_schedule.input is null then
    raise exception 'schedule % takes its input from %: pass the input (the Python API evaluates it)',
      quote_literal(v_schedule.schedule_name), v_schedule.input_callable
      using errcode = '22023';
  end if;
  insert into pgflow.schedule_ticks (schedule_name, tick, run_id, kind)
  values (v_schedule.schedule_name, trigger_schedule.now, v_run_id, 'manual');
  perform pgflow.start_flows(v_schedule.flow_slug, jsonb_build_array(coalesce(trigger_schedule.input, v_schedule.input)),
                             array[v_run_id]);
  update pgflow.schedules as s
     set last_run_id = v_run_id, last_fired_at = clock_timestamp()
   where s.schedule_name = v_schedule.schedule_name;
  return v_run_id;
end;
$$;

-- ---------------------------------------------------------------- 0023_one_home.sql
-- Frozen migration delta 0023_one_home (loaded by pgflow_django/migrations/0023_one_home.py):
-- fail_task and reject_task share one fence, pgflow.lock_claimed_task (lock the run, then the task,
-- check the claimed attempt, archive a terminal task's message), instead of two copies of it.

-- 0335_function_lock_claimed_task.sql
-- The fence fail_task and reject_task share: locks the run, then the task (the lock order of every
-- task transition), and returns the task when `attempt` is its current claim of a started run and
-- step. Otherwise it returns null (the caller answers 'stale' and changes nothing), after archiving
-- the message of a task that is already terminal.
create or replace function pgflow.lock_claimed_task(
  run_id uuid, step_slug text, task_index integer, attempt integer
)
returns pgflow.step_tasks
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
begin
  perform 1 from pgflow.runs as r where r.run_id = lock_claimed_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = lock_claimed_task.run_id and t.step_slug = lock_claimed_task.step_slug
     and t.task_index = lock_claimed_task.task_index
   for update;
  if not found then
    return null;
  end if;

  select v_task.status = 'started' and v_task.attempts_count = lock_claimed_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = lock_claimed_task.step_slug
   where r.run_id = lock_claimed_task.run_id;

  if coalesce(v_current, false) then
    return v_task;
  end if;
  if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
    perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
  end if;
  return null;
end;
$$;
-- 0340_function_fail_task.sql
-- Records a failed attempt of the claim `attempt`. While attempts remain the task is queued again
-- and its message becomes visible after floor(base_delay * 2^attempts) seconds, or after the
-- handler-chosen retry_delay (attempt accounting is the same either way). Returns 'retrying',
-- 'failed', 'skipped' (exhausted, per when_exhausted) or 'stale' (not the current claim: nothing
-- changes; the message is archived when the task is already terminal: pgflow.lock_claimed_task).
-- Each recorded failure is also appended to the task's attempt_errors.
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text,
  retry_delay integer default null
)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_task pgflow.step_tasks;
  v_max_attempts integer;
  v_delay integer;
  v_error jsonb;
begin
  if retry_delay is not null and retry_delay < 0 then
    raise exception 'fail_task: retry_delay must be >= 0 seconds, got %', retry_delay using errcode = '22023';
  end if;

  v_task := pgflow.lock_claimed_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index,
                                     fail_task.attempt);
  if v_task.run_id is null then
    return 'stale';
  end if;

  v_error := jsonb_build_object('attempt', v_task.attempts_count, 'worker_id', v_task.last_worker_id,
                                'error', fail_task.error_message, 'failed_at', clock_timestamp());
  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(fail_task.retry_delay,
                  least(floor(coalesce(s.opt_base_delay, f.opt_base_delay) * power(2, v_task.attempts_count - v_task.attempts_base)), 2147483647)::integer)
    into v_max_attempts, v_delay
    from pgflow.steps as s join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count - v_task.attempts_base < v_max_attempts then
    update pgflow.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = clock_timestamp(),
           attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
    perform pgflow.set_vt_batch(v_task.queue_name, array[v_task.message_id], array[v_delay], 'set');
    perform pgflow.release_limit_slots(array[fail_task.run_id]);
    return 'retrying';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
  return pgflow.exhaust_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index, fail_task.error_message);
end;
$$;
-- 0341_function_reject_task.sql
-- Records a failed attempt that no retry can fix (the worker cannot decode the task's input, or
-- encode or store its handler's output): the task fails at once, whatever attempts remain, and its
-- step's when_exhausted decides what follows. Fenced by the claimed `attempt` through the same
-- pgflow.lock_claimed_task as fail_task, so both lock in one order (run, task, then the message).
-- Returns 'failed', 'skipped' or 'stale' (not the current claim: nothing changes; the message is
-- archived when the task is already terminal). The failure is appended to the task's attempt_errors.
create or replace function pgflow.reject_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text
)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
begin
  v_task := pgflow.lock_claimed_task(reject_task.run_id, reject_task.step_slug, reject_task.task_index,
                                     reject_task.attempt);
  if v_task.run_id is null then
    return 'stale';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', v_task.attempts_count, 'worker_id', v_task.last_worker_id,
           'error', reject_task.error_message, 'failed_at', clock_timestamp()))
   where t.run_id = reject_task.run_id and t.step_slug = reject_task.step_slug
     and t.task_index = reject_task.task_index;
  return pgflow.exhaust_task(reject_task.run_id, reject_task.step_slug, reject_task.task_index,
                             reject_task.error_message);
end;
$$;

-- ---------------------------------------------------------------- 0024_batch_joins.sql
-- 0298_function_claim_classified.sql
-- The second half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks once they
-- have classified a batch: the arrays hold each message id with its task key and outcome, in task
-- key order (the order every writer locks a run's tasks). Claims the 'claimed' tasks still queued
-- (one more attempt, hidden for at least the effective timeout + 2 s before they are returned: a
-- message the read already hid that long is not written again), defers the
-- visibility of 'started' ones to their stalled-recovery deadline, archives the messages whose
-- outcome is in `archived`, and returns one claim_record per message.
-- Lock order: every other writer locks run, then task, then message; the claim already holds its
-- messages (the read locked them), so it never waits for a task: a task another transaction holds
-- (a cancel, a failing run, a skipped step, a deletion, each about to end it) is skipped, reported
-- 'started' and its message left hidden as the read set it. Waiting would close a cycle with that
-- writer, which waits for the message next.
create or replace function pgflow.claim_classified(
  queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[],
  outcomes text[], archived text[]
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  outcomes := pgflow.limit_claim(claim_classified.queue_name, ids, runs, steps, indexes, outcomes);
  -- the callers checked each task's run and step; a run that fails or a step that is skipped
  -- meanwhile terminalizes its queued tasks, which the status recheck on the locked row sees; a
  -- row locked by another transaction is skipped, never waited for (see above)
  -- each task is locked by its own probe (a lateral subquery) and updated by the row version locked:
  -- the plan stays an index probe per claimed message even if it was made while the table was empty
  with lockable as (
    select t.row_id
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
     cross join lateral (
       select t.ctid as row_id
         from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
          and t.status = 'queued'
          for no key update skip locked
     ) as t
     where k.outcome = 'claimed'
  ), claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = clock_timestamp(),
           last_worker_id = claim_classified.worker_id
      from lockable as l
     where t.ctid = l.row_id and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2),
                              'extend')
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(claim_classified.queue_name, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer), 'set')
     from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
    cross join lateral (
      select t.flow_slug, t.step_slug, t.message_id, t.started_at
        from pgflow.step_tasks as t
       where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
         and t.status = 'started'
      offset 0
    ) as t
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started'
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

-- ---------------------------------------------------------------- 0026_completion_probe.sql
-- Frozen migration delta 0026_completion_probe (loaded by pgflow_django/migrations/0026_completion_probe.py):
-- complete_tasks updates the completed steps' states from the batch alone and reads each step's
-- type by its own probe: joined to the definition table first, PostgreSQL 18 planned the update as a
-- walk of every step state of the step (each partition of a partitioned history), matching the run
-- afterwards. start_flows returns its new runs by a probe of each id instead of a join to the array.

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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_ids uuid[];
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

  perform pgflow.cascade(v_ids);

  -- each new run by its own probe: joined to the array, a plan could walk every run and match the
  -- whole batch against each
  return query
    select r.*
      from unnest(v_ids) with ordinality as i(run_id, n)
     cross join lateral (select * from pgflow.runs as x where x.run_id = i.run_id offset 0) as r
     order by i.n;
end;
$$;

-- ---------------------------------------------------------------- 0027_key_only_probes.sql
-- Frozen migration delta 0027_key_only_probes (loaded by pgflow_django/migrations/0027_key_only_probes.py):
-- the probes of a run by its id (cascade, start_ready_steps, maybe_complete_runs, hand_off_tasks,
-- requeue_stalled_tasks) hold only the id; the run's status, and the hand-off's task filters, are
-- checked outside the probe. Planned on a small partition (a new day's), `status = 'started'`
-- beside the id made the (flow_slug, status) index as cheap as the primary key, and each probe
-- then read every started run of the partition. Stalled recovery reads the started runs flow by
-- flow (both columns of that index) instead of by status alone, a walk of the whole index. The
-- hand-off leaves a task to a read while a visible message of higher priority waits in its queue.

-- 0250_function_maybe_complete_runs.sql
-- Recounts each started run's unfinished steps and completes the runs that have none left. The run
-- output maps each completed leaf step (a step nothing depends on) to its output; skipped leaves
-- are absent, and a run with no completed leaf (no steps, or every leaf skipped) has no output
-- (NULL), as in pgflow. Each distinct run id of the batch is probed on its own, then its step
-- states (see cascade).
create or replace function pgflow.maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
begin
  with counts as (
    select r.run_id,
           count(ss.step_slug) filter (where ss.status not in ('completed', 'skipped')) as open_steps
      from (select distinct u.run_id from unnest(run_ids) as u(run_id)) as b
     cross join lateral (
       select r.run_id, r.status from pgflow.runs as r where r.run_id = b.run_id offset 0
     ) as r
      left join lateral (
        select ss.step_slug, ss.status from pgflow.step_states as ss where ss.run_id = r.run_id offset 0
      ) as ss on true
     where r.status = 'started'
     group by r.run_id
  )
  update pgflow.runs as r
     set remaining_steps = c.open_steps,
         status = case when c.open_steps = 0 then 'completed' else r.status end,
         completed_at = case when c.open_steps = 0 then clock_timestamp() end,
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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
           set status = 'failed', failed_at = clock_timestamp(), error_message = 'condition unmet'
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

-- ---------------------------------------------------------------- 0028_wake_after_claims.sql
-- Frozen migration delta 0028_wake_after_claims (loaded by pgflow_django/migrations/0028_wake_after_claims.py):
-- the completion's release of concurrency slots, now its last step, first locks the keys' limit_slots
-- rows in key order (release_limit_slots' new wait_for_claims), so it waits for a claim deciding one
-- of those keys and then wakes the tasks that claim deferred (a slot freed while a claim deferred the
-- key's only waiter used to wake nobody and stay unused until the deferral ended). The completion's
-- hand-off leaves tasks of flows with flow control to a read, so no completion takes key rows twice.
-- An exhausted task that skips its step releases its run's slots after the skip, so the slots of the
-- skipped steps' started tasks come free too instead of waiting for stalled recovery's sweep. A run
-- failed inside a completion leaves its slots to that completion's final release.

drop function pgflow.release_limit_slots(uuid[]);
-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path. Its
-- concurrency slots are freed here, or, inside pgflow.complete_tasks, by that completion's release.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = clock_timestamp(), error_message = fail_run.error_message,
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
  -- inside pgflow.complete_tasks the completion's own release, its last statement, frees them
  if current_setting('pgflow.slots_released_at_end', true) is distinct from 'on' then
    perform pgflow.release_limit_slots(array[fail_run.run_id]);
  end if;
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
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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
    select f.run_id, f.step_slug, f.task_index, f.map_slug, p.current
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
           error_message = format('output of %s is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug)
     where t.run_id = v_bad.run_id and t.step_slug = v_bad.step_slug and t.task_index = v_bad.task_index;
    update pgflow.step_states as ss
       set status = 'failed', failed_at = clock_timestamp(),
           error_message = format('output is not an array, but map step %s needs one', v_bad.map_slug)
     where ss.run_id = v_bad.run_id and ss.step_slug = v_bad.step_slug;
    perform pgflow.fail_run(v_bad.run_id,
      format('step %s: output is not an array, but map step %s needs one', v_bad.step_slug, v_bad.map_slug));
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
-- 0330_function_exhaust_task.sql
-- A task that has no attempt left: it fails, and its step's when_exhausted decides what follows
-- (fail: the step and the run fail; skip: the step is skipped and dependents go on without it;
-- skip-cascade: the step and everything downstream are skipped). The caller holds the run's lock.
-- The concurrency slots its run frees are released once the run has failed (pgflow.fail_run) or
-- the skip is done.
-- Returns 'failed' or 'skipped'.
create or replace function pgflow.exhaust_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
  v_when text;
begin
  update pgflow.step_tasks as t
     set status = 'failed', failed_at = clock_timestamp(), error_message = exhaust_task.error_message
   where t.run_id = exhaust_task.run_id and t.step_slug = exhaust_task.step_slug
     and t.task_index = exhaust_task.task_index
  returning t.* into v_task;

  perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);

  select s.when_exhausted into v_when
    from pgflow.steps as s where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_when = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed', failed_at = clock_timestamp(), error_message = exhaust_task.error_message
     where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
    perform pgflow.fail_run(exhaust_task.run_id, format('step %s failed: %s', exhaust_task.step_slug, exhaust_task.error_message));
    return 'failed';
  end if;

  update pgflow.step_states as ss
     set error_message = exhaust_task.error_message
   where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
  perform pgflow.skip_step(exhaust_task.run_id, exhaust_task.step_slug, 'handler_failed', v_when = 'skip-cascade');
  perform pgflow.cascade(array[exhaust_task.run_id]);
  -- after the skip: the slots of this task and of the skipped steps' started tasks come free together
  perform pgflow.release_limit_slots(array[exhaust_task.run_id]);
  return 'skipped';
end;
$$;

-- ---------------------------------------------------------------- 0029_hot_path_without_jit.sql
alter function pgflow.cascade(uuid[]) set jit = off;
alter function pgflow.claim_classified(text,uuid,bigint[],uuid[],text[],integer[],text[],text[]) set jit = off;
alter function pgflow.classify_claim(text,bigint[],text[],text[],text,text) set jit = off;
alter function pgflow.complete_and_hand_off(jsonb,text,uuid,text[],text[],bigint[],integer) set jit = off;
alter function pgflow.complete_tasks(jsonb) set jit = off;
alter function pgflow.fail_task(uuid,text,integer,integer,text,integer) set jit = off;
alter function pgflow.lock_claimed_task(uuid,text,integer,integer) set jit = off;
alter function pgflow.maybe_complete_runs(uuid[]) set jit = off;
alter function pgflow.start_flows(text,jsonb,uuid[],integer,integer) set jit = off;
alter function pgflow.start_shared_tasks(text,bigint[],uuid,text[],text[]) set jit = off;
alter function pgflow.start_tasks(text,text,bigint[],uuid,text) set jit = off;

-- ---------------------------------------------------------------- 0030_limit_wakeups.sql
-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass. The started runs are read flow by flow from the (flow_slug, status)
-- index and their tasks by probe, so a pass reads the runs in flight, not the history, with the
-- hot functions' planner settings. The flows are read in key order: a plain read of every flow is
-- a sequential scan, which those settings price so high (1e10) that the statement was compiled by
-- JIT on every call, 0.2-0.4 s.
create or replace function pgflow.requeue_stalled_tasks()
returns table (outcome text, task_count integer)
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
    from (select f.flow_slug, f.opt_timeout from pgflow.flows as f order by f.flow_slug offset 0) as f
   cross join lateral (
     select r.run_id from pgflow.runs as r where r.flow_slug = f.flow_slug and r.status = 'started' offset 0
   ) as r
   cross join lateral (
     select t.run_id, t.step_slug, t.status, t.started_at from pgflow.step_tasks as t where t.run_id = r.run_id offset 0
   ) as t
    join pgflow.steps as s on s.flow_slug = f.flow_slug and s.step_slug = t.step_slug
   where t.status = 'started'
     and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30);
  if v_candidates is null then
    if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
      perform pgflow.release_limit_slots(null);
    end if;
    return query select 'requeued'::text, 0 union all select 'permanently_stalled', 0;
    return;
  end if;

  select array_agg(l.run_id) into v_locked
    from (select r.run_id, r.status from pgflow.runs as r
           where r.run_id = any(v_candidates)
           order by r.run_id offset 0
             for update skip locked) as l
   where l.status = 'started';
  v_locked := coalesce(v_locked, '{}');

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
           t.requeued_count < 3 and t.attempts_count - t.attempts_base < coalesce(s.opt_max_attempts, f.opt_max_attempts) as can_requeue
      from pgflow.step_tasks as t
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
     where t.run_id = any(v_locked) and t.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
  ), requeued as (
    update pgflow.step_tasks as t
       set status = 'queued', requeued_count = t.requeued_count + 1, last_requeued_at = clock_timestamp(), queued_at = clock_timestamp()
      from stalled as st
     where st.can_requeue
       and t.run_id = st.run_id and t.step_slug = st.step_slug and t.task_index = st.task_index
    returning t.queue_name, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]), 'set')
      from (select rq.queue_name, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.queue_name) as g
  ), marked as (
    update pgflow.step_tasks as t
       set permanently_stalled_at = clock_timestamp()
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
    -- an earlier exhaustion in this loop may have skipped the step or failed the run meanwhile
    if (select r.status from pgflow.runs as r where r.run_id = v_stalled.run_id) = 'started'
       and exists (select 1 from pgflow.step_tasks as t
                    where t.run_id = v_stalled.run_id and t.step_slug = v_stalled.step_slug
                      and t.task_index = v_stalled.task_index and t.status = 'started') then
      perform pgflow.exhaust_task(v_stalled.run_id, v_stalled.step_slug, v_stalled.task_index,
                                  'permanently stalled: the task was requeued 3 times or ran out of attempts');
      v_exhausted := v_exhausted + 1;
    end if;
  end loop;
  -- last: the sweep's wake-ups lock waits (skip locked) that a claim holding the messages the
  -- exhaustions above wait for may update next; taken before those waits, they closed a cycle
  if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
    perform pgflow.release_limit_slots(null);
  end if;

  return query select 'requeued'::text, v_requeued union all select 'permanently_stalled', v_exhausted;
end;
$$;
-- 0500_function_limit_claim.sql
-- The flow-control half of a claim, called by pgflow.claim_classified before it starts anything:
-- returns the claim's outcomes with 'deferred' for each 'claimed' task a limit of its flow or step
-- refuses now, and records the slots and tokens of the others (in a hand-off, 'left' for each
-- 'claimed' task its flow's limits apply to, and nothing recorded: see below).
--   concurrency  the key's started tasks are counted from its holds (each still started in its
--                attempt), under the key's limit_slots row lock, so two claims of one key on any
--                two workers decide one after the other; tasks within the limit get a hold, the
--                others wait: the first `limit` waiters of a key are deferred about 1 s, doubling
--                per deferral up to 30 s (0.5 to 1.5 times that each time), the ones behind them
--                20 to 30 s, so a deep backlog does not keep coming back ahead of other keys,
--                and woken at once by pgflow.release_limit_slots when a slot of their key frees
--                (oldest waiter first)
--   rate         the key's token bucket (amount per period, holding at most burst) is refilled for
--                the time elapsed and spent, one token per task; a task without a token is deferred
--                until its token is due
-- A deferred task keeps its attempt count and its queued status; only its message's visibility
-- changes. Lock order: the claim holds its messages; slot rows are locked in key order, and no other
-- writer waits for a slot row while holding a message, so the claim's waits never close a cycle.
create or replace function pgflow.limit_claim(
  queue_name text, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[]
)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_now timestamptz;
  v_cands pgflow.limit_candidate[];
  v_denied integer[];
  v_rate_n integer[];
  v_rate_delay double precision[];
  v_all integer[];
  v_msgs bigint[];
  v_at timestamptz[];
begin
  if outcomes is null or not exists (select 1 from pgflow.flow_limits) then
    return outcomes;
  end if;

  -- every (claimed task, limit of its flow or step) pair, with the task's key for that limit
  select array_agg(row(k.n, k.run_id, k.step_slug, k.task_index, k.id, t.attempts_count + 1, t.flow_slug,
                       l.step_slug, l.kind,
                       case l.key_source
                         when 'input' then coalesce((select r.input ->> l.key_field from pgflow.runs as r
                                                      where r.run_id = k.run_id), '')
                         when 'stored' then coalesce((select rk.key from pgflow.run_limit_keys as rk
                                                       where rk.run_id = k.run_id and rk.step_slug = l.step_slug
                                                         and rk.kind = l.kind), '')
                         else ''
                       end,
                       l.amount, l.period, l.burst)::pgflow.limit_candidate
                   order by t.flow_slug, l.step_slug, l.kind, k.n)
    into v_cands
    from unnest(ids, runs, steps, indexes, outcomes) with ordinality as k(id, run_id, step_slug, task_index, outcome, n)
    cross join lateral (
      select t.flow_slug, t.attempts_count from pgflow.step_tasks as t
       where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       limit 1
    ) as t
    join pgflow.flow_limits as l on l.flow_slug = t.flow_slug and l.step_slug in ('', k.step_slug)
   where k.outcome = 'claimed';
  if v_cands is null then
    return outcomes;
  end if;
  -- a completion's hand-off (pgflow.hand_off_tasks) takes no key row: the completion already holds
  -- the ones its release locked, and taking more, in another order, could close a cycle with a
  -- claim. The hand-off left out the flows with flow control; a flow that got its first limits
  -- since then has its tasks 'left' as they are (queued, the message visible) for a read to claim.
  if current_setting('pgflow.hand_off', true) = 'on' then
    return array(
      select case when exists (select 1 from unnest(v_cands) as c where c.n = e.n) then 'left' else e.outcome end
        from unnest(outcomes) with ordinality as e(outcome, n)
       order by e.n);
  end if;
  v_now := clock_timestamp();

  -- a key's first claim creates its row (a rate bucket starts full), then every claim locks its keys'
  -- rows in key order; the decisions below are separate statements, so they read what the claims
  -- that held these locks before committed
  insert into pgflow.limit_slots (flow_slug, step_slug, kind, key, tokens, refilled_at)
  select distinct c.flow_slug, c.scope, c.kind, c.key, coalesce(c.burst, 0), v_now
    from unnest(v_cands) as c
   order by c.flow_slug, c.scope, c.kind, c.key
  on conflict do nothing;
  -- each row locked by its own probe, the keys taken in key order (the outer side of the loop)
  perform 1
     from (select distinct c.flow_slug, c.scope, c.kind, c.key from unnest(v_cands) as c
            order by c.flow_slug, c.scope, c.kind, c.key) as g
    cross join lateral (
      select 1 from pgflow.limit_slots as x
       where x.flow_slug = g.flow_slug and x.step_slug = g.scope and x.kind = g.kind and x.key = g.key
       limit 1
         for update
    ) as x;

  -- concurrency: the key's holds still started in their attempt, then this batch in message order
  select coalesce(array_agg(distinct c.n), '{}') into v_denied
    from (select c.*, row_number() over (partition by c.flow_slug, c.scope, c.key order by c.message_id) as rank
            from unnest(v_cands) as c where c.kind = 'concurrency') as c
    cross join lateral (
      select count(*) as n
        from pgflow.limit_holds as h
       where h.flow_slug = c.flow_slug and h.step_slug = c.scope and h.key = c.key
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is not null
    ) as used
   where c.rank > c.amount - used.n;

  -- rate: refill each bucket for the time elapsed (up to burst), spend a token per task still in
  -- the running, and defer the others until their token is due
  with wanted as (
    select c.*, row_number() over (partition by c.flow_slug, c.scope, c.key order by c.message_id) as rank
      from unnest(v_cands) as c where c.kind = 'rate' and not c.n = any(v_denied)
  ), bucket as (
    select g.flow_slug, g.scope, g.key, g.wanted, g.amount / g.period as per_second, s.row_id,
           least(g.burst::double precision,
                 s.tokens + greatest(0, extract(epoch from v_now - s.refilled_at)) * g.amount / g.period) as available
      from (select w.flow_slug, w.scope, w.key, max(w.amount) as amount, max(w.period) as period,
                   max(w.burst) as burst, count(*) as wanted
              from wanted as w group by w.flow_slug, w.scope, w.key) as g
      cross join lateral (
        select s.ctid as row_id, s.tokens, s.refilled_at from pgflow.limit_slots as s
         where s.flow_slug = g.flow_slug and s.step_slug = g.scope and s.kind = 'rate' and s.key = g.key
         limit 1
      ) as s
  ), spent as (
    update pgflow.limit_slots as s
       set tokens = b.available - least(b.wanted, floor(b.available)), refilled_at = v_now,
           granted_at = case when b.available >= 1 then v_now else s.granted_at end
      from bucket as b
     where s.ctid = b.row_id
    returning 1
  )
  select array_agg(d.n), array_agg(d.delay) into v_rate_n, v_rate_delay
    from (select w.n, max((w.rank - b.available) / b.per_second) as delay
            from wanted as w
            join bucket as b on b.flow_slug = w.flow_slug and b.scope = w.scope and b.key = w.key
           where w.rank > floor(b.available)
           group by w.n) as d;
  v_all := v_denied || coalesce(v_rate_n, '{}');

  -- the tasks the claim may start hold a slot of each of their concurrency keys from now on
  insert into pgflow.limit_holds as h (run_id, task_step_slug, task_index, flow_slug, step_slug, key, attempt, held_at)
  select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.scope, c.key, c.attempt, v_now
    from unnest(v_cands) as c
   where c.kind = 'concurrency' and not c.n = any(v_all)
   order by c.run_id, c.step_slug, c.task_index, c.scope
  on conflict (run_id, task_step_slug, task_index, step_slug)
  do update set flow_slug = excluded.flow_slug, key = excluded.key, attempt = excluded.attempt, held_at = excluded.held_at;
  delete from pgflow.limit_waits as w
   where w.ctid = any(array(
           select x.row_id
             from unnest(v_cands) as c
            cross join lateral (
              select x.ctid as row_id from pgflow.limit_waits as x
               where x.run_id = c.run_id and x.task_step_slug = c.step_slug and x.task_index = c.task_index
               limit 1
            ) as x
            where not c.n = any(v_all)));

  if cardinality(v_all) > 0 then
    -- one wait per deferred task, named by the first limit that refused it (concurrency before rate)
    -- a concurrency deferral is short for the first `limit` waiters of the key (next in line: if a
    -- wake-up is missed they come back soon) and 20 to 30 s behind them: those are woken in turn as
    -- slots free, so a deep backlog does not keep coming back ahead of other keys' messages
    with refused as (
      select distinct on (c.n) c.*, r.delay
        from unnest(v_cands) as c
        left join unnest(v_rate_n, v_rate_delay) as r(n, delay) on r.n = c.n
       where (c.kind = 'concurrency' and c.n = any(v_denied)) or (c.kind = 'rate' and r.n is not null)
       order by c.n, c.kind, c.scope
    ), backlog as (
      select g.flow_slug, g.scope, g.key,
             (select count(*) from (
                select 1 from pgflow.limit_waits as x
                 where x.flow_slug = g.flow_slug and x.step_slug = g.scope and x.kind = 'concurrency'
                   and x.key = g.key
                 limit g.amount + 1) as x) > g.amount as deep
        from (select distinct f.flow_slug, f.scope, f.key, f.amount
                from refused as f where f.kind = 'concurrency') as g
    ), deferred as (
      insert into pgflow.limit_waits as w (run_id, task_step_slug, task_index, flow_slug, step_slug, kind, key,
                                           queue_name, message_id, deferred_at, visible_at)
      select f.run_id, f.step_slug, f.task_index, f.flow_slug, f.scope, f.kind, f.key,
             limit_claim.queue_name, f.message_id, v_now,
             v_now + make_interval(secs => case when f.kind = 'rate' then greatest(f.delay, 0.01)
                                                when b.deep then 20 + 10 * random()
                                                else 0.5 + random() end)
        from refused as f
        left join backlog as b on b.flow_slug = f.flow_slug and b.scope = f.scope and b.key = f.key
       order by f.run_id, f.step_slug, f.task_index
      on conflict (run_id, task_step_slug, task_index) do update
        set flow_slug = excluded.flow_slug, step_slug = excluded.step_slug, kind = excluded.kind,
            key = excluded.key, queue_name = excluded.queue_name, message_id = excluded.message_id,
            deferrals = w.deferrals + case when w.woken_at is null then 1 else 0 end,
            visible_at = case when excluded.kind = 'rate' then excluded.visible_at
                              when w.woken_at is not null then v_now + interval '0.25 seconds'
                              when excluded.visible_at > v_now + interval '15 seconds' then excluded.visible_at
                              else v_now + make_interval(secs => least(30, power(2, w.deferrals) * (0.5 + random())))
                         end,
            woken_at = null
      returning w.message_id, w.visible_at
    )
    select array_agg(d.message_id), array_agg(d.visible_at) into v_msgs, v_at from deferred as d;
    perform pgflow.set_limit_visibility(limit_claim.queue_name, v_msgs, v_at);
  end if;

  return array(
    select case when e.n = any(v_all) then 'deferred' else e.outcome end
      from unnest(outcomes) with ordinality as e(outcome, n)
     order by e.n);
end;
$$;
alter function pgflow.requeue_stalled_tasks()
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.limit_claim(text,bigint[],uuid[],text[],integer[],text[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;

-- ---------------------------------------------------------------- 0031_queue_access.sql
-- Frozen migration delta 0031_queue_access (loaded by pgflow_django/migrations/0031_queue_access.py):
-- the hot path sends, archives, hides and looks at the head of a queue's messages through
-- pgflow.queue_access, which pgflow.write_queue_access() writes with a branch of static SQL for each
-- of pgflow's queues whose tables have PGMQ's layout (planned once per session, where PGMQ's dynamic
-- SQL was planned on every call); other queues go through PGMQ's functions as before. The branches
-- are rewritten where pgflow creates or drops a queue and at every worker's start-up; this delta
-- writes them for the queues that exist.

-- 0198_function_write_queue_access.sql
-- Writes pgflow.queue_access, the one way the engine sends, archives, hides and looks at the head of
-- a queue's messages, with a branch of static SQL for each of pgflow's queues (plain flows' default
-- queues, the steps' queues, the declared shared queues, and provisioning: a queue being created in
-- this transaction, before the row that names it). PGMQ builds these statements as dynamic SQL, planned again
-- on every call, which costs three to eight times as much as running the planned statement for one
-- message; a static statement is planned once per session. A queue without a branch (one created
-- after the last write, or whose tables are not PGMQ's layout) goes through the dynamic statements
-- at the end of the function, so a branch is an optimisation and never the only way to a queue.
-- A queue gets a branch when its table and archive have PGMQ's layout: the columns below with these
-- types and a generated message id, as PGMQ 1.11 to 1.13 create them. Called where pgflow creates
-- or drops a queue and by every worker at start-up, so a PGMQ upgrade that changes the tables is
-- seen before the first claim. The function is replaced only when its text changes: no DDL, so no
-- invalidated plans in other sessions, when nothing did. Returns the queues that have a branch.
-- Writers take one advisory lock until they commit, so each sees the queues of those before it.
-- Calls inside a longer transaction (creating or dropping queues) pass wait => false: they hold
-- other locks (PGMQ's queue locks among them), and waiting for this one while its holder waits for
-- one of theirs would deadlock; such a call writes nothing and returns NULL when the lock is taken,
-- and the queue gets its branch at the next write, at the latest when a worker for it starts.
create or replace function pgflow.write_queue_access(provisioning text = null, wait boolean = true)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_branches text;
  v_source text;
begin
  if wait then
    perform pg_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0));
  elsif not pg_try_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0)) then
    return null;
  end if;

  select coalesce(array_agg(q.queue_name order by q.queue_name), '{}') into v_queues
    from (select s.queue_name from pgflow.steps as s
          union
          select lower(f.flow_slug) from pgflow.flows as f where f.queue_mode = 'flow'
          union
          select sq.queue_name from pgflow.shared_queues as sq
          union
          select lower(provisioning) where provisioning is not null) as q
   where (select count(*)
            from (values ('q'), ('a')) as t(kind)
            cross join (values ('msg_id', 'bigint'::regtype), ('read_ct', 'integer'),
                               ('enqueued_at', 'timestamptz'), ('last_read_at', 'timestamptz'),
                               ('vt', 'timestamptz'), ('message', 'jsonb'), ('headers', 'jsonb'))
                         as want(column_name, column_type)
            join pg_attribute as a
              on a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, t.kind)))
             and a.attname = want.column_name and a.atttypid = want.column_type and not a.attisdropped) = 14
     and exists (select 1 from pg_attribute as a
                  where a.attrelid = to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, 'q')))
                    and a.attname = 'msg_id' and (a.attidentity <> '' or a.atthasdef));

  select coalesce(string_agg(format($branch$
  if v_queue = %1$L then
    if op = 'send' then
      return query
        insert into pgmq.%2$I as q (vt, message, headers)
        select clock_timestamp() + make_interval(secs => coalesce(numbers[1], 0)), m.message, m.headers
          from rows from (unnest(messages), unnest(headers)) with ordinality as m(message, headers, n)
         order by m.n
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'archive' then
      return query
        with archived as (
          delete from pgmq.%2$I as q where q.msg_id = any(msg_ids)
          returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%3$I as a (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers)
        select d.msg_id, d.read_ct, d.enqueued_at, d.last_read_at, d.vt, d.message, d.headers from archived as d
        returning a.msg_id, a.read_ct, a.enqueued_at, a.last_read_at, a.vt, a.message, a.headers;
    elsif op in ('set', 'extend') then
      return query
        update pgmq.%2$I as q
           set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
          from unnest(msg_ids, numbers) as o(msg_id, vt_offset)
         where q.msg_id = o.msg_id
           and (op = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'head' then
      return query
        select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
          from pgmq.%2$I as q
         where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
         order by pgflow.message_priority(q.headers) desc, q.msg_id
         limit 1;
    end if;
    return;
  end if;$branch$,
      q.queue_name, pgmq.format_table_name(q.queue_name, 'q'), pgmq.format_table_name(q.queue_name, 'a')),
      '' order by q.queue_name), '')
    into v_branches
    from unnest(v_queues) as q(queue_name);

  v_source := format($body$
-- written by pgflow.write_queue_access(): a branch for each of %1$s
declare
  v_queue constant text := lower(queue_name);
begin
  if op is null or op not in ('send', 'archive', 'set', 'extend', 'head') then
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %%',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
%2$s
  if op = 'send' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.send_batch(queue_name, messages, headers, coalesce(numbers[1], 0)) as m(msg_id);
  elsif op = 'archive' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.archive(queue_name, msg_ids) as m(msg_id);
  elsif op in ('set', 'extend') then
    return query execute format(
      'update pgmq.%%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  else
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  end if;
end;
$body$,
    case when cardinality(v_queues) = 0 then 'no queue yet'
         else 'queue ' || array_to_string(v_queues, ', ') end,
    v_branches);

  if v_source is distinct from (select p.prosrc from pg_proc as p
                                 where p.oid = to_regprocedure(
                                   'pgflow.queue_access(text,text,bigint[],integer[],jsonb[],jsonb[])')) then
    execute format($create$
      create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                     messages jsonb[], headers jsonb[])
      returns setof pgmq.message_record
      language plpgsql set search_path = pg_catalog, pgflow, pgmq
      as %L
    $create$, v_source);
    comment on function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]) is
      'One queue operation (op): send messages with headers, visible after numbers[1] seconds (ids in message order); archive msg_ids; set (or extend) the visibility of msg_ids to numbers[i] seconds from now; head: the visible message a claim takes first, among those sent before this statement. Written by pgflow.write_queue_access().';
  end if;
  return v_queues;
end;
$$;
select pgflow.write_queue_access();
-- 0200_function_set_vt_batch.sql
-- One statement sets the visibility of a batch of messages, each from its own offset (seconds):
--   set     visibility = now + offset, for every message
--   extend  hidden for at least now + offset: a message already hidden that long (within a second)
--           is not written, so a worker that read its batch with a long enough visibility pays no
--           second update per message when the claim applies the task's timeout
-- Returns the messages it wrote (pgflow.queue_access: static SQL for pgflow's queues).
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[], mode text)
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if mode is null or mode not in ('set', 'extend') then
    raise exception 'set_vt_batch: mode must be ''set'' or ''extend'', got %', coalesce(quote_literal(mode), 'NULL')
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'set_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  return query select m.* from pgflow.queue_access(mode, queue_name, msg_ids, vt_offsets, null, null) as m;
end;
$$;
-- 0205_function_archive_task_messages.sql
-- Archive the messages of the given tasks, one archive per queue (pgflow.queue_access; each task's
-- queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive. A live message whose id is already in the queue's archive (a row
-- inserted with a reused id) cannot be archived again: it is deleted instead, with a warning naming
-- the queue and the ids, so the queue keeps moving. That case is found only when PGMQ's archive
-- fails on the archive's key, so the common path stays one call per queue.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_group record;
  v_doubles bigint[];
begin
  begin
    perform pgflow.queue_access('archive', g.queue_name, g.ids, null, null, null)
       from (
         select m.queue_name, array_agg(m.msg_id) as ids
           from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
          where m.msg_id is not null
          group by m.queue_name
       ) as g
      where to_regclass(format('pgmq.%I', pgmq.format_table_name(g.queue_name, 'q'))) is not null;
    return;
  exception when unique_violation then
    null;
  end;

  for v_group in
    select m.queue_name, array_agg(distinct m.msg_id order by m.msg_id) as ids
      from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
     where m.msg_id is not null
       and to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
     group by m.queue_name
     order by m.queue_name
  loop
    execute format(
      'select array_agg(q.msg_id order by q.msg_id) from pgmq.%I as q where q.msg_id = any($1)
          and exists (select 1 from pgmq.%I as a where a.msg_id = q.msg_id)',
      pgmq.format_table_name(v_group.queue_name, 'q'), pgmq.format_table_name(v_group.queue_name, 'a'))
      into v_doubles using v_group.ids;
    if v_doubles is not null then
      perform pgmq.delete(v_group.queue_name, v_doubles);
      raise warning 'queue %: message id(s) % were already in its archive; deleted from the queue instead of archived again',
        v_group.queue_name, array_to_string(v_doubles, ', ');
    end if;
    perform pgmq.archive(v_group.queue_name,
                         array(select i from unnest(v_group.ids) as i where i <> all(coalesce(v_doubles, '{}'))));
  end loop;
end;
$$;
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
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
  perform pgflow.index_queue_priority(queue_name);
  perform pgflow.write_queue_access(queue_name, wait => false);
end;
$$;
-- 0211_function_provision_shared_queue.sql
-- The one path that declares, and creates when absent, a shared queue (the compiler calls it for each
-- queue of a routed flow). A queue already declared shared is reused (created again through PGMQ if
-- it went missing). Refused: an invalid name, a name containing '__' (reserved for generated
-- queues, so never a step queue), the default queue name of a flow (a plain flow's queue), and an
-- existing PGMQ queue (pgmq.list_queues, compared case-insensitively) that pgflow never declared:
-- pgflow never adopts or converts a queue.
create or replace function pgflow.provision_shared_queue(queue_name text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
  -- the common case, a queue declared and present, takes no lock: compilations that verify several
  -- flows on one queue in one transaction never wait on each other (declarations are never removed
  -- by pgflow)
  if exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = v_queue)
     and (select count(*) from pgmq.list_queues() as l where lower(l.queue_name) = v_queue) = 1 then
    return;
  end if;
  perform pg_advisory_xact_lock(hashtextextended('pgflow:shared_queue:' || v_queue, 0));

  select f.flow_slug into v_owner from pgflow.flows as f
   where lower(f.flow_slug) = v_queue limit 1;
  if v_owner is not null then
    raise exception 'queue name % is the default queue name reserved for flow %: choose another shared queue name',
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
      perform pgflow.index_queue_priority(v_queue);
      perform pgflow.write_queue_access(v_queue, wait => false);
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
  perform pgflow.index_queue_priority(v_queue);
  perform pgflow.write_queue_access(v_queue, wait => false);
end;
$$;
-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one send per
-- queue and start delay (pgflow.queue_access) (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
-- A task's priority (the run's, else its step's default, else its flow's) travels in its message's
-- headers, {"priority": N}; a priority of 0 sends no headers (pgflow.message_priority reads 0).
-- The n-th id returned by the send belongs to the n-th message sent. The step states are read by
-- the batch and each run by its own probe (see cascade).
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_batches jsonb;
  v_batch record;
begin
  with started as (
    update pgflow.step_states as ss
       set status = 'started', started_at = clock_timestamp(), remaining_tasks = ss.initial_tasks
      from pgflow.steps as s, pgflow.flows as f
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks > 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started'
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       and f.flow_slug = ss.flow_slug
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks, s.opt_start_delay,
              s.queue_name, s.opt_priority as step_priority, f.opt_priority as flow_priority
  ), timed as (
    select st.flow_slug, st.run_id, st.step_slug, st.initial_tasks, st.queue_name,
           greatest(coalesce(st.opt_start_delay, 0),
                    coalesce(ceil(extract(epoch from r.not_before - clock_timestamp()))::integer, 0)) as start_delay,
           coalesce(r.priority, st.step_priority, st.flow_priority) as priority
      from started as st
     cross join lateral (
       select r.not_before, r.priority from pgflow.runs as r where r.run_id = st.run_id offset 0
     ) as r
  ), messages as (
    select st.queue_name, st.start_delay,
           jsonb_build_object('flow_slug', st.flow_slug, 'run_id', st.run_id,
                              'step_slug', st.step_slug, 'task_index', i) as message,
           case when st.priority <> 0 then jsonb_build_object('priority', st.priority) end as headers
      from timed as st
     cross join lateral generate_series(0, st.initial_tasks - 1) as i
  )
  select jsonb_agg(jsonb_build_object('queue_name', m.queue_name, 'start_delay', m.start_delay, 'messages', m.messages,
                                       'headers', m.headers))
    into v_batches
    from (select queue_name, start_delay, jsonb_agg(message) as messages,
                 case when bool_or(headers is not null) then jsonb_agg(headers) end as headers
            from messages group by queue_name, start_delay) as m;

  if v_batches is null then
    return;
  end if;

  for v_batch in
    select b->>'queue_name' as queue_name, (b->>'start_delay')::integer as start_delay, b->'messages' as messages,
           nullif(b->'headers', 'null'::jsonb) as headers
      from jsonb_array_elements(v_batches) as b
  loop
    -- rows from pairs the n-th message with the n-th id by position: no join to plan, so a large map
    -- step's batch costs its length, whatever the planner settings
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.message->>'flow_slug', (m.message->>'run_id')::uuid, m.message->>'step_slug',
           (m.message->>'task_index')::integer, m.msg_id, v_batch.queue_name
      from rows from (
             jsonb_array_elements(v_batch.messages),
             pgflow.queue_access(
               'send', v_batch.queue_name, null, array[v_batch.start_delay],
               array(select e from jsonb_array_elements(v_batch.messages) as e),
               case when v_batch.headers is not null
                    then array(select nullif(h, 'null'::jsonb) from jsonb_array_elements(v_batch.headers) as h) end)
           ) as m(message, msg_id, read_ct, enqueued_at, last_read_at, vt, body, headers);
  end loop;
end;
$$;
-- 0303_function_hand_off_tasks.sql
-- Direct hand-off: claims, for the worker that just completed tasks of the given runs, the tasks
-- that completion made ready on its queue, so that worker runs them without waiting for a
-- notification, a read and a claim. Only tasks created by the calling statement are taken (queued
-- since it began, never attempted: nobody else has seen their messages yet), of a (flow_slug,
-- step_slug) pair the worker supports whose flow is still at the generation it compiled against,
-- on queue_name, with no start delay (of the step, or what remains of a delayed run's not_before),
-- at most free_slots of them, in task key order (the order every writer locks a run's tasks), and
-- none whose priority is below the queue's: a visible message of higher priority that was waiting
-- before the statement began (the first entry of the queue's priority index) goes first, so the
-- hand-off keeps the claim's order (higher priority first) and leaves those tasks to a read. Tasks
-- of a flow with flow control (pgflow.flow_limits) are left to a read too: their claim locks key
-- rows, and the completion holds the key rows its released slots locked, which another order of
-- taking them could deadlock against a claim. A flow that gets its first limits between that check
-- and the claim is caught by pgflow.limit_claim, which in a hand-off (pgflow.hand_off = 'on' for
-- the claim) leaves such tasks for a read instead of taking key rows.
-- The claiming itself is pgflow.claim_classified's, as for a read batch: one more attempt,
-- started_at, last_worker_id, the message hidden for the effective timeout + 2 s. The message stays
-- the durable record: a worker that dies holding a handed-off task loses it to stalled recovery
-- like any other claim. Returns one claim_record ('claimed') per task handed off.
create or replace function pgflow.hand_off_tasks(
  queue_name text, worker_id uuid, run_ids uuid[], support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_ids bigint[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_priorities integer[];
  v_waiting_priority integer;
begin
  if coalesce(free_slots, 0) <= 0 or coalesce(cardinality(run_ids), 0) = 0
     or coalesce(cardinality(support_flows), 0) = 0 then
    return;
  end if;

  select array_agg(h.message_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.run_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.step_slug order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.task_index order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.priority order by h.run_id, h.step_slug, h.task_index)
    into v_ids, v_runs, v_steps, v_indexes, v_priorities
    from (
      select t.run_id, t.step_slug, t.task_index, t.message_id,
             coalesce(ss.priority, s.opt_priority, f.opt_priority, 0) as priority
        from (select distinct k.run_id from unnest(hand_off_tasks.run_ids) as k(run_id)) as k
       cross join lateral (
         select ss.flow_slug, ss.step_slug, r.priority
           from (select r.run_id, r.status, r.not_before, r.priority from pgflow.runs as r
                  where r.run_id = k.run_id offset 0) as r
           join pgflow.step_states as ss on ss.run_id = r.run_id
          where r.status = 'started' and (r.not_before is null or r.not_before <= clock_timestamp())
            and ss.status = 'started' and ss.started_at >= statement_timestamp()
         offset 0
       ) as ss
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        join pgflow.flows as f on f.flow_slug = ss.flow_slug
                               and not exists (select 1 from pgflow.flow_limits as l where l.flow_slug = f.flow_slug)
        join unnest(hand_off_tasks.support_flows, hand_off_tasks.support_steps, hand_off_tasks.support_generations)
          as p(flow_slug, step_slug, generation)
          on p.flow_slug = ss.flow_slug and p.step_slug = ss.step_slug and p.generation = f.generation
       cross join lateral (
         select t.run_id, t.step_slug, t.task_index, t.message_id, t.status, t.attempts_count, t.queued_at,
                t.queue_name
           from pgflow.step_tasks as t
          where t.run_id = k.run_id and t.step_slug = ss.step_slug
         offset 0
       ) as t
       where coalesce(s.opt_start_delay, 0) = 0
         and t.status = 'queued' and t.attempts_count = 0 and t.queued_at >= statement_timestamp()
         and t.queue_name = hand_off_tasks.queue_name and t.message_id is not null
       order by t.run_id, t.step_slug, t.task_index
       limit hand_off_tasks.free_slots
    ) as h;
  if v_ids is null then
    return;
  end if;

  select pgflow.message_priority(q.headers) into v_waiting_priority
    from pgflow.queue_access('head', hand_off_tasks.queue_name, null, null, null, null) as q;
  if v_waiting_priority > (select min(p) from unnest(v_priorities) as p) then
    select array_agg(c.id order by c.n), array_agg(c.run_id order by c.n), array_agg(c.step_slug order by c.n),
           array_agg(c.task_index order by c.n)
      into v_ids, v_runs, v_steps, v_indexes
      from unnest(v_ids, v_runs, v_steps, v_indexes, v_priorities) with ordinality
           as c(id, run_id, step_slug, task_index, priority, n)
     where c.priority >= v_waiting_priority;
    if v_ids is null then
      return;
    end if;
  end if;

  perform set_config('pgflow.hand_off', 'on', true);
  return query
    select c.* from pgflow.claim_classified(hand_off_tasks.queue_name, hand_off_tasks.worker_id, v_ids, v_runs,
                                            v_steps, v_indexes, array_fill('claimed'::text, array[cardinality(v_ids)]),
                                            '{}'::text[]) as c
     where c.outcome = 'claimed';
  perform set_config('pgflow.hand_off', 'off', true);
end;
$$;
-- 0370_function_delete_flow_and_data.sql
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it (a plain flow's default queue, a step-queued flow's private step queues, with
-- their archives), then the flow row last. Every queue of the persisted route (pgflow.flow_queues)
-- is validated first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- and tasks are locked before the queues' messages (run, task, message: the order every writer
-- uses). Messages are not archived one by one: dropping a queue drops its table and archive
-- together. Serialised with compilation by the per-flow advisory lock, and with starts by the
-- flow's start lock (taken exclusively: runs being started commit first, later starts find the flow
-- gone). Shared queues (pgflow.shared_queues) are never dropped: only this flow's live messages on
-- them are deleted, found through its task snapshots. The workers' support rows for the flow go too.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_queue text;
  v_spellings text[] := '{}';
  v_problem text;
  v_other text;
  v_shared_queues text[];
  v_shared_msgs bigint[];
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || flow_slug, 0));
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

  with gone as (
    delete from pgflow.step_tasks as t
     where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug)
    returning t.queue_name, t.message_id, t.status
  )
  select coalesce(array_agg(g.queue_name), '{}'), coalesce(array_agg(g.message_id), '{}')
    into v_shared_queues, v_shared_msgs
    from gone as g
    join pgflow.shared_queues as sq on sq.queue_name = g.queue_name
   where g.message_id is not null and g.status in ('queued', 'started');

  -- on shared queues, only this flow's own messages go (found through its task snapshots); the
  -- queues, their archives and every other message stay
  perform pgmq.delete(m.queue_name, array_agg(m.msg_id order by m.msg_id))
     from unnest(v_shared_queues, v_shared_msgs) as m(queue_name, msg_id)
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
    group by m.queue_name;

  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p where p.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_support as ws where ws.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
  perform pgflow.write_queue_access(wait => false);
end;
$$;
alter function pgflow.archive_task_messages(text[],bigint[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.start_ready_steps(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
alter function pgflow.hand_off_tasks(text,uuid,uuid[],text[],text[],bigint[],integer)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;

-- ---------------------------------------------------------------- 0032_archive_partitions.sql
-- Frozen migration delta 0032_archive_partitions (loaded by pgflow_django/migrations/0032_archive_partitions.py):
-- the PGMQ archives of pgflow's queues can be partitioned by archived_at on the history's intervals
-- (pgflow.partition_queue_archive), with their partitions kept ready by the workers
-- (pgflow.create_archive_partitions) and old ones dropped by retention (pgflow.prune_queue_archive).
-- pgflow_partition does it for a new partitioning; `pgflow_partition --archives`
-- (pgflow.partition_archives) for a history partitioned before this migration. pgflow.engine_queues
-- names the queues once for these and pgflow.write_queue_access.

-- 0187_table_history_partitioning.sql
alter table pgflow.history_partitioning add column archives boolean not null default false;
-- 0196_function_engine_queues.sql
-- Every queue the engine sends to: plain flows' default queues, the steps' queues and the declared
-- shared queues. The queues pgflow writes static SQL for (write_queue_access) and partitions the
-- archives of (create_history_partitions).
create or replace function pgflow.engine_queues()
returns setof text
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select s.queue_name from pgflow.steps as s
  union
  select lower(f.flow_slug) from pgflow.flows as f where f.queue_mode = 'flow'
  union
  select sq.queue_name from pgflow.shared_queues as sq
$$;
-- 0360_function_prune_data_older_than.sql
-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. Archives of shared queues are left alone: several flows'
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
      execute format('select count(*) from pgflow.%I', 'step_tasks_' || v_part.suffix) into v_count;
      v_dropped_tasks := v_dropped_tasks + v_count;
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

  delete from pgflow.step_tasks as t using unnest(v_runs) as p(run_id) where t.run_id = p.run_id;
  get diagnostics v_tasks = row_count;
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
-- 0362_function_prune_queue_archive.sql
-- Retention of one queue's archive: removes its archived messages older than `cutoff` and returns
-- how many. A partitioned archive (pgflow.partition_queue_archive) first drops every partition
-- whose range ends at or before the cutoff, a_<queue>_old included once its last interval has
-- passed (its rows are counted for the result, then one DROP TABLE: no row-level WAL, no dead rows);
-- the rest (the default partition and the interval holding the cutoff) is deleted row by row.
create or replace function pgflow.prune_queue_archive(queue_name text, cutoff timestamptz)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive regclass := to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'a')));
  v_part record;
  v_count bigint;
  v_pruned bigint := 0;
begin
  if v_archive is null then
    return 0;
  end if;
  for v_part in
    select c.relname
      from pg_inherits as inh
      join pg_class as c on c.oid = inh.inhrelid
     where inh.inhparent = v_archive
       and (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz <= cutoff
     order by c.relname
  loop
    execute format('select count(*) from pgmq.%I', v_part.relname) into v_count;
    execute format('drop table pgmq.%I', v_part.relname);
    v_pruned := v_pruned + v_count;
  end loop;
  execute format('delete from %s where archived_at < $1', v_archive) using cutoff;
  get diagnostics v_count = row_count;
  return v_pruned + v_count;
end;
$$;
-- 0365_function_prune_shared_archive.sql
-- Queue-wide retention of one declared shared queue's archive: deletes its archived messages older
-- than now - retention, whichever flow they belonged to (pgflow.prune_queue_archive: a partitioned
-- archive drops its old partitions). Returns how many were removed.
create or replace function pgflow.prune_shared_archive(queue_name text, retention interval)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
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
  return pgflow.prune_queue_archive(queue_name, now() - retention);
end;
$$;
-- 0470_function_partition_history.sql
-- Partitions runs, step_states and step_tasks by run id (range partitions of time-ordered UUIDv7
-- ids, one per `partition_interval`, `ahead` of them kept ready), opt-in for an existing install.
-- No row is copied: each current table becomes its new parent's DEFAULT partition (renamed
-- <table>_default, its indexes <table>_default_*), so the conversion is catalog work under a short
-- ACCESS EXCLUSIVE lock, and run ids that are not time-ordered (idempotency keys' UUIDv5, chosen
-- ids, ids made before UUIDv7) keep living there. The parents get the primary keys, the foreign keys
-- to the definition tables and the plain indexes; unique indexes without run_id stay per partition.
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
-- 0472_function_create_history_partitions.sql
-- Keeps the history partitions ready: creates every missing one from the interval holding now
-- (or `since`, when earlier: history loaded from elsewhere) through `ahead` intervals after it (and
-- through `through`, when later), for runs, step_states and
-- step_tasks alike. Partition k of each table holds the run ids from uuid_v7_bound(start_k) to
-- uuid_v7_bound(start_k + interval), has foreign keys to its sibling partitions and copies of the
-- default partitions' own unique indexes (a unique index without run_id cannot span partitions).
-- Run ids of a new partition's range that reached a default partition meanwhile (a partition made
-- late, or an id that is not time-ordered) move into it first. One caller at a time creates (the
-- others return 0); returns how many intervals it created, 0 on a plain install. With `archives`
-- on, it also partitions the archive of an engine queue that is still a plain table (a queue made
-- since: pgflow.partition_queue_archive, skipped while the archive is busy) and keeps each
-- archive's partitions ready (pgflow.create_archive_partitions). Cheap when nothing is missing: the
-- worker calls it with its stalled recovery.
create or replace function pgflow.create_history_partitions(since timestamptz default null, through timestamptz default null)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_interval interval;
  v_ahead integer;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_lo uuid;
  v_hi uuid;
  v_suffix text;
  v_table text;
  v_options text[];
  v_def text;
  v_created integer := 0;
  v_archives boolean;
  v_queue text;
begin
  select hp.partition_interval, hp.ahead, hp.archives into v_interval, v_ahead, v_archives
    from pgflow.history_partitioning as hp;
  if v_interval is null then
    return 0;
  end if;
  v_start := date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00');
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgflow.%I', 'runs_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    v_missing := '{}';
  end if;

  foreach v_start in array v_missing loop
    v_suffix := 'p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgflow.%I', 'runs_' || v_suffix)) is not null;
    v_created := v_created + 1;
    v_lo := pgflow.uuid_v7_bound(v_start);
    v_hi := pgflow.uuid_v7_bound(v_start + v_interval);
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('create table pgflow.%I (like pgflow.%I including defaults including constraints including storage)',
                     v_table || '_' || v_suffix, v_table);
      select c.reloptions into v_options from pg_class as c where c.oid = format('pgflow.%I', v_table || '_default')::regclass;
      if v_options is not null then
        execute format('alter table pgflow.%I set (%s)', v_table || '_' || v_suffix, array_to_string(v_options, ', '));
      end if;
      execute format('insert into pgflow.%I select * from pgflow.%I where run_id >= $1 and run_id < $2',
                     v_table || '_' || v_suffix, v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['step_tasks', 'step_states', 'runs'] loop
      execute format('delete from pgflow.%I where run_id >= $1 and run_id < $2', v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('alter table pgflow.%I attach partition pgflow.%I for values from (%L) to (%L)',
                     v_table, v_table || '_' || v_suffix, v_lo, v_hi);
      for v_def in
        select pg_get_indexdef(i.indexrelid) from pg_index as i
         where i.indrelid = format('pgflow.%I', v_table || '_default')::regclass
           and not exists (select 1 from pg_inherits as inh where inh.inhrelid = i.indexrelid)
         order by i.indexrelid
      loop
        execute replace(v_def, v_table || '_default', v_table || '_' || v_suffix);
      end loop;
    end loop;
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_states_' || v_suffix, 'step_states_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id, step_slug) references pgflow.%I (run_id, step_slug)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_step_slug_fkey', 'step_states_' || v_suffix);
  end loop;

  -- the archives after the history tables, the order in which every writer takes them
  if v_archives then
    for v_queue in
      select e.queue_name from pgflow.engine_queues() as e(queue_name)
       where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
       order by e.queue_name
    loop
      perform pgflow.partition_queue_archive(v_queue, wait => false);
      perform pgflow.create_archive_partitions(v_queue, since, through);
    end loop;
  end if;
  return v_created;
end;
$$;
-- 0473_function_create_archive_partitions.sql
-- Keeps a partitioned archive's partitions ready: creates every missing partition of the queue's
-- archive (pgmq.a_<queue>, range-partitioned by archived_at) from the interval holding now (or
-- `since`, when earlier) through `ahead` intervals after it (and through `through`, when later), on
-- the history's intervals. Partition a_<queue>_pYYYYMMDD gets the archive's columns, a primary key
-- on msg_id (as PGMQ's archive has) and the parent's archived_at index. Intervals below the upper
-- bound of a_<queue>_old (the archive as it was before partitioning) are left to it. Archived
-- messages of a new partition's range that reached the default partition meanwhile move into it
-- first. One caller at a time creates (create_history_partitions' advisory lock; the others return
-- 0). Returns how many partitions it created: 0 for a plain archive or when none is missing (cheap,
-- no lock taken then: the worker calls it with its stalled recovery).
create or replace function pgflow.create_archive_partitions(
  queue_name text, since timestamptz default null, through timestamptz default null
)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_ahead integer;
  v_floor timestamptz;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_part text;
  v_created integer := 0;
begin
  select hp.partition_interval, hp.ahead into v_interval, v_ahead from pgflow.history_partitioning as hp;
  if v_interval is null
     or (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'p' then
    return 0;
  end if;
  select (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz into v_floor
    from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive || '_old'));
  v_start := greatest(date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00'),
                      coalesce(v_floor, '-infinity'));
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgmq.%I', v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    return 0;
  end if;

  foreach v_start in array v_missing loop
    v_part := v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgmq.%I', v_part)) is not null;
    execute format('create table pgmq.%I (like pgmq.%I including defaults including storage)', v_part, v_archive);
    execute format('alter table pgmq.%I add primary key (msg_id)', v_part);
    execute format('with moved as (delete from pgmq.%I where archived_at >= $1 and archived_at < $2 returning *)'
                   ' insert into pgmq.%I select * from moved', v_archive || '_default', v_part)
      using v_start, v_start + v_interval;
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (%L) to (%L)',
                   v_archive, v_part, v_start, v_start + v_interval);
    v_created := v_created + 1;
  end loop;
  return v_created;
end;
$$;
-- 0474_function_partition_queue_archive.sql
-- Partitions one queue's PGMQ archive by archived_at, on the history's intervals, so that retention
-- drops whole partitions of archived messages instead of deleting them. No row is copied: the
-- archive as it was becomes the partition a_<queue>_old, holding every time up to the end of the
-- interval of its newest message (an empty one is dropped instead), beside a default partition and
-- the partitions create_archive_partitions keeps ready. The parent has the archive's columns and
-- PGMQ's archived_at index (by PGMQ's name, so pgmq.create finds it); primary keys on msg_id are per
-- partition, since a key of a table partitioned by time must hold the time. PGMQ's statements and
-- pgflow.queue_access insert into the parent unchanged. Attaching a_<queue>_old reads it once, under
-- the archive's ACCESS EXCLUSIVE lock; with `wait` false the lock is tried and a busy archive is
-- left for a later call. Returns true when it partitioned the archive; false when the queue has no
-- archive, it is partitioned already, it has no archived_at (not PGMQ's layout), or the lock was
-- busy.
create or replace function pgflow.partition_queue_archive(queue_name text, wait boolean default true)
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_newest timestamptz;
begin
  select hp.partition_interval into v_interval from pgflow.history_partitioning as hp;
  if v_interval is null then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first' using errcode = '55000';
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'r'
     or not exists (select 1 from pg_attribute as a
                     where a.attrelid = to_regclass(format('pgmq.%I', v_archive)) and a.attname = 'archived_at'
                       and a.atttypid = 'timestamptz'::regtype and not a.attisdropped) then
    return false;
  end if;
  if wait then
    execute format('lock table pgmq.%I in access exclusive mode', v_archive);
  else
    begin
      execute format('lock table pgmq.%I in access exclusive mode nowait', v_archive);
    exception when lock_not_available then
      return false;
    end;
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) <> 'r' then
    return false;  -- partitioned by another caller while this one waited for the lock
  end if;

  execute format('select max(archived_at) from pgmq.%I', v_archive) into v_newest;
  execute format('alter table pgmq.%I rename to %I', v_archive, v_archive || '_old');
  if to_regclass(format('pgmq.%I', 'archived_at_idx_' || queue_name)) is not null then
    execute format('alter index pgmq.%I rename to %I', 'archived_at_idx_' || queue_name, v_archive || '_old_at_idx');
  end if;
  execute format('create table pgmq.%I (like pgmq.%I including defaults including storage including comments)'
                 ' partition by range (archived_at)', v_archive, v_archive || '_old');
  execute format('create index %I on pgmq.%I (archived_at)', 'archived_at_idx_' || queue_name, v_archive);
  if v_newest is null then
    execute format('drop table pgmq.%I', v_archive || '_old');
  else
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (minvalue) to (%L)', v_archive,
                   v_archive || '_old',
                   date_bin(v_interval, v_newest, timestamptz '2000-01-03 00:00:00+00') + v_interval);
  end if;
  execute format('create table pgmq.%I partition of pgmq.%I default', v_archive || '_default', v_archive);
  execute format('alter table pgmq.%I add primary key (msg_id)', v_archive || '_default');
  perform pgflow.create_archive_partitions(queue_name);
  return true;
end;
$$;
-- 0476_function_partition_archives.sql
-- Partitions the PGMQ archives of pgflow's queues on a history partitioned before archives were
-- (pgflow.partition_queue_archive for each, then `archives` on, so that workers partition new
-- queues' archives too). Returns the statements in order; runs them only when `apply` (otherwise
-- it changes nothing: the plan `pgflow_partition --archives` prints).
create or replace function pgflow.partition_archives(apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['update pgflow.history_partitioning set archives = true'];
  v_queue text;
  v_step text;
begin
  if not exists (select 1 from pgflow.history_partitioning) then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first (it partitions the archives too)'
      using errcode = '55000';
  end if;
  if exists (select 1 from pgflow.history_partitioning as hp where hp.archives) then
    raise exception 'the queue archives are already partitioned' using errcode = '55000';
  end if;
  for v_queue in
    select e.queue_name from pgflow.engine_queues() as e(queue_name)
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
     order by e.queue_name
  loop
    v_steps := v_steps || format('select pgflow.partition_queue_archive(%L)', v_queue);
  end loop;
  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;

-- ---------------------------------------------------------------- 0033_limit_wake_locked_messages.sql
-- Frozen migration delta 0033_limit_wake_locked_messages (loaded by
-- pgflow_django/migrations/0033_limit_wake_locked_messages.py):
-- * a freed concurrency slot wakes a waiter only with its message locked. A read locks the newest
--   version of a message before it checks the message's visibility and keeps that lock until its
--   claim commits; a release that met such a lock marked the waiter woken while its message stayed
--   hidden, and the key's next freed slot and stalled recovery's sweep then passed it over until
--   its deferral ended (0.5 to 1.5 s at first, up to 30 s), with the slot unused. The slot now goes
--   to the key's next waiter, and a waiter passed over stays unwoken for the next release or sweep.

-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); the sweep wakes as many as each key has slots
-- unused, freed now or earlier; waits of tasks no longer queued are dropped.
-- Returns the number of slots freed.
-- wait_for_claims (the completion's release, its last step): first lock the limit_slots rows of the
-- keys these runs hold, in key order as a claim does, until commit. A claim deciding one of those
-- keys meanwhile counts this slot as taken: the release waits for that claim to commit and then
-- wakes the tasks it deferred, and a claim that comes later waits for the release and finds the slot
-- free. (Without the wait, a slot freed while a claim deferred the key's only waiter wakes nobody and
-- stays unused until that deferral ends.) A claim holds the messages it read while it waits for a
-- key row, so only a caller that waits for no message row afterwards may pass true; the other paths
-- (failures, cancels, recovery) release without it. A waiter whose message another transaction
-- holds is passed over for the key's next one (see below).
create or replace function pgflow.release_limit_slots(run_ids uuid[], wait_for_claims boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_flows text[];
  v_scopes text[];
  v_keys text[];
  v_now timestamptz := clock_timestamp();
  v_key_flows text[];
  v_key_scopes text[];
  v_key_keys text[];
  v_key_slots integer[];
  v_tried tid[] := '{}';
  v_rows tid[];
  v_queues text[];
  v_msgs bigint[];
  v_key_nos bigint[];
  v_locked_queues text[];
  v_locked_msgs bigint[];
  v_woken_queues text[];
  v_woken_msgs bigint[];
  v_woken_keys bigint[];
begin
  if run_ids is not null then
    if not exists (select 1 from pgflow.limit_holds as h where h.run_id = any(run_ids))
       and not exists (select 1 from pgflow.limit_waits as w where w.run_id = any(run_ids)) then
      return 0;
    end if;
    if wait_for_claims then
      perform 1
         from (select distinct h.flow_slug, h.step_slug, h.key
                 from unnest(run_ids) as k(run_id)
                cross join lateral (select h.flow_slug, h.step_slug, h.key from pgflow.limit_holds as h
                                     where h.run_id = k.run_id offset 0) as h
                order by h.flow_slug, h.step_slug, h.key) as g
        cross join lateral (
          select 1 from pgflow.limit_slots as x
           where x.flow_slug = g.flow_slug and x.step_slug = g.step_slug and x.kind = 'concurrency'
             and x.key = g.key
           limit 1
             for update
        ) as x;
      v_now := clock_timestamp();
    end if;
    with freed as (
      delete from pgflow.limit_holds as h
       where h.run_id = any(run_ids)
         and (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where w.run_id = any(run_ids)
       and (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  else
    with freed as (
      delete from pgflow.limit_holds as h
       where (select 1 from pgflow.step_tasks as t
               where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                 and t.status = 'started' and t.attempts_count = h.attempt
               limit 1) is null
      returning h.flow_slug, h.step_slug, h.key
    )
    select array_agg(f.flow_slug), array_agg(f.step_slug), array_agg(f.key) into v_flows, v_scopes, v_keys
      from freed as f;
    delete from pgflow.limit_waits as w
     where (select 1 from pgflow.step_tasks as t
             where t.run_id = w.run_id and t.step_slug = w.task_step_slug and t.task_index = w.task_index
               and t.status = 'queued'
             limit 1) is null;
  end if;
  if v_flows is null and run_ids is not null then
    return 0;
  end if;

  -- one waiter per freed slot, oldest first, still queued and not woken already (the waits of
  -- deleted runs, swept by stalled recovery, never take a wake-up). The sweep instead counts each
  -- key's unused slots (its limit, less its holds and its waiters woken already): a slot freed by a
  -- path that does not wait for claims, while a claim deferred the key's only waiter, woke nobody,
  -- and the sweep wakes that waiter instead of leaving the slot unused until its deferral ends.
  select array_agg(u.flow_slug), array_agg(u.step_slug), array_agg(u.key), array_agg(u.n)
    into v_key_flows, v_key_scopes, v_key_keys, v_key_slots
    from (
      select f.flow_slug, f.step_slug, f.key, count(*)::integer as n
        from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
       where run_ids is not null
       group by f.flow_slug, f.step_slug, f.key
      union all
      select u.flow_slug, u.step_slug, u.key, u.n::integer
        from (
          select l.flow_slug, l.step_slug, k.key,
                 l.amount
                 - (select count(*) from pgflow.limit_holds as h
                     where h.flow_slug = l.flow_slug and h.step_slug = l.step_slug and h.key = k.key)
                 - (select count(*) from pgflow.limit_waits as x
                     where x.flow_slug = l.flow_slug and x.step_slug = l.step_slug and x.kind = 'concurrency'
                       and x.key = k.key and x.woken_at is not null) as n
            from pgflow.flow_limits as l
           cross join lateral (
             select distinct w.key from pgflow.limit_waits as w
              where w.flow_slug = l.flow_slug and w.step_slug = l.step_slug and w.kind = 'concurrency'
                and w.woken_at is null and w.visible_at > v_now
           ) as k
           where run_ids is null and l.kind = 'concurrency'
        ) as u
       where u.n > 0
    ) as u;

  -- A waiter is woken only with its message locked here (pgflow.lock_waiting_messages), and its
  -- wait row is locked only then: a message another transaction holds cannot be made visible now,
  -- and marked woken with its message still hidden, the waiter was passed over by the key's next
  -- freed slot and by the sweep until its deferral ended. Its slot goes to the key's next waiter
  -- instead, tried in the next round (at most three); a waiter left out stays unwoken for the next
  -- release or sweep to wake. The wait row of a queued task is written only by the holder of its
  -- message (a claim deferring or taking the task, or this), so two releases share a key's waiters
  -- without waiting for each other, and a claim holding a waiter's message never waits for a wait
  -- row this transaction locked.
  for v_round in 1..3 loop
    exit when v_key_slots is null or not exists (select 1 from unnest(v_key_slots) as n where n > 0);
    select array_agg(x.row_id order by k.key_no, x.deferred_at, x.message_id),
           array_agg(x.queue_name order by k.key_no, x.deferred_at, x.message_id),
           array_agg(x.message_id order by k.key_no, x.deferred_at, x.message_id),
           array_agg(k.key_no order by k.key_no, x.deferred_at, x.message_id)
      into v_rows, v_queues, v_msgs, v_key_nos
      from unnest(v_key_flows, v_key_scopes, v_key_keys, v_key_slots)
           with ordinality as k(flow_slug, step_slug, key, n, key_no)
     cross join lateral (
       select x.ctid as row_id, x.queue_name, x.message_id, x.deferred_at
         from pgflow.limit_waits as x
        where x.flow_slug = k.flow_slug and x.step_slug = k.step_slug and x.kind = 'concurrency'
          and x.key = k.key and x.woken_at is null and x.visible_at > v_now
          and x.ctid <> all(v_tried)
          and (select 1 from pgflow.step_tasks as t
                where t.run_id = x.run_id and t.step_slug = x.task_step_slug
                  and t.task_index = x.task_index and t.status = 'queued'
                limit 1) is not null
        order by x.deferred_at, x.message_id
        limit k.n
     ) as x
     where k.n > 0;
    exit when v_rows is null;
    v_tried := v_tried || v_rows;

    select array_agg(q.queue_name), array_agg(m.msg_id) into v_locked_queues, v_locked_msgs
      from (select distinct c.queue_name from unnest(v_queues) as c(queue_name)) as q
     cross join lateral unnest(pgflow.lock_waiting_messages(
             q.queue_name,
             array(select c.msg_id from unnest(v_queues, v_msgs) as c(queue_name, msg_id)
                    where c.queue_name = q.queue_name))) as m(msg_id);

    -- a wait row another release woke, or a claim deferred again, since it was read above has a
    -- new version (its row id no longer matches) and is left for the next round's waiter
    with woken as (
      update pgflow.limit_waits as w
         set visible_at = v_now, woken_at = v_now
        from unnest(v_rows, v_queues, v_msgs, v_key_nos) as c(row_id, queue_name, msg_id, key_no)
       where w.ctid = c.row_id and w.woken_at is null and w.visible_at > v_now
         and exists (select 1 from unnest(v_locked_queues, v_locked_msgs) as l(queue_name, msg_id)
                      where l.queue_name = c.queue_name and l.msg_id = c.msg_id)
      returning w.queue_name, w.message_id, c.key_no
    )
    select array_agg(w.queue_name), array_agg(w.message_id), array_agg(w.key_no)
      into v_woken_queues, v_woken_msgs, v_woken_keys
      from woken as w;
    perform pgflow.set_limit_visibility(g.queue_name, g.ids, array_fill(v_now, array[cardinality(g.ids)]))
       from (select w.queue_name, array_agg(w.msg_id) as ids
               from unnest(v_woken_queues, v_woken_msgs) as w(queue_name, msg_id)
              group by w.queue_name) as g;
    v_key_slots := array(
      select k.n - (select count(*) from unnest(v_woken_keys) as w(key_no) where w.key_no = k.key_no)::integer
        from unnest(v_key_slots) with ordinality as k(n, key_no)
       order by k.key_no);
  end loop;
  return coalesce(cardinality(v_flows), 0);
end;
$$;
-- 0504_function_lock_waiting_messages.sql
-- Locks, without waiting, the given messages of a queue that no other transaction holds, and returns
-- their ids: the messages pgflow.release_limit_slots can make visible now. One another transaction
-- holds is left out; its holder may be a read that locked it and then found it hidden (a read locks
-- the newest version of a message before it checks the message's visibility, and keeps that lock
-- until its claim commits), so waking that waiter would leave its message hidden.
create or replace function pgflow.lock_waiting_messages(queue_name text, msg_ids bigint[])
returns bigint[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_locked bigint[];
begin
  execute format(
    $q$
      select coalesce(array_agg(m.msg_id order by m.msg_id), '{}')
        from (select distinct o.msg_id from unnest($1) as o(msg_id)) as o
       cross join lateral (select m.msg_id from pgmq.%I as m where m.msg_id = o.msg_id
                              for update skip locked) as m
    $q$, pgmq.format_table_name(queue_name, 'q')) into v_locked using msg_ids;
  return v_locked;
end;
$$;
-- 0990_settings_hot_path.sql (for the function replaced above)
alter function pgflow.release_limit_slots(uuid[],boolean)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;

-- ---------------------------------------------------------------- 0034_queue_provisioning.sql
-- Frozen migration delta 0034_queue_provisioning (loaded by
-- pgflow_django/migrations/0034_queue_provisioning.py):
-- * pgflow.write_queue_access() checks every queue's tables with one lookup by key instead of a scan
--   of pg_attribute per queue (13 s with 350 queues, now linear);
-- * beyond 32 queues the branches of static SQL move out of pgflow.queue_access into 256 functions
--   pgflow.queue_access_000 to _255 chosen by a hash of the queue name, and pgflow.queue_access
--   dispatches to them: a new session no longer compiles one branch per queue (2.9 s with 2,000
--   queues), a call no longer compares its queue with every other, and a new or dropped queue
--   rewrites only its own function;
-- * a call that provisions a queue checks and writes only that queue's function, so compiling many
--   flows in one go stays linear;
-- * pgflow.queue_access_dynamic holds PGMQ's dynamic statements for a queue without a branch.
-- The last statement writes the functions for the queues that exist.

-- 0197_function_queue_access_dynamic.sql
-- pgflow.queue_access for a queue without a branch of static SQL: the same operations through PGMQ's
-- functions and statements built at each call (planned again every time). A queue has no branch
-- when it was created after the last pgflow.write_queue_access() or when its tables are not laid out
-- as PGMQ 1.11 to 1.13 make them; a branch is an optimisation and never the only way to a queue.
create or replace function pgflow.queue_access_dynamic(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                       messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if op = 'send' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.send_batch(queue_name, messages, headers, coalesce(numbers[1], 0)) as m(msg_id);
  elsif op = 'archive' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.archive(queue_name, msg_ids) as m(msg_id);
  elsif op in ('set', 'extend') then
    return query execute format(
      'update pgmq.%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  elsif op = 'head' then
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  else
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
end;
$$;
-- 0198_function_write_queue_access.sql
-- Writes pgflow.queue_access, the one way the engine sends, archives, hides and looks at the head of
-- a queue's messages, with a branch of static SQL for each of pgflow's queues (pgflow.engine_queues,
-- and provisioning: a queue being created in this transaction, before the row that names it). PGMQ
-- builds these statements as dynamic SQL, planned again on every call, which costs three to eight
-- times as much as running the planned statement for one message; a static statement is planned
-- once per session. A queue without a branch (one created after the last write, or whose tables are
-- not PGMQ's layout) goes through pgflow.queue_access_dynamic, so a branch is an optimisation and
-- never the only way to a queue.
-- A queue gets a branch when its table and archive have PGMQ's layout: the columns below with these
-- types and a generated message id, as PGMQ 1.11 to 1.13 create them. The tables of every queue are
-- resolved once and their columns looked up by key (a scan of pg_attribute per queue made the check
-- quadratic: 13 s with 350 queues).
-- Where the branches live: up to 32 queues, in pgflow.queue_access itself. Beyond, in 256 functions
-- pgflow.queue_access_000 to _255, each holding the branches of the queues whose
-- hashtext(queue) & 255 is its number, and pgflow.queue_access only picks the queue's function
-- (eight comparisons) and calls it. One function with a branch per queue took 2.9 s to compile in
-- each new session with 2,000 queues (compiling grows faster than the text) and compared a queue
-- with every branch before its own on each call; split, a session compiles the dispatcher and the
-- functions of the queues it uses, a call compares a queue with the few of its function, and a new
-- or dropped queue rewrites only its own function, invalidating no other function's plans. The
-- numbered functions, once made, stay (empty below 33 queues), so a session still running the
-- previous dispatcher never calls a missing one.
-- Called where pgflow creates or drops a queue and by every worker at start-up, so a PGMQ upgrade
-- that changes the tables is seen before the first claim. A call that provisions a queue while the
-- dispatcher is in place checks and writes only that queue's function (compiling many flows in one
-- go stays linear); any other call checks every queue. A function is replaced only when its text
-- changes: no DDL, so no invalidated plans in other sessions, when nothing did (a worker's start-up
-- normally writes nothing). Returns the queues that have a branch, among those it checked.
-- Writers take one advisory lock until they commit, so each sees the queues of those before it.
-- Calls inside a longer transaction (creating or dropping queues) pass wait => false: they hold
-- other locks (PGMQ's queue locks among them), and waiting for this one while its holder waits for
-- one of theirs would deadlock; such a call writes nothing and returns NULL when the lock is taken,
-- and the queue gets its branch at the next write, at the latest when a worker for it starts.
create or replace function pgflow.write_queue_access(provisioning text = null, wait boolean = true)
returns text[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  c_inline constant integer := 32;
  c_buckets constant integer := 256;  -- a power of two: a queue's function is hashtext(queue) & 255
  v_candidates text[];
  v_split boolean;
  v_tree text[];
  v_width integer := 1;
  v_dispatcher text;
  v_only integer;
  v_queues text[];
  v_tables text[];
  v_archives text[];
  v_write record;
begin
  if wait then
    perform pg_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0));
  elsif not pg_try_advisory_xact_lock(hashtextextended('pgflow:queue_access', 0)) then
    return null;
  end if;

  select coalesce(array_agg(q.queue_name), '{}') into v_candidates
    from (select e.queue_name from pgflow.engine_queues() as e(queue_name)
          union
          select lower(provisioning) where provisioning is not null) as q;
  v_split := cardinality(v_candidates) > c_inline;

  if v_split then
    -- the dispatcher: a binary tree of comparisons on the number of the queue's function
    v_tree := array(select format('return query select m.* from pgflow.%I(op, queue_name, msg_ids, numbers, messages, headers) as m;',
                                  format('queue_access_%s', lpad(b::text, 3, '0')))
                      from generate_series(0, c_buckets - 1) as b order by b);
    while cardinality(v_tree) > 1 loop
      v_tree := array(select format(E'if v_bucket < %s then\n  %s\nelse\n  %s\nend if;', (2 * i + 1) * v_width,
                                    replace(v_tree[2 * i + 1], E'\n', E'\n  '),
                                    replace(v_tree[2 * i + 2], E'\n', E'\n  '))
                        from generate_series(0, cardinality(v_tree) / 2 - 1) as i order by i);
      v_width := v_width * 2;
    end loop;
    v_dispatcher := format($body$
-- written by pgflow.write_queue_access(): more than %1$s queues, so each queue's branch is in the
-- function pgflow.queue_access_NNN numbered hashtext(queue) & %2$s
declare
  v_bucket constant integer := hashtext(lower(queue_name)) & %2$s;
begin
  %3$s
end;
$body$, c_inline, c_buckets - 1, replace(v_tree[1], E'\n', E'\n  '));
    if provisioning is not null
       and v_dispatcher = (select p.prosrc from pg_proc as p
                            where p.oid = to_regprocedure('pgflow.queue_access(text,text,bigint[],integer[],jsonb[],jsonb[])')) then
      v_only := hashtext(lower(provisioning)) & (c_buckets - 1);
    end if;
  end if;

  -- the tables of every queue checked resolved once, then their columns looked up by key
  with queues as materialized (
    select n.queue_name, n.queue_table, n.archive_table,
           to_regclass(format('pgmq.%I', n.queue_table)) as queue_oid,
           to_regclass(format('pgmq.%I', n.archive_table)) as archive_oid
      from (select q.queue_name, pgmq.format_table_name(q.queue_name, 'q') as queue_table,
                   pgmq.format_table_name(q.queue_name, 'a') as archive_table
              from unnest(v_candidates) as q(queue_name)
             where v_only is null or hashtext(q.queue_name) & (c_buckets - 1) = v_only) as n
  )
  select coalesce(array_agg(qs.queue_name order by qs.queue_name), '{}'),
         coalesce(array_agg(qs.queue_table order by qs.queue_name), '{}'),
         coalesce(array_agg(qs.archive_table order by qs.queue_name), '{}')
    into v_queues, v_tables, v_archives
    from queues as qs
   where (select count(*)
            from (values (qs.queue_oid), (qs.archive_oid)) as t(relid)
            cross join (values ('msg_id', 'bigint'::regtype), ('read_ct', 'integer'),
                               ('enqueued_at', 'timestamptz'), ('last_read_at', 'timestamptz'),
                               ('vt', 'timestamptz'), ('message', 'jsonb'), ('headers', 'jsonb'))
                         as want(column_name, column_type)
            join pg_attribute as a
              on a.attrelid = t.relid and a.attname = want.column_name and a.atttypid = want.column_type
             and not a.attisdropped) = 14
     and exists (select 1 from pg_attribute as a
                  where a.attrelid = qs.queue_oid and a.attname = 'msg_id' and (a.attidentity <> '' or a.atthasdef));

  for v_write in
    with functions as (
      select 'queue_access' as name where v_only is null
      union all
      select format('queue_access_%s', lpad(b::text, 3, '0'))
        from generate_series(0, c_buckets - 1) as b
       where (v_only is null or b = v_only)
         and (v_split or to_regprocedure(format('pgflow.queue_access_%s(text,text,bigint[],integer[],jsonb[],jsonb[])',
                                                lpad(b::text, 3, '0'))) is not null)
    ),
    branches as (
      select case when v_split then format('queue_access_%s', lpad((hashtext(q.queue_name) & (c_buckets - 1))::text, 3, '0'))
                  else 'queue_access' end as name,
             q.queue_name,
             format($branch$
  if v_queue = %1$L then
    if op = 'send' then
      return query
        insert into pgmq.%2$I as q (vt, message, headers)
        select clock_timestamp() + make_interval(secs => coalesce(numbers[1], 0)), m.message, m.headers
          from rows from (unnest(messages), unnest(headers)) with ordinality as m(message, headers, n)
         order by m.n
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'archive' then
      return query
        with archived as (
          delete from pgmq.%2$I as q where q.msg_id = any(msg_ids)
          returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%3$I as a (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers)
        select d.msg_id, d.read_ct, d.enqueued_at, d.last_read_at, d.vt, d.message, d.headers from archived as d
        returning a.msg_id, a.read_ct, a.enqueued_at, a.last_read_at, a.vt, a.message, a.headers;
    elsif op in ('set', 'extend') then
      return query
        update pgmq.%2$I as q
           set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
          from unnest(msg_ids, numbers) as o(msg_id, vt_offset)
         where q.msg_id = o.msg_id
           and (op = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
        returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers;
    elsif op = 'head' then
      return query
        select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
          from pgmq.%2$I as q
         where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
         order by pgflow.message_priority(q.headers) desc, q.msg_id
         limit 1;
    end if;
    return;
  end if;$branch$, q.queue_name, q.queue_table, q.archive_table) as branch
        from unnest(v_queues, v_tables, v_archives) as q(queue_name, queue_table, archive_table)
    ),
    holders as materialized (
      select b.name, string_agg(b.queue_name, ', ' order by b.queue_name) as queues,
             string_agg(b.branch, '' order by b.queue_name) as branches
        from branches as b
       group by b.name
    ),
    wanted as (
      select f.name,
             case when f.name = 'queue_access' and v_split then v_dispatcher
             else format($body$
-- written by pgflow.write_queue_access(): %1$s
declare
  v_queue constant text := lower(queue_name);
begin
  if op is null or op not in ('send', 'archive', 'set', 'extend', 'head') then
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %%',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
%2$s
  return query select m.* from pgflow.queue_access_dynamic(op, queue_name, msg_ids, numbers, messages, headers) as m;
end;
$body$, coalesce('a branch for each of queue ' || h.queues, 'no branch'), coalesce(h.branches, ''))
             end as source
        from functions as f
        left join holders as h on h.name = f.name
    )
    select w.name, w.source
      from wanted as w
     where w.source is distinct from (select p.prosrc from pg_proc as p
                                       where p.oid = to_regprocedure(
                                         format('pgflow.%I(text,text,bigint[],integer[],jsonb[],jsonb[])', w.name)))
     order by w.name desc  -- the numbered functions first, then the dispatcher that calls them
  loop
    execute format($create$
      create or replace function pgflow.%I(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                           messages jsonb[], headers jsonb[])
      returns setof pgmq.message_record
      language plpgsql set search_path = pg_catalog, pgflow, pgmq
      as %L
    $create$, v_write.name, v_write.source);
    if v_write.name = 'queue_access' then
      comment on function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]) is
        'One queue operation (op): send messages with headers, visible after numbers[1] seconds (ids in message order); archive msg_ids; set (or extend) the visibility of msg_ids to numbers[i] seconds from now; head: the visible message a claim takes first, among those sent before this statement. Written by pgflow.write_queue_access().';
    end if;
  end loop;
  return v_queues;
end;
$$;
-- 0199_function_queue_access.sql
-- pgflow.queue_access(op, queue_name, msg_ids, numbers, messages, headers): the engine's one way to
-- send, archive, hide and look at the head of a queue's messages. Its body is written by
-- pgflow.write_queue_access() from the queues pgflow has (the branches themselves, or beyond 32
-- queues a dispatcher to the numbered functions that hold them), so this file creates it and has it
-- written at once; the body below is only what the writer replaces.
create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                               messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  raise exception 'pgflow.queue_access has not been written: run select pgflow.write_queue_access()';
end;
$$;
select pgflow.write_queue_access();

-- ---------------------------------------------------------------- 0035_schedule_catch_up.sql
-- Frozen migration delta 0035_schedule_catch_up (loaded by pgflow_django/migrations/0035_schedule_catch_up.py):
-- a schedule whose planned ticks are all in the past (every scheduler was down for longer than its
-- plan lasted) is no longer due until it is planned again from now. Its catch-up policy used to
-- pick the stale end of the old plan (catch_up 'latest' fired the last planned tick, 80 minutes late
-- after a 3-hour outage of a per-minute schedule, then the real latest one on the next pass).

-- 0453_function_due_schedule_names.sql
-- The schedules due at `now`, earliest first, at most max_schedules: enabled, not paused, with a
-- planned tick whose fire time has come. Schedules whose input is a Python callable are included
-- only when `with_callables` (the Python scheduler, which evaluates them; pg_cron cannot).
-- A schedule whose planned ticks are all at or before `now` is not due until it is planned again
-- (unless its expression has no tick left, planned_until 'infinity'): cron ticks after its plan may be
-- due too (every scheduler was down for longer than the plan lasted), and firing the stale end of
-- the old plan would apply the catch-up policy to the wrong ticks. The Python scheduler plans such a
-- schedule from now before it fires (pgflow_django.schedules.planner).
create or replace function pgflow.due_schedule_names(now timestamptz, max_schedules integer, with_callables boolean)
returns text[]
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  select coalesce(array_agg(d.schedule_name order by d.next_fire_at, d.schedule_name), '{}')
    from (select s.schedule_name, s.next_fire_at
            from pgflow.schedules as s
           where s.enabled and s.paused_reason is null and s.next_fire_at <= due_schedule_names.now
             and (with_callables or s.input_callable is null)
             and (s.upcoming[cardinality(s.upcoming)] > due_schedule_names.now
                  or s.planned_until = 'infinity')
           order by s.next_fire_at, s.schedule_name
           limit max_schedules) as d
$$;

-- ---------------------------------------------------------------- 0036_return_unstarted_tasks.sql
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

-- ---------------------------------------------------------------- 0037_schedule_isolation.sql
-- Frozen migration delta 0037_schedule_isolation (loaded by pgflow_django/migrations/0037_schedule_isolation.py):
-- one schedule that cannot be planned (a stored cron that no longer parses, a time zone the planning
-- host does not know) no longer stops every schedule's scheduler pass. Its reason is recorded in the
-- new column pgflow.schedules.plan_error (when: plan_failed_at), and pgflow.plan_schedules takes
-- failures beside plans in the same call: it records the failures, stores the plans and clears the
-- error of every schedule planned again, all in one statement. pgflow.fire_due_schedules holds back
-- a schedule whose input its flow refuses (not an array for a root map step) alone: it used to make
-- pgflow.start_flows fail for every schedule of that flow.

-- 0180_table_schedules.sql
alter table pgflow.schedules add column plan_error text, add column plan_failed_at timestamptz;
-- 0455_function_plan_schedules.sql
-- Stores what Python planned (cron arithmetic, time zones and DST stay in one place). `plans` is a
-- JSON array whose elements are either a plan or a failure:
--   {"schedule": name, "revision": n, "ticks": [timestamps], "planned_until": t}
--       ticks merged into `upcoming` (sorted, without duplicates, none at or before the last fired
--       tick), next_fire_at recomputed, plan_error and plan_failed_at cleared;
--   {"schedule": name, "revision": n, "error": text, "failed_at": t}
--       a schedule Python could not plan (its cron no longer parses, its time zone is unknown to the
--       planning host): the reason and the moment are recorded, its planned ticks stay as they are.
-- One statement for all of them, so one schedule's failure never holds back another's plan. An
-- element made for another revision of the definition (the schedule was edited meanwhile) is
-- ignored. Returns the names of the schedules planned (not those whose failure was recorded).
create or replace function pgflow.plan_schedules(plans jsonb)
returns setof text
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if plans is null or jsonb_typeof(plans) <> 'array' then
    raise exception 'plan_schedules: plans must be a JSON array of {"schedule", "revision", "ticks", "planned_until"} or {"schedule", "revision", "error", "failed_at"}'
      using errcode = '22023';
  end if;
  return query
    with p as (
      select e.value ->> 'schedule' as name, (e.value ->> 'revision')::bigint as revision,
             array(select t::timestamptz from jsonb_array_elements_text(e.value -> 'ticks') as t) as ticks,
             (e.value ->> 'planned_until')::timestamptz as planned_until,
             e.value ->> 'error' as error,
             coalesce((e.value ->> 'failed_at')::timestamptz, clock_timestamp()) as failed_at
        from jsonb_array_elements(plans) as e(value)
    ), merged as (
      select s.schedule_name, p.planned_until, p.error, p.failed_at,
             case when p.error is not null then s.upcoming
                  else coalesce(array(select distinct u.tick from unnest(s.upcoming || p.ticks) as u(tick)
                                       where s.last_tick is null or u.tick > s.last_tick
                                       order by u.tick), '{}')
             end as upcoming
        from pgflow.schedules as s
        join p on p.name = s.schedule_name and p.revision = s.revision
    ), stored as (
      update pgflow.schedules as s
         set upcoming = m.upcoming,
             planned_until = case when m.error is null then greatest(s.planned_until, m.planned_until)
                                  else s.planned_until end,
             next_fire_at = case when m.error is null
                                 then pgflow.schedule_next_fire_at(s.schedule_name, m.upcoming, s.jitter_seconds)
                                 else s.next_fire_at end,
             plan_error = left(m.error, 2000),
             plan_failed_at = case when m.error is null then null else m.failed_at end
        from merged as m
       where s.schedule_name = m.schedule_name
      returning s.schedule_name, m.error is null as planned
    )
    select st.schedule_name from stored as st where st.planned;
end;
$$;
-- 0454_function_fire_due_schedules.sql
-- Fires every due tick of at most max_schedules schedules: starts each tick's run through
-- pgflow.start_flows and records the tick in pgflow.schedule_ticks in this same transaction, so a
-- tick fires once, or (when the transaction is lost) not at all and is fired by the next call.
-- Concurrent callers do not wait: a transaction-level advisory try-lock lets one caller fire while
-- the others return no rows at once; schedule rows being edited are skipped (SKIP LOCKED) and the
-- ledger's primary key refuses a tick recorded before, whatever the isolation level.
-- Every due tick is consumed, fired or missed, as pgflow.schedule_due_ticks decides per catch-up
-- policy; a schedule whose planned ticks are all in the past waits to be planned again from now
-- (pgflow.due_schedule_names). `inputs` carries the inputs of callable-input schedules, evaluated by the Python scheduler:
-- a JSON array of {"schedule": name, "tick": timestamp, "input": value}; a callable schedule with a
-- firing tick it has no input for is left due. When starting a flow's runs fails (e.g. the flow was
-- deleted), its schedules keep their ticks and record the error in last_error; the others still fire.
-- An input the flow refuses (not an array, for a flow whose root step is a map) holds back only its
-- own schedule, with the reason in last_error, before the flow's runs are started together.
-- Returns the ticks fired by this call.
create or replace function pgflow.fire_due_schedules(
  now timestamptz default clock_timestamp(),
  max_schedules integer default 500,
  inputs jsonb default null,
  grace interval default interval '60 seconds'
)
returns table (schedule_name text, tick timestamptz, run_id uuid)
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_names text[];
  v_plan record;
  v_flow record;
  v_held text[] := '{}';
  v_fired_names text[] := '{}';
  v_fired_ticks timestamptz[] := '{}';
  v_fired_ids uuid[] := '{}';
  v_new_names text[];
  v_new_ticks timestamptz[];
  v_new_ids uuid[];
  v_new_inputs jsonb;
begin
  if fire_due_schedules.now is null or max_schedules is null or max_schedules < 1 then
    raise exception 'fire_due_schedules: now must be a timestamp and max_schedules >= 1, got % and %',
      coalesce(fire_due_schedules.now::text, 'NULL'), coalesce(max_schedules::text, 'NULL')
      using errcode = '22023';
  end if;
  if inputs is not null and jsonb_typeof(inputs) <> 'array' then
    raise exception 'fire_due_schedules: inputs must be a JSON array of {"schedule", "tick", "input"}'
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(hashtextextended('pgflow:fire_due_schedules', 0)) then
    return;
  end if;

  select array_agg(l.schedule_name) into v_names
    from (select s.schedule_name
            from pgflow.schedules as s
           where s.schedule_name = any(pgflow.due_schedule_names(fire_due_schedules.now, max_schedules,
                                                                 inputs is not null))
             for update skip locked) as l;
  if v_names is null then
    return;
  end if;

  select array_agg(d.schedule_name order by d.schedule_name, d.tick) as names,
         array_agg(d.tick order by d.schedule_name, d.tick) as ticks,
         array_agg(d.fire order by d.schedule_name, d.tick) as fires,
         array_agg(d.flow_slug order by d.schedule_name, d.tick) as flows,
         jsonb_agg(case when d.input_callable is null then d.input else i.input end
                   order by d.schedule_name, d.tick) as inputs,
         coalesce(array_agg(distinct d.schedule_name)
                    filter (where d.fire and d.input_callable is not null and i.input is null), '{}') as lacking
    into v_plan
    from pgflow.schedule_due_ticks(v_names, fire_due_schedules.now, grace) as d
    left join lateral (
      select e.value -> 'input' as input
        from jsonb_array_elements(coalesce(inputs, '[]'::jsonb)) as e(value)
       where e.value ->> 'schedule' = d.schedule_name and (e.value ->> 'tick')::timestamptz = d.tick
         and e.value ? 'input'
       limit 1
    ) as i on d.input_callable is not null;
  if v_plan.names is null then
    return;
  end if;
  v_held := v_plan.lacking;

  -- pgflow.start_flows refuses all the inputs of a call when one is not an array for a flow whose
  -- root step is a map: such an input holds back its own schedule here, not its flow's others
  with refused as (
    select distinct on (p.name) p.name, p.flow, m.step_slug, jsonb_typeof(p.input) as got
      from rows from (unnest(v_plan.names), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) as p(name, fire, flow, input)
      join pgflow.steps as m on m.flow_slug = p.flow and m.step_type = 'map' and m.deps_count = 0
     where p.fire and jsonb_typeof(p.input) <> 'array' and not (p.name = any(v_held))
     order by p.name, m.step_index
  ), recorded as (
    update pgflow.schedules as s
       set last_error = left(format('starting flow %s: root map step %s needs an array input, got %s',
                                    r.flow, r.step_slug, coalesce(r.got, 'null')), 2000)
      from refused as r
     where s.schedule_name = r.name
    returning s.schedule_name
  )
  select v_held || coalesce(array_agg(r.schedule_name), '{}') into v_held from recorded as r;

  for v_flow in
    select p.flow, array_agg(p.name order by p.n) as names, array_agg(p.tick order by p.n) as ticks,
           jsonb_agg(p.input order by p.n) as inputs
      from rows from (unnest(v_plan.names), unnest(v_plan.ticks), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) with ordinality as p(name, tick, fire, flow, input, n)
     where p.fire and not (p.name = any(v_held))
     group by p.flow
     order by p.flow
  loop
    begin
      with fresh as (
        insert into pgflow.schedule_ticks as st (schedule_name, tick, run_id)
        select u.name, u.tick, pgflow.uuid_v7()
          from unnest(v_flow.names, v_flow.ticks) as u(name, tick)
        on conflict do nothing
        returning st.schedule_name, st.tick, st.run_id
      )
      select array_agg(f.schedule_name order by f.schedule_name, f.tick),
             array_agg(f.tick order by f.schedule_name, f.tick),
             array_agg(f.run_id order by f.schedule_name, f.tick),
             jsonb_agg(u.input order by f.schedule_name, f.tick)
        into v_new_names, v_new_ticks, v_new_ids, v_new_inputs
        from fresh as f
        join rows from (unnest(v_flow.names), unnest(v_flow.ticks), jsonb_array_elements(v_flow.inputs))
             as u(name, tick, input) on u.name = f.schedule_name and u.tick = f.tick;
      if v_new_ids is not null then
        perform pgflow.start_flows(v_flow.flow, v_new_inputs, v_new_ids);
        v_fired_names := v_fired_names || v_new_names;
        v_fired_ticks := v_fired_ticks || v_new_ticks;
        v_fired_ids := v_fired_ids || v_new_ids;
      end if;
    exception when others then
      v_held := v_held || v_flow.names;
      update pgflow.schedules as s
         set last_error = left('starting flow ' || v_flow.flow || ': ' || sqlerrm, 2000)
       where s.schedule_name = any(v_flow.names);
    end;
  end loop;

  with consumed as (
    select p.name, count(*) filter (where not p.fire) as missed
      from rows from (unnest(v_plan.names), unnest(v_plan.fires)) as p(name, fire)
     where not (p.name = any(v_held))
     group by p.name
  ), latest as (
    select distinct on (f.name) f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick desc
  ), remaining as (
    select s.schedule_name, r.upcoming,
           pgflow.schedule_next_fire_at(s.schedule_name, r.upcoming, s.jitter_seconds) as next_fire_at
      from pgflow.schedules as s
     cross join lateral (
       select coalesce(array(select u.tick from unnest(s.upcoming) as u(tick)
                              where pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds)
                                    > fire_due_schedules.now
                              order by u.tick), '{}') as upcoming
     ) as r
     where s.schedule_name = any(array(select c.name from consumed as c))
  )
  update pgflow.schedules as s
     set upcoming = r.upcoming,
         next_fire_at = r.next_fire_at,
         last_tick = greatest(s.last_tick, l.tick),
         last_run_id = coalesce(l.run_id, s.last_run_id),
         last_fired_at = case when l.tick is null then s.last_fired_at else clock_timestamp() end,
         missed_ticks = s.missed_ticks + c.missed,
         last_error = null
    from consumed as c
    join remaining as r on r.schedule_name = c.name
    left join latest as l on l.name = c.name
   where s.schedule_name = c.name;

  return query
    select f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick;
end;
$$;

-- ---------------------------------------------------------------- 0038_worker_support_queue.sql
-- Frozen migration delta 0038_worker_support_queue (loaded by pgflow_django/migrations/0038_worker_support_queue.py):
-- one worker process may poll many queues (manage.py pgflow_worker with no selection serves every
-- flow), so each row of pgflow.worker_support records the queue of its (flow, step) pair. Such a
-- worker's pgflow.workers.queue_name is '*'. Existing rows take their worker's one queue; rows of
-- workers still running the previous release stay null and mean that queue.

-- 0135_table_worker_support.sql
alter table pgflow.worker_support add column queue_name text;
update pgflow.worker_support as s
   set queue_name = w.queue_name
  from pgflow.workers as w
 where w.worker_id = s.worker_id;
