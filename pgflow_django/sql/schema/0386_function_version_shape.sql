-- A client's definition as compiled under one version's stored slug: the route the client generated
-- from the flow's slug names the first version's queues, so it is left out for another version (whose
-- generated queues the database names); a routed flow's route names shared queues and is kept.
create or replace function pgflow.version_shape(flow_slug text, shape jsonb)
returns jsonb
language sql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
  select case when flow_slug = pgflow.version_of(flow_slug) or coalesce(shape->>'queue_mode', 'flow') = 'routed'
              then shape else shape - 'route' end
$$;
