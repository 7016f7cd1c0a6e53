-- The exact pgmq.meta spelling of a canonical queue name, for metadata-sensitive PGMQ calls such as
-- drop_queue (PGMQ lowercases table names but not its metadata). Exactly one case-insensitive match
-- is required: none means the queue is missing, several are aliases of the same tables.
create or replace function pgflow.resolve_queue_spelling(queue_name text)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
declare
  v_matches text[];
begin
  select array_agg(m.queue_name::text order by m.queue_name) into v_matches
    from pgmq.meta as m where lower(m.queue_name) = lower(resolve_queue_spelling.queue_name);
  if v_matches is null then
    raise exception 'PGMQ queue % does not exist (no pgmq.meta row matches it)', quote_literal(queue_name)
      using errcode = 'P0002';
  end if;
  if cardinality(v_matches) > 1 then
    raise exception 'PGMQ queue % is ambiguous: pgmq.meta rows % address the same tables; remove the pgmq.meta row of each alias you do not use (delete from pgmq.meta where queue_name = ...; dropping an alias queue would drop the shared tables)',
      quote_literal(queue_name), array_to_string(v_matches, ', ')
      using errcode = '21000';
  end if;
  return v_matches[1];
end;
$$;
