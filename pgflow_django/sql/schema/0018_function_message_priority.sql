-- The priority of a PGMQ message: its headers' "priority" number (rounded, clamped to -100..100),
-- 0 when it has none (no headers, a missing or non-numeric "priority"). Every queue pgflow
-- provisions is indexed on it (pgflow.index_queue_priority) and the claim reads visible messages in
-- that index's order: higher priority first, message id order (FIFO) within a priority. It never
-- raises, so a foreign message with odd headers is still sent and read.
create or replace function pgflow.message_priority(headers jsonb)
returns smallint
language sql set search_path = pg_catalog, pgflow, pgmq
immutable parallel safe
as $$
  select case when jsonb_typeof(headers -> 'priority') = 'number'
              then least(greatest(round((headers ->> 'priority')::numeric), -100), 100)::smallint
              else 0::smallint end
$$;
