-- Frozen migration delta 0028_wake_after_claims (loaded by pgflow_django/migrations/0028_wake_after_claims.py):
-- a transaction's first release of concurrency slots locks the keys' limit_slots rows in key order
-- before it frees anything, so it waits for a claim deciding one of those keys and then wakes the
-- tasks that claim deferred (a slot freed while a claim deferred the key's only waiter used to wake
-- nobody and stay unused until the deferral ended). The completion's hand-off leaves tasks of flows
-- with flow control to a read, so no completion takes key rows in two orders.

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
-- taking them could deadlock against a claim.
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
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

  return query
    select c.* from pgflow.claim_classified(hand_off_tasks.queue_name, hand_off_tasks.worker_id, v_ids, v_runs,
                                            v_steps, v_indexes, array_fill('claimed'::text, array[cardinality(v_ids)]),
                                            '{}'::text[]) as c
     where c.outcome = 'claimed';
end;
$$;

-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); waits of tasks no longer queued are dropped.
-- Returns the number of slots freed.
-- Before it changes anything, the first release of a transaction locks the limit_slots rows of the
-- keys it may free, in key order as a claim does, until commit. A claim deciding one of those keys
-- meanwhile counts this slot as taken: the release waits for that claim to commit and then wakes
-- the tasks it deferred, and a claim that comes later waits for the release and finds the slot
-- free. (Without the wait, a slot freed while a claim deferred the key's only waiter woke nobody and
-- stayed unused until that deferral ended.) The wait closes no cycle: a claim waits only for key,
-- hold and wait rows and takes its key rows first, and a transaction's first release holds none of
-- them yet (the completion's hand-off leaves tasks under limits to a read). A later release in the
-- same transaction (an exhaustion that fails its run, a cancel of several runs) waits for no key row,
-- since it may hold some already; a waiter another transaction holds is skipped.
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
  v_transaction text;
begin
  if run_ids is not null then
    if not exists (select 1 from pgflow.limit_holds as h where h.run_id = any(run_ids))
       and not exists (select 1 from pgflow.limit_waits as w where w.run_id = any(run_ids)) then
      return 0;
    end if;
    -- every key these runs hold a slot of (the ones freed now and the ones a later release of the
    -- same runs frees in this transaction)
    select array_agg(g.flow_slug), array_agg(g.step_slug), array_agg(g.key) into v_flows, v_scopes, v_keys
      from (select distinct h.flow_slug, h.step_slug, h.key
              from unnest(run_ids) as k(run_id)
             cross join lateral (select h.flow_slug, h.step_slug, h.key from pgflow.limit_holds as h
                                  where h.run_id = k.run_id offset 0) as h) as g;
  else
    select array_agg(g.flow_slug), array_agg(g.step_slug), array_agg(g.key) into v_flows, v_scopes, v_keys
      from (select distinct h.flow_slug, h.step_slug, h.key from pgflow.limit_holds as h
             where (select 1 from pgflow.step_tasks as t
                     where t.run_id = h.run_id and t.step_slug = h.task_step_slug and t.task_index = h.task_index
                       and t.status = 'started' and t.attempts_count = h.attempt
                     limit 1) is null) as g;
  end if;
  v_transaction := txid_current()::text;
  if v_flows is not null and current_setting('pgflow.limit_keys_locked_by', true) is distinct from v_transaction then
    perform set_config('pgflow.limit_keys_locked_by', v_transaction, true);
    perform 1
       from (select distinct f.flow_slug, f.step_slug, f.key
               from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
              order by f.flow_slug, f.step_slug, f.key) as g
      cross join lateral (
        select 1 from pgflow.limit_slots as x
         where x.flow_slug = g.flow_slug and x.step_slug = g.step_slug and x.kind = 'concurrency'
           and x.key = g.key
         limit 1
           for update
      ) as x;
    v_now := clock_timestamp();
  end if;

  if run_ids is not null then
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
  -- deleted runs, swept by stalled recovery, never take a wake-up)
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
