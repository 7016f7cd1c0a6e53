-- Frozen migration delta 0031_queue_access, down: the seven functions as 0030 left them, without
-- pgflow.queue_access and its writer.

-- 0200_function_set_vt_batch.sql
-- One statement sets the visibility of a batch of messages, each from its own offset (seconds):
--   set     visibility = now + offset, for every message
--   extend  hidden for at least now + offset: a message already hidden that long (within a second)
--           is not written, so a worker that read its batch with a long enough visibility pays no
--           second update per message when the claim applies the task's timeout
-- Returns the messages it wrote.
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
  return query execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
         and ($3 = 'set' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
      returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets, mode;
end;
$$;

-- 0205_function_archive_task_messages.sql
-- Archive the messages of the given tasks, one PGMQ call per queue (each task's queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive. A live message whose id is already in the queue's archive (a row
-- inserted with a reused id) cannot be archived again: it is deleted instead, with a warning naming
-- the queue and the ids, so the queue keeps moving. That case is found only when PGMQ's archive
-- fails on the archive's key, so the common path stays one PGMQ call per queue.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_group record;
  v_doubles bigint[];
begin
  begin
    perform pgmq.archive(g.queue_name, g.ids)
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
end;
$$;

-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one PGMQ batch per
-- queue and start delay (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
-- A task's priority (the run's, else its step's default, else its flow's) travels in its message's
-- headers, {"priority": N}; a priority of 0 sends no headers (pgflow.message_priority reads 0).
-- The n-th id returned by send_batch belongs to the n-th message sent. The step states are read by
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
             pgmq.send_batch(
               v_batch.queue_name,
               array(select e from jsonb_array_elements(v_batch.messages) as e),
               case when v_batch.headers is not null
                    then array(select nullif(h, 'null'::jsonb) from jsonb_array_elements(v_batch.headers) as h) end,
               v_batch.start_delay)
           ) as m(message, msg_id);
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

  execute format('select pgflow.message_priority(q.headers) from pgmq.%I as q'
                 ' where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()'
                 ' order by pgflow.message_priority(q.headers) desc, q.msg_id limit 1',
                 pgmq.format_table_name(hand_off_tasks.queue_name, 'q'))
     into v_waiting_priority;
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

drop function pgflow.queue_access(text, text, bigint[], integer[], jsonb[], jsonb[]);
drop function pgflow.write_queue_access(text, boolean);
