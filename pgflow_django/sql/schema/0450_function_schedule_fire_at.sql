-- When a planned tick fires: the tick plus its jitter, a deterministic offset in
-- [0, jitter_seconds] seconds (millisecond steps) derived from the schedule name and the tick, so
-- every caller, and every later call, computes the same fire time without storing it.
-- PL/pgSQL keeps the expression's plan across calls (a SQL function with a pinned search path is
-- planned again on every call).
create or replace function pgflow.schedule_fire_at(schedule_name text, tick timestamptz, jitter_seconds integer)
returns timestamptz
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jitter_seconds is null or jitter_seconds <= 0 then
    return tick;
  end if;
  return tick + make_interval(secs => (abs(hashtextextended(schedule_name || '@' || extract(epoch from tick)::text, 0))
                                       % (jitter_seconds::bigint * 1000 + 1)) / 1000.0);
end;
$$;
