create or replace function pgflow.maybe_complete_run(run_id uuid)
returns void
language plpgsql
as $$
begin
  perform pgflow.maybe_complete_runs(array[run_id]);
end;
$$;
