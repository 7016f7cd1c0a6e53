-- Locks, without waiting, the given messages of a queue that no other transaction holds, and returns
-- their ids: the messages pgflow.release_limit_slots can make visible now. One another transaction
-- holds is left out; its holder may be a read that locked it and then found it hidden (a read locks
-- the newest version of a message before it checks the message's visibility, and keeps that lock
-- until its claim commits), so waking that waiter would leave its message hidden.
create or replace function pgflow.lock_waiting_messages(queue_name text, msg_ids bigint[])
returns bigint[]
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_locked bigint[];
begin
  execute format(
    $q$
      select coalesce(array_agg(m.msg_id order by m.msg_id), '{}')
        from (select distinct o.msg_id from unnest($1) as o(msg_id)) as o
       cross join lateral (select m.msg_id from pgmq.%I as m where m.msg_id = o.msg_id
                              for update skip locked) as m
    $q$, pgmq.format_table_name(queue_name, 'q')) into v_locked using msg_ids;
  return v_locked;
end;
$$;
