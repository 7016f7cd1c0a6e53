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
