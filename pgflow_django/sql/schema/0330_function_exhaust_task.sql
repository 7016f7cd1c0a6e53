-- A task that has no attempt left: it fails, and its step's when_exhausted decides what follows
-- (fail: the step and the run fail; skip: the step is skipped and dependents go on without it;
-- skip-cascade: the step and everything downstream are skipped). The caller holds the run's lock.
-- The concurrency slots its run frees are released once the run has failed (pgflow.fail_run) or
-- the skip is done.
-- Returns 'failed' or 'skipped'.
create or replace function pgflow.exhaust_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_task pgflow.step_tasks;
  v_when text;
begin
  update pgflow.step_tasks as t
     set status = 'failed', failed_at = clock_timestamp(), error_message = exhaust_task.error_message
   where t.run_id = exhaust_task.run_id and t.step_slug = exhaust_task.step_slug
     and t.task_index = exhaust_task.task_index
  returning t.* into v_task;

  perform pgflow.archive_task_messages(array[v_task.queue_name], array[v_task.message_id]);

  select s.when_exhausted into v_when
    from pgflow.steps as s where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_when = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed', failed_at = clock_timestamp(), error_message = exhaust_task.error_message
     where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
    perform pgflow.fail_run(exhaust_task.run_id, format('step %s failed: %s', exhaust_task.step_slug, exhaust_task.error_message));
    return 'failed';
  end if;

  update pgflow.step_states as ss
     set error_message = exhaust_task.error_message
   where ss.run_id = exhaust_task.run_id and ss.step_slug = exhaust_task.step_slug;
  perform pgflow.skip_step(exhaust_task.run_id, exhaust_task.step_slug, 'handler_failed', v_when = 'skip-cascade');
  perform pgflow.cascade(array[exhaust_task.run_id]);
  -- after the skip: the slots of this task and of the skipped steps' started tasks come free together
  perform pgflow.release_limit_slots(array[exhaust_task.run_id]);
  return 'skipped';
end;
$$;
