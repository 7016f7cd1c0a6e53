-- Fails a started child run (pgflow.fail_run with error_message) if no other transaction holds it,
-- without waiting: its parent's writer holds the parent and may hold other runs, and waiting for a
-- child locked after them would break the order every writer locks runs in. True when the child no
-- longer needs failing (failed now, finished, or gone); false when another writer holds it (the
-- caller leaves its wait due, and the next pgflow.wake_waits tries again).
create or replace function pgflow.fail_child_run(child_run_id uuid, error_message text)
returns boolean
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  perform 1 from pgflow.runs as r where r.run_id = fail_child_run.child_run_id for update skip locked;
  if found then
    perform pgflow.fail_run(fail_child_run.child_run_id, fail_child_run.error_message);
    return true;
  end if;
  return not exists (select 1 from pgflow.runs as r
                      where r.run_id = fail_child_run.child_run_id and r.status = 'started');
end;
$$;
