-- The private queue generated for one step of a step-queued flow: lower(flow_slug || '__' ||
-- step_slug) when it fits PGMQ's 47 characters, else lower(flow_slug || '__' || step_index) (the
-- zero-based definition index). Slugs never contain '__' nor start with a digit, so generated names
-- never collide with a flow's default queue nor with one another. Raises, naming both candidates,
-- when neither fits. Python's pgflow_django.flows.slugs.step_queue_name mirrors it for immediate feedback;
-- this function is authoritative.
create or replace function pgflow.step_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language plpgsql set search_path = pg_catalog, pgflow, pgmq
immutable
as $$
declare
  v_readable text := lower(flow_slug || '__' || step_slug);
  v_fallback text := lower(flow_slug || '__' || step_index);
begin
  if flow_slug is null or step_slug is null or step_index is null or step_index < 0 then
    raise exception 'step_queue_name(%, %, %): flow slug, step slug and a step index >= 0 are required',
      quote_nullable(flow_slug), quote_nullable(step_slug), quote_nullable(step_index)
      using errcode = '22023';
  end if;
  if length(v_readable) <= 47 then
    return v_readable;
  end if;
  if length(v_fallback) <= 47 then
    return v_fallback;
  end if;
  raise exception 'step % of flow %: neither generated queue name % (% characters) nor % (% characters) fits PGMQ''s 47-character limit; choose a flow slug of at most % characters',
    quote_literal(step_slug), quote_literal(flow_slug), quote_literal(v_readable), length(v_readable),
    quote_literal(v_fallback), length(v_fallback), 45 - length(step_index::text)
    using errcode = '22023';
end;
$$;
