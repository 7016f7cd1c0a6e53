-- Frozen migration delta 0035_schedule_catch_up (loaded by pgflow_django/migrations/0035_schedule_catch_up.py):
-- a schedule whose planned ticks are all in the past (every scheduler was down for longer than its
-- plan lasted) is no longer due until it is planned again from now. Its catch-up policy used to
-- pick the stale end of the old plan (catch_up 'latest' fired the last planned tick, 80 minutes late
-- after a 3-hour outage of a per-minute schedule, then the real latest one on the next pass).

-- 0453_function_due_schedule_names.sql
-- The schedules due at `now`, earliest first, at most max_schedules: enabled, not paused, with a
-- planned tick whose fire time has come. Schedules whose input is a Python callable are included
-- only when `with_callables` (the Python scheduler, which evaluates them; pg_cron cannot).
-- A schedule whose planned ticks are all at or before `now` is not due until it is planned again
-- (unless its expression has no tick left, planned_until 'infinity'): cron ticks after its plan may be
-- due too (every scheduler was down for longer than the plan lasted), and firing the stale end of
-- the old plan would apply the catch-up policy to the wrong ticks. The Python scheduler plans such a
-- schedule from now before it fires (pgflow_django.schedules.planner).
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
             and (s.upcoming[cardinality(s.upcoming)] > due_schedule_names.now
                  or s.planned_until = 'infinity')
           order by s.next_fire_at, s.schedule_name
           limit max_schedules) as d
$$;
