-- Fires a schedule now, outside its cron ticks: starts one run through pgflow.start_flows and
-- records it in the ledger as a 'manual' tick at `now`, in one transaction. Works on a paused
-- schedule too (an operator asked for it). `input` replaces the stored input; a callable-input
-- schedule needs it (Python evaluates the callable). Returns the run id.
create or replace function pgflow.trigger_schedule(schedule_name text, now timestamptz default clock_timestamp(), input jsonb default null)
returns uuid
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_schedule pgflow.schedules;
  v_run_id uuid := pgflow.uuid_v7();
begin
  select * into v_schedule from pgflow.schedules as s where s.schedule_name = trigger_schedule.schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', quote_literal(coalesce(trigger_schedule.schedule_name, 'NULL'))
      using errcode = '22023';
  end if;
  if v_schedule.input_callable is not null and trigger_schedule.input is null then
    raise exception 'schedule % takes its input from %: pass the input (the Python API evaluates it)',
      quote_literal(v_schedule.schedule_name), v_schedule.input_callable
      using errcode = '22023';
  end if;
  insert into pgflow.schedule_ticks (schedule_name, tick, run_id, kind)
  values (v_schedule.schedule_name, trigger_schedule.now, v_run_id, 'manual');
  perform pgflow.start_flows(coalesce(pgflow.flow_version(v_schedule.flow_slug), v_schedule.flow_slug), jsonb_build_array(coalesce(trigger_schedule.input, v_schedule.input)),
                             array[v_run_id]);
  update pgflow.schedules as s
     set last_run_id = v_run_id, last_fired_at = clock_timestamp()
   where s.schedule_name = v_schedule.schedule_name;
  return v_run_id;
end;
$$;
