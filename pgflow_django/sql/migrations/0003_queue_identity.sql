-- Frozen migration delta 0003_queue_identity (loaded by pgflow_django/migrations/0003_queue_identity.py
-- after the upgrade preflight has taken the migration lock and the table locks and found nothing).
-- Persisted physical queue identity: steps and tasks carry their lowercase queue name, message ids
-- are unique per queue, every queue operation uses the task's queue snapshot; tightened slug rules;
-- generated-queue ownership checks; message classification in the claim; subscription pauses.

-- 0010_function_is_valid_slug.sql
-- Slug rules: letters, digits and underscores, no leading digit, no leading or trailing underscore,
-- no double underscore ('__' is reserved for generated queue names), at most 128 characters,
-- reserved words refused. The Python DSL mirrors this function (a parity test checks it).
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language sql
immutable
as $$
  select slug is not null
     and length(slug) between 1 and 128
     and slug ~ '^[A-Za-z][A-Za-z0-9_]*$'
     and slug !~ '_$'
     and position('__' in slug) = 0
     and lower(slug) <> all (array['run'])
$$;

-- 0012_function_is_valid_queue_name.sql
-- Queue names pgflow stores: lowercase canonical physical identities that fit PGMQ's 47-character
-- limit (PGMQ lowercases table names, so 'Orders' and 'orders' would address the same tables).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
as $$
  select queue_name is not null
     and length(queue_name) between 1 and 47
     and queue_name ~ '^[a-z0-9_]+$'
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
  select 2
$$;

-- queue snapshots, backfilled to the only route the previous release had: lower(flow_slug)
alter table pgflow.steps add column queue_name text;
update pgflow.steps set queue_name = lower(flow_slug);
alter table pgflow.steps
  alter column queue_name set not null,
  add constraint steps_queue_name_check check (pgflow.is_valid_queue_name(queue_name));

alter table pgflow.step_tasks add column queue_name text;
update pgflow.step_tasks set queue_name = lower(flow_slug);
alter table pgflow.step_tasks
  alter column queue_name set not null,
  add constraint step_tasks_queue_name_check check (pgflow.is_valid_queue_name(queue_name));

drop index pgflow.step_tasks_message_idx;
-- PGMQ message ids are queue-scoped: (queue_name, message_id) is a message's identity.
create unique index step_tasks_queue_message_key on pgflow.step_tasks (queue_name, message_id)
  where message_id is not null;

-- PGMQ lowercases table names: flows differing only in case would share a queue.
create unique index flows_slug_lower_key on pgflow.flows (lower(flow_slug));

create unique index steps_slug_lower_key on pgflow.steps (flow_slug, lower(step_slug));

alter type pgflow.completion_item add attribute queue_name text;

drop function pgflow.archive_task_messages(text[], bigint[]);
drop function pgflow.add_step(text, text, text[], integer, integer, integer, integer, text, jsonb, jsonb, text, text);

-- claims, completions and step transitions change no indexed column any more: HOT updates
drop index pgflow.step_tasks_started_idx;
drop index pgflow.step_tasks_flow_idx;
drop index pgflow.step_states_ready_idx;
drop index pgflow.step_states_flow_idx;
alter table pgflow.step_tasks set (fillfactor = 80);
alter table pgflow.step_states set (fillfactor = 80);

-- 0170_table_worker_pauses.sql
-- One persisted switch per worker subscription (a plain worker's subscription is (flow_slug, '')).
-- A row exists only while the subscription is paused: 'fatal' is set by a claim that met
-- unsupported work, 'operator' by pgflow_pause. Workers refuse to start while paused and running
-- ones stop at their next heartbeat; pgflow_resume deletes the row.
create table pgflow.worker_pauses (
  flow_slug text not null,
  step_slug text not null default '',
  queue_name text not null,
  reason text not null check (reason in ('fatal', 'operator')),
  detail text,
  paused_at timestamptz not null default now(),
  primary key (flow_slug, step_slug)
);

-- 0205_function_archive_messages.sql
-- Archive the messages of the given tasks, one PGMQ call per queue (each task's queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.ids)
     from (
       select m.queue_name, array_agg(m.msg_id) as ids
         from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
        where m.msg_id is not null
        group by m.queue_name
     ) as g
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(g.queue_name, 'q'))) is not null;
end;
$$;

