-- Fires every due tick of at most max_schedules schedules: starts each tick's run (of the flow's newest
-- version, pgflow.flow_version) through pgflow.start_flows and records the tick in pgflow.schedule_ticks in this same transaction, so a
-- tick fires once, or (when the transaction is lost) not at all and is fired by the next call.
-- Concurrent callers do not wait: a transaction-level advisory try-lock lets one caller fire while
-- the others return no rows at once; schedule rows being edited are skipped (SKIP LOCKED) and the
-- ledger's primary key refuses a tick recorded before, whatever the isolation level.
-- Every due tick is consumed, fired or missed, as pgflow.schedule_due_ticks decides per catch-up
-- policy; a schedule whose planned ticks are all in the past waits to be planned again from now
-- (pgflow.due_schedule_names). `inputs` carries the inputs of callable-input schedules, evaluated by the Python scheduler:
-- a JSON array of {"schedule": name, "tick": timestamp, "input": value}; a callable schedule with a
-- firing tick it has no input for is left due. When starting a flow's runs fails (e.g. the flow was
-- deleted), its schedules keep their ticks and record the error in last_error; the others still fire.
-- An input the flow refuses (not an array, for a flow whose root step is a map) holds back only its
-- own schedule, with the reason in last_error, before the flow's runs are started together.
-- Returns the ticks fired by this call.
create or replace function pgflow.fire_due_schedules(
  now timestamptz default clock_timestamp(),
  max_schedules integer default 500,
  inputs jsonb default null,
  grace interval default interval '60 seconds'
)
returns table (schedule_name text, tick timestamptz, run_id uuid)
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_names text[];
  v_plan record;
  v_flow record;
  v_held text[] := '{}';
  v_fired_names text[] := '{}';
  v_fired_ticks timestamptz[] := '{}';
  v_fired_ids uuid[] := '{}';
  v_new_names text[];
  v_new_ticks timestamptz[];
  v_new_ids uuid[];
  v_new_inputs jsonb;
