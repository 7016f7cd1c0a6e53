-- Queue-wide retention of one declared shared queue's archive: deletes its archived messages older
-- than now - retention, whichever flow they belonged to (pgflow.prune_queue_archive: a partitioned
-- archive drops its old partitions). Returns how many were removed.
create or replace function pgflow.prune_shared_archive(queue_name text, retention interval)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_shared_archive: retention must be a non-negative interval' using errcode = '22023';
  end if;
  if not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = prune_shared_archive.queue_name) then
    raise exception 'queue % is not a shared queue declared by pgflow (shared queues: %)',
      quote_literal(coalesce(queue_name, 'NULL')),
      coalesce((select string_agg(sq.queue_name, ', ' order by sq.queue_name) from pgflow.shared_queues as sq), 'none')
      using errcode = '22023';
  end if;
  return pgflow.prune_queue_archive(queue_name, now() - retention);
end;
$$;
