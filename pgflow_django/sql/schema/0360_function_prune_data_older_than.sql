-- Deletes finished runs (completed or failed before now - retention) with their step states and
-- tasks, archived messages older than the retention in every private queue a step routes to, and
-- workers stopped or silent for that long. The live messages of a pruned run's tasks that never
-- finished (rows changed by hand: the engine ends a finished run's tasks) are archived in the same
-- transaction, read from the deleted rows (or the dropped partition's count), so no worker reads a
-- message whose task is gone. Archives of shared queues are left alone: several flows'
-- messages meet there, so their retention is queue-wide (pgflow.prune_shared_archive)
-- (a worker that sent a heartbeat in the last 10 minutes is never pruned, whatever the retention).
-- A partitioned history (pgflow.partition_history) drops whole partitions instead: every interval
-- that ended before the cutoff and whose runs all finished before it goes with one DROP TABLE of
-- its three partitions (reruns naming its runs get rerun_of = NULL); the rest (the default
-- partitions, which hold the ids that are not time-ordered, and an old interval that still has a run
-- in progress or finished later) is deleted row by row as before, reading only the partitions that
-- can hold such runs. 'partitions' counts the intervals dropped. A partitioned archive drops its
-- old partitions too (pgflow.prune_queue_archive). The rows go by a join with the
-- pruned ids (a hash join or index probes), not by `= any(array)`, which tests every row against
-- every id.
create or replace function pgflow.prune_data_older_than(retention interval)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_cutoff timestamptz := now() - retention;
  v_runs uuid[];
  v_tasks integer;
  v_states integer;
  v_workers integer;
  v_archived bigint := 0;
  v_queue text;
  v_count bigint;
  v_dropped integer := 0;
  v_partitioned boolean;
  v_part record;
  v_unfinished bigint;
  v_dropped_runs bigint := 0;
  v_dropped_states bigint := 0;
  v_dropped_tasks bigint := 0;
  v_upper uuid;
  v_live constant text := 't.status in (''queued'', ''started'') and t.message_id is not null';
  v_live_queues text[];
  v_live_ids bigint[];
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval' using errcode = '22023';
  end if;

  v_partitioned := exists (select 1 from pgflow.history_partitioning);
  if v_partitioned then
    for v_part in
      select substr(c.relname, 6) as suffix, pgflow.uuid_v7_bound(lo) as lo, pgflow.uuid_v7_bound(lo + hp.partition_interval) as hi
        from pg_inherits as inh
        join pg_class as c on c.oid = inh.inhrelid
        cross join pgflow.history_partitioning as hp
        cross join lateral (select to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC' as lo) as b
       where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$'
         and b.lo + hp.partition_interval <= v_cutoff
       order by c.relname
    loop
      execute format('select count(*), count(*) filter (where status not in (''completed'', ''failed'')'
                     ' or coalesce(completed_at, failed_at) >= $1) from pgflow.%I', 'runs_' || v_part.suffix)
        into v_count, v_unfinished using v_cutoff;
      continue when v_unfinished > 0;
      v_dropped_runs := v_dropped_runs + v_count;
      execute format('select count(*) from pgflow.%I', 'step_states_' || v_part.suffix) into v_count;
      v_dropped_states := v_dropped_states + v_count;
      execute format('select count(*), array_agg(t.queue_name) filter (where %s), array_agg(t.message_id) filter (where %s)'
                     ' from pgflow.%I as t', v_live, v_live, 'step_tasks_' || v_part.suffix)
        into v_count, v_live_queues, v_live_ids;
      v_dropped_tasks := v_dropped_tasks + v_count;
      if v_live_ids is not null then
        perform pgflow.archive_task_messages(v_live_queues, v_live_ids);
      end if;
      update pgflow.runs as r set rerun_of = null where r.rerun_of >= v_part.lo and r.rerun_of < v_part.hi;
      execute format('drop table pgflow.%I, pgflow.%I, pgflow.%I',
                     'step_tasks_' || v_part.suffix, 'step_states_' || v_part.suffix, 'runs_' || v_part.suffix);
      v_dropped := v_dropped + 1;
    end loop;
    -- time-ordered ids of runs finished before the cutoff sort below its bound; the others are in the
    -- default partitions, which no range excludes
    select pgflow.uuid_v7_bound(coalesce(max(to_date(substr(c.relname, 7), 'YYYYMMDD')::timestamp at time zone 'UTC'
                                             + hp.partition_interval), v_cutoff))
      into v_upper
      from pg_inherits as inh join pg_class as c on c.oid = inh.inhrelid cross join pgflow.history_partitioning as hp
     where inh.inhparent = 'pgflow.runs'::regclass and c.relname ~ '^runs_p[0-9]{8}$';
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where (r.run_id < pgflow.uuid_v7_bound(v_cutoff) or r.run_id >= v_upper)
       and r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
    update pgflow.runs as r set rerun_of = null from unnest(v_runs) as p(run_id) where r.rerun_of = p.run_id;
  else
    select array_agg(r.run_id) into v_runs
      from pgflow.runs as r
     where r.status in ('completed', 'failed') and coalesce(r.completed_at, r.failed_at) < v_cutoff;
    v_runs := coalesce(v_runs, '{}');
  end if;

  delete from pgflow.step_waits as w using unnest(v_runs) as p(run_id) where w.run_id = p.run_id;
  with gone as (
    delete from pgflow.step_tasks as t using unnest(v_runs) as p(run_id) where t.run_id = p.run_id
    returning t.status, t.queue_name, t.message_id
  )
  select count(*), array_agg(t.queue_name) filter (where t.status in ('queued', 'started') and t.message_id is not null),
         array_agg(t.message_id) filter (where t.status in ('queued', 'started') and t.message_id is not null)
    into v_tasks, v_live_queues, v_live_ids
    from gone as t;
  if v_live_ids is not null then
    perform pgflow.archive_task_messages(v_live_queues, v_live_ids);
  end if;
  delete from pgflow.step_states as ss using unnest(v_runs) as p(run_id) where ss.run_id = p.run_id;
  get diagnostics v_states = row_count;
  delete from pgflow.runs as r using unnest(v_runs) as p(run_id) where r.run_id = p.run_id;

  delete from pgflow.workers as w
   where coalesce(w.stopped_at, w.last_heartbeat_at) < v_cutoff
     and (w.stopped_at is not null or w.last_heartbeat_at < now() - interval '10 minutes');
  get diagnostics v_workers = row_count;

  for v_queue in
    select distinct s.queue_name from pgflow.steps as s
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(s.queue_name, 'a'))) is not null
       and not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = s.queue_name)
     order by s.queue_name
  loop
    v_archived := v_archived + pgflow.prune_queue_archive(v_queue, v_cutoff);
  end loop;

  return jsonb_build_object('runs', cardinality(v_runs) + v_dropped_runs, 'step_states', v_states + v_dropped_states,
                            'step_tasks', v_tasks + v_dropped_tasks, 'workers', v_workers,
                            'archived_messages', v_archived, 'partitions', v_dropped);
end;
$$;
