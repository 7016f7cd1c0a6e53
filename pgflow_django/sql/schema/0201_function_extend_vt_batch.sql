-- Makes each message hidden for at least its own offset (seconds) from now, in one statement. A
-- message already hidden that long (within a second) is not written: a worker that read its batch
-- with a long enough visibility pays no second update per message when the claim applies the
-- task's timeout.
create or replace function pgflow.extend_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns void
language plpgsql
as $$
begin
  if msg_ids is null or cardinality(msg_ids) = 0 then
    return;
  end if;
  if cardinality(msg_ids) <> coalesce(cardinality(vt_offsets), 0) then
    raise exception 'extend_vt_batch: % message ids but % offsets; pass one offset per message id',
      cardinality(msg_ids), coalesce(cardinality(vt_offsets), 0);
  end if;
  execute format(
    $q$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => o.vt_offset)
        from unnest($1, $2) as o(msg_id, vt_offset)
       where q.msg_id = o.msg_id
         and q.vt < clock_timestamp() + make_interval(secs => o.vt_offset - 1)
    $q$,
    pgmq.format_table_name(queue_name, 'q')
  ) using msg_ids, vt_offsets;
end;
$$;
