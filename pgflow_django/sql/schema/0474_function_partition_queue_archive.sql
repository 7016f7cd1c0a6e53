-- Partitions one queue's PGMQ archive by archived_at, on the history's intervals, so that retention
-- drops whole partitions of archived messages instead of deleting them. No row is copied: the
-- archive as it was becomes the partition a_<queue>_old, holding every time up to the end of the
-- interval of its newest message (an empty one is dropped instead), beside a default partition and
-- the partitions create_archive_partitions keeps ready. The parent has the archive's columns and
-- PGMQ's archived_at index (by PGMQ's name, so pgmq.create finds it); primary keys on msg_id are per
-- partition, since a key of a table partitioned by time must hold the time. PGMQ's statements and
-- pgflow.queue_access insert into the parent unchanged. Attaching a_<queue>_old reads it once, under
-- the archive's ACCESS EXCLUSIVE lock; with `wait` false the lock is tried and a busy archive is
-- left for a later call. Returns true when it partitioned the archive; false when the queue has no
-- archive, it is partitioned already, it has no archived_at (not PGMQ's layout), or the lock was
-- busy.
create or replace function pgflow.partition_queue_archive(queue_name text, wait boolean default true)
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive text := pgmq.format_table_name(queue_name, 'a');
  v_interval interval;
  v_newest timestamptz;
begin
  select hp.partition_interval into v_interval from pgflow.history_partitioning as hp;
  if v_interval is null then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first' using errcode = '55000';
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) is distinct from 'r'
     or not exists (select 1 from pg_attribute as a
                     where a.attrelid = to_regclass(format('pgmq.%I', v_archive)) and a.attname = 'archived_at'
                       and a.atttypid = 'timestamptz'::regtype and not a.attisdropped) then
    return false;
  end if;
  if wait then
    execute format('lock table pgmq.%I in access exclusive mode', v_archive);
  else
    begin
      execute format('lock table pgmq.%I in access exclusive mode nowait', v_archive);
    exception when lock_not_available then
      return false;
    end;
  end if;
  if (select c.relkind from pg_class as c where c.oid = to_regclass(format('pgmq.%I', v_archive))) <> 'r' then
    return false;  -- partitioned by another caller while this one waited for the lock
  end if;

  execute format('select max(archived_at) from pgmq.%I', v_archive) into v_newest;
  execute format('alter table pgmq.%I rename to %I', v_archive, v_archive || '_old');
  if to_regclass(format('pgmq.%I', 'archived_at_idx_' || queue_name)) is not null then
    execute format('alter index pgmq.%I rename to %I', 'archived_at_idx_' || queue_name, v_archive || '_old_at_idx');
  end if;
  execute format('create table pgmq.%I (like pgmq.%I including defaults including storage including comments)'
                 ' partition by range (archived_at)', v_archive, v_archive || '_old');
  execute format('create index %I on pgmq.%I (archived_at)', 'archived_at_idx_' || queue_name, v_archive);
  if v_newest is null then
    execute format('drop table pgmq.%I', v_archive || '_old');
  else
    execute format('alter table pgmq.%I attach partition pgmq.%I for values from (minvalue) to (%L)', v_archive,
                   v_archive || '_old',
                   date_bin(v_interval, v_newest, timestamptz '2000-01-03 00:00:00+00') + v_interval);
  end if;
  execute format('create table pgmq.%I partition of pgmq.%I default', v_archive || '_default', v_archive);
  execute format('alter table pgmq.%I add primary key (msg_id)', v_archive || '_default');
  perform pgflow.create_archive_partitions(queue_name);
  return true;
end;
$$;
