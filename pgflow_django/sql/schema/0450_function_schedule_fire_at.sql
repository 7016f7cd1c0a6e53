-- When a planned tick fires: the tick plus its jitter, a deterministic offset in
-- [0, jitter_seconds] seconds (millisecond steps) derived from the schedule name and the tick, so
-- every caller, and every later call, computes the same fire time without storing it.
create or replace function pgflow.schedule_fire_at(schedule_name text, tick timestamptz, jitter_seconds integer)
returns timestamptz
language sql
immutable
parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select case when jitter_seconds > 0
    then tick + make_interval(secs => (abs(hashtextextended(schedule_name || '@' || extract(epoch from tick)::text, 0))
                                        % (jitter_seconds::bigint * 1000 + 1)) / 1000.0)
    else tick end
$$;
