-- The persisted shape of a flow, in the compiler's JSON form: ordered steps with slug, type, sorted
-- dependencies, when_unmet, when_exhausted, condition patterns and, for an event or sleep step, what
-- it waits for (wait: kind, event, key, seconds, until, flow; NULL for a handler step). Runtime options are
-- not shape.
create or replace function pgflow.flow_shape(flow_slug text)
returns jsonb
language sql set search_path = pg_catalog, pgflow, pgmq
stable
as $$
  select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
           'slug', s.step_slug,
           'step_type', s.step_type,
           'deps', coalesce((select jsonb_agg(d.dep_slug order by d.dep_slug) from pgflow.deps as d
                              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '[]'::jsonb),
           'when_unmet', s.when_unmet,
           'when_exhausted', s.when_exhausted,
           'required_input_pattern', s.required_input_pattern,
           'forbidden_input_pattern', s.forbidden_input_pattern,
           'wait', case when s.step_kind <> 'handler' then jsonb_strip_nulls(jsonb_build_object(
                     'kind', s.step_kind, 'event', s.wait_event, 'key', s.wait_key, 'seconds', s.wait_seconds,
                     'until', s.sleep_until, 'flow', s.subflow_slug)) end
         ) order by s.step_index), '[]'::jsonb))
    from pgflow.steps as s
   where s.flow_slug = flow_shape.flow_slug
$$;
