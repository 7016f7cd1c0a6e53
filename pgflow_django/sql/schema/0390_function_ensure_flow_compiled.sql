-- The startup compiler: one entry point that takes a flow's complete ordered definition under a
-- per-flow advisory lock and answers compiled (created now), verified (same shape and routing;
-- runtime options updated in place and listed), mismatch (nothing changed; differences listed as a
-- short diff by step slug, and "mismatch" says whether the shape, the routing or both differ) or
-- recompiled (the changed flow replaced: its data deleted, then compiled again). Every answer
-- carries the flow's generation (a fresh number per compilation, which a worker's claim compares)
-- and, for a mismatch or a replacement, the flow's runs and unfinished runs (the ones deleted).
-- on_change says what a changed definition may do: 'refuse' (never deletes); 'replace-if-idle'
-- (replaces only when no run is unfinished); 'replace' (an explicit request: replaces, but when
-- confirmed_runs is given, only while the flow has no more runs than the caller showed and had
-- confirmed). Before counting, a replacement takes the flow's start lock exclusively (every start
-- holds it shared until its transaction ends, before it touches a row): no run can start between the
-- count and the deletion, and no row lock is held while waiting for starts. "refused" names why a
-- replacement did not happen ('unfinished' or 'confirmation'). Routing is the queue mode
-- ('flow', 'step' or 'routed') and the route: generated for plain and step-queued flows (the
-- definition may carry the route its client generated, "route": {step: queue}, which must equal the
-- one generated here), given for a routed flow (every step exactly once, each a valid shared queue
-- name, declared or reused through pgflow.provision_shared_queue). Every generated name
-- is validated before anything changes; a new flow never adopts an existing queue, a verified
-- flow's queues must exist with all their objects. Takes the migration lock in shared mode, so
-- compilations never interleave with a pgflow migration.
create or replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, on_change text, confirmed_runs bigint default null)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_step jsonb;
  v_expected jsonb;
  v_found jsonb;
  v_differences text[];
  v_route_differences text[];
  v_updated text[];
  v_status text := 'compiled';
  v_options jsonb := coalesce(shape->'options', '{}'::jsonb);
  v_mode text := coalesce(shape->>'queue_mode', 'flow');
  v_route jsonb;
  v_mismatch text[] := '{}';
  v_bad_slug text;
  v_runs bigint;
  v_unfinished bigint;
  v_refused text;
