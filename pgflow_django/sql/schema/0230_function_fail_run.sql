-- The failure path of a run. The caller holds the run's row lock. Every unfinished task is
-- cancelled and its message archived, so nothing of a failed run stays queued, started or visible;
-- a step that had started reads 'cancelled' (its tasks will never finish). remaining_steps keeps
-- counting the steps that neither completed nor were skipped, as on every other path. Its waits
-- (pgflow.step_waits) end with it, and its unfinished child runs fail (pgflow.end_waits); a failed
-- child run makes its parent's wait due (pgflow.wake_waits fails the parent's task). Its
-- concurrency slots are freed here, or, inside pgflow.complete_tasks, by that completion's release.
create or replace function pgflow.fail_run(run_id uuid, error_message text)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_queues text[];
  v_msgs bigint[];
  v_parent uuid;
begin
  update pgflow.runs as r
     set status = 'failed', failed_at = clock_timestamp(), error_message = fail_run.error_message,
         remaining_steps = (select count(*) from pgflow.step_states as ss
                             where ss.run_id = r.run_id and ss.status not in ('completed', 'skipped'))
   where r.run_id = fail_run.run_id and r.status = 'started'
  returning r.parent_run_id into v_parent;
  if not found then
    return;
  end if;

  -- its waits end, and its unfinished child runs fail with it (now, or at the next wait pass)
  perform pgflow.end_waits(fail_run.run_id, format('parent run %s failed', fail_run.run_id));

  update pgflow.step_states as ss
     set status = 'cancelled'
   where ss.run_id = fail_run.run_id and ss.status = 'started';

  with cancelled as (
    update pgflow.step_tasks as t
       set status = 'cancelled', error_message = coalesce(t.error_message, 'run failed: ' || fail_run.error_message)
     where t.run_id = fail_run.run_id and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(c.queue_name), array_agg(c.message_id) into v_queues, v_msgs from cancelled as c;

  perform pgflow.archive_task_messages(v_queues, v_msgs);
  -- a failed child run: its parent's subflow task is due, for pgflow.wake_waits
  if v_parent is not null then
    update pgflow.step_waits as w set due_at = clock_timestamp()
     where w.child_run_id = fail_run.run_id and w.due_at is null;
    perform pg_notify('pgflow_waits', '');
  end if;
  -- inside pgflow.complete_tasks the completion's own release, its last statement, frees them
  if current_setting('pgflow.slots_released_at_end', true) is distinct from 'on' then
    perform pgflow.release_limit_slots(array[fail_run.run_id]);
  end if;
end;
$$;
