-- Keeps the history partitions ready: creates every missing one from the interval holding now
-- (or `since`, when earlier: history loaded from elsewhere) through `ahead` intervals after it (and
-- through `through`, when later), for runs, step_states and
-- step_tasks alike. Partition k of each table holds the run ids from uuid_v7_bound(start_k) to
-- uuid_v7_bound(start_k + interval), has foreign keys to its sibling partitions and copies of the
-- default partitions' own unique indexes (a unique index without run_id cannot span partitions).
-- Run ids of a new partition's range that reached a default partition meanwhile (a partition made
-- late, or an id that is not time-ordered) move into it first. One caller at a time creates (the
-- others return 0); returns how many intervals it created, 0 on a plain install. With `archives`
-- on, it also partitions the archive of an engine queue that is still a plain table (a queue made
-- since: pgflow.partition_queue_archive, skipped while the archive is busy) and keeps each
-- archive's partitions ready (pgflow.create_archive_partitions). Cheap when nothing is missing: the
-- worker calls it with its stalled recovery.
create or replace function pgflow.create_history_partitions(since timestamptz default null, through timestamptz default null)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_interval interval;
  v_ahead integer;
  v_start timestamptz;
  v_last timestamptz;
  v_missing timestamptz[] := '{}';
  v_lo uuid;
  v_hi uuid;
  v_suffix text;
  v_table text;
  v_options text[];
  v_def text;
  v_created integer := 0;
  v_archives boolean;
  v_queue text;
begin
  select hp.partition_interval, hp.ahead, hp.archives into v_interval, v_ahead, v_archives
    from pgflow.history_partitioning as hp;
  if v_interval is null then
    return 0;
  end if;
  v_start := date_bin(v_interval, least(now(), coalesce(since, now())), timestamptz '2000-01-03 00:00:00+00');
  v_last := greatest(date_bin(v_interval, now(), timestamptz '2000-01-03 00:00:00+00') + v_interval * v_ahead,
                     date_bin(v_interval, coalesce(through, v_start), timestamptz '2000-01-03 00:00:00+00'));
  while v_start <= v_last loop
    if to_regclass(format('pgflow.%I', 'runs_p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD'))) is null then
      v_missing := v_missing || v_start;
    end if;
    v_start := v_start + v_interval;
  end loop;
  if cardinality(v_missing) = 0 or not pg_try_advisory_xact_lock(hashtext('pgflow.create_history_partitions')) then
    v_missing := '{}';
  end if;

  foreach v_start in array v_missing loop
    v_suffix := 'p' || to_char(v_start at time zone 'UTC', 'YYYYMMDD');
    continue when to_regclass(format('pgflow.%I', 'runs_' || v_suffix)) is not null;
    v_created := v_created + 1;
    v_lo := pgflow.uuid_v7_bound(v_start);
    v_hi := pgflow.uuid_v7_bound(v_start + v_interval);
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('create table pgflow.%I (like pgflow.%I including defaults including constraints including storage)',
                     v_table || '_' || v_suffix, v_table);
      select c.reloptions into v_options from pg_class as c where c.oid = format('pgflow.%I', v_table || '_default')::regclass;
      if v_options is not null then
        execute format('alter table pgflow.%I set (%s)', v_table || '_' || v_suffix, array_to_string(v_options, ', '));
      end if;
      execute format('insert into pgflow.%I select * from pgflow.%I where run_id >= $1 and run_id < $2',
                     v_table || '_' || v_suffix, v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['step_tasks', 'step_states', 'runs'] loop
      execute format('delete from pgflow.%I where run_id >= $1 and run_id < $2', v_table || '_default') using v_lo, v_hi;
    end loop;
    foreach v_table in array array['runs', 'step_states', 'step_tasks'] loop
      execute format('alter table pgflow.%I attach partition pgflow.%I for values from (%L) to (%L)',
                     v_table, v_table || '_' || v_suffix, v_lo, v_hi);
      for v_def in
        select pg_get_indexdef(i.indexrelid) from pg_index as i
         where i.indrelid = format('pgflow.%I', v_table || '_default')::regclass
           and not exists (select 1 from pg_inherits as inh where inh.inhrelid = i.indexrelid)
         order by i.indexrelid
      loop
        execute replace(v_def, v_table || '_default', v_table || '_' || v_suffix);
      end loop;
    end loop;
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_states_' || v_suffix, 'step_states_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id) references pgflow.%I (run_id)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_fkey', 'runs_' || v_suffix);
    execute format('alter table pgflow.%I add constraint %I foreign key (run_id, step_slug) references pgflow.%I (run_id, step_slug)',
                   'step_tasks_' || v_suffix, 'step_tasks_' || v_suffix || '_run_id_step_slug_fkey', 'step_states_' || v_suffix);
  end loop;

  -- the archives after the history tables, the order in which every writer takes them
  if v_archives then
    for v_queue in
      select e.queue_name from pgflow.engine_queues() as e(queue_name)
       where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
       order by e.queue_name
    loop
      perform pgflow.partition_queue_archive(v_queue, wait => false);
      perform pgflow.create_archive_partitions(v_queue, since, through);
    end loop;
  end if;
  return v_created;
end;
$$;
