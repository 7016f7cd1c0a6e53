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

-- 0299_function_classify_claim.sql
-- The first half of a claim, shared by pgflow.start_tasks and pgflow.start_shared_tasks: each
-- distinct message id of the batch with its task, found by persisted identity ((queue_name,
-- message_id) -> task; a lateral LIMIT 1 keeps the plan an index probe per message whatever the
-- table statistics say), and its outcome:
--   <no_task>      no task has this message (start_tasks passes NULL and judges the body next)
--   <unsupported>  the task is not one of the (flow_slug, step_slug) pairs of the support set
--   terminal, started, claimed (a queued task in a started run and step), ineligible (otherwise)
-- The arrays are in task key order, the order in which every other writer locks a run's tasks.
create or replace function pgflow.classify_claim(
  queue_name text, msg_ids bigint[], support_flows text[], support_steps text[], no_task text, unsupported text,
  out ids bigint[], out runs uuid[], out steps text[], out indexes integer[], out outcomes text[]
)
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
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
    left join pgflow.runs as r on r.run_id = t.run_id
    left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
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
as $$
declare
  v_claimed pgflow.step_tasks[];
begin
  -- the callers checked each task's run and step; a run that fails or a step that is skipped
  -- meanwhile terminalizes its queued tasks, which the status recheck on the locked row sees; a
  -- row locked by another transaction is skipped, never waited for (see above)
  with lockable as (
    select t.run_id, t.step_slug, t.task_index
      from unnest(runs, steps, indexes, outcomes) as k(run_id, step_slug, task_index, outcome)
      join pgflow.step_tasks as t
        on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
     where k.outcome = 'claimed' and t.status = 'queued'
       for no key update of t skip locked
  ), claimed as (
    update pgflow.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = clock_timestamp(),
           last_worker_id = claim_classified.worker_id
      from lockable as l
     where t.run_id = l.run_id and t.step_slug = l.step_slug and t.task_index = l.task_index
       and t.status = 'queued'
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
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
                                'error', fail_task.error_message, 'failed_at', clock_timestamp());
  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(fail_task.retry_delay,
                  least(floor(coalesce(s.opt_base_delay, f.opt_base_delay) * power(2, v_task.attempts_count)), 2147483647)::integer)
    into v_max_attempts, v_delay
    from pgflow.steps as s join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update pgflow.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = clock_timestamp(),
           attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
    perform pgflow.set_vt_batch(v_task.queue_name, array[v_task.message_id], array[v_delay], 'set');
    return 'retrying';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(v_error)
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index;
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
       and t.attempts_count < coalesce(s.opt_max_attempts, f.opt_max_attempts)
    returning t.queue_name, t.message_id, t.run_id, t.step_slug, t.task_index
  )
  select coalesce(jsonb_agg(jsonb_build_object('queue_name', rl.queue_name, 'message_id', rl.message_id,
                                               'run_id', rl.run_id, 'step_slug', rl.step_slug,
                                               'task_index', rl.task_index)), '[]'::jsonb)
    into v_released
    from released as rl;

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

-- 0350_function_requeue_stalled_tasks.sql
-- Recovers tasks whose worker vanished: started tasks of started runs and steps whose claim is older
-- than the step's effective timeout + 30 s. Each is requeued (visible now) while it has been
-- requeued fewer than 3 times and has attempts left; otherwise it is marked permanently stalled and
-- exhausted like a task out of attempts, so its run still ends. Runs locked by another writer are
-- left for the next pass.
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

-- every other function keeps its definition and pins its search_path
alter function pgflow.add_step(flow_slug text, step_slug text, deps_slugs text[], max_attempts integer, base_delay integer, timeout integer, start_delay integer, step_type text, required_input_pattern jsonb, forbidden_input_pattern jsonb, when_unmet text, when_exhausted text, queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[]) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.cancel_run(run_id uuid, reason text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.cascade(run_ids uuid[]) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.check_flow_queues(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.complete_tasks(items jsonb) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.create_flow(flow_slug text, max_attempts integer, base_delay integer, timeout integer, queue_mode text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.delete_flow_and_data(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.exhaust_task(run_id uuid, step_slug text, task_index integer, error_message text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.fail_run(run_id uuid, error_message text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.flow_queues(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.flow_shape(flow_slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_pgflow_message(message jsonb) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_valid_queue_name(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.is_valid_slug(slug text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.maybe_complete_runs(run_ids uuid[]) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.notify_queue_insert() set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.pause_subscription(flow_slug text, step_slug text, reason text, detail text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.protocol_version() set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.provision_generated_queue(flow_slug text, queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.provision_shared_queue(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.prune_data_older_than(retention interval) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.prune_shared_archive(queue_name text, retention interval) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.queue_objects_problem(queue_name text) set search_path = pg_catalog, pgflow, pgmq;
alter function pgflow.reject_task(run_id uuid, step_slug text, task_index integer, attempt integer, error_message text) set search_path = pg_catalog, pgflow, pgmq;
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
