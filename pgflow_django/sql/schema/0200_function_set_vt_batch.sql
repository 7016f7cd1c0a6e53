-- One statement sets the visibility of a batch of messages, each from its own offset (seconds):
--   set     visibility = now + offset, for every message
--   extend  hidden for at least now + offset: a message already hidden that long (within a second)
--           is not written, so a worker that read its batch with a long enough visibility pays no
--           second update per message when the claim applies the task's timeout
-- Returns the messages it wrote (pgflow.queue_access: static SQL for pgflow's queues).
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[], mode text)
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if mode is null or mode not in ('set', 'extend') then
    raise exception 'set_vt_batch: mode must be ''set'' or ''extend'', got %', coalesce(quote_literal(mode), 'NULL')
      using errcode = '22023';
  end if;
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'set_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  return query select m.* from pgflow.queue_access(mode, queue_name, msg_ids, vt_offsets, null, null) as m;
end;
$$;
