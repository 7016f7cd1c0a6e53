-- Frozen migration delta 0044_flow_versions (loaded by pgflow_django/migrations/0044_flow_versions.py):
-- versions of a flow under one slug.
-- * pgflow.flows.version_of and version_number (generated from the stored slug: version 1 keeps the
--   flow's slug, version N >= 2 is stored as slug___vN with its own rows and queues) and
--   pgflow.flows.version (the code's version name, or a digest of its definition). Every existing
--   flow becomes version 1 of its slug; its runs, schedules, limits and idempotency keys keep it.
-- * New: pgflow.version_of, pgflow.is_valid_flow_slug, pgflow.flow_version (the version a start
--   uses), pgflow.version_in_service (the versions that need workers), pgflow.version_shape and
--   pgflow.compile_flow_version (compiles a definition as a version).
-- * Changed: pgflow.create_flow takes a version's stored slug (and a routed flow's longer slug);
--   schedules (fire_due_schedules, trigger_schedule) and child flows (start_child_runs) start the
--   newest version of their flow, and so does a rerun (rerun); an operator's pause of a flow's slug
--   holds every version (subscription_pause), may be set while any version exists (pause_subscription)
--   and stays while one remains (delete_flow_and_data).

-- 0011_function_version_of.sql
-- The slug a flow version belongs to. The first version of a flow is stored under the flow's own slug;
-- version N >= 2 under slug || '___v' || N, a name no slug, generated queue or step queue can take
-- ('__' is refused in slugs, and a generated name never holds '___'), so each version keeps its own
-- rows and its own queues while runs, schedules and limits of the first version keep their slug.
create or replace function pgflow.version_of(flow_slug text)
returns text
language sql set search_path = pg_catalog, pgflow, pgmq
immutable parallel safe
as $$
  select regexp_replace(flow_slug, '___v([2-9]|[1-9][0-9]+)$', '')
$$;

-- 0014_function_is_valid_flow_slug.sql
-- A stored flow slug: a valid slug (version 1), or a valid slug with a version suffix '___vN', N >= 2
-- (pgflow.version_of).
create or replace function pgflow.is_valid_flow_slug(flow_slug text)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select pgflow.is_valid_slug(pgflow.version_of(flow_slug))
$$;

-- 0100_table_flows.sql (the columns, constraint and indexes it adds)
alter table pgflow.flows drop constraint flows_flow_slug_check;
alter table pgflow.flows
  add constraint flows_flow_slug_check check (pgflow.is_valid_flow_slug(flow_slug)),
  add column version_of text not null generated always as (pgflow.version_of(flow_slug)) stored,
  add column version_number integer not null
    generated always as (coalesce(substring(flow_slug from '___v([0-9]+)$')::integer, 1)) stored,
  add column version text constraint flows_version_check
    check (length(version) between 1 and 80 and version !~ '[[:cntrl:]]');
create unique index flows_version_key on pgflow.flows (version_of, version) where version is not null;
create index flows_version_of_idx on pgflow.flows (version_of, version_number);

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
begin
  if not pgflow.is_valid_flow_slug(flow_slug) then
    raise exception 'invalid flow slug %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if length(flow_slug) > 47 and queue_mode is distinct from 'routed' then
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

-- 0212_function_flow_version.sql
-- The stored slug of the version a start should use. flow_slug names the flow (or one version's
-- stored slug). With version null: the newest version (a version's stored slug names itself). With a
-- version (the code's Flow(..., version=) name or its 'shape:' digest): the version compiled from that
-- definition; while no compile has claimed the newest version yet (a flow compiled before versions
-- existed), that one. Null when no version of the flow is compiled (the caller's start then names the
-- missing flow); a definition that is not compiled while others are is refused here, naming the fix.
create or replace function pgflow.flow_version(flow_slug text, version text default null)
returns text
language plpgsql stable set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_found text;
  v_newest pgflow.flows;
begin
  if flow_version.version is not null then
    select f.flow_slug into v_found
      from pgflow.flows as f
     where f.version_of = pgflow.version_of(flow_version.flow_slug) and f.version = flow_version.version;
    if found then
      return v_found;
    end if;
  end if;
  if flow_version.flow_slug <> pgflow.version_of(flow_version.flow_slug) then
    select f.flow_slug into v_found from pgflow.flows as f where f.flow_slug = flow_version.flow_slug;
    if found then
      return v_found;
    end if;
  end if;
  select f.* into v_newest
    from pgflow.flows as f
   where f.version_of = pgflow.version_of(flow_version.flow_slug)
   order by f.version_number desc
   limit 1;
  if not found then
    return null;
  end if;
  if flow_version.version is null or v_newest.version is null then
    return v_newest.flow_slug;
  end if;
  raise exception 'flow %: the version this code defines (%) is not compiled in this database (compiled: %): run manage.py pgflow_compile % before code that starts it is deployed',
    quote_literal(pgflow.version_of(flow_version.flow_slug)),
    case when flow_version.version like 'shape:%' then 'shape ' || substr(flow_version.version, 7, 12)
         else quote_literal(flow_version.version) end,
    (select string_agg('v' || f.version_number, ', ' order by f.version_number)
       from pgflow.flows as f where f.version_of = pgflow.version_of(flow_version.flow_slug)),
    pgflow.version_of(flow_version.flow_slug)
    using errcode = '22023';
end;
$$;

-- 0213_function_version_in_service.sql
-- Whether a flow version needs workers: the newest version of its flow always (new runs start there),
-- an earlier one while it has an unfinished run. Coverage, the health check and the metrics' live
-- worker counts ask only about these, so a drained version needs nothing.
create or replace function pgflow.version_in_service(flow_slug text)
returns boolean
language sql stable set search_path = pg_catalog, pgflow, pgmq
as $$
  select not exists (select 1 from pgflow.flows as newer
                      where newer.version_of = pgflow.version_of(version_in_service.flow_slug)
                        and newer.version_number > coalesce(substring(version_in_service.flow_slug from '___v([0-9]+)$')::integer, 1))
      or exists (select 1 from pgflow.runs as r
                  where r.flow_slug = version_in_service.flow_slug and r.status = 'started')
$$;

-- 0263_function_start_child_runs.sql
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
-- them are deleted, found through its task snapshots. The workers' support rows for the flow go too;
-- its pauses too, except a pause of the flow's slug while another version of the flow remains.
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

  delete from pgflow.step_waits as w where w.flow_slug = delete_flow_and_data.flow_slug;
  -- parents of this flow's runs: their subflow tasks fail at the next wait pass (the child is gone)
  update pgflow.step_waits as w set due_at = clock_timestamp()
   where w.child_run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.step_states as ss
   where ss.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug);
  delete from pgflow.runs as r where r.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.deps as d where d.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.steps as s where s.flow_slug = delete_flow_and_data.flow_slug;
  delete from pgflow.worker_pauses as p
   where p.flow_slug = delete_flow_and_data.flow_slug
     and not exists (select 1 from pgflow.flows as f  -- a pause of the flow's slug holds its other versions
                      where f.version_of = pgflow.version_of(delete_flow_and_data.flow_slug)
                        and f.flow_slug <> delete_flow_and_data.flow_slug);
  delete from pgflow.worker_support as ws where ws.flow_slug = delete_flow_and_data.flow_slug;

  foreach v_queue in array v_spellings loop
    perform pgmq.drop_queue(v_queue);
  end loop;

  delete from pgflow.flows as f where f.flow_slug = delete_flow_and_data.flow_slug;
  perform pgflow.write_queue_access(wait => false);
end;
$$;

-- 0386_function_version_shape.sql
-- A client's definition as compiled under one version's stored slug: the route the client generated
-- from the flow's slug names the first version's queues, so it is left out for another version (whose
-- generated queues the database names); a routed flow's route names shared queues and is kept.
create or replace function pgflow.version_shape(flow_slug text, shape jsonb)
returns jsonb
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select case when flow_slug = pgflow.version_of(flow_slug) or coalesce(shape->>'queue_mode', 'flow') = 'routed'
              then shape else shape - 'route' end
$$;

-- 0392_function_compile_flow_version.sql
-- Compile a flow's definition as one of its versions; what workers, pgflow_compile and the testing
-- toolkit call. version identifies the definition: the name Flow(..., version=) gives, or 'shape:'
-- and a digest of the definition the client computes (its shape, options and queue mode).
--
-- on_change 'version' (the default policy): the version with that identity is verified; else a version
-- not yet claimed by a compile (one compiled before versions existed) with the same shape is claimed;
-- else a new version is added (stored under slug || '___v' || N, with its own queues), and no run of
-- another version is touched. A named version whose stored definition differs is a mismatch: a name
-- identifies one definition. 'refuse', 'replace-if-idle' and 'replace' act on the version with that
-- identity, else the newest one, as pgflow.ensure_flow_compiled does (a changed shape is refused, or
-- replaced with its runs). The answer is ensure_flow_compiled's, with the version's flow_slug,
-- version_number and version, and status 'versioned' for a version added beside others.
create or replace function pgflow.compile_flow_version(
  flow_slug text, shape jsonb, version text, on_change text, confirmed_runs bigint default null
)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_family text := compile_flow_version.flow_slug;
  v_target text;
  v_candidate text;
  v_number integer;
  v_answer jsonb;
begin
  if on_change is null or on_change not in ('version', 'refuse', 'replace-if-idle', 'replace') then
    raise exception 'compile_flow_version(%): on_change must be version, refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if not pgflow.is_valid_slug(v_family) then
    raise exception 'invalid flow slug %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_family, 'NULL'))
      using errcode = '22023';
  end if;
  if version is not null and (length(version) not between 1 and 80 or version ~ '[[:cntrl:]]') then
    raise exception 'flow %: a version name is 1 to 80 printable characters, got %', quote_literal(v_family),
      quote_literal(left(version, 100))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || v_family, 0));

  select f.flow_slug into v_target
    from pgflow.flows as f where f.version_of = v_family and f.version = compile_flow_version.version;

  if v_target is null and on_change <> 'version' then
    select f.flow_slug into v_target
      from pgflow.flows as f where f.version_of = v_family order by f.version_number desc limit 1;
  end if;
  if v_target is null and on_change = 'version' then
    for v_candidate in
      select f.flow_slug from pgflow.flows as f
       where f.version_of = v_family and f.version is null
       order by f.version_number desc
    loop
      v_answer := pgflow.ensure_flow_compiled(v_candidate, pgflow.version_shape(v_candidate, shape), 'refuse');
      if v_answer->>'status' = 'verified' then
        v_target := v_candidate;
        exit;
      end if;
    end loop;
  end if;

  if v_target is not null then
    v_answer := pgflow.ensure_flow_compiled(v_target, pgflow.version_shape(v_target, shape),
                                            case on_change when 'version' then 'refuse' else on_change end,
                                            confirmed_runs);
  else
    select coalesce(max(f.version_number), 0) + 1 into v_number from pgflow.flows as f where f.version_of = v_family;
    v_target := case when v_number = 1 then v_family else v_family || '___v' || v_number end;
    if length(v_target) > 47 and coalesce(shape->>'queue_mode', 'flow') <> 'routed' then
      raise exception 'flow %: its changed definition would be version % under % (% characters), longer than a PGMQ queue name (47): versions of a flow with its own queues need a slug of at most % characters; deploy it under a shorter slug, or replace the flow (manage.py pgflow_compile % --replace)',
        quote_literal(v_family), v_number, quote_literal(v_target), length(v_target),
        47 - length('___v' || v_number), v_family
        using errcode = '22023';
    end if;
    v_answer := pgflow.ensure_flow_compiled(v_target, pgflow.version_shape(v_target, shape), 'refuse');
    if v_number > 1 then
      v_answer := v_answer || jsonb_build_object('status', 'versioned');
    end if;
  end if;

  if v_answer->>'status' <> 'mismatch' then  -- under refuse or replace, the compiled code's identity
    update pgflow.flows as f set version = compile_flow_version.version
     where f.flow_slug = v_target and compile_flow_version.version is not null
       and f.version is distinct from compile_flow_version.version
       and (f.version is null or on_change <> 'version');
  end if;
  return v_answer || (select jsonb_build_object('flow_slug', f.flow_slug, 'version_number', f.version_number,
                                                'version', f.version)
                        from pgflow.flows as f where f.flow_slug = v_target);
