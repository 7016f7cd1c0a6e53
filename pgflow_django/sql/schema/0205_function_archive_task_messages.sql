-- Archive the messages of the given tasks, one archive per queue (pgflow.queue_access; each task's
-- queue snapshot).
-- Idempotent: messages already archived or deleted are skipped by PGMQ; a queue whose table is gone
-- has nothing left to archive. A live message whose id is already in the queue's archive (a row
-- inserted with a reused id) cannot be archived again: it is deleted instead, with a warning naming
-- the queue and the ids, so the queue keeps moving. That case is found only when PGMQ's archive
-- fails on the archive's key, so the common path stays one call per queue.
create or replace function pgflow.archive_task_messages(queue_names text[], msg_ids bigint[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_group record;
  v_doubles bigint[];
begin
  begin
    perform pgflow.queue_access('archive', g.queue_name, g.ids, null, null, null)
       from (
         select m.queue_name, array_agg(m.msg_id) as ids
           from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
          where m.msg_id is not null
          group by m.queue_name
       ) as g
      where to_regclass(format('pgmq.%I', pgmq.format_table_name(g.queue_name, 'q'))) is not null;
    return;
  exception when unique_violation then
    null;
  end;

  for v_group in
    select m.queue_name, array_agg(distinct m.msg_id order by m.msg_id) as ids
      from unnest(queue_names, msg_ids) as m(queue_name, msg_id)
     where m.msg_id is not null
       and to_regclass(format('pgmq.%I', pgmq.format_table_name(m.queue_name, 'q'))) is not null
     group by m.queue_name
     order by m.queue_name
  loop
    execute format(
      'select array_agg(q.msg_id order by q.msg_id) from pgmq.%I as q where q.msg_id = any($1)
          and exists (select 1 from pgmq.%I as a where a.msg_id = q.msg_id)',
      pgmq.format_table_name(v_group.queue_name, 'q'), pgmq.format_table_name(v_group.queue_name, 'a'))
      into v_doubles using v_group.ids;
    if v_doubles is not null then
      perform pgmq.delete(v_group.queue_name, v_doubles);
      raise warning 'queue %: message id(s) % were already in its archive; deleted from the queue instead of archived again',
        v_group.queue_name, array_to_string(v_doubles, ', ');
    end if;
    perform pgmq.archive(v_group.queue_name,
                         array(select i from unnest(v_group.ids) as i where i <> all(coalesce(v_doubles, '{}'))));
  end loop;
end;
$$;
