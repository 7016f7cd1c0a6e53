create table pgflow.workers (
  worker_id uuid primary key,
  queue_name text not null,
  function_name text not null,
  started_at timestamptz not null default clock_timestamp(),
  last_heartbeat_at timestamptz not null default clock_timestamp(),
  deprecated_at timestamptz,
  stopped_at timestamptz
);

create index workers_queue_heartbeat_idx on pgflow.workers (queue_name, last_heartbeat_at);
