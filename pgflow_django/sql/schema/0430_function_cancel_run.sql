-- Cancels a started run: it ends as failed with reason 'cancelled', its unfinished tasks are
-- cancelled and their messages archived, exactly as a failed run. Returns 'cancelled', or the run's
-- status when it was not started (nothing changes then).
create or replace function pgflow.cancel_run(run_id uuid)
returns text
language plpgsql
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
  perform pgflow.fail_run(cancel_run.run_id, 'cancelled');
  return 'cancelled';
end;
$$;
