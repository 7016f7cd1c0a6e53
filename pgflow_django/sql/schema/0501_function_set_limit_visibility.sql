-- Sets each message's visibility to its own timestamp (sub-second, unlike pgflow.set_vt_batch's whole
-- seconds: a rate-limited task waits exactly for its token). A message another transaction holds
-- is skipped: that transaction (a claim that read it) decides its visibility itself. When a message
-- becomes visible now, the queue's listeners are told as an insert would (workers poll at once).
create or replace function pgflow.set_limit_visibility(queue_name text, msg_ids bigint[], visible_at timestamptz[])
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_table text := pgmq.format_table_name(queue_name, 'q');
  v_set integer;
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return 0;
  end if;
  execute format(
    $q$
      update pgmq.%I as q
         set vt = o.visible_at
        from (select m.msg_id, o.visible_at
                from unnest($1, $2) as o(msg_id, visible_at)
                cross join lateral (select m.msg_id from pgmq.%I as m where m.msg_id = o.msg_id
                                       for update skip locked) as m) as o
       where q.msg_id = o.msg_id
    $q$, v_table, v_table) using msg_ids, visible_at;
  get diagnostics v_set = row_count;
  if v_set > 0 and exists (select 1 from unnest(visible_at) as v(at) where v.at <= clock_timestamp()) then
    perform pg_notify('pgmq.' || v_table || '.INSERT', null);
  end if;
  return v_set;
end;
$$;
