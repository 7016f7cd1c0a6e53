-- The smallest UUIDv7 of a moment's millisecond: the bound of a history partition that starts then
-- (every run id made from that millisecond on sorts at or above it).
create or replace function pgflow.uuid_v7_bound(at timestamptz)
returns uuid
language sql
immutable strict parallel safe
set search_path = pg_catalog, pgflow, pgmq
as $$
  select encode(substring(int8send(floor(extract(epoch from at) * 1000)::bigint) from 3)
                || '\x00000000000000000000'::bytea, 'hex')::uuid
$$;