-- 0206_function_resolve_queue_spelling.sql
-- The exact pgmq.meta spelling of a canonical queue name, for metadata-sensitive PGMQ calls such as
-- drop_queue (PGMQ lowercases table names but not its metadata). Exactly one case-insensitive match
-- is required: none means the queue is missing, several are aliases of the same tables.
create or replace function pgflow.resolve_queue_spelling(queue_name text)
returns text
language plpgsql
stable
as $$
declare
  v_matches text[];
begin
  select array_agg(m.queue_name::text order by m.queue_name) into v_matches
    from pgmq.meta as m where lower(m.queue_name) = lower(resolve_queue_spelling.queue_name);
  if v_matches is null then
    raise exception 'PGMQ queue % does not exist (no pgmq.meta row matches it)', quote_literal(queue_name)
      using errcode = 'P0002';
  end if;
  if cardinality(v_matches) > 1 then
    raise exception 'PGMQ queue % is ambiguous: pgmq.meta rows % address the same tables; remove the pgmq.meta row of each alias you do not use (delete from pgmq.meta where queue_name = ...; dropping an alias queue would drop the shared tables)',
      quote_literal(queue_name), array_to_string(v_matches, ', ')
      using errcode = '21000';
  end if;
  return v_matches[1];
end;
$$;

-- 0207_function_queue_objects_problem.sql
-- What is wrong with a PGMQ queue's physical objects (queue table, archive table, message id
-- sequence), or NULL when all are there.
create or replace function pgflow.queue_objects_problem(queue_name text)
returns text
language sql
stable
as $$
  select nullif(concat_ws(', ',
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'q'))) is null
                then 'queue table pgmq.' || pgmq.format_table_name(queue_name, 'q') || ' is missing' end,
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'a'))) is null
                then 'archive table pgmq.' || pgmq.format_table_name(queue_name, 'a') || ' is missing' end,
           case when to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'q') || '_msg_id_seq')) is null
                then 'sequence pgmq.' || pgmq.format_table_name(queue_name, 'q') || '_msg_id_seq is missing' end
         ), '')
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

-- 0210_function_create_flow.sql
-- Idempotent: the flow row is created once (options of an existing flow are left as they are; the
-- compiler updates them). No queue DDL here: add_step and the compiler provision the flow's queue
-- through pgflow.provision_generated_queue. A new flow whose default queue lower(flow_slug) already
-- exists in PGMQ, or that differs only in case from an existing flow, is refused.
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

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout)
  values (flow_slug, coalesce(max_attempts, 3), coalesce(base_delay, 1), coalesce(timeout, 60))
  on conflict on constraint flows_pkey do nothing;

  select * into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;

  return v_flow;
end;
$$;

-- 0220_function_add_step.sql
-- Appends a step in definition order. Idempotent for an identical definition; any other change to an
-- existing step is refused (a concrete flow's shape is fixed: compile a new slug instead). The
-- step's queue (omitted: the flow's default queue lower(flow_slug), the only route of a plain flow)
-- is checked and provisioned through pgflow.provision_generated_queue.
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
  v_queue text := coalesce(queue_name, lower(flow_slug));
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

  if v_queue <> lower(flow_slug) then
    raise exception 'step %.%: queue % is not a route of flow %; a plain flow routes every step to its default queue %',
      flow_slug, step_slug, quote_literal(v_queue), quote_literal(flow_slug), quote_literal(lower(flow_slug))
      using errcode = '22023';
  end if;
  if exists (select 1 from pgflow.steps as s
              where s.flow_slug = add_step.flow_slug and lower(s.step_slug) = lower(add_step.step_slug)
                and s.step_slug <> add_step.step_slug) then
    raise exception 'step slug % of flow % differs only in case from an existing step: choose another slug',
      quote_literal(step_slug), quote_literal(flow_slug)
      using errcode = '23505';
  end if;

  perform pgflow.provision_generated_queue(flow_slug, v_queue);

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
    flow_slug, step_slug, step_type,
    coalesce((select max(s.step_index) + 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug), 0),
    cardinality(v_deps),
    max_attempts, base_delay, timeout, start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, v_queue
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
  v_queues text[];
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
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
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
    returning t.queue_name, t.message_id
  )
  select array_agg(t.queue_name), array_agg(t.message_id) into v_queues, v_msgs from tasks as t;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
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

-- 0260_function_start_ready_steps.sql
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

-- 0296_type_claim_record.sql
-- One message of a claim batch and what the claim did with it (see pgflow.start_tasks).
create type pgflow.claim_record as (
  outcome text,
  message_id bigint,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  attempt integer,
  input jsonb
);

