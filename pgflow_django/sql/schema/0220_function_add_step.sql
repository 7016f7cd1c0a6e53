-- Appends a step in definition order. Idempotent for an identical definition; any other change to an
-- existing step is refused (a concrete flow's shape is fixed: compile a new slug instead). The
-- step's queue is generated, never chosen: the default queue lower(flow_slug) in a plain flow, the
-- step's private pgflow.step_queue_name in a step-queued flow. A queue_name argument must equal it;
-- it is checked and provisioned through pgflow.provision_generated_queue. A routed flow's step takes
-- the declared shared queue named by queue_name (declared first by pgflow.provision_shared_queue).
create or replace function pgflow.add_step(
  flow_slug text,
  step_slug text,
  deps_slugs text[] default '{}',
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  start_delay integer default null,
  step_type text default 'single',
  required_input_pattern jsonb default null,
  forbidden_input_pattern jsonb default null,
  when_unmet text default 'skip',
  when_exhausted text default 'fail',
  queue_name text default null
)
returns pgflow.steps
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_deps text[] := coalesce((select array_agg(distinct d order by d) from unnest(deps_slugs) as d), '{}');
  v_existing pgflow.steps;
  v_missing text[];
  v_step pgflow.steps;
  v_mode text;
  v_index integer;
  v_queue text;
  v_refusal text;
begin
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = add_step.flow_slug;
  if not found then
    raise exception 'flow % does not exist: create it with pgflow.create_flow first', quote_literal(flow_slug)
      using errcode = '22023';
  end if;
  if not pgflow.is_valid_slug(step_slug) then
    raise exception 'invalid step slug % in flow %: use letters, digits and underscores, no leading digit, at most 128 characters, not a reserved word',
      quote_literal(coalesce(step_slug, 'NULL')), flow_slug
      using errcode = '22023';
  end if;
  if step_type is null or step_type not in ('single', 'map') then
    raise exception 'step %.%: step_type must be single or map, got %', flow_slug, step_slug, quote_literal(coalesce(step_type, 'NULL'))
      using errcode = '22023';
  end if;
  -- pgflow's text and code, which its tests hold it to
  if step_type = 'map' and cardinality(deps_slugs) > 1 then
    raise exception 'Map step "%" can have at most one dependency, but % were provided: %',
      step_slug, cardinality(deps_slugs), array_to_string(deps_slugs, ', ');
  end if;
  select format('step %s.%s: %s must be fail, skip or skip-cascade, got %s', flow_slug, step_slug, o.name,
                quote_nullable(o.value))
    into v_refusal
    from (values (1, 'when_unmet', when_unmet), (2, 'when_exhausted', when_exhausted)) as o(n, name, value)
   where o.value is null or o.value not in ('fail', 'skip', 'skip-cascade')
   order by o.n limit 1;
  if v_refusal is null then
    select format('step %s.%s: %s must be >= %s, got %s', flow_slug, step_slug, o.name, o.least_value, o.value)
      into v_refusal
      from (values (1, 'max_attempts', max_attempts, 1), (2, 'base_delay', base_delay, 0), (3, 'timeout', timeout, 1),
                   (4, 'start_delay', start_delay, 0)) as o(n, name, value, least_value)
     where o.value < o.least_value
     order by o.n limit 1;
  end if;
  if v_refusal is null then
    select format('step %s.%s: %s must be a JSON object, got %s', flow_slug, step_slug, o.name, jsonb_typeof(o.value))
      into v_refusal
      from (values (1, 'required_input_pattern', required_input_pattern),
                   (2, 'forbidden_input_pattern', forbidden_input_pattern)) as o(n, name, value)
     where jsonb_typeof(o.value) <> 'object'
     order by o.n limit 1;
  end if;
  if v_refusal is not null then
    raise exception '%', v_refusal using errcode = '22023';
  end if;
  if step_slug = any(v_deps) then
    raise exception 'step %.% depends on itself: remove % from its dependencies', flow_slug, step_slug, step_slug
      using errcode = '22023';
  end if;

  select s.step_index into v_index from pgflow.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if not found then
    v_index := coalesce((select max(s.step_index) + 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug), 0);
  end if;
  if v_mode = 'routed' then
    if queue_name is null or not exists (select 1 from pgflow.shared_queues as sq where sq.queue_name = add_step.queue_name) then
      raise exception 'step %.%: a routed flow''s step needs a declared shared queue (pgflow.provision_shared_queue), got %',
        flow_slug, step_slug, quote_literal(coalesce(queue_name, 'NULL'))
        using errcode = '22023';
    end if;
    v_queue := queue_name;
  else
    v_queue := case v_mode when 'step' then pgflow.step_queue_name(flow_slug, step_slug, v_index) else lower(flow_slug) end;
  end if;
  if queue_name is not null and queue_name <> v_queue then
    raise exception 'step %.%: queue % is not its route; % routes it to its generated queue %',
      flow_slug, step_slug, quote_literal(queue_name),
      case v_mode when 'step' then 'a step-queued flow' else 'a plain flow' end, quote_literal(v_queue)
      using errcode = '22023';
  end if;
  if exists (select 1 from pgflow.steps as s
              where s.flow_slug = add_step.flow_slug and lower(s.step_slug) = lower(add_step.step_slug)
                and s.step_slug <> add_step.step_slug) then
    raise exception 'step slug % of flow % differs only in case from an existing step: choose another slug',
      quote_literal(step_slug), quote_literal(flow_slug)
      using errcode = '23505';
  end if;

  if v_mode <> 'routed' then
    perform pgflow.provision_generated_queue(flow_slug, v_queue);
  end if;

  select * into v_existing from pgflow.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if found then
    if v_existing.step_type = add_step.step_type
       and v_existing.when_unmet = add_step.when_unmet
       and v_existing.when_exhausted = add_step.when_exhausted
       and v_existing.required_input_pattern is not distinct from add_step.required_input_pattern
       and v_existing.forbidden_input_pattern is not distinct from add_step.forbidden_input_pattern
       and v_existing.queue_name = v_queue
       and v_deps = coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps as d
                               where d.flow_slug = add_step.flow_slug and d.step_slug = add_step.step_slug), '{}') then
      return v_existing;
    end if;
    raise exception 'step %.% already exists with a different definition: compile the changed flow under a new slug',
      flow_slug, step_slug
      using errcode = '23505';
  end if;

  select array_agg(d order by d) into v_missing
    from unnest(v_deps) as d
   where not exists (select 1 from pgflow.steps as s where s.flow_slug = add_step.flow_slug and s.step_slug = d);
  if v_missing is not null then
    raise exception 'step %.% depends on %, which does not exist in flow %: add dependencies before the steps that use them',
      flow_slug, step_slug, array_to_string(v_missing, ', '), flow_slug
      using errcode = '22023';
  end if;

  insert into pgflow.steps (
    flow_slug, step_slug, step_type, step_index, deps_count,
    opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, queue_name
  )
  values (
    flow_slug, step_slug, step_type, v_index, cardinality(v_deps),
    max_attempts, base_delay, timeout, start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, v_queue
  )
  returning * into v_step;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d, add_step.step_slug from unnest(v_deps) as d;

  return v_step;
end;
$$;
