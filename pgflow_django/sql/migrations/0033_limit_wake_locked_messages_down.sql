-- Frozen migration delta 0033_limit_wake_locked_messages, down: release_limit_slots as 0030 left it,
-- and no pgflow.lock_waiting_messages.

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
-- (failures, cancels, recovery) release without it, and a waiter another transaction holds is skipped.
create or replace function pgflow.release_limit_slots(run_ids uuid[], wait_for_claims boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
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
  if v_flows is null and run_ids is not null then
    return 0;
  end if;

  -- one waiter per freed slot, oldest first, still queued and not woken already (the waits of
  -- deleted runs, swept by stalled recovery, never take a wake-up). The sweep instead counts each
  -- key's unused slots (its limit, less its holds and its waiters woken already): a slot freed by a
  -- path that does not wait for claims, while a claim deferred the key's only waiter, woke nobody,
  -- and the sweep wakes that waiter instead of leaving the slot unused until its deferral ends.
  with freed as (
    select f.flow_slug, f.step_slug, f.key, count(*) as n
      from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
     where run_ids is not null
     group by f.flow_slug, f.step_slug, f.key
    union all
    select u.flow_slug, u.step_slug, u.key, u.n
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
  return coalesce(cardinality(v_flows), 0);
end;
$$;

alter function pgflow.release_limit_slots(uuid[],boolean)
  set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off
  set enable_hashjoin = off set jit = off;

drop function if exists pgflow.lock_waiting_messages(text, bigint[]);
