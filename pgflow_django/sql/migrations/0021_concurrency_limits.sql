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

-- 0230_function_fail_run.sql
-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path.
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
  perform pgflow.release_limit_slots(array[fail_run.run_id]);
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
  perform pgflow.release_limit_slots(v_run_ids);

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
             when s.step_type = 'single' then done.first_output
             else (
               select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                 from pgflow.step_tasks as t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug)
           end
      from done, pgflow.steps as s
     where ss.run_id = done.run_id and ss.step_slug = done.step_slug
       and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.status
  )
  select array_agg(distinct f.run_id order by f.run_id) into v_finished
    from finished as f where f.status = 'completed';

  if v_finished is not null then
    perform pgflow.cascade(v_finished);
  end if;

  -- the failing items, once the items listed before them have completed; a run that failed
  -- meanwhile (a condition with when_unmet = fail) makes its failing item stale
  for v_bad in
    select f.run_id, f.step_slug, f.task_index, f.map_slug,
           coalesce(r.status = 'started' and ss.status = 'started' and t.status = 'started', false) as current
      from jsonb_to_recordset(v_first) as f(run_id uuid, step_slug text, task_index integer, map_slug text)
      join pgflow.runs as r on r.run_id = f.run_id
      left join pgflow.step_states as ss on ss.run_id = f.run_id and ss.step_slug = f.step_slug
      left join pgflow.step_tasks as t
        on t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
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
  perform pgflow.release_limit_slots(array[exhaust_task.run_id]);

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
  return 'skipped';
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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
    if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
      perform pgflow.release_limit_slots(null);
    end if;
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
  if exists (select 1 from pgflow.limit_holds) or exists (select 1 from pgflow.limit_waits) then
    perform pgflow.release_limit_slots(null);
  end if;

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

-- 0500_function_limit_claim.sql
-- The flow-control half of a claim, called by pgflow.claim_classified before it starts anything:
-- returns the claim's outcomes with 'deferred' for each 'claimed' task a limit of its flow or step
-- refuses now, and records the slots and tokens of the others.
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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
