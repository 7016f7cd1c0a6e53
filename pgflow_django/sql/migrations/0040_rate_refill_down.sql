-- Frozen down delta of 0040_rate_refill: back to 0039_row_writes (pgflow.limit_claim reads its clock
-- before it locks its keys' rows).

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
-- 0990_settings_hot_path.sql (for the function replaced above)
alter function pgflow.limit_claim(text,bigint[],uuid[],text[],integer[],text[])
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;
