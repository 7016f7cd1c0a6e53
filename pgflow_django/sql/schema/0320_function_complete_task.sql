create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, attempt integer, output jsonb
)
returns text
language sql set search_path = pg_catalog, pgflow, pgmq
as $$
  select c.outcome
    from pgflow.complete_tasks(jsonb_build_array(jsonb_build_object(
      'run_id', run_id, 'step_slug', step_slug, 'task_index', task_index,
      'attempt', attempt, 'output', coalesce(output, 'null'::jsonb)))) as c
$$;
