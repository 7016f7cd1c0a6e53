-- Frozen migration delta 0030_limit_wakeups, down: the four functions as 0029 left them.

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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
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
    if (select r.status from pgflow.runs as r where r.run_id = v_stalled.run_id) = 'started'
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
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
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

-- 0502_function_release_limit_slots.sql
-- Frees the concurrency slots of tasks that are no longer started in the attempt that took them (a
-- completion, a failure or retry, an exhaustion, a cancelled or failed run, stalled recovery), of
-- the given runs, or of every run when run_ids is NULL (stalled recovery's sweep, which also
-- collects the holds and waits of deleted runs). Each freed slot wakes the oldest waiting task of its
-- key at once (its message becomes visible now); waits of tasks no longer queued are dropped.
-- Returns the number of slots freed.
-- wait_for_claims (the completion's release, its last step): first lock the limit_slots rows of the
-- keys these runs hold, in key order as a claim does, until commit. A claim deciding one of those
-- keys meanwhile counts this slot as taken: the release waits for that claim to commit and then
-- wakes the tasks it deferred, and a claim that comes later waits for the release and finds the slot
-- free. (Without the wait, a slot freed while a claim deferred the key's only waiter wakes nobody and
-- stays unused until that deferral ends.) A claim holds the messages it read while it waits for a
-- key row, so only a caller that waits for no message row afterwards may pass true; the other paths
-- (failures, cancels, recovery) release without it, and a waiter another transaction holds is skipped.
create or replace function pgflow.release_limit_slots(run_ids uuid[], wait_for_claims boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off set jit = off
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