begin
  if on_change is null or on_change not in ('refuse', 'replace-if-idle', 'replace') then
    raise exception 'ensure_flow_compiled(%): on_change must be refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if shape is null or jsonb_typeof(shape->'steps') <> 'array' then
    raise exception 'ensure_flow_compiled(%): shape must be a JSON object with a "steps" array', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  if v_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', quote_literal(coalesce(flow_slug, 'NULL')), quote_literal(v_mode)
      using errcode = '22023';
  end if;
  if v_mode = 'step' and jsonb_array_length(shape->'steps') = 0 then
    raise exception 'step-queued flow % has no steps: add steps before with_step_queues', quote_literal(coalesce(flow_slug, 'NULL'))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || flow_slug, 0));

  select x.e->>'slug' into v_bad_slug from jsonb_array_elements(shape->'steps') as x(e)
   where jsonb_typeof(x.e->'slug') is distinct from 'string' or not pgflow.is_valid_slug(x.e->>'slug')
   limit 1;
  if found then
    raise exception 'invalid step slug % in flow %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_bad_slug, 'NULL')), quote_literal(flow_slug)
      using errcode = '22023';
  end if;

  -- the route: generated (plain, step-queued) or given (routed), every name validated before
  -- anything changes
  if v_mode = 'routed' then
    if jsonb_typeof(shape->'route') is distinct from 'object' then
      raise exception 'routed flow % needs a "route" object {step_slug: queue_name}', quote_literal(flow_slug)
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(x.e->>'slug'), ', ' order by x.n) into v_bad_slug
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n)
     where not (shape->'route') ? (x.e->>'slug');
    if v_bad_slug is not null then
      raise exception 'route of flow % has no queue for step(s) %: give every step exactly one queue',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    select string_agg(quote_literal(r.key), ', ' order by r.key) into v_bad_slug
      from jsonb_object_keys(shape->'route') as r(key)
     where not exists (select 1 from jsonb_array_elements(shape->'steps') as x(e) where x.e->>'slug' = r.key);
    if v_bad_slug is not null then
      raise exception 'route of flow % names %, which are not its steps (steps: %)',
        quote_literal(flow_slug), v_bad_slug,
        (select string_agg(x.e->>'slug', ', ') from jsonb_array_elements(shape->'steps') as x(e))
        using errcode = '22023';
    end if;
    select string_agg(format('%s -> %s', r.key, r.value), ', ' order by r.key) into v_bad_slug
      from jsonb_each(shape->'route') as r(key, value)
     where jsonb_typeof(r.value) <> 'string' or not pgflow.is_valid_queue_name(r.value #>> '{}')
        or position('__' in (r.value #>> '{}')) > 0;
    if v_bad_slug is not null then
      raise exception 'route of flow %: invalid shared queue name(s) %: use lowercase letters, digits and single underscores, at most 47 characters (''__'' is reserved for generated queues)',
        quote_literal(flow_slug), v_bad_slug
        using errcode = '22023';
    end if;
    v_route := shape->'route';
  else
    select coalesce(jsonb_object_agg(x.e->>'slug',
             case v_mode when 'step' then pgflow.step_queue_name(flow_slug, x.e->>'slug', (x.n - 1)::integer)
                         else lower(flow_slug) end), '{}'::jsonb)
      into v_route
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
  end if;
  perform pgmq.validate_queue_name(r.queue) from jsonb_each_text(v_route) as r(step, queue);
  if v_mode <> 'routed' and shape ? 'route' and shape->'route' is distinct from v_route then
    raise exception 'flow %: the client generated the route % but the database generates %; deploy pgflow_django code and migrations of the same release',
      quote_literal(flow_slug), shape->'route', v_route
      using errcode = '22023';
  end if;

  if exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
             'slug', e->'slug', 'step_type', coalesce(e->'step_type', '"single"'),
             'deps', coalesce((select jsonb_agg(d order by d) from jsonb_array_elements_text(e->'deps') as d), '[]'::jsonb),
             'when_unmet', coalesce(e->'when_unmet', '"skip"'),
             'when_exhausted', coalesce(e->'when_exhausted', '"fail"'),
             'required_input_pattern', coalesce(e->'required_input_pattern', 'null'),
             'forbidden_input_pattern', coalesce(e->'forbidden_input_pattern', 'null'),
             'wait', coalesce(jsonb_strip_nulls(nullif(e->'wait', 'null'::jsonb)), 'null')
           ) order by n), '[]'::jsonb))
      into v_expected
      from jsonb_array_elements(shape->'steps') with ordinality as x(e, n);
    v_found := pgflow.flow_shape(flow_slug);

    if v_expected <> v_found then
      v_mismatch := v_mismatch || 'shape'::text;
    end if;
    select array_agg(diff order by ord) into v_route_differences
      from (
        select 0 as ord, format('queue mode: %s in the definition, %s in the database', v_mode, f.queue_mode) as diff
          from pgflow.flows as f
         where f.flow_slug = ensure_flow_compiled.flow_slug and f.queue_mode <> v_mode
        union all
        select s.step_index + 1, format('route of step %s: queue %s in the definition, %s in the database',
                                        s.step_slug, v_route->>s.step_slug, s.queue_name)
          from pgflow.steps as s
         where s.flow_slug = ensure_flow_compiled.flow_slug and v_route ? s.step_slug
           and v_route->>s.step_slug <> s.queue_name
      ) as d;
    if v_route_differences is not null then
      v_mismatch := v_mismatch || 'routing'::text;
    end if;

    if cardinality(v_mismatch) = 0 then
      v_status := 'verified';
      perform pgflow.check_flow_queues(flow_slug);
      perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                       where v_mode = 'routed' order by 1) as d(q);
    else
      -- a short diff by step slug, database -> definition: removed, added, changed, reordered
      with ex as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_expected->'steps') with ordinality as x(e, n)
      ), fo as (
        select x.e, x.e->>'slug' as slug, x.n from jsonb_array_elements(v_found->'steps') with ordinality as x(e, n)
      ), common as (
        select ex.slug, ex.n as ex_n, fo.n as fo_n, ex.e as ex_e, fo.e as fo_e from ex join fo using (slug)
      )
      select array_agg(diff order by ord) into v_differences
        from (
          select fo.n as ord, format('- step %s', fo.slug) as diff
            from fo where not exists (select 1 from ex where ex.slug = fo.slug)
          union all
          select 10000 + ex.n, format('+ step %s%s%s', ex.slug,
                   case when ex.e->>'step_type' <> 'single' then format(' (%s)', ex.e->>'step_type') else '' end,
                   case when jsonb_array_length(ex.e->'deps') > 0
                        then format(' depending on %s', (select string_agg(d, ', ') from jsonb_array_elements_text(ex.e->'deps') as d))
                        else '' end)
            from ex where not exists (select 1 from fo where fo.slug = ex.slug)
          union all
          select 20000 + c.ex_n * 10 + k.n, format('~ step %s: %s %s -> %s', c.slug, k.key,
                   coalesce(c.fo_e->k.key #>> '{}', 'null'), coalesce(c.ex_e->k.key #>> '{}', 'null'))
            from common as c
           cross join unnest(array['step_type', 'deps', 'when_unmet', 'when_exhausted',
                                   'required_input_pattern', 'forbidden_input_pattern', 'wait'])
                      with ordinality as k(key, n)
           where c.ex_e->k.key is distinct from c.fo_e->k.key
          union all
          select 30000, format('~ step order: %s -> %s', o.found, o.expected)
            from (select string_agg(c.slug, ', ' order by c.fo_n) as found,
                         string_agg(c.slug, ', ' order by c.ex_n) as expected from common as c) as o
           where o.found <> o.expected
        ) as d;
      v_differences := coalesce(v_differences, '{}') || coalesce(v_route_differences, '{}');
      if on_change <> 'refuse' then
        -- starts hold this lock shared until they commit: holding it, the count below stays true
        perform pg_advisory_xact_lock(hashtextextended('pgflow:start:' || ensure_flow_compiled.flow_slug, 0));
      end if;
      select count(*), count(*) filter (where r.status = 'started') into v_runs, v_unfinished
        from pgflow.runs as r where r.flow_slug = ensure_flow_compiled.flow_slug;
      v_refused := case
        when on_change = 'replace-if-idle' and v_unfinished > 0 then 'unfinished'
        when on_change = 'replace' and v_runs > confirmed_runs then 'confirmation'
      end;
      if on_change = 'refuse' or v_refused is not null then
        return jsonb_build_object('status', 'mismatch', 'mismatch', to_jsonb(v_mismatch),
                                  'differences', to_jsonb(v_differences), 'options_updated', '[]'::jsonb,
                                  'generation', (select f.generation from pgflow.flows as f
                                                  where f.flow_slug = ensure_flow_compiled.flow_slug),
                                  'runs', v_runs, 'unfinished_runs', v_unfinished, 'refused', v_refused);
      end if;
      perform pgflow.delete_flow_and_data(flow_slug);
      v_status := 'recompiled';
    end if;
  end if;

  if v_status = 'verified' then
    with flow_opts as (
      select f.flow_slug, o.key, o.old_value, (v_options->>o.key)::integer as new_value
        from pgflow.flows as f
       cross join lateral (values ('max_attempts', f.opt_max_attempts), ('base_delay', f.opt_base_delay),
                                  ('timeout', f.opt_timeout), ('priority', f.opt_priority::integer)) as o(key, old_value)
       where f.flow_slug = ensure_flow_compiled.flow_slug and v_options ? o.key
         and (v_options->>o.key)::integer is distinct from o.old_value
    ), flow_update as (
      update pgflow.flows as f
         set opt_max_attempts = coalesce((v_options->>'max_attempts')::integer, f.opt_max_attempts),
             opt_base_delay = coalesce((v_options->>'base_delay')::integer, f.opt_base_delay),
             opt_timeout = coalesce((v_options->>'timeout')::integer, f.opt_timeout),
             opt_priority = coalesce((v_options->>'priority')::integer, f.opt_priority)
       where f.flow_slug = ensure_flow_compiled.flow_slug and exists (select 1 from flow_opts)
      returning 1
    ), step_opts as (
      select s.step_slug, o.key, o.old_value, (x.e->'options'->>o.key)::integer as new_value
        from jsonb_array_elements(shape->'steps') as x(e)
        join pgflow.steps as s on s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
       cross join lateral (values ('max_attempts', s.opt_max_attempts), ('base_delay', s.opt_base_delay),
                                  ('timeout', s.opt_timeout), ('start_delay', s.opt_start_delay),
                                  ('priority', s.opt_priority::integer)) as o(key, old_value)
       where (x.e->'options'->>o.key)::integer is distinct from o.old_value
    ), step_update as (
      update pgflow.steps as s
         set opt_max_attempts = (x.e->'options'->>'max_attempts')::integer,
             opt_base_delay = (x.e->'options'->>'base_delay')::integer,
             opt_timeout = (x.e->'options'->>'timeout')::integer,
             opt_start_delay = (x.e->'options'->>'start_delay')::integer,
             opt_priority = (x.e->'options'->>'priority')::integer
        from jsonb_array_elements(shape->'steps') as x(e)
       where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
         and exists (select 1 from step_opts as so where so.step_slug = s.step_slug)
      returning 1
    )
    select array_agg(u order by u) into v_updated
      from (
        select format('flow %s: %s -> %s', fo.key, coalesce(fo.old_value::text, 'default'), coalesce(fo.new_value::text, 'default')) as u
          from flow_opts as fo
        union all
        select format('step %s %s: %s -> %s', so.step_slug, so.key, coalesce(so.old_value::text, 'default'), coalesce(so.new_value::text, 'default'))
          from step_opts as so
        union all select null from flow_update where false
        union all select null from step_update where false
      ) as changes;
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'options_updated', coalesce(to_jsonb(v_updated), '[]'::jsonb),
                              'generation', (select f.generation from pgflow.flows as f
                                              where f.flow_slug = ensure_flow_compiled.flow_slug));
  end if;

  perform pgflow.create_flow(flow_slug, (v_options->>'max_attempts')::integer,
                             (v_options->>'base_delay')::integer, (v_options->>'timeout')::integer, v_mode);
  if v_mode = 'flow' then
    perform pgflow.provision_generated_queue(flow_slug, lower(flow_slug));
  elsif v_mode = 'routed' then
    perform pgflow.provision_shared_queue(q) from (select distinct r.queue from jsonb_each_text(v_route) as r(step, queue)
                                                     order by 1) as d(q);
  end if;
  for v_step in select e from jsonb_array_elements(shape->'steps') as x(e)
  loop
    perform pgflow.add_step(
      flow_slug, v_step->>'slug',
      coalesce(array(select jsonb_array_elements_text(v_step->'deps')), '{}'),
      (v_step->'options'->>'max_attempts')::integer,
      (v_step->'options'->>'base_delay')::integer,
      (v_step->'options'->>'timeout')::integer,
      (v_step->'options'->>'start_delay')::integer,
      coalesce(v_step->>'step_type', 'single'),
      nullif(v_step->'required_input_pattern', 'null'::jsonb),
      nullif(v_step->'forbidden_input_pattern', 'null'::jsonb),
      coalesce(v_step->>'when_unmet', 'skip'),
      coalesce(v_step->>'when_exhausted', 'fail'),
      case when v_mode = 'routed' then v_route->>(v_step->>'slug') end
    );
  end loop;
  -- what an event, sleep or subflow step waits for (add_step creates every step as a handler step)
  update pgflow.steps as s
     set step_kind = x.e->'wait'->>'kind', wait_event = x.e->'wait'->>'event', wait_key = x.e->'wait'->>'key',
         wait_seconds = (x.e->'wait'->>'seconds')::integer, sleep_until = x.e->'wait'->>'until',
         subflow_slug = x.e->'wait'->>'flow'
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and jsonb_typeof(x.e->'wait') = 'object';
  -- priority defaults are runtime options kept beside create_flow's and add_step's
  update pgflow.flows as f set opt_priority = (v_options->>'priority')::integer
   where f.flow_slug = ensure_flow_compiled.flow_slug and v_options->>'priority' is not null;
  update pgflow.steps as s set opt_priority = (x.e->'options'->>'priority')::integer
    from jsonb_array_elements(shape->'steps') as x(e)
   where s.flow_slug = ensure_flow_compiled.flow_slug and s.step_slug = x.e->>'slug'
     and x.e->'options'->>'priority' is not null;
  return jsonb_build_object('status', v_status, 'differences', coalesce(to_jsonb(v_differences), '[]'::jsonb),
                            'options_updated', '[]'::jsonb,
                            'generation', (select f.generation from pgflow.flows as f
                                            where f.flow_slug = ensure_flow_compiled.flow_slug))
         || case when v_status = 'recompiled'
                 then jsonb_build_object('runs', v_runs, 'unfinished_runs', v_unfinished) else '{}'::jsonb end;
end;
$$;
