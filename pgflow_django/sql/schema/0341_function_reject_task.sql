-- Records a failed attempt that no retry can fix (the worker cannot decode the task's input, or
-- encode or store its handler's output): the task fails at once, whatever attempts remain, and its
-- step's when_exhausted decides what follows. Fenced by the claimed `attempt` through the same
-- pgflow.lock_claimed_task as fail_task, so both lock in one order (run, task, then the message).
-- Returns 'failed', 'skipped' or 'stale' (not the current claim: nothing changes; the message is
-- archived when the task is already terminal). The failure is appended to the task's attempt_errors.
create or replace function pgflow.reject_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text
)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
begin
  v_task := pgflow.lock_claimed_task(reject_task.run_id, reject_task.step_slug, reject_task.task_index,
                                     reject_task.attempt);
  if v_task.run_id is null then
    return 'stale';
  end if;

  update pgflow.step_tasks as t
     set attempt_errors = t.attempt_errors || jsonb_build_array(jsonb_build_object(
           'attempt', v_task.attempts_count, 'worker_id', v_task.last_worker_id,
           'error', reject_task.error_message, 'failed_at', clock_timestamp()))
   where t.run_id = reject_task.run_id and t.step_slug = reject_task.step_slug
     and t.task_index = reject_task.task_index;
  return pgflow.exhaust_task(reject_task.run_id, reject_task.step_slug, reject_task.task_index,
                             reject_task.error_message);
end;
$$;
