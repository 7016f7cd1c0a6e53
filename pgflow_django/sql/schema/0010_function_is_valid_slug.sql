-- Slug rules: letters, digits and underscores, no leading digit, no leading or trailing underscore,
-- no double underscore ('__' is reserved for generated queue names), at most 128 characters,
-- reserved words refused. The Python DSL mirrors this function (a parity test checks it).
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select slug is not null
     and length(slug) between 1 and 128
     and slug ~ '^[A-Za-z][A-Za-z0-9_]*$'
     and slug !~ '_$'
     and position('__' in slug) = 0
     and lower(slug) <> all (array['run'])
$$;
