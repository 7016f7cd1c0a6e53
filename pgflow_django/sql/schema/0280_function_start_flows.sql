-- Starts one run per element of the JSON array `inputs`, in one call. Every input is checked before
-- any row is written: a flow whose root step is a map needs array inputs. start_delay (seconds)
-- delays the runs: their first tasks' messages become visible no earlier than now + start_delay.
-- priority (-100..100, NULL: the steps' and the flow's defaults) is every run's claim priority.
-- Holds the flow's start lock in shared mode until the caller's transaction ends: starts run side by
-- side, while a deletion (pgflow.delete_flow_and_data takes it exclusively) waits for them, and a
-- start that comes during a deletion waits for it, then finds the flow gone.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, run_ids uuid[] default null, start_delay integer default null,
  priority integer default null
)
returns setof pgflow.runs
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_root_map text;
  v_bad bigint;
  v_bad_type text;
  v_ids uuid[];
  v_lo uuid;
  v_hi uuid;
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:start:' || flow_slug, 0));
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = start_flows.flow_slug) then
    raise exception 'flow % does not exist: compile it first (manage.py pgflow_compile)', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if inputs is null or jsonb_typeof(inputs) <> 'array' then
    raise exception 'start_flows(%): inputs must be a JSON array of run inputs', flow_slug
      using errcode = '22023';
  end if;
  if start_delay is not null and start_delay < 0 then
    raise exception 'start_flows(%): start_delay must be >= 0 seconds, got %', flow_slug, start_delay
      using errcode = '22023';
  end if;
  if priority is not null and priority not between -100 and 100 then
    raise exception 'start_flows(%): priority must be a whole number from -100 to 100, got %', flow_slug, priority
      using errcode = '22023';
  end if;
  if run_ids is not null and cardinality(run_ids) <> jsonb_array_length(inputs) then
    raise exception 'start_flows(%): % inputs but % run ids', flow_slug, jsonb_array_length(inputs), cardinality(run_ids)
      using errcode = '22023';
  end if;

  select s.step_slug into v_root_map
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug and s.step_type = 'map' and s.deps_count = 0
   order by s.step_index limit 1;
  if v_root_map is not null then
    select e.n, jsonb_typeof(e.input) into v_bad, v_bad_type
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
     where jsonb_typeof(e.input) <> 'array'
     order by e.n limit 1;
    if v_bad is not null then
      -- pgflow's text and code (P0001); a batch also says which of its inputs
      raise exception 'Flow % has root map steps but input is not an array (got %)%', flow_slug, v_bad_type,
        case when jsonb_array_length(inputs) > 1 then format(' (input %s of %s)', v_bad, jsonb_array_length(inputs)) else '' end
        using hint = format('root map step %s maps over the run''s input: pass a JSON array', v_root_map);
    end if;
  end if;

  with new_runs as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, not_before, priority)
    select coalesce(run_ids[e.n], pgflow.uuid_v7()), start_flows.flow_slug, e.input,
           (select count(*) from pgflow.steps as s where s.flow_slug = start_flows.flow_slug),
           case when start_flows.start_delay > 0
                then clock_timestamp() + make_interval(secs => start_flows.start_delay) end,
           start_flows.priority
      from jsonb_array_elements(inputs) with ordinality as e(input, n)
    returning runs.run_id, runs.input
  ), states as (
    insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
    select start_flows.flow_slug, nr.run_id, s.step_slug, s.deps_count,
           case when s.step_type = 'single' then 1
                when s.deps_count = 0 then jsonb_array_length(nr.input)
           end
      from new_runs as nr
      cross join pgflow.steps as s
     where s.flow_slug = start_flows.flow_slug
  )
  select array_agg(nr.run_id) into v_ids from new_runs as nr;
  -- the bounds by a statement of their own: an ordered aggregate beside the one above lets
  -- PostgreSQL 16 and later sort the input for it, and v_ids would lose the inputs' order
  select b.lo, b.hi into v_lo, v_hi from pgflow.run_id_bounds(v_ids) as b;

  -- a new run's only moves are its root steps': when none of them has a condition and no root map
  -- gets an empty array, starting them is all pgflow.cascade would do (every count is already
  -- right, no step completes, so no run does), and its recounts are skipped (pgflow.fast_hop =
  -- 'off' turns this off, as it does the completion's fast path)
  if current_setting('pgflow.fast_hop', true) is distinct from 'off'
     and exists (select 1 from pgflow.steps as s where s.flow_slug = start_flows.flow_slug)
     and not exists (
       select 1 from pgflow.steps as s
        where s.flow_slug = start_flows.flow_slug and s.deps_count = 0
          and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null
               or s.step_type = 'map' and exists (select 1 from jsonb_array_elements(inputs) as e(input)
                                                   where e.input = '[]'::jsonb))) then
    perform pgflow.start_ready_steps(v_ids);
  else
    perform pgflow.cascade(v_ids);
  end if;

  -- each new run by its own probe: joined to the array, a plan could walk every run and match the
  -- whole batch against each; between the batch's lowest and highest ids, so that on a partitioned
  -- history only the partitions holding them are set up (see pgflow.complete_hop)
  return query
    select r.*
      from unnest(v_ids) with ordinality as i(run_id, n)
     cross join lateral (
       select * from pgflow.runs as x where x.run_id = i.run_id and x.run_id between v_lo and v_hi offset 0
     ) as r
     order by i.n;
end;
$$;
