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

-- 0260_function_start_ready_steps.sql
-- Starts every ready step (created, no open dependencies, at least one task) of the given started
-- runs: creates its tasks and sends their messages to the step's persisted queue, one PGMQ batch per
-- queue and start delay (the step's start_delay, or what remains of a delayed run's not_before);
-- each task stores that queue as its immutable snapshot. No queue DDL here.
-- The n-th id returned by send_batch belongs to the n-th message sent.
create or replace function pgflow.start_ready_steps(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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
               v_batch.start_delay)
           ) as m(message, msg_id);
  end loop;
end;
$$;

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

alter function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[]) set enable_seqscan = off;
alter function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[]) set enable_mergejoin = off;
alter function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[]) set enable_hashjoin = off;
alter function pgflow.cascade(run_ids uuid[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.cascade(run_ids uuid[]) set enable_seqscan = off;
alter function pgflow.cascade(run_ids uuid[]) set enable_mergejoin = off;
alter function pgflow.cascade(run_ids uuid[]) set enable_hashjoin = off;
alter function pgflow.claim_classified(queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[], archived text[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.claim_classified(queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[], archived text[]) set enable_seqscan = off;
alter function pgflow.claim_classified(queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[], archived text[]) set enable_mergejoin = off;
alter function pgflow.claim_classified(queue_name text, worker_id uuid, ids bigint[], runs uuid[], steps text[], indexes integer[], outcomes text[], archived text[]) set enable_hashjoin = off;
alter function pgflow.complete_tasks(items jsonb) set plan_cache_mode = force_generic_plan;
alter function pgflow.complete_tasks(items jsonb) set enable_seqscan = off;
alter function pgflow.complete_tasks(items jsonb) set enable_mergejoin = off;
alter function pgflow.complete_tasks(items jsonb) set enable_hashjoin = off;
alter function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, attempt integer, error_message text, retry_delay integer) set plan_cache_mode = force_generic_plan;
alter function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, attempt integer, error_message text, retry_delay integer) set enable_seqscan = off;
alter function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, attempt integer, error_message text, retry_delay integer) set enable_mergejoin = off;
alter function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, attempt integer, error_message text, retry_delay integer) set enable_hashjoin = off;
alter function pgflow.maybe_complete_runs(run_ids uuid[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.maybe_complete_runs(run_ids uuid[]) set enable_seqscan = off;
alter function pgflow.maybe_complete_runs(run_ids uuid[]) set enable_mergejoin = off;
alter function pgflow.maybe_complete_runs(run_ids uuid[]) set enable_hashjoin = off;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_seqscan = off;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_mergejoin = off;
alter function pgflow.start_flows(flow_slug text, inputs jsonb, run_ids uuid[], start_delay integer) set enable_hashjoin = off;
alter function pgflow.start_ready_steps(run_ids uuid[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_ready_steps(run_ids uuid[]) set enable_seqscan = off;
alter function pgflow.start_ready_steps(run_ids uuid[]) set enable_mergejoin = off;
alter function pgflow.start_ready_steps(run_ids uuid[]) set enable_hashjoin = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_seqscan = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_mergejoin = off;
alter function pgflow.start_shared_tasks(queue_name text, msg_ids bigint[], worker_id uuid, support_flows text[], support_steps text[]) set enable_hashjoin = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set plan_cache_mode = force_generic_plan;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_seqscan = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_mergejoin = off;
alter function pgflow.start_tasks(queue_name text, flow_slug text, msg_ids bigint[], worker_id uuid, step_slug text) set enable_hashjoin = off;
