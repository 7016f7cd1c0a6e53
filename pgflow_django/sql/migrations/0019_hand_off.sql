-- Frozen migration delta 0019_hand_off (loaded by pgflow_django/migrations/0019_hand_off.py):
-- direct hand-off. A worker's completion also claims, in the same transaction, the tasks it made
-- ready on that worker's queue (pgflow.complete_and_hand_off, pgflow.hand_off_tasks), through the
-- claim's own pgflow.claim_classified, so the next step of a chain skips the notification, the read
-- and the claim; the insert notification waits for the hand-off and goes only to the queues still
-- holding new messages (pgflow.notify_queue_insert honours pgflow.defer_notify).

-- 0020_function_notify_queue_insert.sql
-- Statement-level wake-up for workers: one NOTIFY per inserting statement on a queue table, on the
-- channel PGMQ's own notify-on-insert uses ('pgmq.q_<queue>.INSERT'). PGMQ's row-level trigger
-- updates a throttle row for every message, which costs more than the send itself in batches.
-- A completion that hands the new tasks to its own worker (pgflow.complete_and_hand_off) defers
-- the wake-up for the rest of its transaction (pgflow.defer_notify = 'on') and notifies only the
-- queues it left new messages on: a worker woken for a task already handed off would read nothing.
create or replace function pgflow.notify_queue_insert()
returns trigger
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if current_setting('pgflow.defer_notify', true) = 'on' then
    return null;
  end if;
  perform pg_notify('pgmq.' || tg_table_name || '.INSERT', null);
  return null;
end;
$$;

-- 0303_function_hand_off_tasks.sql
-- Direct hand-off: claims, for the worker that just completed tasks of the given runs, the tasks
-- that completion made ready on its queue, so that worker runs them without waiting for a
-- notification, a read and a claim. Only tasks created by the calling statement are taken (queued
-- since it began, never attempted: nobody else has seen their messages yet), of a (flow_slug,
-- step_slug) pair the worker supports whose flow is still at the generation it compiled against,
-- on queue_name, with no start delay (of the step, or what remains of a delayed run's not_before),
-- at most free_slots of them, in task key order (the order every writer locks a run's tasks).
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
begin
  if coalesce(free_slots, 0) <= 0 or coalesce(cardinality(run_ids), 0) = 0
     or coalesce(cardinality(support_flows), 0) = 0 then
    return;
  end if;

  select array_agg(h.message_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.run_id order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.step_slug order by h.run_id, h.step_slug, h.task_index),
         array_agg(h.task_index order by h.run_id, h.step_slug, h.task_index)
    into v_ids, v_runs, v_steps, v_indexes
    from (
      select t.run_id, t.step_slug, t.task_index, t.message_id
        from (select distinct k.run_id from unnest(hand_off_tasks.run_ids) as k(run_id)) as k
        join pgflow.runs as r on r.run_id = k.run_id
        join pgflow.step_states as ss on ss.run_id = r.run_id
        join pgflow.step_tasks as t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        join pgflow.flows as f on f.flow_slug = ss.flow_slug
        join unnest(hand_off_tasks.support_flows, hand_off_tasks.support_steps, hand_off_tasks.support_generations)
          as p(flow_slug, step_slug, generation)
          on p.flow_slug = ss.flow_slug and p.step_slug = ss.step_slug and p.generation = f.generation
       where r.status = 'started' and (r.not_before is null or r.not_before <= clock_timestamp())
         and ss.status = 'started' and ss.started_at >= statement_timestamp()
         and coalesce(s.opt_start_delay, 0) = 0
         and t.status = 'queued' and t.attempts_count = 0 and t.queued_at >= statement_timestamp()
         and t.queue_name = hand_off_tasks.queue_name and t.message_id is not null
       order by t.run_id, t.step_slug, t.task_index
       limit hand_off_tasks.free_slots
    ) as h;
  if v_ids is null then
    return;
  end if;

  return query
    select c.* from pgflow.claim_classified(hand_off_tasks.queue_name, hand_off_tasks.worker_id, v_ids, v_runs,
                                            v_steps, v_indexes, array_fill('claimed'::text, array[cardinality(v_ids)]),
                                            '{}'::text[]) as c
     where c.outcome = 'claimed';
end;
$$;

-- 0315_function_complete_and_hand_off.sql
-- pgflow.complete_tasks for a worker that can run more: completes the items as complete_tasks does
-- (one row per item: outcome 'completed', 'stale' or 'failed' with its task key, other columns
-- NULL), then hands that worker, in the same transaction, the tasks the completion made ready on
-- its queue (pgflow.hand_off_tasks: at most free_slots, of the (flow_slug, step_slug) pairs it
-- supports at the flow generations it compiled against): one 'claimed' row each, as a claim
-- returns them. The insert notifications of the new messages wait until the hand-off is done and
-- go only to the queues still holding new messages, so no worker is woken to read a message that
-- was handed off.
create or replace function pgflow.complete_and_hand_off(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_mergejoin = off set enable_hashjoin = off
as $$
declare
  v_done pgflow.claim_record[];
  v_runs uuid[];
begin
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'on', true);
  end if;
  select array_agg(row(c.outcome, null, null, c.run_id, c.step_slug, c.task_index, null, null)::pgflow.claim_record)
    into v_done
    from pgflow.complete_tasks(items) as c;
  return query select d.* from unnest(v_done) as d;
  v_runs := array(select distinct d.run_id from unnest(v_done) as d where d.outcome = 'completed');
  return query
    select h.* from pgflow.hand_off_tasks(
      lower(complete_and_hand_off.queue_name), complete_and_hand_off.worker_id, v_runs,
      complete_and_hand_off.support_flows, complete_and_hand_off.support_steps,
      complete_and_hand_off.support_generations, complete_and_hand_off.free_slots) as h;
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'off', true);
    perform pg_notify('pgmq.' || pgmq.format_table_name(n.queue_name, 'q') || '.INSERT', null)
       from (select distinct t.queue_name
               from unnest(v_runs) as k(run_id)
               join pgflow.step_tasks as t on t.run_id = k.run_id
              where t.status = 'queued' and t.queued_at >= statement_timestamp()) as n;
  end if;
end;
$$;

