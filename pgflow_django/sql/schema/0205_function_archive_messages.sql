-- Archive the messages of the given tasks, one PGMQ call per queue. Idempotent: messages already
-- archived or deleted are skipped by PGMQ. In this release a task's queue is its flow slug.
create or replace function pgflow.archive_task_messages(flow_slugs text[], msg_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.ids)
     from (
       select m.queue_name, array_agg(m.msg_id) as ids
         from unnest(flow_slugs, msg_ids) as m(queue_name, msg_id)
        where m.msg_id is not null
        group by m.queue_name
     ) as g
    where exists (select 1 from pgmq.meta where meta.queue_name = g.queue_name);
end;
$$;
