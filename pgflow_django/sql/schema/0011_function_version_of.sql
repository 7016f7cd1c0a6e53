-- The slug a flow version belongs to. The first version of a flow is stored under the flow's own slug;
-- version N >= 2 under slug || '___v' || N, a name no slug, generated queue or step queue can take
-- ('__' is refused in slugs, and a generated name never holds '___'), so each version keeps its own
-- rows and its own queues while runs, schedules and limits of the first version keep their slug.
create or replace function pgflow.version_of(flow_slug text)
returns text
language sql set search_path = pg_catalog, pgflow, pgmq
immutable parallel safe
as $$
  select regexp_replace(flow_slug, '___v([2-9]|[1-9][0-9]+)$', '')
$$;
