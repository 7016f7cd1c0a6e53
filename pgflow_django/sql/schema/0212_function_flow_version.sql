-- The stored slug of the version a start should use. flow_slug names the flow (or one version's
-- stored slug). With version null: the newest version (a version's stored slug names itself). With a
-- version (the code's Flow(..., version=) name or its 'shape:' digest): the version compiled from that
-- definition; while no compile has claimed the newest version yet (a flow compiled before versions
-- existed), that one. Null when no version of the flow is compiled (the caller's start then names the
-- missing flow); a definition that is not compiled while others are is refused here, naming the fix.
create or replace function pgflow.flow_version(flow_slug text, version text default null)
returns text
language plpgsql stable set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_found text;
  v_newest pgflow.flows;
begin
  if flow_version.version is not null then
    select f.flow_slug into v_found
      from pgflow.flows as f
     where f.version_of = pgflow.version_of(flow_version.flow_slug) and f.version = flow_version.version;
    if found then
      return v_found;
    end if;
  end if;
  if flow_version.flow_slug <> pgflow.version_of(flow_version.flow_slug) then
    select f.flow_slug into v_found from pgflow.flows as f where f.flow_slug = flow_version.flow_slug;
    if found then
      return v_found;
    end if;
  end if;
  select f.* into v_newest
    from pgflow.flows as f
   where f.version_of = pgflow.version_of(flow_version.flow_slug)
   order by f.version_number desc
   limit 1;
  if not found then
    return null;
  end if;
  if flow_version.version is null or v_newest.version is null then
    return v_newest.flow_slug;
  end if;
  raise exception 'flow %: the version this code defines (%) is not compiled in this database (compiled: %): run manage.py pgflow_compile % before code that starts it is deployed',
    quote_literal(pgflow.version_of(flow_version.flow_slug)),
    case when flow_version.version like 'shape:%' then 'shape ' || substr(flow_version.version, 7, 12)
         else quote_literal(flow_version.version) end,
    (select string_agg('v' || f.version_number, ', ' order by f.version_number)
       from pgflow.flows as f where f.version_of = pgflow.version_of(flow_version.flow_slug)),
    pgflow.version_of(flow_version.flow_slug)
    using errcode = '22023';
end;
$$;