end;
$$;

-- 0400_function_pause_subscription.sql
-- Pauses a worker subscription (a flow, or a flow and step): its workers stop polling at their next
-- heartbeat and new ones refuse to start until pgflow.resume_subscription. An operator pause never
-- replaces a fatal one (the fatal detail is what an operator must read before resuming). A flow's
-- slug may be paused while any version of it exists (the pause holds every version; a version's
-- stored slug pauses that version).
create or replace function pgflow.pause_subscription(
  flow_slug text, step_slug text default '', reason text default 'operator', detail text default null
)
returns pgflow.worker_pauses
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_pause pgflow.worker_pauses;
begin
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = pause_subscription.flow_slug)
     and (pause_subscription.flow_slug <> pgflow.version_of(pause_subscription.flow_slug)
          or not exists (select 1 from pgflow.flows as f where f.version_of = pause_subscription.flow_slug)) then
    raise exception 'flow % does not exist', quote_literal(coalesce(flow_slug, 'NULL')) using errcode = '22023';
  end if;
  if coalesce(step_slug, '') <> '' and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug in (pause_subscription.flow_slug, pgflow.flow_version(pause_subscription.flow_slug))
          and s.step_slug = pause_subscription.step_slug) then
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

-- 0420_function_subscription_pause.sql
-- The pause of a worker subscription, or NULL when it may run. A plain worker's subscription is
-- (flow_slug, ''); a pause of the whole flow also holds its step subscriptions, and an operator's pause
-- of a flow's slug holds every version of it (a version's stored slug pauses that version only; a fatal
-- pause, set by a claim, holds the version whose queue it was set on).
create or replace function pgflow.subscription_pause(flow_slug text, step_slug text default '')
returns pgflow.worker_pauses
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select p.* from pgflow.worker_pauses as p
   where (p.flow_slug = subscription_pause.flow_slug
          or p.flow_slug = pgflow.version_of(subscription_pause.flow_slug) and p.reason = 'operator')
     and p.step_slug in ('', coalesce(subscription_pause.step_slug, ''))
   order by (p.reason = 'fatal') desc, p.step_slug desc
   limit 1
