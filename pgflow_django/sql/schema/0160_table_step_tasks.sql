create table pgflow.step_tasks (
  -- no foreign key to flows: see pgflow.refuse_flow_in_use
  flow_slug text not null,
  run_id uuid not null references pgflow.runs (run_id),
  step_slug text not null,
  task_index integer not null default 0 check (task_index >= 0),
  message_id bigint,
  status text not null default 'queued'
    check (status in ('queued', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  attempts_count integer not null default 0 check (attempts_count >= 0),
  error_message text,
  output jsonb,
  last_worker_id uuid,
  requeued_count integer not null default 0 check (requeued_count >= 0),
  last_requeued_at timestamptz,
  permanently_stalled_at timestamptz,
  queued_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  queue_name text not null constraint step_tasks_queue_name_check check (pgflow.is_valid_queue_name(queue_name)),
  -- one entry per failed attempt: {attempt, worker_id, error, failed_at} (fail_task appends)
  attempt_errors jsonb not null default '[]'::jsonb,
  -- attempts made before the run's last pgflow.retry_run: max_attempts counts the attempts after it
  attempts_base integer not null default 0 check (attempts_base >= 0),
  primary key (run_id, step_slug, task_index),
  foreign key (run_id, step_slug) references pgflow.step_states (run_id, step_slug),
  check (status <> 'started' or started_at is not null),
  -- pgflow's invariants (named as in pgflow); a failed task keeps the output that broke a map
  constraint output_valid_only_for_completed check (output is null or status in ('completed', 'failed')),
  constraint completed_at_or_failed_at check (completed_at is null or failed_at is null)
) with (fillfactor = 80);

-- PGMQ message ids are queue-scoped: (queue_name, message_id) is a message's identity.
create unique index step_tasks_queue_message_key on pgflow.step_tasks (queue_name, message_id)
  where message_id is not null;
-- Claims and completions change no indexed column, so they are HOT updates (fillfactor leaves room
-- on the page); stalled recovery finds started tasks from the active runs instead of an index.
