-- Frozen migration delta 0037_schedule_isolation, down: pgflow.plan_schedules as 0014 left it, and
-- pgflow.schedules without plan_error and plan_failed_at (the recorded planning errors are lost).

-- 0455_function_plan_schedules.sql
-- Stores planned ticks computed by Python (cron arithmetic, time zones and DST stay in one place):
-- `plans` is a JSON array of {"schedule": name, "revision": n, "ticks": [timestamps], "planned_until": t}.
-- Ticks are merged into `upcoming` (sorted, without duplicates, none at or before the last fired
-- tick) and next_fire_at is recomputed. A plan made for another revision of the definition (the
-- schedule was edited meanwhile) is ignored. Returns the names of the schedules updated.
create or replace function pgflow.plan_schedules(plans jsonb)
returns setof text
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if plans is null or jsonb_typeof(plans) <> 'array' then
    raise exception 'plan_schedules: plans must be a JSON array of {"schedule", "revision", "ticks", "planned_until"}'
      using errcode = '22023';
  end if;
  return query
    with p as (
      select e.value ->> 'schedule' as name, (e.value ->> 'revision')::bigint as revision,
             array(select t::timestamptz from jsonb_array_elements_text(e.value -> 'ticks') as t) as ticks,
             (e.value ->> 'planned_until')::timestamptz as planned_until
        from jsonb_array_elements(plans) as e(value)
    ), merged as (
      select s.schedule_name, p.planned_until,
             coalesce(array(select distinct u.tick from unnest(s.upcoming || p.ticks) as u(tick)
                             where s.last_tick is null or u.tick > s.last_tick
                             order by u.tick), '{}') as upcoming
        from pgflow.schedules as s
        join p on p.name = s.schedule_name and p.revision = s.revision
    )
    update pgflow.schedules as s
       set upcoming = m.upcoming,
           planned_until = greatest(s.planned_until, m.planned_until),
           next_fire_at = pgflow.schedule_next_fire_at(s.schedule_name, m.upcoming, s.jitter_seconds)
      from merged as m
     where s.schedule_name = m.schedule_name
    returning s.schedule_name;
end;
$$;

-- 0180_table_schedules.sql
alter table pgflow.schedules drop column plan_error, drop column plan_failed_at;
