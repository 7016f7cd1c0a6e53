-- Frozen migration delta 0004_run_control (loaded by pgflow_django/migrations/0004_run_control.py):
-- cancelling a started run and re-running a finished one, for the admin's actions.

alter table pgflow.runs
  add column rerun_of uuid constraint runs_rerun_of_fkey references pgflow.runs (run_id) on delete set null;

-- 0430_function_cancel_run.sql
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

-- 0440_function_rerun.sql
-- Starts a new run of a finished run's flow with the same input, linked to it by rerun_of.
create or replace function pgflow.rerun(run_id uuid)
returns uuid
language plpgsql
as $$
declare
  v_run pgflow.runs;
  v_new uuid := gen_random_uuid();
begin
  select * into v_run from pgflow.runs as r where r.run_id = rerun.run_id;
  if not found then
    raise exception 'run % does not exist', rerun.run_id using errcode = 'P0002';
  end if;
  if v_run.status = 'started' then
    raise exception 'run % is still started: cancel it or wait for it to finish before re-running it', rerun.run_id
      using errcode = '55000';
  end if;
  perform 1 from pgflow.start_flow(v_run.flow_slug, v_run.input, v_new);
  update pgflow.runs as r set rerun_of = rerun.run_id where r.run_id = v_new;
  return v_new;
end;
$$;

