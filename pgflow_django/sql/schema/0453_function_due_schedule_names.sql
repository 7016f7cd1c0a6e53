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
