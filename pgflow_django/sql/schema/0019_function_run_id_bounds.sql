-- The lowest and highest of some run ids (NULLs left out; both NULL when none is left). The hot
-- path bounds its probes of the history by them, redundant with each probe's own key, so that on a
-- partitioned history (range-partitioned by run_id) a generic plan prunes, when it starts, the
-- partitions outside them (see pgflow.complete_hop). PostgreSQL 15 has no min() or max() of uuid.
-- No pinned search_path, so that it is inlined into the caller's statement: every name it looks up
-- is pg_catalog's, and the ordering is the uuid type's own.
create or replace function pgflow.run_id_bounds(run_ids uuid[])
returns table (lo uuid, hi uuid)
language sql
immutable parallel safe
as $$
  select (pg_catalog.array_agg(r order by r))[1], (pg_catalog.array_agg(r order by r desc))[1]
    from pg_catalog.unnest(run_ids) as r
   where r is not null
$$;
