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
-- (failures, cancels, recovery) release without it. A waiter whose message another transaction
-- holds is passed over for the key's next one (see below).
create or replace function pgflow.release_limit_slots(run_ids uuid[], wait_for_claims boolean default false)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_flows text[];
  v_scopes text[];
  v_keys text[];
  v_now timestamptz := clock_timestamp();
  v_key_flows text[];
  v_key_scopes text[];
  v_key_keys text[];
  v_key_slots integer[];
  v_tried tid[] := '{}';
  v_rows tid[];
  v_queues text[];
  v_msgs bigint[];
  v_key_nos bigint[];
  v_locked_queues text[];
  v_locked_msgs bigint[];
  v_woken_queues text[];
  v_woken_msgs bigint[];
  v_woken_keys bigint[];
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
  select array_agg(u.flow_slug), array_agg(u.step_slug), array_agg(u.key), array_agg(u.n)
    into v_key_flows, v_key_scopes, v_key_keys, v_key_slots
    from (
      select f.flow_slug, f.step_slug, f.key, count(*)::integer as n
        from unnest(v_flows, v_scopes, v_keys) as f(flow_slug, step_slug, key)
       where run_ids is not null
       group by f.flow_slug, f.step_slug, f.key
      union all
      select u.flow_slug, u.step_slug, u.key, u.n::integer
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
    ) as u;

  -- A waiter is woken only with its message locked here (pgflow.lock_waiting_messages), and its
  -- wait row is locked only then: a message another transaction holds cannot be made visible now,
  -- and marked woken with its message still hidden, the waiter was passed over by the key's next
  -- freed slot and by the sweep until its deferral ended. Its slot goes to the key's next waiter
  -- instead, tried in the next round (at most three); a waiter left out stays unwoken for the next
  -- release or sweep to wake. The wait row of a queued task is written only by the holder of its
  -- message (a claim deferring or taking the task, or this), so two releases share a key's waiters
  -- without waiting for each other, and a claim holding a waiter's message never waits for a wait
  -- row this transaction locked.
  for v_round in 1..3 loop
    exit when v_key_slots is null or not exists (select 1 from unnest(v_key_slots) as n where n > 0);
    select array_agg(x.row_id order by k.key_no, x.deferred_at, x.message_id),
           array_agg(x.queue_name order by k.key_no, x.deferred_at, x.message_id),
           array_agg(x.message_id order by k.key_no, x.deferred_at, x.message_id),
           array_agg(k.key_no order by k.key_no, x.deferred_at, x.message_id)
      into v_rows, v_queues, v_msgs, v_key_nos
      from unnest(v_key_flows, v_key_scopes, v_key_keys, v_key_slots)
           with ordinality as k(flow_slug, step_slug, key, n, key_no)
     cross join lateral (
       select x.ctid as row_id, x.queue_name, x.message_id, x.deferred_at
         from pgflow.limit_waits as x
        where x.flow_slug = k.flow_slug and x.step_slug = k.step_slug and x.kind = 'concurrency'
          and x.key = k.key and x.woken_at is null and x.visible_at > v_now
          and x.ctid <> all(v_tried)
          and (select 1 from pgflow.step_tasks as t
                where t.run_id = x.run_id and t.step_slug = x.task_step_slug
                  and t.task_index = x.task_index and t.status = 'queued'
                limit 1) is not null
        order by x.deferred_at, x.message_id
        limit k.n
     ) as x
     where k.n > 0;
    exit when v_rows is null;
    v_tried := v_tried || v_rows;

    select array_agg(q.queue_name), array_agg(m.msg_id) into v_locked_queues, v_locked_msgs
      from (select distinct c.queue_name from unnest(v_queues) as c(queue_name)) as q
     cross join lateral unnest(pgflow.lock_waiting_messages(
             q.queue_name,
             array(select c.msg_id from unnest(v_queues, v_msgs) as c(queue_name, msg_id)
                    where c.queue_name = q.queue_name))) as m(msg_id);

    -- a wait row another release woke, or a claim deferred again, since it was read above has a
    -- new version (its row id no longer matches) and is left for the next round's waiter
    with woken as (
      update pgflow.limit_waits as w
         set visible_at = v_now, woken_at = v_now
        from unnest(v_rows, v_queues, v_msgs, v_key_nos) as c(row_id, queue_name, msg_id, key_no)
       where w.ctid = c.row_id and w.woken_at is null and w.visible_at > v_now
         and exists (select 1 from unnest(v_locked_queues, v_locked_msgs) as l(queue_name, msg_id)
                      where l.queue_name = c.queue_name and l.msg_id = c.msg_id)
      returning w.queue_name, w.message_id, c.key_no
    )
    select array_agg(w.queue_name), array_agg(w.message_id), array_agg(w.key_no)
      into v_woken_queues, v_woken_msgs, v_woken_keys
      from woken as w;
    perform pgflow.set_limit_visibility(g.queue_name, g.ids, array_fill(v_now, array[cardinality(g.ids)]))
       from (select w.queue_name, array_agg(w.msg_id) as ids
               from unnest(v_woken_queues, v_woken_msgs) as w(queue_name, msg_id)
              group by w.queue_name) as g;
    v_key_slots := array(
      select k.n - (select count(*) from unnest(v_woken_keys) as w(key_no) where w.key_no = k.key_no)::integer
        from unnest(v_key_slots) with ordinality as k(n, key_no)
       order by k.key_no);
  end loop;
  return coalesce(cardinality(v_flows), 0);
end;
$$;
