-- Tasks a claim deferred because of a limit, one row per task: kind and scope name the limit,
-- deferrals counts how often (the concurrency deferral doubles each time, up to 30 s, while a freed
-- slot wakes the oldest waiter of its key at once), deferred_at is the first deferral (wake order),
-- visible_at when the message comes back by itself, woken_at when a freed slot woke it (a woken task
-- that a claim still finds over the limit, because the completion that freed the slot had not
-- committed yet, is tried again 0.25 s later instead of waiting out a doubled deferral).
-- Deleted when the task is claimed, woken or no longer queued.
create table pgflow.limit_waits (
  run_id uuid not null,
  task_step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  step_slug text not null,
  kind text not null check (kind in ('concurrency', 'rate')),
  key text not null,
  queue_name text not null,
  message_id bigint not null,
  deferrals integer not null default 1,
  deferred_at timestamptz not null default clock_timestamp(),
  visible_at timestamptz not null,
  woken_at timestamptz,
  primary key (run_id, task_step_slug, task_index)
);

create index limit_waits_key_idx on pgflow.limit_waits (flow_slug, step_slug, kind, key, deferred_at, message_id);
-- the worker's next poll after a claim that deferred tasks: the first one due on its queue
create index limit_waits_queue_due_idx on pgflow.limit_waits (queue_name, visible_at);
