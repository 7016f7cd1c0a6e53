-- The earliest fire time among a schedule's planned ticks (NULL when none is planned).
create or replace function pgflow.schedule_next_fire_at(schedule_name text, upcoming timestamptz[], jitter_seconds integer)
returns timestamptz
language sql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select min(pgflow.schedule_fire_at(schedule_name, u.tick, jitter_seconds)) from unnest(upcoming) as u(tick)
$$;
