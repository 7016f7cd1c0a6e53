-- Cancels a started run: it ends as failed with reason 'cancelled' (or 'cancelled: <reason>'), its
-- unfinished tasks are cancelled and their messages archived, exactly as a failed run. Returns
-- 'cancelled', or the run's status when it was not started (nothing changes then). Locks the run,
-- then its tasks, then their messages, the order every writer uses; the claim, which holds messages
-- first, skips a task it finds locked, so a cancel never deadlocks with workers.
create or replace function pgflow.cancel_run(run_id uuid, reason text default null)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_status text;
begin
  select r.status into v_status from pgflow.runs as r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', cancel_run.run_id using errcode = 'P0002';
  end if;
  if v_status <> 'started' then
    return v_status;
  end if;
  perform pgflow.fail_run(cancel_run.run_id,
                          'cancelled' || coalesce(': ' || nullif(btrim(cancel_run.reason), ''), ''));
  return 'cancelled';
end;
$$;
