-- The priority of a PGMQ message: its headers' "priority" number (rounded, clamped to -100..100),
-- 0 when it has none (no headers, a missing or non-numeric "priority"). Every queue pgflow
-- provisions is indexed on it (pgflow.index_queue_priority) and the claim reads visible messages in
-- that index's order: higher priority first, message id order (FIFO) within a priority. It never
-- raises, so a foreign message with odd headers is still sent and read.
-- No pinned search_path, so that it is inlined: the index computes it for every message sent, and
-- a pinned SQL function was parsed and planned again by each statement that sent one (a tenth of
-- a hop's CPU). Every name in the body is qualified with pg_catalog, operators and types included,
-- so no caller's path changes what it means (tests/sql/schema_rules checks it under a hostile path).
create or replace function pgflow.message_priority(headers jsonb)
returns smallint
language sql
immutable parallel safe
as $$
  select case when pg_catalog.jsonb_typeof(headers operator(pg_catalog.->) 'priority') operator(pg_catalog.=) 'number'
              then least(greatest(pg_catalog.round((headers operator(pg_catalog.->>) 'priority')::pg_catalog.numeric),
                                  -100), 100)::pg_catalog.int2
              else 0::pg_catalog.int2 end
$$;
