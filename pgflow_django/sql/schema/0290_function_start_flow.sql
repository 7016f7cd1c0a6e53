-- One run of start_flows: the same checks, an optional run id, start delay (seconds) and priority.
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if input is null and exists (select 1 from pgflow.steps as s
                                where s.flow_slug = start_flow.flow_slug and s.step_type = 'map' and s.deps_count = 0) then
    raise exception 'Flow % has root map steps but input is NULL', flow_slug;  -- pgflow's text and code
  elsif input is null then
    raise exception 'start_flow(%): input must not be NULL (use a JSON value, e.g. {})', flow_slug
      using errcode = '22023';
  end if;
  return query select * from pgflow.start_flows(flow_slug, jsonb_build_array(input),
                                                case when run_id is null then null else array[run_id] end,
                                                start_delay, priority);
end;
$$;
