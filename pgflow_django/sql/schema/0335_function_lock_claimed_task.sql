-- The fence fail_task and reject_task share: locks the run, then the task (the lock order of every
-- task transition), and returns the task when `attempt` is its current claim of a started run and
-- step. Otherwise it returns null (the caller answers 'stale' and changes nothing), after archiving
-- the message of a task that is already terminal.
create or replace function pgflow.lock_claimed_task(
  run_id uuid, step_slug text, task_index integer, attempt integer
)
returns pgflow.step_tasks
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
  v_current boolean;
begin
  perform 1 from pgflow.runs as r where r.run_id = lock_claimed_task.run_id for update;

  select t.* into v_task from pgflow.step_tasks as t
   where t.run_id = lock_claimed_task.run_id and t.step_slug = lock_claimed_task.step_slug
     and t.task_index = lock_claimed_task.task_index
   for update;
  if not found then
    return null;
  end if;

  select v_task.status = 'started' and v_task.attempts_count = lock_claimed_task.attempt
         and r.status = 'started' and ss.status = 'started'
    into v_current
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id and ss.step_slug = lock_claimed_task.step_slug
   where r.run_id = lock_claimed_task.run_id;

  if coalesce(v_current, false) then
    return v_task;
  end if;
  if v_task.status in ('completed', 'failed', 'skipped', 'cancelled') then
    perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);
  end if;
  return null;
end;
$$;
