-- Frozen migration delta 0037_schedule_isolation (loaded by pgflow_django/migrations/0037_schedule_isolation.py):
-- one schedule that cannot be planned (a stored cron that no longer parses, a time zone the planning
-- host does not know) no longer stops every schedule's scheduler pass. Its reason is recorded in the
-- new column pgflow.schedules.plan_error (when: plan_failed_at), and pgflow.plan_schedules takes
-- failures beside plans in the same call: it records the failures, stores the plans and clears the
-- error of every schedule planned again, all in one statement.

-- 0180_table_schedules.sql
alter table pgflow.schedules add column plan_error text, add column plan_failed_at timestamptz;

-- 0455_function_plan_schedules.sql
-- Stores what Python planned (cron arithmetic, time zones and DST stay in one place). `plans` is a
-- JSON array whose elements are either a plan or a failure:
--   {"schedule": name, "revision": n, "ticks": [timestamps], "planned_until": t}
--       ticks merged into `upcoming` (sorted, without duplicates, none at or before the last fired
--       tick), next_fire_at recomputed, plan_error and plan_failed_at cleared;
--   {"schedule": name, "revision": n, "error": text, "failed_at": t}
--       a schedule Python could not plan (its cron no longer parses, its time zone is unknown to the
--       planning host): the reason and the moment are recorded, its planned ticks stay as they are.
-- One statement for all of them, so one schedule's failure never holds back another's plan. An
-- element made for another revision of the definition (the schedule was edited meanwhile) is
-- ignored. Returns the names of the schedules planned (not those whose failure was recorded).
create or replace function pgflow.plan_schedules(plans jsonb)
returns setof text
language plpgsql
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if plans is null or jsonb_typeof(plans) <> 'array' then
    raise exception 'plan_schedules: plans must be a JSON array of {"schedule", "revision", "ticks", "planned_until"} or {"schedule", "revision", "error", "failed_at"}'
      using errcode = '22023';
  end if;
  return query
    with p as (
      select e.value ->> 'schedule' as name, (e.value ->> 'revision')::bigint as revision,
             array(select t::timestamptz from jsonb_array_elements_text(e.value -> 'ticks') as t) as ticks,
             (e.value ->> 'planned_until')::timestamptz as planned_until,
             e.value ->> 'error' as error,
             coalesce((e.value ->> 'failed_at')::timestamptz, clock_timestamp()) as failed_at
        from jsonb_array_elements(plans) as e(value)
    ), merged as (
      select s.schedule_name, p.planned_until, p.error, p.failed_at,
             case when p.error is not null then s.upcoming
                  else coalesce(array(select distinct u.tick from unnest(s.upcoming || p.ticks) as u(tick)
                                       where s.last_tick is null or u.tick > s.last_tick
                                       order by u.tick), '{}')
             end as upcoming
        from pgflow.schedules as s
        join p on p.name = s.schedule_name and p.revision = s.revision
    ), stored as (
      update pgflow.schedules as s
         set upcoming = m.upcoming,
             planned_until = case when m.error is null then greatest(s.planned_until, m.planned_until)
                                  else s.planned_until end,
             next_fire_at = case when m.error is null
                                 then pgflow.schedule_next_fire_at(s.schedule_name, m.upcoming, s.jitter_seconds)
                                 else s.next_fire_at end,
             plan_error = left(m.error, 2000),
             plan_failed_at = case when m.error is null then null else m.failed_at end
        from merged as m
       where s.schedule_name = m.schedule_name
      returning s.schedule_name, m.error is null as planned
    )
    select st.schedule_name from stored as st where st.planned;
end;
$$;
