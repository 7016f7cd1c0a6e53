-- Keeps a partitioned archive's partitions ready: creates every missing partition of the queue's
-- archive (pgmq.a_<queue>, range-partitioned by archived_at) from the interval holding now (or
-- `since`, when earlier) through `ahead` intervals after it (and through `through`, when later), on
-- the history's intervals. Partition a_<queue>_pYYYYMMDD gets the archive's columns, a primary key
-- on msg_id (as PGMQ's archive has) and the parent's archived_at index. Intervals below the upper
-- bound of a_<queue>_old (the archive as it was before partitioning) are left to it. Archived
-- messages of a new partition's range that reached the default partition meanwhile move into it
-- first. One caller at a time creates (create_history_partitions' advisory lock; the others return
-- 0). Returns how many partitions it created: 0 for a plain archive or when none is missing (cheap,
-- no lock taken then: the worker calls it with its stalled recovery).
create or replace function pgflow.create_archive_partitions(
  queue_name text, since timestamptz default null, through timestamptz default null
)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_ahead integer;
  v_floor timestamptz;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_part text;
  v_created integer := 0;
begin
  select hp.partition_interval, hp.ahead into v_interval, v_ahead from pgflow.history_partitioning as hp;
  if v_interval is null
     or (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'p' then
    return 0;
  end if;
  select (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz into v_floor
    from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive || '_old'));
  v_start := greatest(date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00'),
                      coalesce(v_floor, '-infinity'));
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgmq.%I', v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    return 0;
  end if;

  foreach v_start in array v_missing loop
    v_part := v_archive || '_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgmq.%I', v_part)) is not null;
    execute format('create table pgmq.%I (like pgmq.%I including defaults including storage)', v_part, v_archive);
    execute format('alter table pgmq.%I add primary key (msg_id)', v_part);
    execute format('with moved as (delete from pgmq.%I where archived_at >= $1 and archived_at < $2 returning *)'
                   ' insert into pgmq.%I select * from moved', v_archive || '_default', v_part)
      using v_start, v_start + v_interval;
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (%L) to (%L)',
                   v_archive, v_part, v_start, v_start + v_interval);
    v_created := v_created + 1;
  end loop;
  return v_created;
end;
$$;
