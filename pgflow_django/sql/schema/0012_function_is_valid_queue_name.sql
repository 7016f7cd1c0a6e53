-- Queue names pgflow stores: lowercase canonical physical identities that fit PGMQ's 47-character
-- limit (PGMQ lowercases table names, so 'Orders' and 'orders' would address the same tables).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select queue_name is not null
     and length(queue_name) between 1 and 47
     and queue_name ~ '^[a-z0-9_]+$'
$$;
