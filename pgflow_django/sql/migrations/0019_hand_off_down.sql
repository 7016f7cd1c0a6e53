-- Frozen migration delta 0019_hand_off, down: no hand-off (workers complete with complete_tasks),
-- and every insert notifies at once again.
drop function pgflow.complete_and_hand_off(items jsonb, queue_name text, worker_id uuid, support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);
drop function pgflow.hand_off_tasks(queue_name text, worker_id uuid, run_ids uuid[], support_flows text[], support_steps text[], support_generations bigint[], free_slots integer);

-- 0020_function_notify_queue_insert.sql
-- Statement-level wake-up for workers: one NOTIFY per inserting statement on a queue table, on the
-- channel PGMQ's own notify-on-insert uses ('pgmq.q_<queue>.INSERT'). PGMQ's row-level trigger
-- updates a throttle row for every message, which costs more than the send itself in batches.
create or replace function pgflow.notify_queue_insert()
returns trigger
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  perform pg_notify('pgmq.' || tg_table_name || '.INSERT', null);
  return null;
end;
$$;
