-- The previous signature, kept for clients of earlier releases during a coordinated upgrade. Those
-- clients passed allow_recompile = true whenever settings.DEBUG was on, which deleted every run of
-- a changed flow without anyone asking: true is refused with the way forward, false compiles or
-- verifies and refuses a changed shape.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_recompile boolean default false)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
begin
  if allow_recompile then
    raise exception 'flow %: allow_recompile is no longer honoured (it deleted every run of the flow without asking); replace the flow with manage.py pgflow_compile % --replace, or deploy the changed flow under a new slug',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(flow_slug, 'FLOW')
      using errcode = '0A000';
  end if;
  return pgflow.ensure_flow_compiled(flow_slug, shape, 'refuse'::text);
end;
$$;
