-- A new time-ordered id (UUIDv7: 48 bits of Unix milliseconds, the version, then random bits), the
-- run ids pgflow makes: they sort by start time, so a run's history partition follows from its id
-- and the primary-key index grows at its right edge. PostgreSQL 18's uuidv7() makes the same layout;
-- this one also runs on 15.
create or replace function pgflow.uuid_v7()
returns uuid
language sql
volatile parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(
           set_byte(
             overlay(uuid_send(gen_random_uuid())
                     placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                     from 1 for 6),
             6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112),
           'hex')::uuid
$$;
