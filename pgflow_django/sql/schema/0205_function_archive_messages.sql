-- Archive the messages of the given tasks, one PGMQ call per queue (each task's queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.ids)
     from (
       select m.queue_name, array_agg(m.msg_id) as ids
         from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
        where m.msg_id is not null
        group by m.queue_name
     ) as g
    where to_regclass(format('pgmq.%I', pgmq.format_table_name(g.queue_name, 'q'))) is not null;
end;
$$;
