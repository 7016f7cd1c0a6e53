-- Frozen down delta of 0047_validate_fidelity_checks: back to 0046, whose constraints are NOT VALID.

alter table pgflow.step_states
  drop constraint status_and_remaining_tasks_match,
  drop constraint remaining_tasks_state_consistency,
  drop constraint initial_tasks_known_when_started,
  drop constraint output_only_for_completed_or_null,
  drop constraint skip_reason_matches_status,
  drop constraint completed_at_or_failed_at_or_skipped_at;
alter table pgflow.step_tasks
  drop constraint output_valid_only_for_completed,
  drop constraint completed_at_or_failed_at;
alter table pgflow.step_states
  add constraint status_and_remaining_tasks_match check (status <> 'completed' or remaining_tasks = 0) not valid,
  add constraint remaining_tasks_state_consistency
    check (remaining_tasks is null or status not in ('created', 'skipped')) not valid,
  add constraint initial_tasks_known_when_started check (status <> 'started' or initial_tasks is not null) not valid,
  add constraint output_only_for_completed_or_null check (output is null or status = 'completed') not valid,
  add constraint skip_reason_matches_status check ((status = 'skipped') = (skip_reason is not null)) not valid,
  add constraint completed_at_or_failed_at_or_skipped_at
    check (num_nonnulls(completed_at, failed_at, skipped_at) <= 1) not valid;
alter table pgflow.step_tasks
  add constraint output_valid_only_for_completed check (output is null or status in ('completed', 'failed')) not valid,
  add constraint completed_at_or_failed_at check (completed_at is null or failed_at is null) not valid;
