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
