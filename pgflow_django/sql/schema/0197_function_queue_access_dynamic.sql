-- pgflow.queue_access for a queue without a branch of static SQL: the same operations through PGMQ's
-- functions and statements built at each call (planned again every time). A queue has no branch
-- when it was created after the last pgflow.write_queue_access() or when its tables are not laid out
-- as PGMQ 1.11 to 1.13 make them; a branch is an optimisation and never the only way to a queue.
create or replace function pgflow.queue_access_dynamic(op text, queue_name text, msg_ids bigint[], numbers integer[],
                                                       messages jsonb[], headers jsonb[])
returns setof pgmq.message_record
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if op = 'send' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.send_batch(queue_name, messages, headers, coalesce(numbers[1], 0)) as m(msg_id);
  elsif op = 'archive' then
    return query
      select m.msg_id, null::integer, null::timestamptz, null::timestamptz, null::timestamptz, null::jsonb, null::jsonb
        from pgmq.archive(queue_name, msg_ids) as m(msg_id);
  elsif op in ('set', 'extend') then
    return query execute format(
      'update pgmq.%I as q
          set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
         from unnest($1, $2) as o(msg_id, vt_offset)
        where q.msg_id = o.msg_id
          and ($3 = ''set'' or q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1))
       returning q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers',
      pgmq.format_table_name(queue_name, 'q')) using msg_ids, numbers, op;
  elsif op = 'head' then
    return query execute format(
      'select q.msg_id, q.read_ct, q.enqueued_at, q.last_read_at, q.vt, q.message, q.headers
         from pgmq.%I as q
        where q.vt <= clock_timestamp() and q.enqueued_at < statement_timestamp()
        order by pgflow.message_priority(q.headers) desc, q.msg_id
        limit 1',
      pgmq.format_table_name(queue_name, 'q'));
  else
    raise exception 'queue_access: op must be send, archive, set, extend or head, got %',
      coalesce(quote_literal(op), 'NULL') using errcode = '22023';
  end if;
end;
$$;
