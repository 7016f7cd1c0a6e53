-- Moves the given started runs forward until nothing changes: recounts open dependencies (of
-- created and skipped steps) and map sizes of created steps, resolves conditions of ready steps (fail, skip or skip-cascade when
-- unmet), completes ready steps that have no tasks (empty maps), then starts the ready steps that
-- have tasks and completes runs with nothing left. Callers hold the runs' row locks. Each
-- statement reads one table by the batch (`= any(run_ids)` in its index condition) and every other
-- history table by a correlated probe the planner cannot flatten (`offset 0`, or a scalar
-- subquery): on fresh tables a join of runs could otherwise drive the plan, walking every started
-- run and matching the whole batch once per run. A probe's subquery holds only the key it probes
-- by; filters on other columns (a run's status) stay outside it: planned on a small partition (a
-- new day's), `status = 'started'` beside the key made the (flow_slug, status) index look as cheap
-- as the primary key, and each probe then read every started run of that partition.
create or replace function pgflow.cascade(run_ids uuid[])
returns void
language plpgsql set search_path = pg_catalog, pgflow, pgmq
as $$
declare
  v_unmet record;
  v_changed boolean;
  v_rows integer;
begin
  loop
    v_changed := false;

    -- open dependencies, and the size of a dependent map once its dependency is finished. A
    -- skipped step's count stays current too, as in pgflow: a dependency that completes, or is
    -- skipped on its own (skip), is no longer open; one skipped with its downstream (skip-cascade,
    -- dependency_skipped) still is, since that skip reached this step instead of freeing it
    with counts as (
      select ss.run_id, ss.step_slug,
             count(d.dep_slug) filter (
               where not (dst.status = 'completed'
                          or dst.status = 'skipped'
                             and (ss.status = 'created'
                                  or dst.skip_reason = 'condition_unmet' and ds.when_unmet = 'skip'
                                  or dst.skip_reason = 'handler_failed' and ds.when_exhausted = 'skip'))
             ) as open_deps,
             case when ss.status = 'created' and s.step_type = 'map' and s.deps_count = 1
                       and bool_and(dst.status in ('completed', 'skipped'))
                  then max(case when dst.status = 'completed' and jsonb_typeof(dst.output) = 'array'
                                then jsonb_array_length(dst.output) else 0 end)
             end as map_size
        from pgflow.step_states as ss
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
        left join pgflow.deps as d on d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
        left join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.dep_slug
        left join lateral (
          select dst.status, dst.skip_reason, dst.output
            from pgflow.step_states as dst
           where dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
          offset 0
        ) as dst on true
       where ss.run_id = any(run_ids) and ss.status in ('created', 'skipped') and s.deps_count > 0
         and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started'
       group by ss.run_id, ss.step_slug, ss.status, s.step_type, s.deps_count
    )
    update pgflow.step_states as ss
       set remaining_deps = c.open_deps,
           initial_tasks = coalesce(ss.initial_tasks, c.map_size)
      from counts as c
     where ss.run_id = c.run_id and ss.step_slug = c.step_slug
       and (ss.remaining_deps <> c.open_deps or (ss.initial_tasks is null and c.map_size is not null));

    -- conditions of ready steps, matched against the step's input
    for v_unmet in
      select ss.run_id, ss.step_slug, s.when_unmet
        from pgflow.step_states as ss
       cross join lateral (
         select r.input, r.status from pgflow.runs as r where r.run_id = ss.run_id offset 0
       ) as r
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       cross join lateral (
         select case when s.deps_count = 0 then r.input
                     else coalesce((select jsonb_object_agg(d.dep_slug, dst.output)
                                      from pgflow.deps as d
                                      join pgflow.step_states as dst
                                        on dst.run_id = ss.run_id and dst.step_slug = d.dep_slug
                                     where d.flow_slug = ss.flow_slug and d.step_slug = ss.step_slug
                                       and dst.status = 'completed'), '{}'::jsonb)
                end as step_input
       ) as i
       where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
         and r.status = 'started'
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
         and not (coalesce(i.step_input @> s.required_input_pattern, true)
                  and not coalesce(i.step_input @> s.forbidden_input_pattern, false))
       order by ss.run_id, s.step_index
    loop
      if (select r.status from pgflow.runs as r where r.run_id = v_unmet.run_id) is distinct from 'started' then
        continue;
      end if;
      if v_unmet.when_unmet = 'fail' then
        update pgflow.step_states as ss
           set status = 'failed', failed_at = clock_timestamp(), error_message = 'Condition not met'
         where ss.run_id = v_unmet.run_id and ss.step_slug = v_unmet.step_slug and ss.status = 'created';
        perform pgflow.fail_run(v_unmet.run_id, format('step %s: Condition not met', v_unmet.step_slug));
      else
        perform pgflow.skip_step(v_unmet.run_id, v_unmet.step_slug, 'condition_unmet', v_unmet.when_unmet = 'skip-cascade');
      end if;
      v_changed := true;
    end loop;

    -- ready steps without tasks (maps over empty arrays) complete at once with an empty output
    update pgflow.step_states as ss
       set status = 'completed', output = '[]'::jsonb, remaining_tasks = 0,
           started_at = clock_timestamp(), completed_at = clock_timestamp()
     where ss.run_id = any(run_ids) and ss.status = 'created' and ss.remaining_deps = 0
       and ss.initial_tasks = 0
       and (select r.status from pgflow.runs as r where r.run_id = ss.run_id) = 'started';
    get diagnostics v_rows = row_count;
    v_changed := v_changed or v_rows > 0;

    exit when not v_changed;
  end loop;

  perform pgflow.start_ready_steps(run_ids);
  perform pgflow.maybe_complete_runs(run_ids);
end;
$$;