-- 0297_function_is_pgflow_message.sql
-- Whether a message body looks like pgflow work: a JSON object carrying flow_slug, run_id (a uuid),
-- step_slug and a non-negative integer task_index. Used only to classify messages that match no
-- task; a body never authorises work.
create or replace function pgflow.is_pgflow_message(message jsonb)
returns boolean
language sql
immutable
as $$
  select coalesce(
    jsonb_typeof(message) = 'object'
    and jsonb_typeof(message->'flow_slug') = 'string'
    and jsonb_typeof(message->'step_slug') = 'string'
    and jsonb_typeof(message->'run_id') = 'string'
    and (message->>'run_id') ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
    and jsonb_typeof(message->'task_index') = 'number'
    and (message->>'task_index') ~ '^[0-9]+$',
    false)
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
--   fatal       no task but a pgflow-shaped body, or the task belongs to another flow's route
-- If any message is fatal, nothing is claimed or archived: every message of the batch is made
-- visible now (outcome 'released' for the others), the subscription (flow_slug, '') is paused with
-- reason 'fatal', and the rows are returned rather than an error raised, so the reset and the pause
-- commit. The worker then stops with one error naming the queue and message ids.
create or replace function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid)
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
  v_unmatched bigint[];
  v_bodies jsonb := '{}'::jsonb;
  v_fatal bigint[];
  v_claimed pgflow.step_tasks[];
begin
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
    values (start_tasks.flow_slug, '', v_queue, 'fatal',
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

  -- the run and step were checked above; a run that fails or a step that is skipped meanwhile
  -- terminalizes its queued tasks, which the status recheck on the locked row sees
  with claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
           last_worker_id = start_tasks.worker_id
      from unnest(v_runs, v_steps, v_indexes, v_outcomes) as k(run_id, step_slug, task_index, outcome)
     where k.outcome = 'claimed'
       and t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
       and t.status = 'queued'
    returning t.*
  )
  select array_agg(c) into v_claimed from claimed as c;

  perform pgflow.set_vt_batch(v_queue, array_agg(c.message_id), array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2))
     from unnest(v_claimed) as c
     join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
     join pgflow.flows as f on f.flow_slug = c.flow_slug
   having count(*) > 0;

  perform pgflow.set_vt_batch(v_queue, array_agg(t.message_id),
                              array_agg(greatest(2, ceil(extract(epoch from
                                t.started_at + make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
                                - clock_timestamp())))::integer))
     from unnest(v_runs, v_steps, v_indexes, v_outcomes) as k(run_id, step_slug, task_index, outcome)
     join pgflow.step_tasks as t
       on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     join pgflow.flows as f on f.flow_slug = t.flow_slug
    where k.outcome = 'started' and t.status = 'started'
   having count(*) > 0;

  perform pgflow.archive_task_messages(array_agg(v_queue), array_agg(e.id))
     from unnest(v_ids, v_outcomes) as e(id, outcome)
    where e.outcome in ('terminal', 'foreign')
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
      from unnest(v_ids, v_outcomes) as e(id, outcome)
     where e.outcome <> 'claimed'
        or not exists (select 1 from unnest(coalesce(v_claimed, '{}')) as c where c.message_id = e.id)
     order by 2;
end;
$$;

