-- The advisory lock of the keyed events named event_name with key event_key: pgflow.start_waits
-- takes it after writing a keyed wait and before reading the kept events, pgflow.send_event before
-- keeping its event and reading the waits, so that of a wait and an event written at the same time
-- the later one always sees the earlier (a run's own events are ordered by the run's row lock).
create or replace function pgflow.event_lock_key(event_name text, event_key text)
returns bigint
language sql immutable parallel safe
as $$
  select pg_catalog.hashtextextended('pgflow:event:' || event_name || pg_catalog.chr(31) || event_key, 0)
$$;
