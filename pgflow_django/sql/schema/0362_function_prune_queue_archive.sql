-- Retention of one queue's archive: removes its archived messages older than `cutoff` and returns
-- how many. A partitioned archive (pgflow.partition_queue_archive) first drops every partition
-- whose range ends at or before the cutoff, a_<queue>_old included once its last interval has
-- passed (its rows are counted for the result, then one DROP TABLE: no row-level WAL, no dead rows);
-- the rest (the default partition and the interval holding the cutoff) is deleted row by row.
create or replace function pgflow.prune_queue_archive(queue_name text, cutoff timestamptz)
returns bigint
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_archive regclass := to_regclass(format('pgmq.%I', pgmq.format_table_name(queue_name, 'a')));
  v_part record;
  v_count bigint;
  v_pruned bigint := 0;
begin
  if v_archive is null then
    return 0;
  end if;
  for v_part in
    select c.relname
      from pg_inherits as inh
      join pg_class as c on c.oid = inh.inhrelid
     where inh.inhparent = v_archive
       and (regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$TO \('([^']+)'\)$re$))[1]::timestamptz <= cutoff
     order by c.relname
  loop
    execute format('select count(*) from pgmq.%I', v_part.relname) into v_count;
    execute format('drop table pgmq.%I', v_part.relname);
    v_pruned := v_pruned + v_count;
  end loop;
  execute format('delete from %s where archived_at < $1', v_archive) using cutoff;
  get diagnostics v_count = row_count;
  return v_pruned + v_count;
end;
$$;