begin
  if fire_due_schedules.now is null or max_schedules is null or max_schedules < 1 then
    raise exception 'fire_due_schedules: now must be a timestamp and max_schedules >= 1, got % and %',
      coalesce(fire_due_schedules.now::text, 'NULL'), coalesce(max_schedules::text, 'NULL')
      using errcode = '22023';
  end if;
  if inputs is not null and jsonb_typeof(inputs) <> 'array' then
    raise exception 'fire_due_schedules: inputs must be a JSON array of {"schedule", "tick", "input"}'
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(hashtextextended('pgflow:fire_due_schedules', 0)) then
    return;
  end if;

  select array_agg(l.schedule_name) into v_names
    from (select s.schedule_name
            from pgflow.schedules as s
           where s.schedule_name = any(pgflow.due_schedule_names(fire_due_schedules.now, max_schedules,
                                                                 inputs is not null))
             for update skip locked) as l;
  if v_names is null then
    return;
  end if;

  select array_agg(d.schedule_name order by d.schedule_name, d.tick) as names,
         array_agg(d.tick order by d.schedule_name, d.tick) as ticks,
         array_agg(d.fire order by d.schedule_name, d.tick) as fires,
         array_agg(d.flow_slug order by d.schedule_name, d.tick) as flows,
         jsonb_agg(case when d.input_callable is null then d.input else i.input end
                   order by d.schedule_name, d.tick) as inputs,
         coalesce(array_agg(distinct d.schedule_name)
                    filter (where d.fire and d.input_callable is not null and i.input is null), '{}') as lacking
    into v_plan
    from pgflow.schedule_due_ticks(v_names, fire_due_schedules.now, grace) as d
    left join lateral (
      select e.value -> 'input' as input
        from jsonb_array_elements(coalesce(inputs, '[]'::jsonb)) as e(value)
       where e.value ->> 'schedule' = d.schedule_name and (e.value ->> 'tick')::timestamptz = d.tick
         and e.value ? 'input'
       limit 1
    ) as i on d.input_callable is not null;
  if v_plan.names is null then
    return;
  end if;
  v_held := v_plan.lacking;

  -- pgflow.start_flows refuses all the inputs of a call when one is not an array for a flow whose
  -- root step is a map: such an input holds back its own schedule here, not its flow's others
  with refused as (
    select distinct on (p.name) p.name, p.flow, m.step_slug, jsonb_typeof(p.input) as got
      from rows from (unnest(v_plan.names), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) as p(name, fire, flow, input)
      join pgflow.steps as m on m.flow_slug = coalesce(pgflow.flow_version(p.flow), p.flow) and m.step_type = 'map' and m.deps_count = 0
     where p.fire and jsonb_typeof(p.input) <> 'array' and not (p.name = any(v_held))
     order by p.name, m.step_index
  ), recorded as (
    update pgflow.schedules as s
       set last_error = left(format('starting flow %s: root map step %s needs an array input, got %s',
                                    r.flow, r.step_slug, coalesce(r.got, 'null')), 2000)
      from refused as r
     where s.schedule_name = r.name
    returning s.schedule_name
  )
  select v_held || coalesce(array_agg(r.schedule_name), '{}') into v_held from recorded as r;

  for v_flow in
    select p.flow, array_agg(p.name order by p.n) as names, array_agg(p.tick order by p.n) as ticks,
           jsonb_agg(p.input order by p.n) as inputs
      from rows from (unnest(v_plan.names), unnest(v_plan.ticks), unnest(v_plan.fires), unnest(v_plan.flows),
                      jsonb_array_elements(v_plan.inputs)) with ordinality as p(name, tick, fire, flow, input, n)
     where p.fire and not (p.name = any(v_held))
     group by p.flow
     order by p.flow
  loop
    begin
      with fresh as (
        insert into pgflow.schedule_ticks as st (schedule_name, tick, run_id)
        select u.name, u.tick, pgflow.uuid_v7()
          from unnest(v_flow.names, v_flow.ticks) as u(name, tick)
        on conflict do nothing
        returning st.schedule_name, st.tick, st.run_id
      )
      select array_agg(f.schedule_name order by f.schedule_name, f.tick),
             array_agg(f.tick order by f.schedule_name, f.tick),
             array_agg(f.run_id order by f.schedule_name, f.tick),
             jsonb_agg(u.input order by f.schedule_name, f.tick)
        into v_new_names, v_new_ticks, v_new_ids, v_new_inputs
        from fresh as f
        join rows from (unnest(v_flow.names), unnest(v_flow.ticks), jsonb_array_elements(v_flow.inputs))
             as u(name, tick, input) on u.name = f.schedule_name and u.tick = f.tick;
      if v_new_ids is not null then
        perform pgflow.start_flows(coalesce(pgflow.flow_version(v_flow.flow), v_flow.flow), v_new_inputs, v_new_ids);
        v_fired_names := v_fired_names || v_new_names;
        v_fired_ticks := v_fired_ticks || v_new_ticks;
        v_fired_ids := v_fired_ids || v_new_ids;
      end if;
    exception when others then
      v_held := v_held || v_flow.names;
      update pgflow.schedules as s
         set last_error = left('starting flow ' || v_flow.flow || ': ' || sqlerrm, 2000)
       where s.schedule_name = any(v_flow.names);
    end;
  end loop;

  with consumed as (
    select p.name, count(*) filter (where not p.fire) as missed
      from rows from (unnest(v_plan.names), unnest(v_plan.fires)) as p(name, fire)
     where not (p.name = any(v_held))
     group by p.name
  ), latest as (
    select distinct on (f.name) f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick desc
  ), remaining as (
    select s.schedule_name, r.upcoming,
           pgflow.schedule_next_fire_at(s.schedule_name, r.upcoming, s.jitter_seconds) as next_fire_at
      from pgflow.schedules as s
     cross join lateral (
       select coalesce(array(select u.tick from unnest(s.upcoming) as u(tick)
                              where pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds)
                                    > fire_due_schedules.now
                              order by u.tick), '{}') as upcoming
     ) as r
     where s.schedule_name = any(array(select c.name from consumed as c))
  )
  update pgflow.schedules as s
     set upcoming = r.upcoming,
         next_fire_at = r.next_fire_at,
         last_tick = greatest(s.last_tick, l.tick),
         last_run_id = coalesce(l.run_id, s.last_run_id),
         last_fired_at = case when l.tick is null then s.last_fired_at else clock_timestamp() end,
         missed_ticks = s.missed_ticks + c.missed,
         last_error = null
    from consumed as c
    join remaining as r on r.schedule_name = c.name
    left join latest as l on l.name = c.name
   where s.schedule_name = c.name;

  return query
    select f.name, f.tick, f.run_id
      from rows from (unnest(v_fired_names), unnest(v_fired_ticks), unnest(v_fired_ids)) as f(name, tick, run_id)
     order by f.name, f.tick;
end;
$$;
