-- pgflow.complete_tasks for a worker that can run more: completes the items as complete_tasks does
-- (one row per item: outcome 'completed', 'stale' or 'failed' with its task key, other columns
-- NULL), then hands that worker, in the same transaction, the tasks the completion made ready on
-- its queue (pgflow.hand_off_tasks: at most free_slots, of the (flow_slug, step_slug) pairs it
-- supports at the flow generations it compiled against): one 'claimed' row each, as a claim
-- returns them. The insert notifications of the new messages wait until the hand-off is done and
-- go only to the queues still holding new messages, so no worker is woken to read a message that
-- was handed off. A batch of the common case takes pgflow.complete_hop's fast path, which does the
-- completion and the hand-off in one pass; any other batch the general path, in the same
-- transaction (complete_tasks, told by pgflow.fast_hop that the fast path already declined).
create or replace function pgflow.complete_and_hand_off(
  items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[],
  support_generations bigint[], free_slots integer
)
returns setof pgflow.claim_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_done pgflow.claim_record[];
  v_runs uuid[];
  v_fast_hop text;
  v_lo uuid;
  v_hi uuid;
begin
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'on', true);
  end if;
  v_done := array(select h from pgflow.complete_hop(items, complete_and_hand_off.queue_name,
                                                    complete_and_hand_off.worker_id, complete_and_hand_off.support_flows,
                                                    complete_and_hand_off.support_steps,
                                                    complete_and_hand_off.support_generations,
                                                    complete_and_hand_off.free_slots) as h);
  if cardinality(v_done) > 0 then
    return query select d.* from unnest(v_done) as d;
    v_runs := array(select distinct d.run_id from unnest(v_done) as d);
  else
    v_fast_hop := current_setting('pgflow.fast_hop', true);
    perform set_config('pgflow.fast_hop', 'off', true);
    select array_agg(row(c.outcome, null, null, c.run_id, c.step_slug, c.task_index, null, null)::pgflow.claim_record)
      into v_done
      from pgflow.complete_tasks(items) as c;
    perform set_config('pgflow.fast_hop', coalesce(v_fast_hop, ''), true);
    return query select d.* from unnest(v_done) as d;
    v_runs := array(select distinct d.run_id from unnest(v_done) as d where d.outcome = 'completed');
    return query
      select h.* from pgflow.hand_off_tasks(
        lower(complete_and_hand_off.queue_name), complete_and_hand_off.worker_id, v_runs,
        complete_and_hand_off.support_flows, complete_and_hand_off.support_steps,
        complete_and_hand_off.support_generations, complete_and_hand_off.free_slots) as h;
  end if;
  if coalesce(free_slots, 0) > 0 then
    perform set_config('pgflow.defer_notify', 'off', true);
    -- the runs' tasks between their lowest and highest ids: on a partitioned history a generic plan
    -- then sets up only the partitions that hold them (see pgflow.complete_hop)
    select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(v_runs) as b;
    perform pg_notify('pgmq.' || pgmq.format_table_name(n.queue_name, 'q') || '.INSERT', null)
       from (select distinct t.queue_name
               from unnest(v_runs) as k(run_id)
              cross join lateral (
                select t.queue_name from pgflow.step_tasks as t
                 where t.run_id = k.run_id and t.run_id between v_lo and v_hi
                   and t.status = 'queued' and t.queued_at >= statement_timestamp()
                offset 0
              ) as t) as n;
  end if;
end;
$$;
