-- Records a failed attempt that no retry can fix (the worker cannot decode the task's input, or
-- encode or store its handler's output): the task fails at once, whatever attempts remain, and its
-- step's when_exhausted decides what follows. Fenced by the claimed `attempt` like fail_task, and
-- locks in the same order (run, task, then the message it archives). Returns 'failed', 'skipped' or
-- 'stale' (not the current claim: nothing changes; the message is archived when the task is
-- already terminal). The failure is appended to the task's attempt_errors.
create or replace function pgflow.reject_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, error_message text
)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
begin
  perform 1 from pgflow.runs as r where r.run_id = reject_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = reject_task.run_id and t.step_slug = reject_task.step_slug
     and t.task_index = reject_task.task_index
   for update;
  if not found then
    return 'stale';
  end if;

  select v_task.status = 'started' and v_task.attempts_count = reject_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = reject_task.step_slug
   where r.run_id = reject_task.run_id;

  if not coalesce(v_current, false) then
    if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
      perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
    end if;
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