$$;

-- 0440_function_rerun.sql
-- Starts a new run of a finished run's flow with the same input and priority, linked to it by rerun_of,
-- on the flow's newest version (a retry, pgflow.retry_run, continues the run on its own version).
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
  perform 1 from pgflow.start_flow(coalesce(pgflow.flow_version(pgflow.version_of(v_run.flow_slug)), v_run.flow_slug),
                                   v_run.input, v_new, null, v_run.priority);
  update pgflow.runs as r set rerun_of = rerun.run_id where r.run_id = v_new;
  return v_new;
end;
$$;

-- 0454_function_fire_due_schedules.sql
-- Fires every due tick of at most max_schedules schedules: starts each tick's run (of the flow's newest
-- version, pgflow.flow_version) through pgflow.start_flows and records the tick in pgflow.schedule_ticks in this same transaction, so a
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
      join pgflow.steps as m on m.flow_slug = coalesce(pgflow.flow_version(p.flow), p.flow) and m.step_type = 'map' and m.deps_count = 0
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
        perform pgflow.start_flows(coalesce(pgflow.flow_version(v_flow.flow), v_flow.flow), v_new_inputs, v_new_ids);
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
  perform pgflow.start_flows(coalesce(pgflow.flow_version(v_schedule.flow_slug), v_schedule.flow_slug), jsonb_build_array(coalesce(trigger_schedule.input, v_schedule.input)),
                             array[v_run_id]);
  update pgflow.schedules as s
     set last_run_id = v_run_id, last_fired_at = clock_timestamp()
   where s.schedule_name = v_schedule.schedule_name;
  return v_run_id;
end;
$$;

alter function pgflow.start_child_runs(uuid[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