-- 0301_function_start_tasks_legacy.sql
-- The previous release's claim, kept as a compatibility wrapper for workers still draining during a
-- coordinated upgrade: it claims through the flow's default queue lower(flow_slug) and returns the
-- old record of each claimed task only.
create or replace function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid)
returns setof pgflow.step_task_record
language sql
as $$
  select c.flow_slug, c.run_id, c.step_slug, c.task_index, c.message_id, c.attempt, c.input
    from pgflow.start_tasks(lower(flow_slug), flow_slug, msg_ids, worker_id) as c
   where c.outcome = 'claimed'
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
  v_queues text[];
  v_msgs bigint[];
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

  perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);

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
    returning t.queue_name, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('queue_name', rl.queue_name, 'message_id', rl.message_id,
                                               'run_id', rl.run_id, 'step_slug', rl.step_slug,
                                               'task_index', rl.task_index)), '[]'::jsonb)
    into v_released
    from released as rl;

  perform pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]))
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
    from pgflow.runs as r
    join pgflow.step_tasks as t on t.run_id = r.run_id
    join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows as f on f.flow_slug = t.flow_slug
   where r.status = 'started' and t.status = 'started'
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
    select t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
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
    returning t.queue_name, t.message_id
  ), visible as (
    select pgflow.set_vt_batch(g.queue_name, g.ids, array_fill(0, array[cardinality(g.ids)]))
      from (select rq.queue_name, array_agg(rq.message_id) as ids
              from requeued as rq where rq.message_id is not null group by rq.queue_name) as g
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
    -- an earlier exhaustion in this loop may have skipped the step or failed the run meanwhile
    if exists (select 1 from pgflow.runs as r where r.run_id = v_stalled.run_id and r.status = 'started')
       and exists (select 1 from pgflow.step_tasks as t
                    where t.run_id = v_stalled.run_id and t.step_slug = v_stalled.step_slug
                      and t.task_index = v_stalled.task_index and t.status = 'started') then
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
-- tasks, archived messages older than the retention in every queue a step routes to, and workers
-- stopped or silent for that long
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

-- 0370_function_delete_flow_and_data.sql
-- Deletes one concrete flow: runs, states, tasks, steps and dependencies, then drops the queues
-- generated for it, then the flow row last. Every queue of the flow's persisted route is validated
-- first (exactly one pgmq.meta spelling, its objects present, referenced by no other flow): a
-- missing, ambiguous, malformed or shared queue fails the whole call and drops nothing. Runtime rows
-- are locked before the queues (the order every writer uses). Messages are not archived one by one:
-- dropping a queue drops its table and archive together. Serialised with compilation by the
-- per-flow advisory lock.
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

  select array_agg(distinct q order by q) into v_queues
    from (select lower(delete_flow_and_data.flow_slug) as q
          union
          select s.queue_name from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug) as route;

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

-- 0385_function_check_flow_queues.sql
-- Verifies that every queue of a persisted flow's route (its default queue and each step's queue)
-- exists exactly once in pgmq.meta with its queue table, archive table and sequence.
create or replace function pgflow.check_flow_queues(flow_slug text)
returns void
language plpgsql
stable
as $$
declare
  v_queue text;
  v_problem text;
begin
  for v_queue in
    select lower(check_flow_queues.flow_slug)
    union
    select s.queue_name from pgflow.steps as s where s.flow_slug = check_flow_queues.flow_slug
  loop
    perform pgflow.resolve_queue_spelling(v_queue);
    v_problem := pgflow.queue_objects_problem(v_queue);
    if v_problem is not null then
      raise exception 'queue % of flow % is malformed: %', quote_literal(v_queue), quote_literal(flow_slug), v_problem
        using errcode = '55000';
    end if;
  end loop;
end;
$$;

-- 0390_function_ensure_flow_compiled.sql
-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape; runtime options
-- updated in place and listed), mismatch (nothing changed; differences listed) or recompiled (a
-- mismatch replaced because allow_recompile is set: the flow's data is deleted first). Every queue
-- of the route is checked before anything changes: a new flow never adopts an existing queue, a
-- verified flow's queues must exist with all their objects. Takes the migration lock in shared mode,
-- so compilations never interleave with a pgflow migration.
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
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
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
      perform pgflow.check_flow_queues(flow_slug);
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
  perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
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
    set reason = excluded.reason, detail = excluded.detail, paused_at = now()
    where p.reason <> 'fatal' or excluded.reason = 'fatal';
  select * into v_pause from pgflow.worker_pauses as p
   where p.flow_slug = pause_subscription.flow_slug and p.step_slug = coalesce(pause_subscription.step_slug, '');
  return v_pause;
end;
$$;

-- 0410_function_resume_subscription.sql
-- Clears a subscription's pause, fatal or operator; true when there was one.
create or replace function pgflow.resume_subscription(flow_slug text, step_slug text default '')
returns boolean
language plpgsql
as $$
begin
  delete from pgflow.worker_pauses as p
   where p.flow_slug = resume_subscription.flow_slug and p.step_slug = coalesce(resume_subscription.step_slug, '');
  return found;
end;
$$;

-- 0420_function_subscription_pause.sql
-- The pause of a worker subscription, or NULL when it may run. A plain worker's subscription is
-- (flow_slug, ''); a pause of the whole flow also holds its step subscriptions.
create or replace function pgflow.subscription_pause(flow_slug text, step_slug text default '')
returns pgflow.worker_pauses
language sql
stable
as $$
  select p.* from pgflow.worker_pauses as p
   where p.flow_slug = subscription_pause.flow_slug
     and p.step_slug in ('', coalesce(subscription_pause.step_slug, ''))
   order by (p.reason = 'fatal') desc, p.step_slug desc
   limit 1
$$;
