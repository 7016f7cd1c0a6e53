-- 'cancelled': a step that had started when its run failed; its unfinished tasks were cancelled.
create table pgflow.step_states (
  -- no foreign keys to flows or steps: see pgflow.refuse_flow_in_use
  flow_slug text not null,
  run_id uuid not null references pgflow.runs (run_id),
  step_slug text not null,
  status text not null default 'created'
    check (status in ('created', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  remaining_tasks integer check (remaining_tasks >= 0),
  initial_tasks integer check (initial_tasks >= 0),
  remaining_deps integer not null default 0 check (remaining_deps >= 0),
  output jsonb,
  error_message text,
  skip_reason text check (skip_reason in ('condition_unmet', 'handler_failed', 'dependency_skipped')),
  created_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  primary key (run_id, step_slug),
  check (status <> 'started' or remaining_tasks is not null),
  -- pgflow's invariants (named as in pgflow): a bug that would break one fails its statement
  constraint status_and_remaining_tasks_match check (status <> 'completed' or remaining_tasks = 0),
  constraint remaining_tasks_state_consistency check (remaining_tasks is null or status not in ('created', 'skipped')),
  constraint initial_tasks_known_when_started check (status <> 'started' or initial_tasks is not null),
  constraint output_only_for_completed_or_null check (output is null or status = 'completed'),
  constraint skip_reason_matches_status check ((status = 'skipped') = (skip_reason is not null)),
  constraint completed_at_or_failed_at_or_skipped_at check (num_nonnulls(completed_at, failed_at, skipped_at) <= 1)
) with (fillfactor = 80);
-- No index besides the primary key: every lookup starts from a run (run_id is its prefix), and an
-- index on a column a state transition changes would make every transition a non-HOT update.
