-- The due ticks of the named schedules at `now` (a tick is due once its fire time has come) and
-- whether each one fires under its schedule's catch-up policy; every due tick is consumed either way:
--   all     the latest max_catch_up due ticks fire, older ones are missed;
--   latest  only the latest due tick fires;
--   none    the latest due tick fires only while it is at most `grace` late (ticks missed while
--           nothing was firing are skipped).
-- With each tick come the schedule's flow, stored input, input callable and time zone.
-- Read-only: pgflow.fire_due_schedules calls it on rows it has locked, and the Python scheduler calls
-- it to learn which ticks of callable-input schedules need an input before it fires them.
create or replace function pgflow.schedule_due_ticks(names text[], now timestamptz, grace interval)
returns table (schedule_name text, tick timestamptz, fire boolean, flow_slug text, input jsonb,
               input_callable text, timezone text)
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  with due as (
    select s.schedule_name, u.tick, pgflow.schedule_fire_at(s.schedule_name, u.tick, s.jitter_seconds) as fire_at,
           s.catch_up, s.max_catch_up, s.flow_slug, s.input, s.input_callable, s.timezone
      from pgflow.schedules as s
      cross join unnest(s.upcoming) as u(tick)
     where s.schedule_name = any(names)
  ), ranked as (
    select d.*, row_number() over (partition by d.schedule_name order by d.tick desc) as back
      from due as d
     where d.fire_at <= schedule_due_ticks.now
  )
  select r.schedule_name, r.tick,
         case r.catch_up
           when 'all' then r.back <= r.max_catch_up
           when 'latest' then r.back = 1
           else r.back = 1 and schedule_due_ticks.now - r.fire_at <= grace
         end,
         r.flow_slug, r.input, r.input_callable, r.timezone
    from ranked as r
   order by r.schedule_name, r.tick
$$;
