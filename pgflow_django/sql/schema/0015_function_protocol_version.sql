-- The worker/database protocol this schema speaks. Workers refuse to start unless it equals theirs:
-- an older worker on a newer database is told to deploy the new worker, a newer worker on an older
-- database is told to migrate (upgrades are coordinated, never rolling).
create or replace function pgflow.protocol_version()
returns integer
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select 4
$$;
