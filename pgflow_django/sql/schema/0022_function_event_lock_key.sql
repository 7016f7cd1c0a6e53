-- The advisory lock that orders the starts of waits and the sends of events meeting on one event:
-- the event's name with its key (a keyed event) or with 'run:' and the run id (an event sent to one
-- run). pgflow.start_waits takes it shared after writing its waits and before reading the kept
-- events, pgflow.send_event exclusively before keeping its event and reading the waits, so of a wait
-- and an event written at the same time the later one always sees the earlier. The name and key are
-- hashed into one of 256 locks, so that a start of thousands of waits takes at most 256 of them (the
-- shared lock table holds max_locks_per_transaction per connection); two events that share a lock
-- only wait for each other's send.
create or replace function pgflow.event_lock_key(event_name text, event_key text)
returns bigint
language sql immutable parallel safe
as $$
  select pg_catalog.hashtextextended(
    'pgflow:event:' || (pg_catalog.hashtext(event_name || pg_catalog.chr(31) || event_key) operator(pg_catalog.&) 255)::text,
    0)
$$;
