create or replace function pgflow.start_ready_steps(run_id uuid)
returns void
language plpgsql
as $$
begin
  perform pgflow.start_ready_steps(array[run_id]);
end;
$$;
