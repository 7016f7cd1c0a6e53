-- pgflow.queue_access(op, queue_name, msg_ids, numbers, messages, headers): the engine's one way to
-- send, archive, hide and look at the head of a queue's messages. Its body is written by
-- pgflow.write_queue_access() from the queues pgflow has (the branches themselves, or beyond 32
-- queues a dispatcher to the numbered functions that hold them), so this file creates it and has it
-- written at once; the body below is only what the writer replaces.
create or replace function pgflow.queue_access(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                               messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  raise exception 'pgflow.queue_access has not been written: run select pgflow.write_queue_access()';
end;
$$;

select pgflow.write_queue_access();
