-- Compile a flow's definition as one of its versions; what workers, pgflow_compile and the testing
-- toolkit call. version identifies the definition: the name Flow(..., version=) gives, or 'shape:'
-- and a digest of the definition the client computes (its shape, options and queue mode).
--
-- on_change 'version' (the default policy): the version with that identity is verified; else a version
-- not yet claimed by a compile (one compiled before versions existed) with the same shape is claimed;
-- else a new version is added (stored under slug || '___v' || N, with its own queues), and no run of
-- another version is touched. A named version whose stored definition differs is a mismatch: a name
-- identifies one definition. 'refuse', 'replace-if-idle' and 'replace' act on the version with that
-- identity, else the newest one, as pgflow.ensure_flow_compiled does (a changed shape is refused, or
-- replaced with its runs). The answer is ensure_flow_compiled's, with the version's flow_slug,
-- version_number and version, and status 'versioned' for a version added beside others.
create or replace function pgflow.compile_flow_version(
  flow_slug text, shape jsonb, version text, on_change text, confirmed_runs bigint default null
)
returns jsonb
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_family text := compile_flow_version.flow_slug;
  v_target text;
  v_candidate text;
  v_number integer;
  v_answer jsonb;
begin
  if on_change is null or on_change not in ('version', 'refuse', 'replace-if-idle', 'replace') then
    raise exception 'compile_flow_version(%): on_change must be version, refuse, replace-if-idle or replace, got %',
      quote_literal(coalesce(flow_slug, 'NULL')), coalesce(quote_literal(on_change), 'NULL')
      using errcode = '22023';
  end if;
  if not pgflow.is_valid_slug(v_family) then
    raise exception 'invalid flow slug %: use letters, digits and single underscores, starting with a letter, at most 128 characters, not a reserved word',
      quote_literal(coalesce(v_family, 'NULL'))
      using errcode = '22023';
  end if;
  if version is not null and (length(version) not between 1 and 80 or version ~ '[[:cntrl:]]') then
    raise exception 'flow %: a version name is 1 to 80 printable characters, got %', quote_literal(v_family),
      quote_literal(left(version, 100))
      using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0));
  perform pg_advisory_xact_lock(hashtextextended('pgflow:compile:' || v_family, 0));

  select f.flow_slug into v_target
    from pgflow.flows as f where f.version_of = v_family and f.version = compile_flow_version.version;

  if v_target is null and on_change <> 'version' then
    select f.flow_slug into v_target
      from pgflow.flows as f where f.version_of = v_family order by f.version_number desc limit 1;
  end if;
  if v_target is null and on_change = 'version' then
    for v_candidate in
      select f.flow_slug from pgflow.flows as f
       where f.version_of = v_family and f.version is null
       order by f.version_number desc
    loop
      v_answer := pgflow.ensure_flow_compiled(v_candidate, pgflow.version_shape(v_candidate, shape), 'refuse');
      if v_answer->>'status' = 'verified' then
        v_target := v_candidate;
        exit;
      end if;
    end loop;
  end if;

  if v_target is not null then
    v_answer := pgflow.ensure_flow_compiled(v_target, pgflow.version_shape(v_target, shape),
                                            case on_change when 'version' then 'refuse' else on_change end,
                                            confirmed_runs);
  else
    select coalesce(max(f.version_number), 0) + 1 into v_number from pgflow.flows as f where f.version_of = v_family;
    v_target := case when v_number = 1 then v_family else v_family || '___v' || v_number end;
    if length(v_target) > 47 and coalesce(shape->>'queue_mode', 'flow') <> 'routed' then
      raise exception 'flow %: its changed definition would be version % under % (% characters), longer than a PGMQ queue name (47): versions of a flow with its own queues need a slug of at most % characters; deploy it under a shorter slug, or replace the flow (manage.py pgflow_compile % --replace)',
        quote_literal(v_family), v_number, quote_literal(v_target), length(v_target),
        47 - length('___v' || v_number), v_family
        using errcode = '22023';
    end if;
    v_answer := pgflow.ensure_flow_compiled(v_target, pgflow.version_shape(v_target, shape), 'refuse');
    if v_number > 1 then
      v_answer := v_answer || jsonb_build_object('status', 'versioned');
    end if;
  end if;

  if v_answer->>'status' <> 'mismatch' then  -- under refuse or replace, the compiled code's identity
    update pgflow.flows as f set version = compile_flow_version.version
     where f.flow_slug = v_target and compile_flow_version.version is not null
       and f.version is distinct from compile_flow_version.version
       and (f.version is null or on_change <> 'version');
  end if;
  return v_answer || (select jsonb_build_object('flow_slug', f.flow_slug, 'version_number', f.version_number,
                                                'version', f.version)
                        from pgflow.flows as f where f.flow_slug = v_target);
end;
$$;
