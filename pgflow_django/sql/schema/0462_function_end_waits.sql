-- Ends the waits of a run's tasks that no longer wait, because the run failed (step_slugs NULL) or
-- those steps were skipped: event and sleep waits are deleted; a subflow task's unfinished child run
-- fails with reason (pgflow.fail_child_run), and its wait is deleted, or, when another writer holds
-- the child, kept due at once with the reason, for pgflow.wake_waits to fail the child later. The
-- caller holds the run's lock.
create or replace function pgflow.end_waits(run_id uuid, reason text, step_slugs text[] default null)
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_child record;
begin
  delete from pgflow.step_waits as w
   where w.run_id = end_waits.run_id and w.kind <> 'subflow'
     and (end_waits.step_slugs is null or w.step_slug = any(end_waits.step_slugs));
  for v_child in
    select w.step_slug, w.task_index, w.child_run_id
      from pgflow.step_waits as w
     where w.run_id = end_waits.run_id and w.kind = 'subflow'
       and (end_waits.step_slugs is null or w.step_slug = any(end_waits.step_slugs))
     order by w.child_run_id
  loop
    if v_child.child_run_id is null or pgflow.fail_child_run(v_child.child_run_id, end_waits.reason) then
      delete from pgflow.step_waits as w
       where w.run_id = end_waits.run_id and w.step_slug = v_child.step_slug and w.task_index = v_child.task_index;
    else
      update pgflow.step_waits as w
         set due_at = clock_timestamp(), error_message = end_waits.reason
       where w.run_id = end_waits.run_id and w.step_slug = v_child.step_slug and w.task_index = v_child.task_index;
    end if;
  end loop;
end;
$$;
