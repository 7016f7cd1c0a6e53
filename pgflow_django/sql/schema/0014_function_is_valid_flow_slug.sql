-- A stored flow slug: a valid slug (version 1), or a valid slug with a version suffix '___vN', N >= 2
-- (pgflow.version_of).
create or replace function pgflow.is_valid_flow_slug(flow_slug text)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select pgflow.is_valid_slug(pgflow.version_of(flow_slug))
$$;
