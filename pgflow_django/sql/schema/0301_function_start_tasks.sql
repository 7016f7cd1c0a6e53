-- The previous release's claim, kept as a compatibility wrapper for workers still draining during a
-- coordinated upgrade: it claims through the flow's default queue lower(flow_slug) and returns the
-- old record of each claimed task only.
create or replace function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid)
returns setof pgflow.step_task_record
language sql set search_path = pg_catalog, pgflow, pgmq
as $$
  select c.flow_slug, c.run_id, c.step_slug, c.task_index, c.message_id, c.attempt, c.input
    from pgflow.start_tasks(lower(flow_slug), flow_slug, msg_ids, worker_id) as c
   where c.outcome = 'claimed'
$$;
