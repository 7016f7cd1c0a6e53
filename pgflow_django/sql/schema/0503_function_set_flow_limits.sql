-- Replaces a flow's flow control settings (pgflow.flow_limits) with `limits`, a JSON array of
-- {step_slug ('' or absent for the flow), kind, key_source, key_field, amount, period, burst}; the
-- compiler calls it after every compile or verification, so the code deployed last decides. The
-- claims that follow apply the new settings; slots and tokens already spent stay counted. Workers
-- that start together compile the same flow at once: a transaction lock per flow makes their
-- replacements one after the other (each delete then sees the rows the previous one committed).
create or replace function pgflow.set_flow_limits(flow_slug text, limits jsonb)
returns integer
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_count integer;
  v_unknown text;
begin
  if limits is null or jsonb_typeof(limits) <> 'array' then
    raise exception 'set_flow_limits: limits must be a JSON array of {step_slug, kind, key_source, key_field, amount, period, burst}'
      using errcode = '22023';
  end if;
  select x.step_slug into v_unknown
    from jsonb_to_recordset(limits) as x(step_slug text)
   where coalesce(x.step_slug, '') <> ''
     and not exists (select 1 from pgflow.steps as s
                      where s.flow_slug = set_flow_limits.flow_slug and s.step_slug = x.step_slug)
   limit 1;
  if found then
    raise exception 'set_flow_limits: flow % has no step %', quote_literal(flow_slug), quote_literal(v_unknown)
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock(hashtext('pgflow.set_flow_limits'), hashtext(set_flow_limits.flow_slug));
  delete from pgflow.flow_limits as l where l.flow_slug = set_flow_limits.flow_slug;
  insert into pgflow.flow_limits (flow_slug, step_slug, kind, key_source, key_field, amount, period, burst)
  select set_flow_limits.flow_slug, coalesce(x.step_slug, ''), x.kind, coalesce(x.key_source, 'none'), x.key_field,
         x.amount, x.period, x.burst
    from jsonb_to_recordset(limits) as x(step_slug text, kind text, key_source text, key_field text, amount integer,
                                          period double precision, burst integer);
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;
