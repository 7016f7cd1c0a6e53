-- Partitions the PGMQ archives of pgflow's queues on a history partitioned before archives were
-- (pgflow.partition_queue_archive for each, then `archives` on, so that workers partition new
-- queues' archives too). Returns the statements in order; runs them only when `apply` (otherwise
-- it changes nothing: the plan `pgflow_partition --archives` prints).
create or replace function pgflow.partition_archives(apply boolean)
returns setof text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_steps text[] := array['update pgflow.history_partitioning set archives = true'];
  v_queue text;
  v_step text;
begin
  if not exists (select 1 from pgflow.history_partitioning) then
    raise exception 'the pgflow history is not partitioned: run pgflow_partition first (it partitions the archives too)'
      using errcode = '55000';
  end if;
  if exists (select 1 from pgflow.history_partitioning as hp where hp.archives) then
    raise exception 'the queue archives are already partitioned' using errcode = '55000';
  end if;
  for v_queue in
    select e.queue_name from pgflow.engine_queues() as e(queue_name)
     where to_regclass(format('pgmq.%I', pgmq.format_table_name(e.queue_name, 'a'))) is not null
     order by e.queue_name
  loop
    v_steps := v_steps || format('select pgflow.partition_queue_archive(%L)', v_queue);
  end loop;
  foreach v_step in array v_steps loop
    if apply then
      execute v_step;
    end if;
    return next v_step;
  end loop;
end;
$$;
