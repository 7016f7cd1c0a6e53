-- Whether a flow version needs workers: the newest version of its flow always (new runs start there),
-- an earlier one while it has an unfinished run. Coverage, the health check and the metrics' live
-- worker counts ask only about these, so a drained version needs nothing.
create or replace function pgflow.version_in_service(flow_slug text)
returns boolean
language sql stable set search_path = pg_catalog, pgflow, pgmq
as $$
  select not exists (select 1 from pgflow.flows as newer
                      where newer.version_of = pgflow.version_of(version_in_service.flow_slug)
                        and newer.version_number > coalesce(substring(version_in_service.flow_slug from '___v([0-9]+)$')::integer, 1))
      or exists (select 1 from pgflow.runs as r
                  where r.flow_slug = version_in_service.flow_slug and r.status = 'started')
$$;
