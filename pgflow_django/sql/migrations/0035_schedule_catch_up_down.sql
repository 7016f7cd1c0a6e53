-- Frozen migration delta 0035_schedule_catch_up, down: pgflow.due_schedule_names as 0014 left it.

-- 0453_function_due_schedule_names.sql
-- The schedules due at `now`, earliest first, at most max_schedules: enabled, not paused, with a
-- planned tick whose fire time has come. Schedules whose input is a Python callable are included
-- only when `with_callables` (the Python scheduler, which evaluates them; pg_cron cannot).
create or replace function pgflow.due_schedule_names(now timestamptz, max_schedules integer, with_callables boolean)
returns text[]
language sql
stable
set search_path = pg_catalog, pgflow, pgmq
as $$
  select coalesce(array_agg(d.schedule_name order by d.next_fire_at, d.schedule_name), '{}')
    from (select s.schedule_name, s.next_fire_at
            from pgflow.schedules as s
           where s.enabled and s.paused_reason is null and s.next_fire_at <= due_schedule_names.now
             and (with_callables or s.input_callable is null)
           order by s.next_fire_at, s.schedule_name
           limit max_schedules) as d
$$;

