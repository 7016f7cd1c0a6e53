-- Indexes a PGMQ queue table on (message priority descending, message id): the claim's read walks
-- it to the first visible messages, so taking the highest priority first stays an index probe
-- however long the backlog. Called where pgflow creates a queue; idempotent. A queue whose tables
-- are missing is left alone (the provisioning functions report it).
create or replace function pgflow.index_queue_priority(queue_name text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_table text := pgmq.format_table_name(queue_name, 'q');
begin
  if to_regclass(format('pgmq.%I', v_table)) is null then
    return;
  end if;
  execute format('create index if not exists %I on pgmq.%I (pgflow.message_priority(headers) desc, msg_id)',
                 v_table || '_priority_idx', v_table);
end;
$$;
