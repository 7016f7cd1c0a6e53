-- The timestamp a JSON value names, or NULL when it names none: a sleep's time comes from a run's
-- data, and one bad value must fail that step alone, not the statement that starts a batch of steps.
-- (PostgreSQL 15 has no pg_input_is_valid.)
create or replace function pgflow.timestamp_or_null(value jsonb)
returns timestamptz
language plpgsql stable set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if jsonb_typeof(value) <> 'string' then
    return null;
  end if;
  return (value #>> '{}')::timestamptz;
exception when others then
  return null;
end;
$$;
