-- Present (one row) once pgflow.partition_history has partitioned runs, step_states and step_tasks
-- by run id: each partition holds the runs started in one interval of `partition_interval` (UTC
-- days, aligned on Monday 2000-01-03), with `ahead` future partitions kept ready by
-- pgflow.create_history_partitions. `archives`: the PGMQ archives of pgflow's queues are partitioned
-- by archived_at on the same intervals (pgflow.partition_queue_archive), new queues' archives
-- included. Absent: the history tables are plain tables.
create table pgflow.history_partitioning (
  singleton boolean primary key default true check (singleton),
  partition_interval interval not null
    check (partition_interval >= interval '1 day' and partition_interval <= interval '31 days'
           and date_trunc('day', partition_interval) = partition_interval
           and extract(month from partition_interval) = 0),
  ahead integer not null check (ahead between 1 and 60),
  partitioned_at timestamptz not null default clock_timestamp(),
  archives boolean not null default false
);
