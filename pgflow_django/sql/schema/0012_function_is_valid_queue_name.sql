-- Queue names pgflow stores: lowercase canonical physical identities that fit PGMQ's 47-character
-- limit (PGMQ lowercases table names, so 'Orders' and 'orders' would address the same tables).
-- The one function without a pinned search_path: the CHECK constraint of step_tasks.queue_name runs it
-- for every row the claim, the completion and a step's start write, and only a SQL function without
-- a SET clause is inlined there (a pinned one is a function call with its own executor, about 2 us a
-- row). Every name in the body is qualified with pg_catalog, operators included, so no caller's path
-- changes what it means (tests/sql/schema_rules checks it under a hostile path).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
as $$
  select queue_name is not null
     and pg_catalog.length(queue_name) operator(pg_catalog.>=) 1
     and pg_catalog.length(queue_name) operator(pg_catalog.<=) 47
     and queue_name operator(pg_catalog.~) '^[a-z0-9_]+$'
$$;
